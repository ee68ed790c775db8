"""The loss_grad graph (exporter/backprop.py): the reference walk of the graph gives the
reverse walk's loss and gradients bit for bit; the layers' backward is a reverse fold
that reads the residuals its forward fold kept and recomputes nothing; refusals name
the rule."""

from __future__ import annotations

import numpy as np
import pytest

from exactc.exporter import backprop, dims, graph, models, training
from exactc.exporter.reference import training as reference_training
from exactc.exporter.reference import walk

SMALL = {"vocab": 11, "dim": 8, "heads": 2, "layers": 2, "mlp": 12, "tokens": 5}
MODELS = {
    "gpt tied": ("gpt", {**SMALL, "positions": 7}),
    "gpt untied": ("gpt", {**SMALL, "positions": 7, "tied": False}),
    "llama": ("llama", {**SMALL, "kv_heads": 1}),
    "gpt, every position": ("gpt", {**SMALL, "positions": 5}),  # the position slice reaches the table's end
}


def batch(lg: training.LossGrad, size: int, length: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and targets (size, length), a few targets the ignore index."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, lg.vocab, (size, length)).astype(np.int32)
    targets = rng.integers(0, lg.vocab, (size, length)).astype(np.int32)
    targets[rng.random((size, length)) < 0.3] = lg.ignore
    targets[0, 0] = 1  # at least one position counts
    return tokens, targets


@pytest.mark.parametrize("size", [1, 2])
@pytest.mark.parametrize("site", ["f64", "f32"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_graph_gives_the_reverse_walks_loss_and_gradients_bit_for_bit(name, site, size):
    model, config = MODELS[name]
    lg = models.build_loss_grad(model, config)
    program = backprop.loss_grad_program(lg, size)
    assert program.output_names == lg.output_names
    params = models.draw_parameters(lg.forward, 3, site)
    for length in (4, 1):  # below T_max, and one position
        tokens, targets = batch(lg, size, length, seed=length + size)
        want = reference_training.loss_grad(lg, site, params, tokens, targets)
        got = walk.evaluate(program, site, params, {"tokens": tokens, "targets": targets})
        for key, array in want.items():
            assert got[key].shape == array.shape and got[key].tobytes() == array.tobytes(), (key, length)


def folds(fn: graph.Function) -> list[graph.Fold]:
    return [node for node in fn.nodes if isinstance(node, graph.Fold)]


# What a layer's backward may apply: the backward primitives, rope's inverse, and the
# elementwise and view operations that write the elementwise rules and move adjoints.
MOVES = {"add", "sub", "mul", "scale", "reshape", "transpose", "slice", "concat", "fill"}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_layers_backward_is_a_reverse_fold_reading_the_kept_residuals(name):
    model, config = MODELS[name]
    lg = models.build_loss_grad(model, config)
    program = backprop.loss_grad_program(lg, 2)
    (sequences,) = folds(program.function)
    assert (sequences.count, sequences.reverse, [v.name for v in sequences.stacked]) == (
        2,
        False,
        ["tokens", "targets"],
    )
    forward, backward = folds(sequences.body)
    (layers,) = folds(lg.forward.function)
    kept = backprop.residuals(layers.body, len(layers.carry))
    assert (forward.count, forward.reverse, forward.rows) == (config["layers"], False, len(kept))
    assert (backward.count, backward.reverse, backward.rows) == (config["layers"], True, len(layers.stacked))
    assert backward.stacked[: len(kept)] == forward.row_outs  # the residuals, layer l's read by layer l
    applied = [op for op in backward.body.ops()]
    recomputed = [
        op.primitive
        for op in applied
        if op.primitive not in MOVES
        and "_bar" not in op.primitive
        and not (op.primitive == "rope" and op.attrs["inverse"])
    ]
    assert recomputed == [], recomputed  # no forward operation runs again
    order = [node.primitive for node in sequences.body.nodes if isinstance(node, graph.Op)]
    assert order.index("xent_rows") < order.index("xent_bar")  # the loss, then the backward of the head


def forward_of(body):
    """A causal LM's forward of one embedding table, `body` of the embedded tokens."""

    def entry(params, input_ids):
        x = graph.embedding(params["wte"], input_ids)
        return {"logits": graph.linear(body(x, params), params["wte"])}

    program = graph.trace(
        "m",
        "forward",
        entry,
        [graph.ParamSpec("wte", (6, 4)), graph.ParamSpec("h.{l}.w", (4, 4), 2)],
        [graph.InputSpec("input_ids", (3,), "i32")],
    )
    return training.loss_grad(program)


def layers_with_a_dead_branch(x, params):
    def layer(x, p):
        graph.silu(graph.scale(x, 1e30), name="dead")  # reaches nothing: no backward
        return graph.linear(x, p["w"])

    return graph.fold(layer, 2, x, graph.group_layers(params, "h."))


def test_an_operation_that_reaches_no_loss_has_no_backward_and_the_bits_hold():
    lg = forward_of(layers_with_a_dead_branch)
    program = backprop.loss_grad_program(lg, 1)
    assert "silu_bar" not in {op.primitive for op in program.function.ops()}
    params = models.draw_parameters(lg.forward, 5, "f32")
    tokens, targets = batch(lg, 1, 3, seed=5)
    want = reference_training.loss_grad(lg, "f32", params, tokens, targets)
    got = walk.evaluate(program, "f32", params, {"tokens": tokens, "targets": targets})
    assert all(got[key].tobytes() == array.tobytes() for key, array in want.items())


def layers_with_rows(x, params):
    def layer(x, p):
        y = graph.linear(x, p["w"])
        return y, y

    out, _ = graph.fold(layer, 2, x, graph.group_layers(params, "h."), rows=True)
    return out


def normed_layers(x, params):
    def layer(x, p):
        return graph.linear(graph.l2norm(x, name="unit"), p["w"])

    return graph.fold(layer, 2, x, graph.group_layers(params, "h."))


REFUSALS = [
    (
        forward_of(normed_layers),
        1,
        "l2norm (unit) has no backward; loss_grad differentiates add, concat, embedding, gelu_tanh, layernorm, "
        "linear, matmul, mean_pool, mul, reshape, rmsnorm, rope, scale, silu, slice, softmax, sub, transpose",
    ),
    (
        forward_of(layers_with_rows),
        1,
        "fold of layer: loss_grad differentiates a plain fold at the entry's top (no rows, no iterations apart, no "
        "float shared value, not inside another fold)",
    ),
    (forward_of(layers_with_rows), 0, "batch 0 must be an integer >= 1"),
]


@pytest.mark.parametrize("lg, size, message", REFUSALS)
def test_a_forward_or_batch_loss_grad_cannot_take_is_refused_in_one_line(lg, size, message):
    with pytest.raises(training.TrainingError) as info:
        backprop.loss_grad_program(lg, size)
    assert str(info.value) == message


def test_a_slice_reaching_its_axis_end_takes_its_rows_by_embedding_bar_or_is_refused():
    lg = models.build_loss_grad("gpt", {**SMALL, "positions": 5})
    ops = list(backprop.loss_grad_program(lg, 1).function.ops())
    assert [(op.attrs["start"], op.attrs["length"]) for op in ops if op.primitive == "iota"] == [
        (0, lg.forward.inputs[0].shape[0])
    ]

    def entry(params, input_ids):
        T = input_ids.shape[0]
        x = graph.embedding(params["wte"], input_ids)
        columns = graph.transpose(graph.slice(params["k"], 1, 0, T), (1, 0))  # axis 1 of k, [0, T)
        return {"logits": graph.linear(graph.add(x, columns), params["wte"])}

    program = graph.trace(
        "m",
        "forward",
        entry,
        [graph.ParamSpec("wte", (6, 4)), graph.ParamSpec("k", (4, 3))],
        [graph.InputSpec("input_ids", (dims.length(3),), "i32")],
    )
    with pytest.raises(training.TrainingError) as info:
        backprop.loss_grad_program(training.loss_grad(program), 1)
    assert str(info.value) == (
        "slice: the slice [0, T) along axis 1 of k[4, 3] follows the run-time length; "
        "loss_grad takes such a slice of a table's rows (axis 0 of a matrix) only"
    )
