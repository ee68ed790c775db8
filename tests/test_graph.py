"""The program graph (exporter/graph.py): the builders and their defaults, folds and their
segments, the layers the reference reports, tracing's refusals naming the value and the
rule, C names, and one body traced once per form."""

from __future__ import annotations

import numpy as np
import pytest

from exactc.exporter import graph

from exactc.exporter.reference import walk
from exactc.verify.compare import assert_bits_equal

from test_export import silu_each

# ---- the graph: fold segments, the layers the reference reports, node names


def apart_program(count: int, apart: tuple[int, ...]):
    """A GPT of `count` layers whose layers `apart` run another body (attention alone): the
    traced program and its fold."""
    from exactc.exporter import graph, models
    from exactc.exporter.models import gpt
    cfg = models.config("gpt", {"vocab": 16, "positions": 6, "dim": 8, "heads": 2, "layers": count, "mlp": 8,
                                "tokens": 6})

    def other(x, p, cfg):
        return graph.add(x, graph.call(gpt.attention, cfg, graph.layernorm(x, p["ln_1.weight"], p["ln_1.bias"]), p))

    def entry(cfg, params, input_ids):
        x = graph.add(graph.embedding(params["transformer.wte.weight"], input_ids),
                      graph.slice(params["transformer.wpe.weight"], 0, 0, cfg.tokens))
        x = graph.fold(gpt.block, cfg.layers, x, graph.group_layers(params, "transformer.h."), cfg,
                       apart={i: other for i in apart})
        return {"logits": gpt.head(cfg, params, x)}
    program = graph.trace("gpt", "apart", entry, gpt.parameters(cfg), gpt.inputs(cfg, cfg.tokens), cfg)
    (fold,) = [n for n in program.function.nodes if isinstance(n, graph.Fold)]
    return program, fold


def test_graph_fold_segments_are_the_runs_of_one_body():
    program, fold = apart_program(5, (1, 3, 4))
    body, other = fold.body, fold.apart[1]
    assert fold.segments() == [(0, 1, body), (1, 2, other), (2, 3, body), (3, 5, other)]
    program, fold = apart_program(4, ())
    assert fold.segments() == [(0, 4, fold.body)]
    program, fold = apart_program(3, (0,))
    assert fold.segments() == [(0, 1, fold.apart[0]), (1, 3, fold.body)]


def test_graph_evaluate_reports_every_layer_as_it_ran():
    from exactc.exporter import graph, models
    program = models.build("gpt", "forward", {"vocab": 16, "positions": 8, "dim": 8, "heads": 2, "layers": 3,
                                              "mlp": 8, "tokens": 6})
    params = models.draw_parameters(program, 1, "f32")
    inputs = {"input_ids": np.array([3, 1, 4, 1], np.int32)}  # T = 4 of 6
    steps = []
    out = walk.evaluate(program, "f32", params, inputs, on_layer=steps.append)
    assert (walk.evaluate(program, "f32", params, inputs)["logits"] == out["logits"]).all()
    (fold,) = [n for n in program.function.nodes if isinstance(n, graph.Fold)]
    assert [s.layer for s in steps] == [0, 1, 2] and all(s.fold is fold and s.length == 4 for s in steps)
    for before, after in zip(steps, steps[1:]):
        assert all((a == b).all() for a, b in zip(after.carry_in, before.carry_out))
    assert steps[0].carry_in[0].shape == (4, 8) and all(s.stacked[0].shape[0] == 3 for s in steps)
    for step in steps:
        again = walk.rerun_layer(step, "f32", step.layer)
        assert len(again) == len(step.carry_out) and all((a == b).all() for a, b in zip(again, step.carry_out))
    other = walk.rerun_layer(steps[2], "f32", 1)  # layer 2 run on layer 1's slice: not its own output
    assert not (other[0] == steps[2].carry_out[0]).all()
    assert program.parameter_count() == sum(int(np.prod(p.full_shape)) for p in program.params) == \
        sum(a.size for a in params.values())


# ---- the graph builders and folds at their edges (exporter/graph.py)


def test_graph_builders_pass_their_defaults_and_names(monkeypatch):
    made = []
    operands = []
    monkeypatch.setattr(graph, "apply", lambda primitive, given, attrs=None, name=None:
                        made.append((primitive, attrs, name)) or operands.append(given))
    graph.sub("a", "b", name="s")
    graph.concat("a", "b", name="c")
    graph.l2norm("x", name="l")
    graph.layernorm("x", "g", "b")
    graph.rmsnorm("x", "g")
    graph.rope("x")
    graph.concat("a", "b")
    graph.linear("x", graph.QuantizedWeight("v", "s", "q8", 32, 64, graph.WEIGHT_ONLY), "bias", name="q")
    assert made.pop() == ("qlinear_w", {"fmt": "q8", "block": 32, "has_b": True}, "q")
    assert operands.pop() == {"x": "x", "wq": "v", "wd": "s", "b": "bias"}
    assert made == [("sub", None, "s"), ("concat", {"axis": 0}, "c"), ("l2norm", {"eps": 1e-12}, "l"),
                    ("layernorm", {"eps": 1e-5}, None), ("rmsnorm", {"eps": 1e-5}, None),
                    ("rope", {"theta": 10000.0, "pos0": 0, "pairing": "half"}, None), ("concat", {"axis": 0}, None)]


def test_graph_quantized_specs_of_both_formats():
    w = graph.ParamSpec("w", (6, 20), 0)
    values, scales = graph.quantized_specs(w, "q4", 8)
    assert (values.name, values.shape, values.kind) == ("w", (6, 12), "u8")  # 3 blocks of 4 bytes a row
    assert (scales.name, scales.shape, scales.kind) == ("w" + graph.SCALE_SUFFIX, (6, 3), "f32")
    values, scales = graph.quantized_specs(w, "q8", 8)
    assert (values.shape, values.kind, scales.shape) == ((6, 20), "i8", (6, 3))


def test_graph_a_reverse_fold_runs_its_layers_from_the_last_down_each_on_its_own_slice():
    from exactc.exporter import models

    def body(x, p):
        y = graph.silu(graph.linear(x, p["w"]))
        return y, y  # the carry, and this layer's row

    def entry(params, x):
        out, (rows,) = graph.fold(body, 3, x, graph.group_layers(params, "h."), rows=True, reverse=True)
        return {"y": out, "rows": rows}

    program = graph.trace("m", "reverse", entry, [graph.ParamSpec("h.{l}.w", (4, 4), 3)],
                          [graph.InputSpec("x", (2, 4), "x")])
    (fold,) = [n for n in program.function.nodes if isinstance(n, graph.Fold)]
    assert fold.reverse and list(fold.order()) == [2, 1, 0]
    params = models.draw_parameters(program, 0, "f64")
    x = np.linspace(-1, 1, 8).reshape(2, 4)
    steps = []
    got = walk.evaluate(program, "f64", params, {"x": x}, on_layer=steps.append)
    assert [s.layer for s in steps] == [2, 1, 0]
    w, want, rows = params["h.{l}.w"], x, {}
    for layer in (2, 1, 0):  # layer 2 on x, then layer 1, then layer 0: row l is layer l's
        want = walk.reference.silu(walk.reference.linear(want, w[layer], site="f64"), site="f64")
        rows[layer] = want
    assert (got["y"] == want).all()
    assert (got["rows"] == np.stack([rows[0], rows[1], rows[2]])).all()


def test_graph_an_apart_layer_runs_its_own_body_and_a_call_reports_its_layers():
    from exactc.exporter import models

    def body(x, p):
        return graph.linear(x, p["w"])

    def other(x, p):
        return graph.silu(graph.linear(x, p["w"]))

    def module(x, params):
        return graph.fold(body, 2, x, graph.group_layers(params, "h."), apart={1: other})

    def entry(params, x):
        return {"y": graph.call(module, x, params)}

    program = graph.trace("m", "apart", entry, [graph.ParamSpec("h.{l}.w", (4, 4), 2)], [graph.InputSpec("x", (2, 4), "x")])
    params = models.draw_parameters(program, 0, "f64")
    x = np.linspace(-1, 1, 8).reshape(2, 4)
    steps = []
    got = walk.evaluate(program, "f64", params, {"x": x}, on_layer=steps.append)["y"]

    def plain(params, x):
        return {"y": graph.silu(graph.linear(graph.linear(x, params["a"]), params["b"]))}
    straight = graph.trace("m", "plain", plain, [graph.ParamSpec("a", (4, 4), 0), graph.ParamSpec("b", (4, 4), 0)],
                           [graph.InputSpec("x", (2, 4), "x")])
    w = params["h.{l}.w"]
    assert (got == walk.evaluate(straight, "f64", {"a": w[0], "b": w[1]}, {"x": x})["y"]).all()
    assert [s.layer for s in steps] == [0, 1]  # the fold inside the call reports its layers too
    # the ops of both bodies are reached: the main body's linear, the apart one's linear and silu
    reached = sorted(op.primitive for op, _ in graph.parameter_reach(program))
    assert reached.count("linear") == 2 and "silu" in reached, reached
    assert (walk.rerun_layer(steps[1], "f64", 1)[0] == got).all()  # layer 1 again: its own (apart) body


def test_graph_one_body_folded_over_layers_of_two_shapes_is_traced_twice():
    from exactc.exporter import models

    def body(x, p):
        return graph.linear(graph.linear(x, p["a"]), p["b"])

    def entry(params, x):
        return {"y": graph.fold(body, 2, graph.fold(body, 2, x, graph.group_layers(params, "h.")),
                                graph.group_layers(params, "g."))}

    specs = [graph.ParamSpec("h.{l}.a", (8, 4), 2), graph.ParamSpec("h.{l}.b", (4, 8), 2),
             graph.ParamSpec("g.{l}.a", (6, 4), 2), graph.ParamSpec("g.{l}.b", (4, 6), 2)]
    program = graph.trace("m", "forms", entry, specs, [graph.InputSpec("x", (2, 4), "x")])
    folds = [n for n in program.function.nodes if isinstance(n, graph.Fold)]
    assert len(folds) == 2 and folds[0].body is not folds[1].body  # (8, 4) and (6, 4) layers: two forms
    params = models.draw_parameters(program, 0, "f64")
    x = np.linspace(-1, 1, 8).reshape(2, 4)
    y = walk.evaluate(program, "f64", params, {"x": x})["y"]
    for prefix in ("h.", "g."):
        for layer in range(2):
            x = x @ params[prefix + "{l}.a"][layer].T @ params[prefix + "{l}.b"][layer].T
    assert y.shape == (2, 4) and np.allclose(y, x)


# ---- the graph's trees at their edges (exporter/graph.py): a quantized weight passed alone,
# one module over the same leaves in two arrangements, one value returned twice, attributes
# given as numpy scalars, C names at their ends, folds inside folds and their forms


def _traced(entry, params, inputs, **quantized):
    return graph.trace("m", "e", entry, params, inputs, quantized=quantized or None)


def test_graph_a_quantized_weight_passed_alone_keeps_its_tensors_names():
    """A QuantizedWeight handed to a module outside a dict has no key for a path: its values
    and its scales go in under their own names (`proj`, `proj_scale`)."""
    def module(x, w):
        return graph.linear(x, w)

    def entry(params, x):
        return {"y": graph.call(module, x, params["proj"])}

    program = _traced(entry, [graph.ParamSpec("proj", (6, 64), 0)], [graph.InputSpec("x", (2, 64), "x")],
                      proj=("q8", 32))
    (node,) = program.function.nodes
    assert [v.name for v in node.function.inputs] == ["x", "proj", "proj_scale"]


def test_graph_one_module_over_the_same_leaves_in_another_arrangement_is_traced_again():
    """Two calls of one module whose arguments hold values of the same shapes under other
    keys are two forms: sharing one would hand `a` where the module reads `b`."""
    def module(p):
        return graph.sub(p["a"], p["b"])

    def entry(params, x, z):
        return {"first": graph.call(module, {"a": x, "b": z}), "second": graph.call(module, {"b": x, "a": z})}

    program = _traced(entry, [], [graph.InputSpec("x", (2, 4), "x"), graph.InputSpec("z", (2, 4), "x")])
    calls = [n for n in program.function.nodes if isinstance(n, graph.Call)]
    assert len(calls) == 2 and calls[0].function is not calls[1].function
    x, z = np.linspace(-1, 1, 8).reshape(2, 4), np.linspace(3, 5, 8).reshape(2, 4)
    out = walk.evaluate(program, "f64", {}, {"x": x, "z": z})
    assert (out["first"] == x - z).all() and (out["second"] == z - x).all()


def test_graph_a_value_returned_twice_is_copied_once_for_its_second_output():
    """The host writes each output through its own pointer: a module returning one value
    twice writes it, then a copy of it (`y_out`)."""
    def module(x):
        y = graph.silu(x, name="y")
        return y, y

    def entry(params, x):
        first, second = graph.call(module, x)
        return {"a": first, "b": second}

    program = _traced(entry, [], [graph.InputSpec("x", (2, 4), "x")])
    (call,) = [n for n in program.function.nodes if isinstance(n, graph.Call)]
    outputs = call.function.outputs
    assert len(outputs) == 2 and outputs[0] is not outputs[1]
    assert [v.name for v in outputs] == ["y", "y_out"]
    copy = call.function.nodes[-1]
    assert (copy.primitive, copy.copy, copy.args, copy.out) == ("reshape", True, (outputs[0],), outputs[1])


def test_graph_attributes_given_as_numpy_scalars_are_held_as_python_numbers():
    def entry(params, x):
        return {"y": graph.reshape(x, (np.int64(4), np.int32(2)))}

    program = _traced(entry, [], [graph.InputSpec("x", (2, 4), "x")])
    (node,) = [n for n in program.function.nodes if isinstance(n, graph.Op) and not n.copy]
    assert node.attrs["shape"] == (4, 2) and [type(d) for d in node.attrs["shape"]] == [int, int]
    assert node.out.shape == (4, 2) and [type(d) for d in node.out.shape] == [int, int]


def test_graph_c_names_keep_their_letters_and_lose_only_underscores_at_their_ends():
    def entry(params, x):
        return {"y": graph.linear(x, params["_Xw.X_"])}

    program = _traced(entry, [graph.ParamSpec("_Xw.X_", (3, 4), 0)], [graph.InputSpec("X_", (2, 4), "x")])
    assert [v.name for v in program.function.inputs] == ["Xw_X", "X"]


def test_graph_a_fold_inside_a_fold_reports_its_layers_and_a_doc_is_its_first_paragraph():
    from exactc.exporter import models

    def inner(x, p):
        return graph.silu(graph.linear(x, p["w"]))

    def outer(x, layer, ws):
        """Two layers of inner ones.

        A second paragraph, not the function's summary."""
        return graph.fold(inner, 2, graph.scale(x, 0.5), {"w": ws})

    def entry(params, x):
        return {"y": graph.fold(outer, 3, x, {}, params["ws"])}

    program = _traced(entry, [graph.ParamSpec("ws", (2, 4, 4), 0)], [graph.InputSpec("x", (2, 4), "x")])
    assert [(f.name, f.doc) for f in program.function.walk()] == [
        ("inner", ""), ("outer", "Two layers of inner ones."), ("e", "")]
    steps = []
    walk.evaluate(program, "f64", models.draw_parameters(program, 0, "f64"), {"x": np.ones((2, 4))},
                   on_layer=steps.append)
    assert [(s.fold.count, s.layer) for s in steps] == [(2, 0), (2, 1), (3, 0), (2, 0), (2, 1), (3, 1),
                                                        (2, 0), (2, 1), (3, 2)]


def test_graph_one_body_folded_over_another_arrangement_or_row_count_is_traced_again():
    """A fold's form is its body with the carry's arrangement and each layer's shape: a
    carry dict with its keys swapped, or layers with other rows, is a body of its own
    (sharing one would hand `a` where the body reads `b`, or read rows a layer lacks).
    A carry dict's formals are named by its keys."""
    def body(c, p):  # the carry returned in the order it came
        return {k: graph.sub(c["a"], c["b"]) if k == "a" else c[k] for k in c}

    def entry(params, x, z):
        return {"first": graph.fold(body, 2, {"a": x, "b": z}, {})["a"],
                "second": graph.fold(body, 2, {"b": x, "a": z}, {})["a"]}

    program = _traced(entry, [], [graph.InputSpec("x", (2, 4), "x"), graph.InputSpec("z", (2, 4), "x")])
    folds = [n for n in program.function.nodes if isinstance(n, graph.Fold)]
    assert len(folds) == 2 and folds[0].body is not folds[1].body
    assert [v.name for v in folds[0].body.inputs] == ["a", "b"]
    x, z = np.linspace(-1, 1, 8).reshape(2, 4), np.linspace(3, 5, 8).reshape(2, 4)
    out = walk.evaluate(program, "f64", {}, {"x": x, "z": z})
    assert (out["first"] == (x - z) - z).all() and (out["second"] == (z - x) - x).all()

    def rows(x, p):
        return graph.add(x, graph.slice(p["t"], 0, 0, 2))

    def tables(params, x):
        return {"y": graph.fold(rows, 2, graph.fold(rows, 2, x, graph.group_layers(params, "h.")),
                                graph.group_layers(params, "g."))}

    program = _traced(tables, [graph.ParamSpec("h.{l}.t", (8, 4), 2), graph.ParamSpec("g.{l}.t", (6, 4), 2)],
                      [graph.InputSpec("x", (2, 4), "x")])
    folds = [n for n in program.function.nodes if isinstance(n, graph.Fold)]
    assert len(folds) == 2 and folds[0].body is not folds[1].body  # (8, 4) and (6, 4) tables: two forms


# ---- tracing


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
    assert_bits_equal(x - y, walk.evaluate(program, "f64", {}, {"x": x, "y": y})["d"], "d", every_bit=True)


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
    got = walk.evaluate(program, "f64", {}, {"x": x})
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
