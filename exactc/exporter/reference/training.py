"""Training in the reference backend (docs/semantics.md section 17): the cross-entropy
loss and the reverse walk of a forward graph (`loss_grad`), one AdamW update
(`adamw_step`), and the learning rate of a step (`learning_rate`).

The reverse walk reads the forward's tape (walk.evaluate with a tape): every operation
of the forward in reverse program order, calls entered, folds from the last layer down,
each rule of backward.py adding into its operands' adjoints. An adjoint is a Cell: the
callee's formal input and the caller's argument share one, and so do a fold layer's
carry out and the next layer's carry in; a stacked parameter's layer gets a view of its
slice of the gradient.

    lg = training.loss_grad(models.build("gpt", "forward", cfg))
    out = reference.training.loss_grad(lg, "f64", params, tokens, targets)
    out["loss"], out["transformer.wte.weight"]
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np

from exactc.exporter import dims, training
from exactc.exporter.graph import Call, Fold, Function, Op
from exactc.exporter.reference import backward, walk
from exactc.exporter.reference.arith import libm64, real, zeros


PI = float.fromhex("0x1.921fb54442d18p+1")  # the nearest f64 to π


@dataclasses.dataclass(eq=False)
class Cell:
    """One adjoint: None until a term is added (a value that does not reach the loss)."""

    array: np.ndarray | None = None

    def bar(self, shape, site: str) -> np.ndarray:
        if self.array is None:
            self.array = zeros(shape, site)
        return self.array


Cells = dict[int, Cell]


# ---- the loss ------------------------------------------------------------------------------

# Each row's loss and the logits' terms: backward.py's, which the primitives xent_rows and
# xent_bar run too.
cross_entropy_rows = backward.cross_entropy_rows


# ---- the reverse walk ---------------------------------------------------------------------


def _cell(cells: Cells, value) -> Cell:
    return cells.setdefault(id(value), Cell())


def _backward(fn: Function, tape: walk.Tape, cells: Cells, site: str) -> None:
    """Walk `fn`'s nodes last first, adding into `cells` (this run's adjoints)."""
    values, length = tape[walk.VALUES], tape[walk.LENGTH]
    for node in reversed(fn.nodes):
        if isinstance(node, Op):
            _backward_op(node, values, length, cells, site)
        elif isinstance(node, Call):
            inner = {id(f): _cell(cells, a) for f, a in zip(node.function.inputs, node.args)}
            inner.update({id(f): _cell(cells, o) for f, o in zip(node.function.outputs, node.outs)})
            _backward(node.function, tape[id(node)][0], inner, site)
        else:
            _backward_fold(node, tape[id(node)], values, cells, site)


def _backward_op(op: Op, values, length: int, cells: Cells, site: str) -> None:
    out = cells.get(id(op.out))
    if out is None or out.array is None:
        return  # no term reached this value: dead code, after differentiation
    operands = {name: values[id(v)] for name, v in op.operands().items()}
    bars = {name: _cell(cells, v).bar(operands[name].shape, site) for name, v in op.operands().items() if v.kind == "x"}
    attrs = dims.substitute(op.attrs, length) if length else op.attrs  # as the forward ran it
    backward.apply(op.primitive, out.array, values[id(op.out)], operands, attrs, bars, site)


def _backward_fold(fold: Fold, tapes: list[walk.Tape], values, cells: Cells, site: str) -> None:
    """The layers from the last down; layer l's stacked values see slice l of their adjoint."""
    if fold.rows:
        raise backward.BackwardError("a fold with per-layer rows (a generation entry) has no backward")
    stacked = [_cell(cells, v).bar(values[id(v)].shape, site) for v in fold.stacked]
    outs = [_cell(cells, v) for v in fold.carry_outs]
    for layer in reversed(range(fold.count)):
        body = fold.body_of(layer)
        ins = [_cell(cells, v) for v in fold.carry] if layer == 0 else [Cell() for _ in fold.carry]
        slices = [Cell(bar[layer]) for bar in stacked]  # views: terms land in the stacked adjoint
        shared = [_cell(cells, v) for v in fold.shared]
        inner = {id(f): c for f, c in zip(body.inputs, ins + slices + shared)}
        inner.update({id(f): c for f, c in zip(body.outputs, outs)})
        _backward(body, tapes[layer], inner, site)
        outs = ins


def loss_grad(
    lg: training.LossGrad, site: str, params: Mapping[str, np.ndarray], tokens: np.ndarray, targets: np.ndarray
) -> dict[str, np.ndarray]:
    """The mean cross-entropy of `targets` (B, T) after `tokens` (B, T) and the gradient of
    every parameter (its name, its full stacked shape): {"loss": 0-d, name: gradient, ...}."""
    backward.check_training_site(site)
    count = training.check_batch(lg, tokens, targets)
    program = lg.forward
    n = real(count, site)
    r = np.divide(real(1.0, site), n)
    grads = {spec.name: zeros(spec.full_shape, site) for spec in program.params}
    total = zeros((), site)
    logits_value = program.function.outputs[program.output_names.index("logits")]
    with np.errstate(all="ignore"):
        for b in range(tokens.shape[0]):
            tape: walk.Tape = {}
            logits = walk.evaluate(program, site, params, {"input_ids": tokens[b]}, tape=tape)["logits"]
            counts = targets[b] != lg.ignore
            losses, terms = cross_entropy_rows(logits, targets[b], counts, r, site)
            total = backward.sum_in_order(total, losses[counts])
            cells: Cells = {id(v): Cell(grads[spec.name]) for spec, v in zip(program.params, program.param_values)}
            cells[id(logits_value)] = Cell(zeros(terms.shape, site) + terms)  # +0 ⊕ each term
            _backward(program.function, tape, cells, site)
        loss = total / n
    return {"loss": np.asarray(loss), **grads}


# ---- AdamW and the learning rate ----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AdamW:
    """The hyperparameters of torch.optim.AdamW, and the clipping norm (0: no clipping)."""

    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.01
    clip: float = 0.0


def _power(base: float, t: int) -> float:
    """base^t as the spec takes it: a product of t factors in order, in f64."""
    p = 1.0
    for _ in range(t):
        p = p * base
    return p


def global_norm(lg: training.LossGrad, grads: Mapping[str, np.ndarray]) -> float:
    """√(Σ g ⊗ g) in f64, the parameters in the program's order, each in C order."""
    ss = np.float64(0.0)
    for spec in lg.params:
        for g in grads[spec.name].astype(np.float64).ravel():
            ss = ss + g * g
    return float(np.sqrt(ss))


def adamw_step(
    lg: training.LossGrad,
    site: str,
    opt: AdamW,
    step: int,
    params: Mapping[str, np.ndarray],
    grads: Mapping[str, np.ndarray],
    m: Mapping[str, np.ndarray],
    v: Mapping[str, np.ndarray],
    lr: float | None = None,
) -> dict[str, dict[str, np.ndarray] | float]:
    """One update at step `step` (counted from 1), the step's rate `lr` (opt.lr when None):
    {"params", "m", "v": {name: array}, "norm": the gradients' global norm before clipping}."""
    backward.check_training_site(site)
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise training.TrainingError(f"AdamW step {step!r} must be an integer >= 1 (counted from 1)")
    rate = opt.lr if lr is None else lr
    bc1, bc2 = 1.0 - _power(opt.beta1, step), 1.0 - _power(opt.beta2, step)
    step_size, root = rate / bc1, float(np.sqrt(np.float64(bc2)))
    decay = 1.0 - rate * opt.weight_decay
    w1, w2 = 1.0 - opt.beta1, 1.0 - opt.beta2
    norm = global_norm(lg, grads)
    clip = opt.clip / norm if opt.clip > 0 and norm > opt.clip else None
    scalars = {
        "clip": clip,
        "decay": decay,
        "w1": w1,
        "beta2": opt.beta2,
        "w2": w2,
        "root": root,
        "eps": opt.eps,
        "step": step_size,
    }
    at_site = {name: None if value is None else real(value, site) for name, value in scalars.items()}
    out: dict[str, dict[str, np.ndarray]] = {"params": {}, "m": {}, "v": {}}
    with np.errstate(all="ignore"):
        for spec in lg.params:
            p, mt, vt = backward.adamw_elements(
                params[spec.name], grads[spec.name], m[spec.name], v[spec.name], at_site, training.decays(spec)
            )
            out["params"][spec.name], out["m"][spec.name], out["v"][spec.name] = p, mt, vt
    return {**out, "norm": norm}


def learning_rate(step: int, steps: int, peak: float, warmup: int = 0, final: float = 0.0) -> float:
    """llm.c's schedule at step `step` (0-based) of `steps`: linear warmup over `warmup`
    steps, then a cosine from `peak` down to `peak ⊗ final`, in f64."""
    if not 0 <= step < steps or not 0 <= warmup:
        raise training.TrainingError(f"step {step} must be in [0, {steps}) and warmup {warmup} >= 0")
    if step < warmup:
        return (peak * float(step + 1)) / float(warmup)
    ratio = float(step - warmup) / float(steps - warmup)
    q = 0.5 * (1.0 + float(libm64("cos", np.array([PI * ratio]))[0]))
    low = peak * final
    return low + q * (peak - low)


def zero_moments(lg: training.LossGrad, site: str) -> dict[str, np.ndarray]:
    """The moments before step 1: +0 of every parameter's full shape."""
    return {spec.name: zeros(spec.full_shape, site) for spec in lg.params}
