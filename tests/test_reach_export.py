"""The export's and the tracer's refusals and rare paths, each seen to happen with its
whole message or its exact result.

Grouped by what they protect:

1. an entry's inputs (export.check_inputs, through ExportSpec.prepare and on traced
   programs): a missing, extra, mis-shaped or mistyped input, a run-time length outside
   [1, T_max], two inputs that disagree on it, a dimension that is not T itself, each
   refused naming the input and the rule;
2. where an export is written and how (check_target, replace_file, _swap, signals_held):
   never over the current directory or one holding it, a relative path refused once the
   current directory is gone, a failed write leaves no temporary, a failed swap puts the
   earlier export back, SIGINT and SIGTERM held through a block and raised once each after
   it, and nothing held outside the main thread;
3. what an export is made from: the conformance lengths of every T_max, the cache key's
   weights, a checkpoint's non-finite weight refused when it is quantized;
4. tracing (graph.py): every GraphError of an entry that breaks a rule, primitives applied
   outside a trace, and the rare paths (sub, an entry returning values without names, a
   fold body traced once per form, C names made of any text);
5. strict JSON files (jsonfile.load): an unreadable path and the size bound, on both sides.
"""

from __future__ import annotations

import os
import re
import signal
import threading
from pathlib import Path

import numpy as np
import pytest

from exactc.exporter import checkpoints, dims, export, graph, jsonfile
from exactc.verify.compare import assert_bits_equal
from test_checkpoints import drawn, hf_config, hf_tensors, write_hf  # tests/test_checkpoints.py
from test_programs import SMALL  # tests/test_programs.py


def ids(*shape: int, dtype=np.int32) -> np.ndarray:
    return np.zeros(shape, dtype)


def cache(length: int, hd: int = 8) -> np.ndarray:
    """A key or value cache of SMALL["gpt"]'s decode step: (layers, heads, T, head dim)."""
    return np.zeros((2, 2, length, hd))


# (entry of gpt at SMALL, the inputs given, the whole message)
INPUT_REFUSALS = [
    ("forward", {}, "gpt.forward: input input_ids is missing"),
    ("forward", {"input_ids": ids(3), "mask": ids(3)}, "gpt.forward takes no input named mask"),
    ("forward", {"input_ids": ids(2, 3)}, "input input_ids has shape (2, 3); the program takes (T,)"),
    ("forward", {"input_ids": ids(0)},
     "input input_ids has shape (0,): its length 0 is outside [1, 6] (the program takes 1 to T_max = 6 positions)"),
    ("forward", {"input_ids": ids(7)},
     "input input_ids has shape (7,): its length 7 is outside [1, 6] (the program takes 1 to T_max = 6 positions)"),
    ("forward", {"input_ids": ids(3, dtype=np.int64)}, "input input_ids is int64; it must be int32"),
    ("decode", {"token": ids(1), "past_k": cache(3, hd=9), "past_v": cache(3)},
     "input past_k has shape (2, 2, 3, 9); the program takes (2, 2, 3, 8) at length 3"),
    ("decode", {"token": ids(1), "past_k": cache(3), "past_v": cache(4)},
     "input past_v has length 4; another input has 3: they must agree"),
    ("decode", {"token": ids(1), "past_k": cache(6), "past_v": cache(6)},
     "input past_k has shape (2, 2, 6, 8): its length 6 is outside [1, 5] (the program takes 1 to T_max = 5 "
     "positions)"),
]


@pytest.mark.parametrize("entry,inputs,message", INPUT_REFUSALS, ids=[m for _, _, m in INPUT_REFUSALS])
def test_an_export_refuses_its_inputs_naming_the_input_and_the_rule(entry, inputs, message):
    with pytest.raises(export.ExportError) as refused:
        export.ExportSpec("gpt", entry, "f32", overrides=SMALL["gpt"], inputs=inputs).prepare()
    assert str(refused.value) == message


def silu_each(params, *inputs):
    return {f"y{k}": graph.silu(x) for k, x in enumerate(inputs)}


T5 = dims.length(5)

# (the traced program's inputs, the inputs given, the whole message)
TRACED_REFUSALS = [
    ([graph.InputSpec("x", (3, 7), "x")], {"x": np.zeros((3, 6))},
     "input x has shape (3, 6); the program takes (3, 7)"),  # no run-time length: no "at length"
    ([graph.InputSpec("x", (T5, 4), "x"), graph.InputSpec("y", (2 * T5, 4), "x")],
     {"x": np.zeros((3, 4)), "y": np.zeros((6, 4))},
     "input y: a dimension 2 * T is not the run-time length T itself"),
]


@pytest.mark.parametrize("specs,inputs,message", TRACED_REFUSALS, ids=[m for _, _, m in TRACED_REFUSALS])
def test_a_traced_program_refuses_its_inputs_naming_the_input_and_the_rule(specs, inputs, message):
    program = graph.trace("m", "e", silu_each, [], specs)
    with pytest.raises(export.ExportError) as refused:
        export.check_inputs(program, "f64", inputs)
    assert str(refused.value) == message


@pytest.mark.parametrize("target", [".", "..", "sub/.."])
def test_an_export_is_never_written_over_the_current_directory_or_one_holding_it(tmp_path, monkeypatch, target):
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    path = Path(target).resolve()
    with pytest.raises(export.ExportError) as refused:
        export.check_target(target, force=True)
    assert str(refused.value) == (f"{path} is the current directory or holds it; an export is written to a "
                                  "directory of its own")


def test_once_the_current_directory_is_gone_only_an_absolute_target_names_a_place(tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    with pytest.raises(export.ExportError) as refused:
        export.check_target("out")
    assert str(refused.value) == ("-o out: the current directory no longer exists, so a relative path names "
                                  "nothing; give an absolute one")
    assert export.check_target(tmp_path / "out") == tmp_path / "out"


def test_a_target_under_folders_not_made_yet_is_taken_unless_a_file_is_in_the_way(tmp_path):
    assert export.check_target(tmp_path / "a" / "b" / "out") == tmp_path / "a" / "b" / "out"
    (tmp_path / "file").write_text("")
    with pytest.raises(export.ExportError) as refused:
        export.check_target(tmp_path / "file" / "b" / "out")
    assert str(refused.value) == f"cannot write {tmp_path}/file/b/out: {tmp_path}/file is not a directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing made


def _a_folder(path: Path) -> object:
    path.mkdir()
    (path / "kept").write_bytes(b"old")
    return b"new"


def _an_earlier_file(path: Path) -> object:
    path.write_bytes(b"old")
    return "text, not bytes"


# (what makes the write fail: makes what is at the path, gives the data; the exception)
FAILED_WRITES = [
    ("a folder holds the name", _a_folder, IsADirectoryError),
    ("the data is text", _an_earlier_file, TypeError),
]


@pytest.mark.parametrize("case,make,raised", FAILED_WRITES, ids=[c for c, _, _ in FAILED_WRITES])
def test_a_failed_replace_file_propagates_and_leaves_what_was_there(tmp_path, case, make, raised):
    path = tmp_path / "weights.bin"
    data = make(path)
    with pytest.raises(raised):
        export.replace_file(path, data)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["weights.bin"]  # no temporary left
    assert (path / "kept" if path.is_dir() else path).read_bytes() == b"old"


def test_a_failed_swap_puts_the_earlier_export_back(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / export.MARKER).write_text(export.MARKER_TEXT)
    with pytest.raises(FileNotFoundError):
        export._swap(tmp_path / "never-written", target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the old folder removed too
    assert (target / export.MARKER).read_text() == export.MARKER_TEXT


@pytest.fixture
def recorded_signals():
    """SIGINT and SIGTERM noted in a list instead of acted on, for the test's length."""
    seen: list[int] = []
    previous = {n: signal.signal(n, lambda number, frame: seen.append(number)) for n in (signal.SIGINT, signal.SIGTERM)}
    yield seen
    for number, handler in previous.items():
        signal.signal(number, handler)


# (the signals sent inside the block, those raised after it, in order)
HELD = [
    ([signal.SIGTERM], [signal.SIGTERM]),
    ([signal.SIGTERM, signal.SIGTERM], [signal.SIGTERM]),  # one of a kind, however many came
    ([signal.SIGINT, signal.SIGTERM], [signal.SIGINT, signal.SIGTERM]),
]


@pytest.mark.parametrize("sent,raised", HELD, ids=["one", "twice", "both"])
def test_signals_are_held_through_the_block_and_raised_once_each_after_it(recorded_signals, sent, raised):
    with export.signals_held():
        for number in sent:
            os.kill(os.getpid(), number)
        inside = list(recorded_signals)
    assert inside == []
    assert recorded_signals == raised


def test_outside_the_main_thread_nothing_is_held(recorded_signals):
    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    def hold() -> None:
        with export.signals_held():
            seen.append(signal.getsignal(signal.SIGTERM))

    worker = threading.Thread(target=hold)
    worker.start()
    worker.join()
    assert seen == [before]
    with export.signals_held():  # the main thread's block does hold: another handler
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


# (T_max, the run-time lengths conformance/ holds)
LENGTHS = [(None, []), (0, []), (1, [1]), (2, [1, 2]), (5, [1, 2, 5]), (7, [1, 2, 7]), (16, [1, 2, 7, 16])]


@pytest.mark.parametrize("top,lengths", LENGTHS, ids=[str(t) for t, _ in LENGTHS])
def test_conformance_lengths_are_1_2_7_and_t_max_those_at_most_t_max(top, lengths):
    assert export.conformance_lengths(top) == lengths


def test_the_export_cache_key_follows_the_quantized_weights():
    def digest(weights):
        return export.ExportSpec("gpt", "forward", "f32", overrides=SMALL["gpt"], weights=weights).digest()

    keys = [digest(w) for w in (None, ("q8", 4), ("q8", 8), ("q4", 4))]
    assert len(set(keys)) == 4, keys
    assert digest(("q8", 4)) == keys[1]


def test_a_checkpoint_s_nonfinite_weight_is_refused_when_quantized(tmp_path):
    program, params = drawn("llama")
    tensors = hf_tensors("llama", program, params)
    tensors["model.layers.1.mlp.up_proj.weight"][3, 7] = np.inf
    folder = write_hf(tmp_path / "llama", "llama", hf_config("llama", program.config), tensors)
    spec = export.ExportSpec("llama", "forward", "f32", checkpoint=checkpoints.load(folder), weights=("q8", 4))
    with pytest.raises(export.ExportError) as refused:
        spec.prepare()
    assert str(refused.value) == ("tensor model.layers.{l}.mlp.up_proj.weight: element at index (1, 3, 7) is inf; "
                                  "quantized weights must be finite (1 element(s) are not)")


X = graph.InputSpec("x", (2, 4), "x")

IDS = graph.InputSpec("ids", (2, 4), "i32")

STACKED = graph.ParamSpec("h.{l}.w", (4, 4), 2)


def layer(x, p):
    return graph.linear(x, p["w"])


def shrink(x, p):
    return graph.slice(graph.linear(x, p["w"]), 1, 0, 2)


def layer_and_row(x, p):
    y = graph.linear(x, p["w"])
    return y, [y]


def layer_and_short_row(x, p):
    y = graph.linear(x, p["w"])
    return y, [graph.slice(y, 1, 0, 2)]


def nothing(x):
    return None


def rearranged(c, p):
    return {"a": graph.linear(c["a"], p["w"]), "b": c["b"]}


def counting(c, p):
    return [graph.linear(c[0], p["w"]), c[1] + 1]


def q4_given_q8(params, x):
    return {"y": graph.apply("qlinear_w", {"x": x, "wq": params["wq"], "wd": params["wd"]}, {"fmt": "q4", "block": 4})}


def folding(body, count=2, carry=lambda x: x, **options):
    """An entry that folds `body` over the stacked `h.{l}.w`."""

    def entry(params, x):
        return {"y": graph.fold(body, count, carry(x), graph.group_layers(params, "h."), **options)}

    return entry


def add_an_array(params, x):
    return {"y": graph.add(x, np.ones((2, 4)))}


def add_ids(params, x, ids):
    return {"y": graph.add(x, ids)}


def returns_a_constant(params, x):
    return {"y": 3.0}


def calls_a_module_of_nothing(params, x):
    return {"y": graph.call(nothing, x)}


def uses_w(params, x):
    return {"y": graph.linear(x, params["w"])}


# (case, entry, parameters, inputs, graph.trace's options, the whole message)
GRAPH_REFUSALS = [
    ("an array for an operand", add_an_array, [], [X], {}, "add: operand b is a ndarray; give a traced Value"),
    ("an operand of the wrong kind", add_ids, [], [X, IDS], {}, "add: operand b (ids) holds i32; it must hold x"),
    ("a q8 operand where q4 is asked", q4_given_q8, [graph.ParamSpec("wq", (4, 4), kind="i8"),
                                                      graph.ParamSpec("wd", (4, 1), kind="f32")], [X], {},
     "qlinear_w: operand wq (wq) holds i8; it must hold u8"),
    ("an entry of constants", returns_a_constant, [], [X], {}, "returns_a_constant returned no traced value"),
    ("a module of nothing", calls_a_module_of_nothing, [], [X], {}, "nothing returned no traced value"),
    ("no layers", folding(layer, count=0), [STACKED], [X], {}, "fold of layer: count 0 must be an int >= 1"),
    ("a count as text", folding(layer, count="2"), [STACKED], [X], {}, "fold of layer: count '2' must be an int >= 1"),
    ("a carry of constants", folding(layer, carry=lambda x: {"n": 3}), [STACKED], [X], {},
     "fold of layer: the carry holds no traced value"),
    ("rows without a pair", folding(layer, rows=True), [STACKED], [X], {},
     "fold body layer with rows must return (carry, rows)"),
    ("a carry reshaped", folding(shrink), [STACKED], [X], {},
     "fold body shrink returned [<slice x[2, 2]>]; it must return a carry shaped as its input [<x x[2, 4]>]"),
    ("a carry given back in another order", folding(rearranged, carry=lambda x: {"b": x, "a": x}), [STACKED], [X], {},
     "fold body rearranged returned its carry as {'a': *, 'b': *}; it must return it arranged as it came, "
     "{'b': *, 'a': *}"),
    ("a carry's static part changed", folding(counting, carry=lambda x: [x, 2]), [STACKED], [X], {},
     "fold body counting returned its carry as [*, 3]; it must return it arranged as it came, [*, 2]"),
    ("apart past the end", folding(layer, apart={2: layer}), [STACKED], [X], {},
     "fold of layer: apart iteration 2 is not in [0, 2)"),
    ("apart before the start", folding(layer, apart={-1: layer}), [STACKED], [X], {},
     "fold of layer: apart iteration -1 is not in [0, 2)"),
    ("apart rows of another shape", folding(layer_and_row, rows=True, apart={1: layer_and_short_row}), [STACKED],
     [X], {}, "fold of layer_and_row: an apart body's outputs differ from the body's"),
    ("quantizing what is not there", uses_w, [graph.ParamSpec("w", (4, 4))], [X], {"quantized": {"v": ("q8", 4)}},
     "m.e: no parameter v to quantize"),
    ("quantizing two that are not there", uses_w, [graph.ParamSpec("w", (4, 4))], [X],
     {"quantized": {"v": ("q8", 4), "u": ("q4", 4)}}, "m.e: no parameter v, u to quantize"),
    ("two parameters never used", uses_w, [graph.ParamSpec(n, (4, 4)) for n in ("w", "a", "b")], [X], {},
     "m.e: parameter(s) a, b are never used; drop them"),
]


@pytest.mark.parametrize("case,entry,params,inputs,options,message", GRAPH_REFUSALS,
                         ids=[row[0] for row in GRAPH_REFUSALS])
def test_tracing_refuses_an_entry_naming_the_value_and_the_rule(case, entry, params, inputs, options, message):
    with pytest.raises(graph.GraphError) as refused:
        graph.trace("m", "e", entry, params, inputs, **options)
    assert str(refused.value) == message


V = graph.Value((2, 4), "x", "v")

OUTSIDE = [
    ("a primitive", lambda: graph.add(V, V)),
    ("a call", lambda: graph.call(nothing, V)),
    ("a fold", lambda: graph.fold(layer, 2, V, {})),
]


@pytest.mark.parametrize("case,use", OUTSIDE, ids=[c for c, _ in OUTSIDE])
def test_a_primitive_outside_a_trace_is_refused(case, use):
    with pytest.raises(graph.GraphError) as refused:
        use()
    assert str(refused.value) == "primitives are applied inside a traced entry (graph.trace)"


def test_sub_is_traced_and_runs_as_the_rounded_difference():
    def entry(params, x, y):
        return {"d": graph.sub(x, y)}

    program = graph.trace("m", "e", entry, [], [X, graph.InputSpec("y", (2, 4), "x")])
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((2, 4)), rng.standard_normal((2, 4))
    assert [op.primitive for op in program.function.ops()] == ["sub"]
    assert_bits_equal(x - y, graph.evaluate(program, "f64", {}, {"x": x, "y": y})["d"], "d", every_bit=True)


def returns_twice(params, x):
    return graph.scale(x, 2.0, name="twice")


def returns_twice_and_half(params, x):
    return graph.scale(x, 2.0, name="twice"), graph.scale(x, 0.5, name="half")


# (an entry that returns values, not a dict; the output names it gets; each output from x)
UNNAMED = [
    (returns_twice, ("twice",), [lambda x: 2.0 * x]),
    (returns_twice_and_half, ("twice", "half"), [lambda x: 2.0 * x, lambda x: 0.5 * x]),
]


@pytest.mark.parametrize("entry,names,values", UNNAMED, ids=["one value", "a tuple"])
def test_an_entry_returning_values_names_its_outputs_after_them(entry, names, values):
    program = graph.trace("m", "e", entry, [], [X])
    assert program.output_names == names
    x = np.random.default_rng(4).standard_normal((2, 4))
    got = graph.evaluate(program, "f64", {}, {"x": x})
    assert list(got) == list(names)
    for name, value in zip(names, values):
        assert_bits_equal(value(x), got[name], name, every_bit=True)


def test_a_fold_body_is_traced_once_per_form_however_many_folds_run_it():
    traced = []

    def body(x, p):
        traced.append(x.shape)
        return graph.linear(x, p["w"])

    def entry(params, x):
        layers = graph.group_layers(params, "h.")
        return {"y": graph.fold(body, 2, graph.fold(body, 2, x, layers), layers)}

    program = graph.trace("m", "e", entry, [STACKED], [X])
    folds = [n for n in program.function.nodes if isinstance(n, graph.Fold)]
    assert traced == [(2, 4)]
    assert len(folds) == 2 and folds[0].body is folds[1].body


# (an input's name, the C name its value gets)
C_NAMES = [("2d", "v2d"), ("a.b-c", "a_b_c"), ("__", "v"), ("int", "int_"), ("T", "T_"),
           ("exactc_x", "exactc_x_"), ("launch_y", "launch_y_")]


@pytest.mark.parametrize("given,c_name", C_NAMES, ids=[g for g, _ in C_NAMES])
def test_a_value_gets_a_c_name_from_any_text(given, c_name):
    program = graph.trace("m", "e", silu_each, [], [graph.InputSpec(given, (2,), "x")])
    assert [v.name for v in program.input_values] == [c_name]


def test_an_unreadable_json_path_is_refused_naming_it(tmp_path):
    with pytest.raises(jsonfile.JSONFileError) as missing:
        jsonfile.load(tmp_path / "config.json")
    assert str(missing.value) == f"{tmp_path / 'config.json'}: cannot read (No such file or directory)"
    with pytest.raises(jsonfile.JSONFileError) as folder:
        jsonfile.load(tmp_path)
    assert str(folder.value) == f"{tmp_path}: cannot read (Is a directory)"


TOO_LONG = f"more than {jsonfile.MAX_BYTES:,} bytes; exactc reads JSON files up to that size"


def test_a_json_file_of_max_bytes_is_read_and_one_byte_more_is_refused(tmp_path):
    at_bound, past = tmp_path / "at.json", tmp_path / "past.json"
    for path, size in ((at_bound, jsonfile.MAX_BYTES), (past, jsonfile.MAX_BYTES + 1)):
        with open(path, "wb") as f:  # sparse: NUL bytes, no disk taken
            f.truncate(size)
    with pytest.raises(jsonfile.JSONFileError, match=re.escape(f"{at_bound}: not JSON (Expecting value")):
        jsonfile.load(at_bound)
    for endless in (past, "/dev/zero"):
        with pytest.raises(jsonfile.JSONFileError) as refused:
            jsonfile.load(endless)
        assert str(refused.value) == f"{endless}: {TOO_LONG}"
