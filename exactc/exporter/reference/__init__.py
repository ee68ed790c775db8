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
from exactc.exporter.primitives import get_primitive
from exactc.exporter.reference.ops import (
    FUNCTIONS,
    add,
    argmax,
    check_operands,
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

__all__ = ["run", "FUNCTIONS", "check_operands", "rope_tables", *FUNCTIONS]


def run(
    primitive: str,
    site: str,
    inputs: Mapping[str, np.ndarray],
    attrs: Mapping[str, Any] | None = None,
) -> dict[str, np.ndarray]:
    """Compute `primitive` at `site` on `inputs` (site-dtype arrays; int32 for ids and
    keep masks) with `attrs` (defaults filled in): {"y": output}."""
    prim = get_primitive(primitive)
    full = prim.full_attrs(attrs)
    expected = check_operands(primitive, site, inputs, full)
    operands = [inputs[name] for name in prim.operand_names(full)]
    # An optional operand's presence is its has_ attribute; the function sees the operand.
    kwargs = {k: v for k, v in full.items() if not k.startswith("has_")}
    y = FUNCTIONS[primitive](*operands, site=site, **kwargs)

    shape, kind = expected["y"]
    dtype = np.dtype(np.int32) if kind == "i32" else types.numpy_dtype(site)
    if y.shape != shape or y.dtype != dtype:
        raise AssertionError(
            f"reference {primitive} at {site} gave {y.dtype} {y.shape}; the catalogue "
            f"says {dtype} {shape}"
        )
    return {"y": y}
