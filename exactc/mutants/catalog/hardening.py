"""Hardening: the rules that keep bad input out, each removed or weakened in turn.

The runtime's readers see files from anywhere: a safetensors file whose tensors do not
tile its data section exactly (a gap, an overlap, trailing bytes) would be read one way
here and another way elsewhere; a read not bounded by the header grows without limit on
a pipe; a check over all pairs of names makes a large header slow without changing any
result (only an instruction count sees it). The Python readers (checkpoints, configs,
plans) must answer every malformed file with their own one-line error: a check dropped
there is a traceback, a MemoryError or a silently wrong reading. A read past a buffer
that changes no output is invisible to every bit comparison: only the sanitized builds
of exported programs (verify/sanitizers.py) see it.
"""

from exactc.mutants.model import Mutant

SAFETENSORS = "exactc/runtime/exactc_safetensors.c"
NPY = "exactc/runtime/exactc_npy.c"
HF = "exactc/exporter/checkpoints/hf.py"
JSONFILE = "exactc/exporter/jsonfile.py"
MODELS = "exactc/exporter/models/__init__.py"
PLANS = "exactc/exporter/kernels/plans.py"
EXPORT = "exactc/exporter/export.py"
CLI = "exactc/cli.py"
EMBED = "exactc/embed.py"
TOOLCHAIN = "exactc/runtime/toolchain.py"
HOST = "exactc/runtime/exactc_host.c"
COMMANDS = "exactc/commands.py"
GGUF = "exactc/exporter/checkpoints/gguf_file.py"
LLAMA2C = "exactc/exporter/checkpoints/llama2c.py"
PROGRAMS = "exactc/programs.py"
GENERATE = "exactc/generate.py"

MUTANTS = [
    Mutant(
        "checkpoint-file-kind-not-checked",
        "--checkpoint naming a FIFO blocks in the format's sniffing (a symlink to /dev/zero is read "
        "as an unknown format) instead of being refused as no regular file",
        "exactc/exporter/checkpoints/__init__.py",
        "    if not hf.regular_file(path):",
        "    if False:",
        ("bad-inputs:api",),
        family="hardening",
    ),
    Mutant(
        "input-shape-refusal-at-length-zero",
        "an input refused before any input gave the run-time length names the shape at T = 0, "
        "`shape (0,)`, instead of `(T,)` and T's range",
        HOST,
        "        int unread = *length == 0 && spec_follows_length(spec);\n",
        "        int unread = 0 && spec_follows_length(spec);\n",
        ("programs:lengths",),
        family="hardening",
    ),
    Mutant(
        "generate-options-judged-by-each-backend",
        "exactc generate leaves the sampling options to each backend: --top-k 99999999999999999999 "
        "generates with the reference and fails with the C program's usage message",
        "exactc/generate.py",
        "    try:\n        check_options(options, 0.0)\n",
        "    try:\n        pass\n",
        ("generate:command",),
        family="hardening",
    ),
    Mutant(
        "sampling-top-k-unbounded",
        "the spec's top-k has no upper bound, while the C program holds it in an int64",
        "exactc/exporter/reference/sampling.py",
        "not 0 <= k <= MAX_TOP_K:",
        "not 0 <= k:",
        ("generate:command",),
        family="hardening",
    ),
    Mutant(
        "program-refuses-subnormal-options",
        "the decode program's option reader takes strtod's ERANGE on underflow as an error: "
        "--temperature 1e-320 generates with the reference and is refused by the C program",
        "exactc/runtime/exactc_generate.c",
        "    if (errno == ERANGE && fabs(v) <= DBL_MIN) errno = 0;\n",
        "",
        ("generate:command",),
        family="hardening",
    ),
    Mutant(
        "makefile-single-precision-constant-accepted",
        "a value-changing flag dropped from the exported Makefile's refused list: make "
        "CFLAGS='-O2 -fsingle-precision-constant' builds, and the constants (so the bits) change",
        "exactc/exporter/templates.py",
        '"-fsingle-precision-constant", ',
        "",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "tune-preprocesses-without-strict",
        "exactc plan --tune preprocesses exactc_rt.h with the build's flags but not STRICT: gcc's GNU "
        "mode on a CPU with AVX512-FP16 predefines FLT_EVAL_METHOD 16 and the header stops the tuner",
        "exactc/verify/tune.py",
        '[cc, *STRICT_FLAGS, *build_flags(cc, march), f"-I{RUNTIME_DIR}"',
        '[cc, *build_flags(cc, march), f"-I{RUNTIME_DIR}"',
        ("compilers:foreign",),
        family="hardening",
    ),
    Mutant(
        "export-from-a-removed-directory-traceback",
        "exactc export run from a directory removed under it ends in a FileNotFoundError "
        "traceback of the current directory's lookup, whatever -o names",
        EXPORT,
        "    try:\n        here = Path.cwd().resolve()\n    except FileNotFoundError:",
        "    try:\n        here = Path.cwd().resolve()\n    except NotADirectoryError:",
        ("bad-inputs:doors",),
        family="hardening",
    ),
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
        "json.loads(text, object_pairs_hook=_no_key_twice, ",
        "json.loads(text, ",
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
    Mutant(
        "force-replaces-any-directory",
        "`exactc export --force -o DIR` replaces DIR whoever wrote it: a mistyped -o removes "
        "the user's files",
        EXPORT,
        "        if not (path / MARKER).is_file():\n",
        "        if False:\n",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "force-replaces-the-current-directory",
        "`-o ''` or `-o .` with --force names the current directory, and it is not refused by "
        "name",
        EXPORT,
        "    if here is not None and (path == here or path in here.parents):\n",
        "    if False:\n",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "export-interrupt-leaves-partial",
        "Ctrl-C or SIGTERM while an export is written skips its clean-up: a .DIR.partial-* "
        "directory is left behind",
        EXPORT,
        "    except BaseException as exc:  # an error, Ctrl-C or SIGTERM",
        "    except Exception as exc:  # an error, Ctrl-C or SIGTERM",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "sigterm-kills-without-clean-up",
        "SIGTERM is left to its default action: the process dies where it stands, its "
        "half-written directory with it",
        CLI,
        "    signal.signal(signal.SIGTERM, _terminate)\n",
        "",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "ctrl-c-prints-a-traceback",
        "Ctrl-C ends a command in a KeyboardInterrupt traceback of 35 lines",
        CLI,
        "    except (KeyboardInterrupt, Terminated) as exc:",
        "    except Terminated as exc:",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "seed-not-checked",
        "--seed -5 goes to numpy's generator, which raises a ValueError traceback",
        MODELS,
        "    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed <= MAX_SEED:",
        "    if False:",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "export-write-error-traceback",
        "-o /sys/out: the OSError of a folder that cannot be made ends in a traceback",
        EXPORT,
        "        if isinstance(exc, OSError):  # a folder",
        "        if False:  # a folder",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "embed-sentences-not-checked",
        "a sentence of bytes that are not UTF-8 reaches the tokenizer, whose TypeError is a "
        "traceback",
        EMBED,
        "    check_sentences(args.sentences)\n",
        "",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "embed-output-checked-after-the-work",
        "-o in a folder that cannot be written is found out only when the embeddings are "
        "computed",
        EMBED,
        "    output = check_output(args.output) if args.output else None\n",
        "    output = Path(args.output) if args.output else None\n",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "cache-folder-error-traceback",
        "EXACTC_CACHE=/sys/cache: the cache folder's OSError ends in a traceback",
        TOOLCHAIN,
        "    except OSError as exc:\n        origin = ",
        "    except ZeroDivisionError as exc:\n        origin = ",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "output-written-in-place",
        "the program writes each output .npy under its own name, directly: a write that "
        "fails midway leaves a truncated file, and a failed run the outputs of its earlier "
        "pairs",
        HOST,
        "    int rc = exactc_npy_write(partial, &a, why, sizeof why);\n    free(wide);\n    if (rc != 0) {\n"
        "        remove(partial);\n",
        "    int rc = exactc_npy_write(path, &a, why, sizeof why);\n    snprintf(partial, sizeof partial, \"%s\", path);\n"
        "    free(wide);\n    if (rc != 0) {\n",
        ("host-runtime",),
        family="hardening",
    ),
    Mutant(
        "outputs-renamed-though-a-pair-failed",
        "the staged outputs are renamed into place even when a later pair failed",
        HOST,
        "        if (rc == 0 && exactc_output_commit(staged[k], err, sizeof err) != 0) {",
        "        if (exactc_output_commit(staged[k], err, sizeof err) != 0) {",
        ("host-runtime",),
        family="hardening",
    ),
    Mutant(
        "run-output-folder-made-first",
        "`exactc run` makes its output folder before the program is built: a failed build "
        "leaves it behind, empty",
        COMMANDS,
        "    program = programs.exported(spec, programs.Build(cc=args.cc), note=_note(\"run\"))\n",
        "    outdir.mkdir(parents=True, exist_ok=True)\n"
        "    program = programs.exported(spec, programs.Build(cc=args.cc), note=_note(\"run\"))\n",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "export-left-at-mode-0700",
        "an export keeps the 0700 of its temporary directory: no one else can read it",
        EXPORT,
        "        os.chmod(work, 0o777 & ~umask())",
        "        pass",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "cache-folder-made-world-readable",
        "the cache folder (built programs, their inputs) is made with the umask's mode",
        TOOLCHAIN,
        "        path.mkdir(mode=0o700, parents=True, exist_ok=True)",
        "        path.mkdir(parents=True, exist_ok=True)",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "makefile-value-changing-flags-accepted",
        "make CFLAGS='-O2 -ffp-contract=fast' builds without a word, and the bits change",
        "exactc/exporter/templates.py",
        "ifneq ($(REFUSED),)\n",
        "ifneq ($(REFUSED),$(REFUSED))\n",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "makefile-strict-flags-first",
        "STRICT comes first on the compiler line: a later CFLAGS flag overrides it",
        "exactc/exporter/templates.py",
        "\nCOMPILE := $(CC) $(CFLAGS) $(WARN) $(OMPFLAGS) $(DEFINES) $(LIBFLAGS) $(STRICT) -I.\n",
        "\nCOMPILE := $(CC) $(STRICT) $(CFLAGS) $(WARN) $(OMPFLAGS) $(DEFINES) $(LIBFLAGS) -I.\n",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "makefile-strict-overridable",
        "make STRICT=-O0 replaces the flags bit identity rests on",
        "exactc/exporter/templates.py",
        "override STRICT := @STRICT@",
        "STRICT  := @STRICT@",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "embed-every-sentence-in-one-process",
        "exactc embed runs every sentence in one process: two paths each on its command line, "
        "and 24,000 sentences fail with E2BIG",
        EMBED,
        "        for start in range(0, len(pairs), pairs_per_run):\n"
        "            program.run_or_fail(pairs[start:start + pairs_per_run])\n",
        "        program.run_or_fail(pairs)\n",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "host-input-read-past-its-end",
        "the host reads the byte after an input's data and ignores it: the same outputs, an "
        "out-of-bounds read that only a sanitizer sees",
        HOST,
        "        memcpy(dst, a->data, count * exactc_kind_size(spec->kind));\n",
        "        memcpy(dst, a->data, count * exactc_kind_size(spec->kind));\n"
        "        { volatile unsigned char past = ((const unsigned char *)a->data)[a->nbytes]; (void)past; }\n",
        ("host-runtime", "sanitizers"),
        family="hardening",
    ),
    Mutant(
        "gguf-alignment-not-checked",
        "a GGUF tensor whose offset is not a multiple of general.alignment (default 32) is read "
        "from wherever it points, as the gguf package reads it; llama.cpp refuses the file",
        GGUF,
        "        if offset % alignment:\n",
        "        if False:\n",
        ("bad-inputs:api",),
        family="hardening",
    ),
    Mutant(
        "gguf-overlapping-tensors-accepted",
        "a GGUF tensor whose offset points inside another tensor's bytes is read as that "
        "tensor's values",
        GGUF,
        "        if begin < at:\n",
        "        if False:\n",
        ("bad-inputs:api",),
        family="hardening",
    ),
    Mutant(
        "gguf-tensor-outside-the-data-section",
        "a GGUF offset whose tensor ends past the data section is not refused: 2^64 - 32 wraps "
        "in the gguf package to the 32 bytes before the data section, read as weights",
        GGUF,
        "        if offset + size > data_len:\n",
        "        if False:\n",
        ("bad-inputs:api",),
        family="hardening",
    ),
    Mutant(
        "gguf-block-scale-not-finite-traceback",
        "a Q8_0 or Q4_0 block whose f16 scale is inf or NaN reaches the quantizer's own check, "
        "whose QuantError ends `exactc export` in a traceback",
        GGUF,
        "        finite_scales(path, t.name, f16, \"block\")",
        "        pass",
        ("bad-inputs:api",),
        family="hardening",
    ),
    Mutant(
        "llama2c-group-scale-not-finite-accepted",
        "a llama2.c version-2 group whose f32 scale is inf or NaN is read: its weights are "
        "inf or NaN, and the export goes on",
        LLAMA2C,
        "        finite_scales(path, source, scales, \"group\")",
        "        pass",
        ("bad-inputs:api",),
        family="hardening",
    ),
    Mutant(
        "safetensors-leading-zeros-accepted",
        "the runtime's reader takes data_offsets [00, 16] as [0, 16]; the safetensors library "
        "refuses the number (JSON has no leading zero)",
        SAFETENSORS,
        "    if (j->s[j->pos] == '0' && j->len - j->pos > 1 && j->s[j->pos + 1] >= '0' && j->s[j->pos + 1] <= '9')\n",
        "    if (0)\n",
        ("safetensors", "fuzz:replay"),
        family="hardening",
    ),
    Mutant(
        "safetensors-header-not-utf8-accepted",
        "the runtime's reader copies a name's bytes as they are: a name that is not UTF-8, "
        "which the library refuses, is read",
        SAFETENSORS,
        "        if (c >= 0x80) {\n",
        "        if (0) {\n",
        ("safetensors", "fuzz:replay"),
        family="hardening",
    ),
    Mutant(
        "safetensors-metadata-values-not-checked",
        "the runtime's reader skips __metadata__ as any JSON value: numbers, objects and lists "
        "as its values, which the library refuses, are read",
        SAFETENSORS,
        "            if (skip_metadata(&j) != 0) return -1;",
        "            if (skip_value(&j) != 0) return -1;",
        ("safetensors", "fuzz:replay"),
        family="hardening",
    ),
    Mutant(
        "checkpoint-minus-zero-read-as-zero",
        "the Python reader reads data_offsets [-0, 192] as [0, 192], as Python's json does; "
        "the safetensors library reads -0 as the float -0.0 and refuses it",
        JSONFILE,
        "parse_int=_serde_int if serde_numbers else None",
        "parse_int=None",
        ("bad-inputs:api",),
        family="hardening",
    ),
    Mutant(
        "hf-weights-file-kind-not-said",
        "a model.safetensors that is a FIFO, a folder or a symlink to /dev/zero is reported as "
        "missing",
        HF,
        "    if regular_file(single):\n",
        "    if single.is_file():\n",
        ("bad-inputs:api",),
        family="hardening",
    ),
    Mutant(
        "cache-checksum-ignored",
        "a cache entry is checked against its manifest and used whatever the check says: a "
        "flipped byte in a cached weights file gives wrong logits with exit 0",
        PROGRAMS,
        "    reason = check_entry(entry, needed)\n    if reason is None:\n",
        "    reason = check_entry(entry, needed)\n    if reason is None or True:\n",
        ("cache:check",),
        family="hardening",
    ),
    Mutant(
        "cache-most-recently-used-removed-first",
        "the size bound removes the most recently used entries first: the ones in use every day go",
        PROGRAMS,
        "    return sorted(found, key=lambda e: e.last_use)\n",
        "    return sorted(found, key=lambda e: -e.last_use)\n",
        ("cache:bound",),
        family="hardening",
    ),
    Mutant(
        "cache-removes-an-entry-in-use",
        "the size bound and exactc cache --clear remove an entry that a running command holds, "
        "its program and weights deleted under it",
        PROGRAMS,
        "    fd = _lock(entry, exclusive=True)\n",
        "    fd = os.open(entry, os.O_RDONLY)\n",
        ("cache:bound",),
        family="hardening",
    ),
    Mutant(
        "output-renamed-over-a-device",
        "an output file is written as a temporary renamed over its path even when a character "
        "device or a FIFO stands there: the device becomes a regular file, and /dev/full's "
        "ENOSPC is never seen (exit 0)",
        "exactc/exporter/files.py",
        "    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):\n        return OutputTarget(here, False)\n",
        "    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):\n        return OutputTarget(here, True)\n",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "output-symlink-replaced",
        "a symlink at an output path is not followed: the file is renamed over the link, and "
        "the file it named keeps its old bytes",
        "exactc/exporter/files.py",
        "        try:\n            link = os.readlink(here)\n        except OSError:",
        "        try:\n            link = os.readlink(here)\n            break\n        except OSError:",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "output-descriptor-opened-again",
        "--json /dev/stdout opens the file stdout is anew, from its start: the document is "
        "written over the tokens printed before it",
        "exactc/exporter/files.py",
        "            return OutputTarget(Path(path), False, int(named[2]) if own else None)",
        "            return OutputTarget(Path(path), False, None)",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "output-block-device-written-through",
        "a block device at an output path is written through like a character device: as "
        "root, a disk overwritten by a JSON document",
        "exactc/exporter/files.py",
        "    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):\n",
        "    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISBLK(mode):\n",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "generate-json-directory-refused-after-the-run",
        "exactc generate --json DIR is refused only when the document is written, after the "
        "whole generation (and after every other refusal)",
        GENERATE,
        "    if args.json:\n        check_json(args.json)\n",
        "",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "embed-output-directory-refused-after-the-run",
        "exactc embed -o DIR.npy is refused only when the embeddings are written, after the "
        "checkpoint is read and every sentence run",
        EMBED,
        "        target = files.output_target(path)\n",
        "        target = files.OutputTarget(path.absolute(), True)\n",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "broken-pipe-traceback",
        "a reader that closes stdout early (`exactc embed ... | head -c 1`) ends the command "
        "in a BrokenPipeError traceback",
        CLI,
        "    except BrokenPipeError:\n        if not _stdout_reader_gone():",
        "    except BlockingIOError:\n        if not _stdout_reader_gone():",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "stdout-flushed-at-the-interpreter-s-exit",
        "what a command printed is written when the interpreter exits, outside the error path: "
        "a reader gone by then is \"Exception ignored ... BrokenPipeError\" and status 120",
        CLI,
        "        code = _run(args)\n        if argv is None:\n",
        "        return _run(args)\n        if argv is None:\n",
        ("bad-inputs:doors",),
        family="hardening",
    ),
]
