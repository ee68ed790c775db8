"""Hardening: the rules that keep bad input out, each removed or weakened in turn.

The runtime's readers see files from anywhere: a safetensors file whose tensors do not
tile its data section exactly (a gap, an overlap, trailing bytes) would be read one way
here and another way elsewhere; a read not bounded by the header grows without limit on
a pipe; a check over all pairs of names makes a large header slow without changing any
result (only an instruction count sees it). The Python readers (checkpoints, configs,
plans) must answer every malformed file with their own one-line error: a check dropped
there is a traceback, a MemoryError or a silently wrong reading.
"""

from exactc.mutants.model import Mutant

SAFETENSORS = "exactc/runtime/exactc_safetensors.c"
NPY = "exactc/runtime/exactc_npy.c"
HF = "exactc/exporter/checkpoints/hf.py"
JSONFILE = "exactc/exporter/jsonfile.py"
MODELS = "exactc/exporter/models/__init__.py"
PLANS = "exactc/exporter/kernels/plans.py"

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
    Mutant(
        "checkpoint-tiling-not-checked",
        "the Python checkpoint reader accepts overlapping tensors, gaps and trailing bytes",
        HF,
        "    _check_tiling(path, list(entries.values()), size - 8 - n)\n",
        "",
        ("bad-inputs:api", "fuzz:readers"),
        family="hardening",
    ),
    Mutant(
        "checkpoint-shape-of-any-numbers",
        "a stored shape is only checked to be a list: [16.0] reads as 16 elements",
        HF,
        "    if not isinstance(shape, list) or not all(_count(d) for d in shape):",
        "    if not isinstance(shape, list):",
        ("bad-inputs:api",),
        family="hardening",
    ),
    Mutant(
        "checkpoint-architectures-letter-by-letter",
        "\"architectures\": \"GPT2LMHeadModel\" (a string) is read as a list of its letters",
        HF,
        "    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):",
        "    if False:",
        ("bad-inputs:api", "fuzz:readers"),
        family="hardening",
    ),
    Mutant(
        "checkpoint-tensor-in-two-shards-last-wins",
        "a tensor stored in two shards is read from whichever comes last",
        HF,
        "            if name in stored:",
        "            if False:",
        ("bad-inputs:api",),
        family="hardening",
    ),
    Mutant(
        "json-duplicate-keys-last-wins",
        "a key given twice in a JSON object (a tensor named twice in a header) keeps its last "
        "value, as Python's json module does",
        JSONFILE,
        "        return json.loads(text, object_pairs_hook=_no_key_twice)",
        "        return json.loads(text)",
        ("bad-inputs:api",),
        family="hardening",
    ),
    Mutant(
        "json-deep-nesting-not-caught",
        "a header or config nested 100,000 deep ends in a RecursionError traceback",
        JSONFILE,
        "    except RecursionError:",
        "    except ZeroDivisionError:",
        ("bad-inputs:api",),
        family="hardening",
    ),
    Mutant(
        "config-fields-not-bounded",
        "--set eps=-1, dim=0, heads=0 are taken as given",
        MODELS,
        "        values[key] = _bounded(model, key, _parse(model, key, value, type(default)), type(default))",
        "        values[key] = _parse(model, key, value, type(default))",
        ("bad-inputs:api", "bad-inputs:cli"),
        family="hardening",
    ),
    Mutant(
        "config-parameter-count-not-bounded",
        "--set vocab=2000000000 is built, and its parameters are drawn until memory runs out",
        MODELS,
        "    if count > MAX_PARAMETERS:",
        "    if False:",
        ("bad-inputs:api",),
        family="hardening",
    ),
    Mutant(
        "plan-read-as-locale-text",
        "a plan file is read with Python's json module directly: not UTF-8 or nested deep, a "
        "traceback",
        PLANS,
        "        value = jsonfile.load(path)",
        "        value = json.loads(Path(path).read_text())",
        ("bad-inputs:api", "fuzz:readers"),
        family="hardening",
    ),
    Mutant(
        "npy-stream-trailing-bytes-accepted",
        "reading a .npy file, the byte after the data the header declares is never looked "
        "for: a file that goes on is read as if it ended there",
        NPY,
        "(more = exactc_read_past_end(f, path, why, sizeof why)) != 0",
        "(more = 0) != 0",
        ("fuzz:replay", "safetensors"),
        family="hardening",
    ),
    Mutant(
        "safetensors-stream-trailing-bytes-accepted",
        "reading a weights file, the byte after the last tensor is never looked for: bytes "
        "after the data the header declares are ignored",
        SAFETENSORS,
        "(more = exactc_read_past_end(f, path, err, errlen)) < 0",
        "(more = 0) < 0",
        ("fuzz:replay", "safetensors"),
        family="hardening",
    ),
]
