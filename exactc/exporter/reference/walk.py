"""The reference backend over a whole graph: each op of a program's entry run by
reference.run in the graph's order, a call as the called function, a fold as one layer
after another on its carry. The graph (exporter/graph.py) only describes a program; this
walk is the reference's own, so that the graph never calls a backend.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

import numpy as np

from exactc.exporter import dims, reference, types
from exactc.exporter.graph import Call, Fold, Function, Op, Program, run_length
from exactc.exporter.primitives import CONTRACT_OFF


@dataclasses.dataclass
class LayerStep:
    """One fold iteration as the reference ran it: what the layer took and what it
    carried out (evaluate's on_layer sees one per iteration, in execution order)."""

    fold: Fold
    layer: int
    carry_in: list[np.ndarray]
    stacked: list[np.ndarray]  # the whole stacked values, every layer's slice
    shared: list[np.ndarray]
    carry_out: list[np.ndarray]
    length: int = 0  # the run-time length it ran at (0: the program has none)
    contract: str = CONTRACT_OFF  # the realization it ran in (semantics.md section 18)


# A tape: what one run of a function made. tape[VALUES] maps id(Value) to its array,
# tape[LENGTH] is the run-time length it ran at (0: none); tape[id(node)] lists the tapes
# of a Call's run (one) or of a Fold's layers (in order).
Tape = dict
VALUES, LENGTH = "values", "length"


def _inner_tape(tape: Tape | None, node: Call | Fold) -> Tape | None:
    """A new tape for one run under `node`, listed in `tape` (None when not taping)."""
    if tape is None:
        return None
    inner: Tape = {}
    tape.setdefault(id(node), []).append(inner)
    return inner


def evaluate(program: Program, site: str, params: Mapping[str, np.ndarray],
             inputs: Mapping[str, np.ndarray],
             on_layer: Callable[[LayerStep], None] | None = None,
             tape: Tape | None = None) -> dict[str, np.ndarray]:
    """Run the program with the numpy reference, primitive by primitive: the bits every
    exported program must reproduce. `params` maps ParamSpec.name to site-typed arrays
    of the full (stacked) shape; `inputs` maps input names to arrays (site dtype or int32).
    A program with a run-time length runs at the length its inputs have: every attribute
    that follows it (a reshape's shape, a slice's bounds) is taken at that length.
    `on_layer` sees every fold iteration (LayerStep), in the order a checking build's
    EXACTC_TRACE_CARRY writes the carried values. A `tape` (an empty dict) keeps every
    value the run made, for the backward walk (see Tape)."""
    types.check_site(site)
    length = run_length(program, inputs)
    env: list[np.ndarray] = []
    for spec in program.params:
        env.append(params[spec.name])
    for spec in program.inputs:
        env.append(inputs[spec.name])
    outs = _run(program.function, site, env, on_layer, length, tape, program.contract)
    return dict(zip(program.output_names, outs))


def rerun_layer(step: LayerStep, site: str, slice_of: int) -> list[np.ndarray]:
    """The layer of `step` run again on its carry-in, reading slice `slice_of` of the
    stacked values instead of its own: what a fold whose slice points at another layer
    computes."""
    args = step.carry_in + [np.ascontiguousarray(s[slice_of]) for s in step.stacked] + step.shared
    return _run(step.fold.body_of(step.layer), site, args, None, step.length, None,
                step.contract)[: len(step.fold.carry)]


def _run(fn: Function, site: str, args: list[np.ndarray], on_layer: Callable[[LayerStep], None] | None,
         length: int, tape: Tape | None = None, contract: str = CONTRACT_OFF) -> list[np.ndarray]:
    values: dict[int, np.ndarray] = {id(v): a for v, a in zip(fn.inputs, args)}
    if tape is not None:
        tape[VALUES], tape[LENGTH] = values, length
    for node in fn.nodes:
        if isinstance(node, Op):
            operands = {k: values[id(v)] for k, v in node.operands().items()}
            attrs = dims.substitute(node.attrs, length) if length else node.attrs
            results = reference.run(node.primitive, site, operands, attrs, contract)
            values.update({id(v): results[name] for name, v in node.results().items()})
        elif isinstance(node, Call):
            outs = _run(node.function, site, [values[id(v)] for v in node.args], on_layer, length,
                        _inner_tape(tape, node), contract)
            values.update({id(v): a for v, a in zip(node.outs, outs)})
        else:
            carry = [values[id(v)] for v in node.carry]
            stacked = [values[id(v)] for v in node.stacked]
            shared = [values[id(v)] for v in node.shared]
            rows: list[dict[int, np.ndarray]] = [{} for _ in node.row_outs]
            for layer in node.order():
                carry_in = carry
                outs = _run(node.body_of(layer), site,
                            carry + [np.ascontiguousarray(s[layer]) for s in stacked] + shared, on_layer, length,
                            _inner_tape(tape, node), contract)
                carry = outs[: len(node.carry)]
                for k, row in enumerate(outs[len(node.carry):]):
                    rows[k][layer] = row
                if on_layer is not None:
                    on_layer(LayerStep(node, layer, carry_in, stacked, shared, carry, length, contract))
            values.update({id(v): a for v, a in zip(node.carry_outs, carry)})
            values.update({id(v): np.stack([r[k] for k in range(node.count)]) for v, r in zip(node.row_outs, rows)})
    return [values[id(v)] for v in fn.outputs]
