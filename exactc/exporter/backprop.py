"""The reverse-mode transform: a causal LM's `loss_grad` entry as a graph of catalogue
primitives (docs/semantics.md section 17), the reverse walk of exporter/reference/
training.py written down as operations.

    lg = training.loss_grad(models.build("gpt", "forward", {"layers": 2}))
    program = backprop.loss_grad_program(lg, batch=2)
    walk.evaluate(program, "f32", params, {"tokens": tokens, "targets": targets})

The program takes tokens and targets (B, T) int32 and gives `loss` and the gradient of
every parameter in the program's parameter order. A fold over the batch, `sequence`,
runs each sequence b = 0 … B-1 in order (its tokens and targets the fold's slice b),
carrying the gradients and the loss total from one sequence to the next, as the walk
does. Its body holds:

- the forward's operations, calls inlined; a fold stays a fold and gives, as its rows,
  every value its layers' backward reads (the residuals: `READS`), so nothing is
  recomputed;
- the loss (xent_rows, summed into the total by sum_rows) and the logits' adjoint
  +0 ⊕ xent_bar's terms;
- the backward: the operations in reverse program order, each rule of
  reference/backward.py written with the backward primitives (an accumulating one takes
  the adjoint so far as `acc`; a term one is added with `add`; the views with add,
  reshape, transpose, slice and concat); a fold's backward is a `reverse` fold, its
  layers from the last down, carrying the adjoint of the forward's carry, reading
  layer l's residuals and parameters, and giving layer l's gradients as its rows.

An adjoint starts as `zeros` (+0) where the walk's Cell takes its first term, and an
operation whose output has no adjoint is skipped (dead code after differentiation).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from exactc.exporter import dims, training
from exactc.exporter import graph as g
from exactc.exporter.graph import Call, Fold, Function, InputSpec, Op, Program, Value

# The operands (and "y", the output) each primitive's backward reads: what a fold keeps
# of its layers for the backward fold.
READS: dict[str, tuple[str, ...]] = {
    "add": (),
    "sub": (),
    "mul": ("a", "b"),
    "scale": (),
    "silu": ("x",),
    "gelu_tanh": ("x",),
    "linear": ("x", "w"),
    "matmul": ("a", "b"),
    "embedding": ("ids",),
    "mean_pool": ("keep",),
    "layernorm": ("x", "g"),
    "rmsnorm": ("x", "g"),
    "softmax": ("y", "keep"),
    "rope": (),
    "reshape": (),
    "transpose": (),
    "slice": (),
    "concat": (),
}

Key = tuple  # (the path of inlined calls, id(forward Value))


@dataclasses.dataclass(eq=False)
class Cell:
    """One adjoint in the graph being built: None until its first term."""

    value: Value | None = None


@dataclasses.dataclass
class _Scope:
    """One traced function's view of the forward: its values (`env`), the adjoints
    (`cells`), and each forward fold's residuals (keys kept, the rows that hold them)."""

    env: dict[Key, Value] = dataclasses.field(default_factory=dict)
    cells: dict[Key, Cell] = dataclasses.field(default_factory=dict)
    kept: dict[Key, tuple[list[Key], list[Value]]] = dataclasses.field(default_factory=dict)

    def value(self, key: Key) -> Value:
        return self.env[_canon(key)]

    def cell(self, key: Key) -> Cell:
        return self.cells.setdefault(_canon(key), Cell())

    def acc(self, key: Key, like: Value) -> Value:
        """The adjoint so far, +0 before its first term (the walk's Cell.bar)."""
        cell = self.cell(key)
        if cell.value is None:
            cell.value = zeros(like.shape, like.name + "_bar")
        return cell.value


def zeros(shape, name: str) -> Value:
    """+0 of `shape`: an adjoint before its first term."""
    return g.apply("fill", {}, {"shape": tuple(shape), "value": 0.0}, name=name)


# A callee's formal is its caller's argument, a callee's output its caller's value: one
# key (one value, one adjoint), as the walk shares one Cell.
_ALIAS: dict[Key, Key] = {}


def _canon(key: Key) -> Key:
    while key in _ALIAS:
        key = _ALIAS[key]
    return key


def _alias_calls(fn: Function, path: tuple) -> None:
    for node in fn.nodes:
        if isinstance(node, Call):
            inner = path + (id(node),)
            for formal, arg in zip(node.function.inputs, node.args):
                _ALIAS[(inner, id(formal))] = (path, id(arg))
            for out, made in zip(node.outs, node.function.outputs):
                _ALIAS[(path, id(out))] = (inner, id(made))
            _alias_calls(node.function, inner)
        elif isinstance(node, Fold):
            _alias_calls(node.body, ())


# ---- the forward, keeping residuals ---------------------------------------------------


def _forward(fn: Function, args: list[Value], scope: _Scope, path: tuple) -> list[Value]:
    for formal, arg in zip(fn.inputs, args):
        scope.env.setdefault(_canon((path, id(formal))), arg)
    for node in fn.nodes:
        if isinstance(node, Op):
            operands = {name: scope.value((path, id(v))) for name, v in node.operands().items()}
            scope.env[_canon((path, id(node.out)))] = g.apply(node.primitive, operands, node.attrs, name=node.out.name)
        elif isinstance(node, Call):
            _forward(node.function, [scope.value((path, id(a))) for a in node.args], scope, path + (id(node),))
        else:
            _forward_fold(node, scope, path)
    return [scope.value((path, id(v))) for v in fn.outputs]


def _check_folds(forward: Function) -> None:
    """loss_grad differentiates plain folds at the entry's top: no rows, no iterations
    apart, no fold inside a fold, no float value shared by the layers."""
    for fn in forward.walk():
        for node in fn.nodes:
            if not isinstance(node, Fold):
                continue
            plain = not (node.rows or node.apart or node.reverse or any(v.kind == "x" for v in node.shared))
            if fn is not forward or not plain:
                raise training.TrainingError(
                    f"fold of {node.body.name}: loss_grad differentiates a plain fold at the entry's top "
                    "(no rows, no iterations apart, no float shared value, not inside another fold)"
                )


def residuals(body: Function, carry: int) -> list[Key]:
    """The keys of the values a fold body's backward reads that its layer's parameters and
    the shared values do not give: its carry in and the values its operations make."""
    _alias_calls(body, ())
    given = {((), id(v)) for v in body.inputs[carry:]}  # stacked and shared formals
    keys: list[Key] = []

    def visit(fn: Function, path: tuple) -> None:
        for node in fn.nodes:
            if isinstance(node, Call):
                visit(node.function, path + (id(node),))
            elif isinstance(node, Op):
                named = {**node.operands(), "y": node.out}
                for name in READS.get(node.primitive, ()):
                    if name in named:
                        key = _canon((path, id(named[name])))
                        if key not in given and key not in keys:
                            keys.append(key)

    visit(body, ())
    return keys


def _forward_fold(fold: Fold, scope: _Scope, path: tuple) -> None:
    body_fn, carry = fold.body, len(fold.carry)
    kept = residuals(body_fn, carry)

    def layer(carry_in: list, params: dict, *shared: Any) -> tuple[list, list]:
        inner = _Scope()
        outs = _forward(body_fn, list(carry_in) + list(params.values()) + list(shared[:-1]), inner, ())
        return outs, [inner.env[key] for key in kept]

    names = [v.name for v in body_fn.inputs[carry : carry + len(fold.stacked)]]
    stacked = {name: scope.value((path, id(v))) for name, v in zip(names, fold.stacked)}
    shared = [scope.value((path, id(v))) for v in fold.shared]
    outs, rows = g.fold(
        layer,
        fold.count,
        [scope.value((path, id(v))) for v in fold.carry],
        stacked,
        *shared,
        f"forward {id(fold)}",
        name=body_fn.name,
        rows=True,
    )
    for v, new in zip(fold.carry_outs, outs):
        scope.env[_canon((path, id(v)))] = new
    scope.kept[(path, id(fold))] = (kept, rows)


# ---- the backward ---------------------------------------------------------------------


def _backward(fn: Function, scope: _Scope, path: tuple) -> None:
    """`fn`'s nodes last first, each adding into its operands' adjoints."""
    for node in reversed(fn.nodes):
        if isinstance(node, Op):
            _backward_op(node, scope, path)
        elif isinstance(node, Call):
            _backward(node.function, scope, path + (id(node),))
        else:
            _backward_fold(node, scope, path)


class _Rule:
    """One op's backward in a scope: its operands' values and adjoints by name."""

    def __init__(self, op: Op, scope: _Scope, path: tuple, dy: Value) -> None:
        self.op, self.scope, self.path, self.dy = op, scope, path, dy
        self.named = op.operands()
        for name, v in self.named.items():  # every float operand gets its adjoint (Cell.bar)
            if v.kind == "x":
                scope.acc((path, id(v)), v)

    def value(self, name: str) -> Value:
        return self.scope.value((self.path, id(self.op.out if name == "y" else self.named[name])))

    def acc(self, name: str) -> Value:
        v = self.named[name]
        return self.scope.acc((self.path, id(v)), v)

    def put(self, name: str, adjoint: Value) -> None:
        self.scope.cell((self.path, id(self.named[name]))).value = adjoint

    def add(self, name: str, term: Value) -> None:
        """x̄ ⊕= term, elementwise."""
        self.put(name, g.add(self.acc(name), term, name=self.named[name].name + "_bar"))

    def accumulate(self, name: str, primitive: str, operands: dict[str, Value], attrs: dict | None = None) -> None:
        """x̄ = primitive(..., acc = x̄): an accumulating backward primitive."""
        self.put(
            name, g.apply(primitive, {**operands, "acc": self.acc(name)}, attrs, name=self.named[name].name + "_bar")
        )


def _elementwise(r: _Rule) -> None:
    prim, dy = r.op.primitive, r.dy
    if prim == "add":
        r.add("a", dy)
        r.add("b", dy)
    elif prim == "sub":
        r.add("a", dy)
        r.put("b", g.sub(r.acc("b"), dy, name=r.named["b"].name + "_bar"))  # b̄ ⊕ (⊖ȳ) = b̄ ⊖ ȳ
    elif prim == "mul":
        r.add("a", g.mul(dy, r.value("b")))
        r.add("b", g.mul(dy, r.value("a")))
    elif prim == "scale":
        r.add("x", g.scale(dy, r.op.attrs["s"]))
    else:
        r.add("x", g.apply(prim + "_bar", {"x": r.value("x"), "dy": dy}))


def _linear(r: _Rule) -> None:
    r.accumulate("x", "linear_bar_x", {"x": r.value("x"), "w": r.value("w"), "dy": r.dy})
    r.accumulate("w", "linear_bar_w", {"x": r.value("x"), "dy": r.dy})
    if r.op.attrs["has_b"]:
        r.accumulate("b", "linear_bar_b", {"dy": r.dy})


def _matmul(r: _Rule) -> None:
    attrs = {k: r.op.attrs[k] for k in ("trans_a", "trans_b", "group")}
    if r.op.attrs["b_rows"]:
        raise training.TrainingError(f"{r.op.out.name}: a matmul over a cache's first rows has no backward")
    r.accumulate("a", "matmul_bar_a", {"b": r.value("b"), "dy": r.dy}, attrs)
    r.accumulate("b", "matmul_bar_b", {"a": r.value("a"), "dy": r.dy}, attrs)


def _embedding(r: _Rule) -> None:
    r.accumulate("table", "embedding_bar", {"ids": r.value("ids"), "dy": r.dy})


def _mean_pool(r: _Rule) -> None:
    r.accumulate("x", "mean_pool_bar", {"keep": r.value("keep"), "dy": r.dy})


def _norm(r: _Rule) -> None:
    kind, eps = r.op.primitive, r.op.attrs["eps"]
    x, gain = r.value("x"), r.value("g")
    r.add("x", g.apply(kind + "_bar_x", {"x": x, "g": gain, "dy": r.dy}, {"eps": eps}))
    r.accumulate("g", "norm_bar_g", {"x": x, "dy": r.dy}, {"kind": kind, "eps": eps})
    if kind == "layernorm":
        r.accumulate("b", "linear_bar_b", {"dy": r.dy})


def _softmax(r: _Rule) -> None:
    attrs = {k: r.op.attrs[k] for k in ("causal", "offset", "has_keep")}
    keep = {"keep": r.value("keep")} if attrs["has_keep"] else {}
    r.add("x", g.apply("softmax_bar", {"probs": r.value("y"), "dy": r.dy, **keep}, attrs))


def _rope(r: _Rule) -> None:
    attrs = {k: r.op.attrs[k] for k in ("theta", "pos0", "pairing")}
    r.add("x", g.apply("rope", {"x": r.dy}, {**attrs, "inverse": True}))


def _reshape(r: _Rule) -> None:
    r.add("x", g.reshape(r.dy, r.named["x"].shape))


def _transpose(r: _Rule) -> None:
    r.add("x", g.transpose(r.dy, tuple(int(k) for k in np.argsort(r.op.attrs["perm"]))))


def _slice(r: _Rule) -> None:
    """The sliced part of x̄ gets ȳ; the parts before and after are x̄'s own, joined back."""
    x, attrs = r.named["x"], r.op.attrs
    axis, start, stop, end = attrs["axis"], attrs["start"], attrs["stop"], x.shape[attrs["axis"]]
    if dims.is_symbolic(start) or dims.is_symbolic(stop):
        # Bounds that follow T: the rows after the slice would be a part of extent end - T,
        # which grows as T shrinks (no buffer sized at T_max holds it), so x̄'s rows are
        # written where they lie instead, by the scatter-add over the slice's row numbers.
        if axis != 0 or len(x.shape) != 2:
            raise training.TrainingError(
                f"{r.op.out.name}: the slice [{start}, {stop}) along axis {axis} of {x.name}{list(x.shape)} follows "
                f"the run-time length; loss_grad takes such a slice of a table's rows (axis 0 of a matrix) only"
            )
        rows = g.apply("iota", {}, {"start": start, "length": stop - start}, name=x.name + "_rows")
        r.accumulate("x", "embedding_bar", {"ids": rows, "dy": r.dy})  # row start + t ⊕= ȳ[t], each once
        return
    acc = r.acc("x")
    bar = g.add(g.slice(acc, axis, start, stop), r.dy)
    if start != 0:
        bar = g.concat(g.slice(acc, axis, 0, start), bar, axis=axis)
    if stop != end:
        bar = g.concat(bar, g.slice(acc, axis, stop, end), axis=axis)
    r.put("x", bar)


def _concat(r: _Rule) -> None:
    axis, first = r.op.attrs["axis"], r.named["a"].shape[r.op.attrs["axis"]]
    r.add("a", g.slice(r.dy, axis, 0, first))
    r.add("b", g.slice(r.dy, axis, first, r.op.out.shape[axis]))


RULES: dict[str, Callable[[_Rule], None]] = {
    "add": _elementwise, "sub": _elementwise, "mul": _elementwise, "scale": _elementwise,
    "silu": _elementwise, "gelu_tanh": _elementwise,
    "linear": _linear, "matmul": _matmul, "embedding": _embedding, "mean_pool": _mean_pool,
    "layernorm": _norm, "rmsnorm": _norm, "softmax": _softmax, "rope": _rope,
    "reshape": _reshape, "transpose": _transpose, "slice": _slice, "concat": _concat,
}  # fmt: skip


def _backward_op(op: Op, scope: _Scope, path: tuple) -> None:
    out = scope.cells.get(_canon((path, id(op.out))))
    if out is None or out.value is None:
        return  # no term reached this value: dead code, after differentiation
    rule = RULES.get(op.primitive)
    if rule is None:
        raise training.TrainingError(
            f"{op.primitive} ({op.out.name}) has no backward; loss_grad differentiates {', '.join(sorted(RULES))}"
        )
    rule(_Rule(op, scope, path, out.value))


def _backward_fold(fold: Fold, scope: _Scope, path: tuple) -> None:
    """A reverse fold: the layers from the last down, carrying the adjoint of the carry;
    layer l reads its residuals and parameters and gives its gradients as row l."""
    body_fn, kept_rows = fold.body, scope.kept[(path, id(fold))]
    kept, rows = kept_rows
    carry, stacked = len(fold.carry), len(fold.stacked)
    outs = [scope.cells.get(_canon((path, id(v))), Cell()).value for v in fold.carry_outs]
    if any(adjoint is None for adjoint in outs):
        raise training.TrainingError(f"fold of {body_fn.name}: a carried value does not reach the loss")
    if any(scope.cells.get(_canon((path, id(v))), Cell()).value is not None for v in fold.carry):
        raise training.TrainingError(f"fold of {body_fn.name}: its carry is read after the fold as well")
    shared_fwd = [scope.value((path, id(v))) for v in fold.shared]
    grads = [scope.acc((path, id(v)), v) for v in fold.stacked]

    def layer(adjoints: list, slices: dict, *shared: Any) -> tuple[list, list]:
        inner = _Scope()
        values = list(slices.values())
        for key, row in zip(kept, values[: len(kept)]):
            inner.env[key] = row
        params, bars = values[len(kept) : len(kept) + stacked], values[len(kept) + stacked :]
        formals = body_fn.inputs
        for v, p in zip(formals[carry:], params + list(shared[:-1])):
            inner.env[((), id(v))] = p
        for v, a in zip(body_fn.outputs, adjoints[:carry]):
            inner.cell(((), id(v))).value = a
        for v, a in zip(formals[carry : carry + stacked], bars):
            inner.cell(((), id(v))).value = a
        _backward(body_fn, inner, ())
        carried = [inner.cell(((), id(v))).value for v in formals[:carry]]
        if any(a is None for a in carried):
            raise training.TrainingError(f"fold of {body_fn.name}: a layer's carry does not reach its output")
        return carried, [inner.cell(((), id(v))).value for v in formals[carry : carry + stacked]]

    names = [f"{v.name}_kept" for v in _values_of(body_fn, kept)]
    names += [v.name for v in body_fn.inputs[carry : carry + stacked]]
    names += [v.name + "_bar" for v in body_fn.inputs[carry : carry + stacked]]
    slices = dict(zip(_unique(names), rows + [scope.value((path, id(v))) for v in fold.stacked] + grads))
    adjoints, grad_rows = g.fold(
        layer,
        fold.count,
        outs,
        slices,
        *shared_fwd,
        f"backward {id(fold)}",
        name=body_fn.name + "_bar",
        rows=True,
        reverse=True,
    )
    for v, a in zip(fold.carry, adjoints):
        scope.cell((path, id(v))).value = a
    for v, a in zip(fold.stacked, grad_rows):
        scope.cell((path, id(v))).value = a


def _values_of(body: Function, keys: list[Key]) -> list[Value]:
    """The forward Values the keys name (for the rows' names)."""
    found: dict[int, Value] = {id(v): v for v in body.inputs}
    for fn in body.walk():
        for v in fn.inputs:
            found[id(v)] = v
        for node in fn.nodes:
            if isinstance(node, Op):
                found[id(node.out)] = node.out
    return [found[key[1]] for key in keys]


def _unique(names: list[str]) -> list[str]:
    out: list[str] = []
    for name in names:
        while name in out:
            name += "_"
        out.append(name)
    return out


# ---- the entry ------------------------------------------------------------------------


def loss_grad_program(lg: training.LossGrad, batch: int = 1) -> Program:
    """The loss_grad entry of `lg` as a graph: tokens, targets (batch, T) in; loss and
    every parameter's gradient out."""
    forward = lg.forward
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise training.TrainingError(f"batch {batch!r} must be an integer >= 1")
    _check_folds(forward.function)
    _ALIAS.clear()
    _alias_calls(forward.function, ())
    length = forward.inputs[0].shape[0]
    logits_at = forward.output_names.index("logits")

    def sequence(carry: tuple, batch_row: dict, r: Value, params: dict, tag: str) -> tuple:
        """One sequence's forward, loss and backward, adding into the gradients."""
        grads, total = carry
        tokens, targets = batch_row["tokens"], batch_row["targets"]
        scope = _Scope()
        logits = _forward(forward.function, list(params.values()) + [tokens], scope, ())[logits_at]
        losses = g.apply("xent_rows", {"logits": logits, "targets": targets}, {"ignore": lg.ignore}, name="losses")
        total = g.apply("sum_rows", {"x": losses, "acc": total}, name="total")
        terms = g.apply(
            "xent_bar", {"logits": logits, "targets": targets, "r": r}, {"ignore": lg.ignore}, name="logits_terms"
        )
        for v, grad in zip(forward.param_values, grads.values()):
            scope.cell(((), id(v))).value = grad
        made = forward.function.outputs[logits_at]
        scope.cell(((), id(made))).value = g.add(scope.acc(((), id(made)), made), terms, name="logits_bar")
        _backward(forward.function, scope, ())
        return {key: scope.cell(((), id(v))).value for key, v in zip(grads, forward.param_values)}, total

    def entry(params: dict, tokens: Value, targets: Value) -> dict:
        one = g.apply("fill", {}, {"shape": (), "value": 1.0}, name="one")
        r = g.apply("xent_mean", {"x": one, "targets": targets}, {"ignore": lg.ignore}, name="r")  # 1 ⊘ n
        grads = {spec.key + "_bar": zeros(spec.full_shape, spec.key + "_bar") for spec in forward.params}
        total = zeros((), "total")
        grads, total = g.fold(
            sequence,
            batch,
            (grads, total),
            {"tokens": tokens, "targets": targets},
            r,
            params,
            "sequence",
            name="sequence",
        )
        loss = g.apply("xent_mean", {"x": total, "targets": targets}, {"ignore": lg.ignore}, name="loss")
        return {"loss": loss, **{spec.name: grad for spec, grad in zip(forward.params, grads.values())}}

    inputs = [InputSpec(name, (batch, length), "i32") for name in ("tokens", "targets")]
    try:
        program = g.trace(forward.model, "loss_grad", entry, list(forward.params), inputs)
    finally:
        _ALIAS.clear()
    program.config = forward.config
    return program
