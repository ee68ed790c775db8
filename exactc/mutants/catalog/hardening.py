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
BUILD = "exactc/verify/build.py"
HOST = "exactc/runtime/exactc_host.c"
COMMANDS = "exactc/commands.py"
GENERATE = "exactc/generate.py"

MUTANTS = [
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
        BUILD,
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
        "    program = programs.exported(spec, programs.Build(cc=args.cc))\n",
        "    outdir.mkdir(parents=True, exist_ok=True)\n    program = programs.exported(spec, programs.Build(cc=args.cc))\n",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "export-left-at-mode-0700",
        "an export keeps the 0700 of its temporary directory: no one else can read it",
        EXPORT,
        "        os.chmod(work, 0o777 & ~_umask())",
        "        pass",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "cache-folder-made-world-readable",
        "the cache folder (built programs, their inputs) is made with the umask's mode",
        BUILD,
        "        path.mkdir(mode=0o700, parents=True, exist_ok=True)",
        "        path.mkdir(parents=True, exist_ok=True)",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "makefile-value-changing-flags-accepted",
        "make CFLAGS='-O2 -ffp-contract=fast' builds without a word, and the bits change",
        EXPORT,
        "ifneq ($(REFUSED),)\n",
        "ifneq ($(REFUSED),$(REFUSED))\n",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "makefile-strict-flags-first",
        "STRICT comes first on the compiler line: a later CFLAGS flag overrides it",
        EXPORT,
        "\nCOMPILE := $(CC) $(CFLAGS) $(WARN) $(OMPFLAGS) $(DEFINES) $(STRICT) -I.\n",
        "\nCOMPILE := $(CC) $(STRICT) $(CFLAGS) $(WARN) $(OMPFLAGS) $(DEFINES) -I.\n",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "makefile-strict-overridable",
        "make STRICT=-O0 replaces the flags bit identity rests on",
        EXPORT,
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
        "output-renamed-over-a-device",
        "an output file is written as a temporary renamed over its path even when a character "
        "device or a FIFO stands there: the device becomes a regular file, and /dev/full's "
        "ENOSPC is never seen (exit 0)",
        EXPORT,
        "    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):\n        return OutputTarget(here, False)\n",
        "    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):\n        return OutputTarget(here, True)\n",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "output-symlink-replaced",
        "a symlink at an output path is not followed: the file is renamed over the link, and "
        "the file it named keeps its old bytes",
        EXPORT,
        "        try:\n            link = os.readlink(here)\n        except OSError:",
        "        try:\n            link = os.readlink(here)\n            break\n        except OSError:",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "output-descriptor-opened-again",
        "--json /dev/stdout opens the file stdout is anew, from its start: the document is "
        "written over the tokens printed before it",
        EXPORT,
        "            return OutputTarget(Path(path), False, int(named[2]) if own else None)",
        "            return OutputTarget(Path(path), False, None)",
        ("bad-inputs:doors",),
        family="hardening",
    ),
    Mutant(
        "output-block-device-written-through",
        "a block device at an output path is written through like a character device: as "
        "root, a disk overwritten by a JSON document",
        EXPORT,
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
        "        target = export.output_target(path)\n",
        "        target = export.OutputTarget(path.absolute(), True)\n",
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
