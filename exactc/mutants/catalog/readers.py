"""The runtime's .npy and .safetensors readers and writer (runtime/exactc_npy.c,
exactc_safetensors.c): read errors taken for the end of a file, a request's bound, a
refusal's numbers, a tensor's shape checked in part."""

from exactc.mutants.model import Mutant

NPY = "exactc/runtime/exactc_npy.c"
SAFETENSORS = "exactc/runtime/exactc_safetensors.c"

MUTANTS: list[Mutant] = [
    Mutant(
        "read-error-taken-for-the-end-of-the-file",
        "exactc_read_more stops at a short read without asking ferror: a stream that fails "
        "midway is read as a file that ended there, refused as truncated, or read whole if the "
        "failure came after its last byte",
        NPY,
        "        if (got < room) {\n"
        "            if (ferror(f))\n"
        "                return exactc_fail(err, errlen, \"error reading '%s': %s\", path, strerror(errno));\n"
        "            break;",
        "        if (got < room) {\n            break;",
        ("readers:doors",),
        family="readers",
    ),
    Mutant(
        "read-error-after-the-data-taken-for-a-byte",
        "exactc_st_open_stream tests the read past the data for a byte only, not for an error: "
        "a read error there is refused as trailing bytes, naming no read error",
        SAFETENSORS,
        "(more = exactc_read_past_end(f, path, err, errlen)) < 0) goto done;",
        "(more = exactc_read_past_end(f, path, err, errlen)) < -1) goto done;",
        ("readers:doors",),
        family="readers",
    ),
    Mutant(
        "read-more-refuses-the-largest-request-that-fits",
        "exactc_read_more's overflow check is off by one: a request whose end is exactly SIZE_MAX is said not to fit",
        NPY,
        "if (want > SIZE_MAX - *len)",
        "if (want >= SIZE_MAX - *len)",
        ("readers:doors",),
        family="readers",
    ),
    Mutant(
        "negative-dimension-printed-unsigned",
        "the shape text loses the sign of a negative dimension: the writer's refusal names "
        "(2, 18446744073709551613) for the shape (2, -3)",
        NPY,
        "if (shape[i] < 0) { /* only in messages about a bad shape */",
        "if (0) { /* only in messages about a bad shape */",
        ("readers:doors",),
        family="readers",
    ),
    Mutant(
        "tensor-read-skips-the-last-dimension",
        "exactc_st_read compares every dimension but the last: a (2, 3) tensor is read as the "
        "(2, 4) the caller asked for, and the caller's buffer is filled short",
        SAFETENSORS,
        "for (int k = 0; ok && k < ndim; k++) ok = t->shape[k] == shape[k];",
        "for (int k = 0; ok && k + 1 < ndim; k++) ok = t->shape[k] == shape[k];",
        ("readers:doors",),
        family="readers",
    ),
]
