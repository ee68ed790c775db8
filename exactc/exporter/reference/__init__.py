"""The numpy reference backend: the bits every exported program must reproduce.

It is one of the two implementations of docs/semantics.md (the other is the C lowering in
exporter/kernels/), written from the text alone. `run` is the catalogue-driven entry the
harness uses; the functions of `ops` (one per primitive, named after it) are what
whole-model code calls:

    y = reference.run("linear", "f32", {"x": x, "w": w, "b": b}, {"has_b": True})["y"]
    y = reference.linear(x, w, b, site="f32")
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from exactc.exporter import types
from exactc.exporter.primitives import CONTRACT_OFF, fuses, get_primitive
from exactc.exporter.reference import backward
from exactc.exporter.reference.ops import (
    FUNCTIONS as FORWARD_FUNCTIONS,
    add,
    argmax,
    check_operands,
    cache_write,
    concat,
    embedding,
    gelu_erf,
    gelu_tanh,
    l2norm,
    layernorm,
    linear,
    matmul,
    mean_pool,
    mul,
    qlinear_i,
    qlinear_w,
    quantize,
    reshape,
    rmsnorm,
    rope,
    rope_tables,
    scale,
    silu,
    slice,
    softmax,
    sub,
    transpose,
)

# Every primitive of the catalogue: the forward's (ops.py) and the backward's (backward.py).
FUNCTIONS = {**FORWARD_FUNCTIONS, **backward.FUNCTIONS}

__all__ = ["run", "FUNCTIONS", "check_operands", "rope_tables", *FORWARD_FUNCTIONS]


def run(
    primitive: str,
    site: str,
    inputs: Mapping[str, np.ndarray],
    attrs: Mapping[str, Any] | None = None,
    contract: str = CONTRACT_OFF,
) -> dict[str, np.ndarray]:
    """Compute `primitive` at `site` on `inputs` (arrays of each operand kind's dtype:
    the site's, int32 for ids and keep masks, int8/uint8/f32/A for quantized operands)
    with `attrs` (defaults filled in) in the realization `contract` (semantics.md
    section 18): {output name: array}, {"y": y} for most."""
    prim = get_primitive(primitive)
    full = prim.full_attrs(attrs)
    expected = check_operands(primitive, site, inputs, full)
    operands = [inputs[name] for name in prim.operand_names(full)]
    # An optional operand's presence is its has_ attribute; the function sees the operand.
    kwargs = {k: v for k, v in full.items() if not k.startswith("has_")}
    if fuses(primitive, contract):
        kwargs["fused"] = True
    result = FUNCTIONS[primitive](*operands, site=site, **kwargs)
    outputs = result if isinstance(result, dict) else {"y": result}

    if sorted(outputs) != sorted(expected):
        raise AssertionError(f"reference {primitive} at {site} gave {sorted(outputs)}; the catalogue says "
                             f"{sorted(expected)}")
    for name, (shape, kind) in expected.items():
        y, dtype = outputs[name], types.kind_dtype(kind, site)
        if y.shape != shape or y.dtype != dtype:
            which = "" if name == "y" else f"{name} = "
            raise AssertionError(
                f"reference {primitive} at {site} gave {which}{y.dtype} {y.shape}; the catalogue "
                f"says {dtype} {shape}"
            )
    return outputs
