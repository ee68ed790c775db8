"""Hardening: the rules that keep bad files out, each removed or weakened in turn.

The runtime's readers see files from anywhere: a safetensors file whose tensors do not
tile its data section exactly (a gap, an overlap, trailing bytes) would be read one way
here and another way elsewhere; a read not bounded by the header grows without limit on
a pipe; a check over all pairs of names makes a large header slow without changing any
result (only an instruction count sees it).
"""

from exactc.mutants.model import Mutant

SAFETENSORS = "exactc/runtime/exactc_safetensors.c"
NPY = "exactc/runtime/exactc_npy.c"

MUTANTS = [
    Mutant(
        "safetensors-gaps-accepted",
        "bytes between two tensors (or before the first) belong to no tensor, and the reader "
        "does not mind",
        SAFETENSORS,
        "        if (t->begin > at)\n",
        "        if (0)\n",
        ("safetensors",),
        family="hardening",
    ),
    Mutant(
        "safetensors-overlaps-accepted",
        "two tensors share data bytes, and the reader does not mind",
        SAFETENSORS,
        "        else if (t->begin < at)\n",
        "        else if (0)\n",
        ("safetensors",),
        family="hardening",
    ),
    Mutant(
        "safetensors-trailing-bytes-accepted",
        "bytes after the last tensor (a header length too small, two files concatenated) are "
        "ignored",
        SAFETENSORS,
        "    if (data_end < have || more)\n",
        "    if (0)\n",
        ("safetensors",),
        family="hardening",
    ),
    Mutant(
        "safetensors-duplicate-names-accepted",
        "a tensor named twice in one header is read as whichever entry sorts first",
        SAFETENSORS,
        "if (strcmp(st->tensors[k - 1].name, st->tensors[k].name) == 0)",
        "if (0)",
        ("safetensors", "programs:safetensors"),
        family="hardening",
    ),
    Mutant(
        "safetensors-names-checked-pairwise",
        "the duplicate-name check compares every pair of names: the same answers, n² work "
        "(80,000 tensors took 6.5 s that way)",
        SAFETENSORS,
        "    for (size_t k = 1; k < st->count; k++)\n"
        "        if (strcmp(st->tensors[k - 1].name, st->tensors[k].name) == 0)",
        "    for (size_t k = 1; k < st->count; k++)\n"
        "        for (size_t i = 0; i < k; i++) if (strcmp(st->tensors[i].name, st->tensors[k].name) == 0)",
        ("safetensors",),
        family="hardening",
    ),
    Mutant(
        "safetensors-header-length-unbounded",
        "a header length past the library's 100,000,000 bytes is read as far as the file goes",
        SAFETENSORS,
        "    if (*n > EXACTC_ST_MAX_HEADER)\n",
        "    if (0)\n",
        ("safetensors",),
        family="hardening",
    ),
    Mutant(
        "safetensors-read-to-end-of-file",
        "the weights file is read to its end, not to the end the header declares: a pipe "
        "that never ends grows memory until the process dies",
        SAFETENSORS,
        "if (exactc_read_more(f, path, &buf, &len, (size_t)data_end, err, errlen) != 0) goto done;",
        "if (exactc_read_more(f, path, &buf, &len, SIZE_MAX - len, err, errlen) != 0) goto done;",
        ("safetensors",),
        family="hardening",
    ),
    Mutant(
        "npy-read-to-end-of-file",
        "an input .npy is read to its end, not to the end its header declares",
        NPY,
        "if (exactc_read_more(f, path, &buf, &len, nbytes, why, sizeof why) != 0) goto failed_read;",
        "if (exactc_read_more(f, path, &buf, &len, SIZE_MAX - len, why, sizeof why) != 0) goto failed_read;",
        ("safetensors",),
        family="hardening",
    ),
]
