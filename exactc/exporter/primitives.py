"""The catalogue of primitives: operands, attributes, shapes and type rules.

This module says *what* each primitive takes and gives, never *how* it computes: the
arithmetic is docs/semantics.md, implemented twice and apart, by the reference backend
(exporter/reference/) and by the kernel lowering (exporter/kernels/). Both use this
catalogue for shapes only.

Operand kinds: "x" holds values of the site type (f64, f32 or bf16); "i32" holds int32
(token ids, keep masks, argmax results). The quantized primitives (docs/semantics.md,
section 15) add "i8" (q8 values), "f32" (weight scales), "acc" (activation scales, in
the accumulator type) and "q" (a weight's values: "i8" for format q8, "u8" bytes for q4).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

from exactc.exporter import dims, types

# A dimension is an int or a dims.Dim (it follows the run-time sequence length); every
# rule below holds for every length the program may run at.
Shape = tuple[dims.Extent, ...]


class PrimitiveError(ValueError):
    """A primitive used with shapes or attributes its rule does not allow."""


# The sites a gradient or an optimizer step is computed at (docs/semantics.md section 17):
# the backward primitives below refuse bf16.
TRAINING_SITES = ("f64", "f32")

# Quantized operands (docs/semantics.md, section 15): the formats and the largest block,
# which keeps every int32 block sum below 2^30.
QUANT_FORMATS = ("q8", "q4")
MAX_BLOCK = 65536

# ggml's k-quants as weight formats of qlinear_w and qlinear_i (docs/semantics.md, section
# 15): rows of super-blocks of 256 values, each its raw bytes in wq, and its f16 d (and
# dmin) widened to f32 in wd. K_FORMATS: bytes per super-block and f32 fields per one.
K_SUPER_BLOCK = 256
K_FORMATS = {"q4_k": (144, 2), "q5_k": (176, 2), "q6_k": (210, 1)}
WEIGHT_FORMATS = QUANT_FORMATS + tuple(K_FORMATS)


# The realizations of docs/semantics.md section 18: "off" rounds each product and then the
# sum (sections 1 to 16, the default); "fma" computes each multiply-accumulate step of
# the fused primitives as one fma_A. Both backends read FUSED_PRIMITIVES from here.
CONTRACT_OFF, CONTRACT_FMA = "off", "fma"
CONTRACTS = (CONTRACT_OFF, CONTRACT_FMA)
FUSED_PRIMITIVES = ("linear", "matmul", "qlinear_w")


def check_contract(contract: str) -> str:
    """`contract` if it names a realization; a PrimitiveError saying which exist."""
    if contract not in CONTRACTS:
        raise PrimitiveError(f"unknown realization --contract {contract!r}; exactc knows {', '.join(CONTRACTS)}")
    return contract


def fuses(primitive: str, contract: str) -> bool:
    """Whether `primitive` computes its multiply-accumulate steps as fma_A under `contract`."""
    return check_contract(contract) == CONTRACT_FMA and primitive in FUSED_PRIMITIVES


def block_count(k: int, block: int) -> int:
    """The blocks of a row of k elements: ceil(k / block), the last one maybe short."""
    return -(-k // block)


def quantized_row_length(fmt: str, k: int, block: int) -> int:
    """The stored length of a row of k values: k int8 for q8, nb·G/2 bytes for q4, the
    super-blocks' bytes for a k-quant."""
    if fmt in K_FORMATS:
        return block_count(k, block) * K_FORMATS[fmt][0]
    return k if fmt == "q8" else block_count(k, block) * (block // 2)


def scale_columns(fmt: str, k: int, block: int) -> int:
    """The f32 scales of a row of k values: one per block; a k-quant's d (and dmin) per
    super-block, side by side."""
    return block_count(k, block) * (K_FORMATS[fmt][1] if fmt in K_FORMATS else 1)


@dataclasses.dataclass(frozen=True)
class Operand:
    name: str
    kind: str = "x"  # "x" (site type), "i32", "i8", "f32", "acc" or "q" (see above)
    optional: bool = False  # present only when the attribute of the same role says so


@dataclasses.dataclass(frozen=True)
class Primitive:
    name: str
    operands: tuple[Operand, ...]
    attrs: Mapping[str, Any]  # attribute -> default
    infer: Callable[[Mapping[str, Shape], Mapping[str, Any]], dict[str, tuple[Shape, str]]]
    doc: str
    # Attributes left out of printed text at their default (added after programs using
    # the primitive were printed: a text without them reads as before).
    quiet: tuple[str, ...] = ()
    # The site types it is defined at: every one, or TRAINING_SITES for the backward.
    sites: tuple[str, ...] = types.SITE_TYPES
    # Its outputs' names, in the order a graph node holds them: `y` for all but quantize's
    # two (the values q and the scales d).
    results: tuple[str, ...] = ("y",)

    def check_site(self, site: str) -> str:
        """`site` if the primitive is defined there; a PrimitiveError in one line if not."""
        types.check_site(site)
        if site not in self.sites:
            raise PrimitiveError(f"{self.name} at {site}: a backward primitive is computed at "
                                 f"{' or '.join(self.sites)} (docs/semantics.md section 17)")
        return site

    def shown_attrs(self, attrs: Mapping[str, Any]) -> dict[str, Any]:
        """The attributes printed texts show: all but a quiet one at its default."""
        return {k: v for k, v in attrs.items() if not (k in self.quiet and v == self.attrs[k])}

    def full_attrs(self, attrs: Mapping[str, Any] | None) -> dict[str, Any]:
        """The attributes with defaults filled in; unknown names are refused."""
        attrs = dict(attrs or {})
        unknown = sorted(set(attrs) - set(self.attrs))
        if unknown:
            raise PrimitiveError(
                f"{self.name}: unknown attribute(s) {', '.join(unknown)}; "
                f"it takes {', '.join(self.attrs) or 'none'}"
            )
        return {**self.attrs, **attrs}

    def operand_names(self, attrs: Mapping[str, Any]) -> list[str]:
        """The operands present for these attributes, in calling order."""
        names = []
        for op in self.operands:
            if op.optional and not attrs.get(f"has_{op.name}"):
                continue
            names.append(op.name)
        return names

    def operand_kind(self, name: str, attrs: Mapping[str, Any] | None = None) -> str:
        """The operand's kind; a quantized weight's ("q") is resolved by the format."""
        kind = next(op.kind for op in self.operands if op.name == name)
        if kind == "q":
            fmt = (attrs or {}).get("fmt", self.attrs.get("fmt"))
            return "i8" if fmt == "q8" else "u8"
        return kind

    def outputs(
        self, shapes: Mapping[str, Shape], attrs: Mapping[str, Any] | None = None
    ) -> dict[str, tuple[Shape, str]]:
        """Check the operand shapes against the rule; give each output's shape and kind."""
        full = self.full_attrs(attrs)
        expected = self.operand_names(full)
        if sorted(shapes) != sorted(expected):
            raise PrimitiveError(
                f"{self.name}: operands {sorted(shapes)} given; with these attributes it "
                f"takes {expected}"
            )
        for name, shape in shapes.items():
            if any(not dims.is_extent(d) or not dims.positive(d) for d in shape):
                raise PrimitiveError(
                    f"{self.name}: operand {name} has shape {tuple(shape)}; every "
                    "dimension must be a positive int (or, at every run-time length, positive)"
                )
        return self.infer({k: tuple(v) for k, v in shapes.items()}, full)


def _fail(prim: str, rule: str) -> None:
    raise PrimitiveError(f"{prim}: {rule}")


def _same(prim: str, shapes, a: str, b: str) -> None:
    if shapes[a] != shapes[b]:
        _fail(prim, f"{a} {shapes[a]} and {b} {shapes[b]} must have the same shape")


def _rank(prim: str, shapes, name: str, rank: int) -> None:
    if len(shapes[name]) != rank:
        _fail(prim, f"{name} has shape {shapes[name]}; it must have rank {rank}")


# ---- elementwise -------------------------------------------------------------------


def _binary(name: str):
    def infer(shapes, attrs):
        _same(name, shapes, "a", "b")
        return {"y": (shapes["a"], "x")}

    return infer


def _unary(name: str):
    def infer(shapes, attrs):
        return {"y": (shapes["x"], "x")}

    return infer


# ---- linear algebra ----------------------------------------------------------------


def _linear(shapes, attrs):
    _rank("linear", shapes, "x", 2)
    _rank("linear", shapes, "w", 2)
    (m, k), (n, k2) = shapes["x"], shapes["w"]
    if k != k2:
        _fail("linear", f"x {shapes['x']} and w {shapes['w']} (out, in) disagree on in: {k} != {k2}")
    if attrs["has_b"] and shapes["b"] != (n,):
        _fail("linear", f"b has shape {shapes['b']}; it must be ({n},)")
    return {"y": ((m, n), "x")}


def _matmul(shapes, attrs):
    _rank("matmul", shapes, "a", 3)
    _rank("matmul", shapes, "b", 3)
    ba, a1, a2 = shapes["a"]
    bb, b1, b2 = shapes["b"]
    m, k = (a2, a1) if attrs["trans_a"] else (a1, a2)
    rows = attrs["b_rows"]
    if rows != 0:  # b's first `rows` rows along its axis 1 (a prefix of a cache's capacity)
        if not (dims.is_extent(rows) and dims.positive(rows) and dims.le(rows, b1)):
            _fail("matmul", f"b_rows {rows} is not in [1, {b1}], the rows of b {shapes['b']}")
        b1 = rows
    kb, n = (b2, b1) if attrs["trans_b"] else (b1, b2)
    group = attrs["group"]
    if not isinstance(group, int) or group < 1:
        _fail("matmul", f"group is {group!r}; it must be a positive int")
    if k != kb:
        _fail("matmul", f"a {shapes['a']} and b {shapes['b']} disagree on the reduced axis: {k} != {kb}")
    if ba != bb * group:
        _fail("matmul", f"a has {ba} batches; it must have b's {bb} times group {group}")
    return {"y": ((ba, m, n), "x")}


def _embedding(shapes, attrs):
    _rank("embedding", shapes, "table", 2)
    _rank("embedding", shapes, "ids", 1)
    return {"y": ((shapes["ids"][0], shapes["table"][1]), "x")}


# ---- normalizations and activations -------------------------------------------------


def _static_row(prim: str, shapes) -> None:
    """A normalization divides by its row's length: that length is static."""
    if dims.is_symbolic(shapes["x"][1]):
        _fail(prim, f"x {shapes['x']}: the normalized dimension follows the run-time length; it must be static")


def _layernorm(shapes, attrs):
    _rank("layernorm", shapes, "x", 2)
    _static_row("layernorm", shapes)
    d = shapes["x"][1]
    for p in ("g", "b"):
        if shapes[p] != (d,):
            _fail("layernorm", f"{p} has shape {shapes[p]}; it must be ({d},)")
    return {"y": (shapes["x"], "x")}


def _rmsnorm(shapes, attrs):
    _rank("rmsnorm", shapes, "x", 2)
    _static_row("rmsnorm", shapes)
    d = shapes["x"][1]
    if shapes["g"] != (d,):
        _fail("rmsnorm", f"g has shape {shapes['g']}; it must be ({d},)")
    return {"y": (shapes["x"], "x")}


def _softmax(shapes, attrs):
    _rank("softmax", shapes, "x", 3)
    if attrs["has_keep"] and shapes["keep"] != (shapes["x"][2],):
        _fail("softmax", f"keep has shape {shapes['keep']}; it must be ({shapes['x'][2]},)")
    if not isinstance(attrs["offset"], int):
        _fail("softmax", f"offset is {attrs['offset']!r}; it must be an int")
    return {"y": (shapes["x"], "x")}


def _rope(shapes, attrs):
    _rank("rope", shapes, "x", 3)
    if dims.is_symbolic(shapes["x"][2]):
        _fail("rope", f"x {shapes['x']}: the head dimension follows the run-time length; it must be static")
    if shapes["x"][2] % 2:
        _fail("rope", f"x {shapes['x']}: the head dimension must be even")
    if attrs["pairing"] not in ("half", "interleaved"):
        _fail("rope", f"pairing is {attrs['pairing']!r}; it must be 'half' or 'interleaved'")
    pos0 = attrs["pos0"]
    if not ((isinstance(pos0, int) and not isinstance(pos0, bool) and pos0 >= 0)
            or (dims.is_symbolic(pos0) and pos0.degree == 1 and dims.le(0, pos0))):
        _fail("rope", f"pos0 is {pos0!r}; it must be an int >= 0, or >= 0 and affine in the run-time length")
    if not attrs["theta"] > 1:
        _fail("rope", f"theta is {attrs['theta']!r}; it must be > 1")
    return {"y": (shapes["x"], "x")}


def _mean_pool(shapes, attrs):
    _rank("mean_pool", shapes, "x", 2)
    if shapes["keep"] != (shapes["x"][0],):
        _fail("mean_pool", f"keep has shape {shapes['keep']}; it must be ({shapes['x'][0]},)")
    return {"y": ((shapes["x"][1],), "x")}


def _l2norm(shapes, attrs):
    _rank("l2norm", shapes, "x", 2)
    return {"y": (shapes["x"], "x")}


def _argmax(shapes, attrs):
    _rank("argmax", shapes, "x", 2)
    return {"y": ((shapes["x"][0],), "i32")}


# ---- quantized operands ----------------------------------------------------------------


def _block(prim: str, fmt: str, block, formats: tuple[str, ...] = QUANT_FORMATS) -> None:
    if fmt not in formats:
        _fail(prim, f"fmt is {fmt!r}; it must be one of {', '.join(formats)}")
    if fmt in K_FORMATS and block != K_SUPER_BLOCK:
        _fail(prim, f"block is {block!r}; {fmt} is super-blocks of {K_SUPER_BLOCK}")
    if isinstance(block, bool) or not isinstance(block, int) or not 1 <= block <= MAX_BLOCK:
        _fail(prim, f"block is {block!r}; it must be an int in 1..{MAX_BLOCK}")
    if fmt == "q4" and block % 2:
        _fail(prim, f"block is {block}; a q4 block is an even number of values (two to a byte)")


def _quantize(shapes, attrs):
    _rank("quantize", shapes, "x", 2)
    _block("quantize", "q8", attrs["block"])
    m, k = shapes["x"]
    return {"q": ((m, k), "i8"), "d": ((m, block_count(k, attrs["block"])), "acc")}


def _quantized_weight(prim: str, shapes, attrs, k: int) -> int:
    """Check wq, wd and b against k input features; give N."""
    fmt, block = attrs["fmt"], attrs["block"]
    _block(prim, fmt, block, WEIGHT_FORMATS)
    if fmt in K_FORMATS and isinstance(k, int) and k % K_SUPER_BLOCK:
        _fail(prim, f"K is {k}; {fmt} rows are whole super-blocks of {K_SUPER_BLOCK} values")
    _rank(prim, shapes, "wq", 2)
    _rank(prim, shapes, "wd", 2)
    n, row = shapes["wq"]
    want = quantized_row_length(fmt, k, block)
    if row != want:
        unit = ("int8 values" if fmt == "q8" else
                f"bytes ({block_count(k, block)} blocks of {want // block_count(k, block)})")
        _fail(prim, f"wq has shape {shapes['wq']}; a {fmt} row of {k} values in blocks of {block} is "
                    f"{want} {unit}")
    if shapes["wd"] != (n, scale_columns(fmt, k, block)):
        what = "d and dmin" if fmt in K_FORMATS and K_FORMATS[fmt][1] == 2 else "one scale"
        _fail(prim, f"wd has shape {shapes['wd']}; it must be ({n}, {scale_columns(fmt, k, block)}): {what} "
                    f"per row and block of {block}")
    if attrs["has_b"] and shapes["b"] != (n,):
        _fail(prim, f"b has shape {shapes['b']}; it must be ({n},)")
    return n


def _qlinear_w(shapes, attrs):
    _rank("qlinear_w", shapes, "x", 2)
    m, k = shapes["x"]
    n = _quantized_weight("qlinear_w", shapes, attrs, k)
    return {"y": ((m, n), "x")}


def _qlinear_i(shapes, attrs):
    _rank("qlinear_i", shapes, "xq", 2)
    m, k = shapes["xq"]
    n = _quantized_weight("qlinear_i", shapes, attrs, k)
    if shapes["xd"] != (m, block_count(k, attrs["block"])):
        _fail("qlinear_i", f"xd has shape {shapes['xd']}; it must be ({m}, {block_count(k, attrs['block'])}): "
                           f"one activation scale per row and block of {attrs['block']}")
    return {"y": ((m, n), "x")}


# ---- views -------------------------------------------------------------------------


def _reshape(shapes, attrs):
    shape = tuple(attrs["shape"])
    if math.prod(shape) != math.prod(shapes["x"]) or not all(dims.is_extent(d) and dims.positive(d) for d in shape):
        _fail("reshape", f"x {shapes['x']} cannot be viewed as {shape}")
    return {"y": (shape, "x")}


def _transpose(shapes, attrs):
    perm = tuple(attrs["perm"])
    if sorted(perm) != list(range(len(shapes["x"]))):
        _fail("transpose", f"perm {perm} is not a permutation of the {len(shapes['x'])} axes of x")
    return {"y": (tuple(shapes["x"][p] for p in perm), "x")}


def _slice(shapes, attrs):
    axis, start, stop = attrs["axis"], attrs["start"], attrs["stop"]
    x = shapes["x"]
    if not 0 <= axis < len(x):
        _fail("slice", f"axis {axis} is not an axis of x {x}")
    if not (dims.is_extent(start) and dims.is_extent(stop)
            and dims.le(0, start) and dims.lt(start, stop) and dims.le(stop, x[axis])):
        _fail("slice", f"[{start}, {stop}) is not a non-empty range inside axis {axis} of x {x}")
    return {"y": (x[:axis] + (stop - start,) + x[axis + 1 :], "x")}


def _concat(shapes, attrs):
    axis = attrs["axis"]
    a, b = shapes["a"], shapes["b"]
    if len(a) != len(b) or not 0 <= axis < len(a):
        _fail("concat", f"a {a} and b {b} with axis {axis}: same rank and a valid axis needed")
    if a[:axis] + a[axis + 1 :] != b[:axis] + b[axis + 1 :]:
        _fail("concat", f"a {a} and b {b} differ off axis {axis}")
    return {"y": (a[:axis] + (a[axis] + b[axis],) + a[axis + 1 :], "x")}


def _cache_write(shapes, attrs):
    _rank("cache_write", shapes, "cache", 3)
    _rank("cache_write", shapes, "rows", 3)
    (b, c, w), (rb, r, rw), pos = shapes["cache"], shapes["rows"], attrs["pos"]
    if (rb, rw) != (b, w):
        _fail("cache_write", f"rows {shapes['rows']} and cache {shapes['cache']} differ off axis 1")
    if not (dims.is_extent(pos) and dims.le(0, pos) and dims.le(pos + r, c)):
        _fail("cache_write", f"rows [{pos}, {pos + r}) are not inside the {c} rows of cache {shapes['cache']}")
    return {"y": (shapes["cache"], "x")}


def _fill(shapes, attrs):
    shape = tuple(attrs["shape"])
    if any(not dims.is_extent(d) or not dims.positive(d) for d in shape):
        _fail("fill", f"shape {shape}: every dimension must be a positive int (or positive at every length)")
    return {"y": (shape, "x")}


def _iota(shapes, attrs):
    start, length = attrs["start"], attrs["length"]
    if not (dims.is_extent(length) and dims.positive(length)) or not (isinstance(start, int) and start >= 0):
        _fail("iota", f"start {start!r} and length {length!r}: give an int >= 0 and a positive length")
    return {"y": ((length,), "i32")}


def _xent_mean(shapes, attrs):
    if len(shapes["targets"]) != 2:
        _fail("xent_mean", f"targets has shape {shapes['targets']}; it is the batch's (B, T)")
    if shapes["x"] != ():
        _fail("xent_mean", f"x has shape {shapes['x']}; it is a scalar, shape ()")
    return {"y": ((), "x")}


# ---- the backward (docs/semantics.md section 17) -----------------------------------------
# A backward primitive gives one adjoint of one operand of a forward primitive. An
# accumulating one takes the adjoint so far, `acc`, and gives it with the rule's ordered
# terms added (its bits depend on acc); a term one gives the elementwise term the rule
# adds, which the graph adds with `add` (the same bits as the rule's ⊕=).


def _as_forward(prim: str, rule, shapes, attrs) -> dict[str, tuple[Shape, str]]:
    """The forward primitive's shape rule on its operands; a refusal names `prim`."""
    try:
        return rule(shapes, attrs)
    except PrimitiveError as error:
        raise PrimitiveError(f"{prim}: the forward's operands do not fit: {error}") from None


def _accumulates(prim: str, shapes, want: Shape) -> dict[str, tuple[Shape, str]]:
    """acc has the adjoint's shape `want`; y is acc with the terms added."""
    if shapes["acc"] != tuple(want):
        _fail(prim, f"acc has shape {shapes['acc']}; the adjoint it holds is {tuple(want)}")
    return {"y": (shapes["acc"], "x")}


def _linear_bar_x(shapes, attrs):
    _as_forward("linear_bar_x", _linear, {"x": shapes["x"], "w": shapes["w"]}, {"has_b": False})
    _rows_of_dy("linear_bar_x", shapes, shapes["x"][0], shapes["w"][0])
    return _accumulates("linear_bar_x", shapes, shapes["x"])


def _linear_bar_w(shapes, attrs):
    _rank("linear_bar_w", shapes, "x", 2)
    _rank("linear_bar_w", shapes, "dy", 2)
    if shapes["dy"][0] != shapes["x"][0]:
        _fail("linear_bar_w", f"dy {shapes['dy']} and x {shapes['x']} disagree on the rows")
    return _accumulates("linear_bar_w", shapes, (shapes["dy"][1], shapes["x"][1]))


def _linear_bar_b(shapes, attrs):
    _rank("linear_bar_b", shapes, "dy", 2)
    return _accumulates("linear_bar_b", shapes, (shapes["dy"][1],))


def _rows_of_dy(prim: str, shapes, rows, cols) -> None:
    if shapes["dy"] != (rows, cols):
        _fail(prim, f"dy has shape {shapes['dy']}; the forward's output is {(rows, cols)}")


def _matmul_shapes(prim: str, shapes, attrs, a, b) -> None:
    """The forward matmul of a and b (its attrs) gives dy's shape."""
    fwd = {k: attrs[k] for k in ("trans_a", "trans_b", "group")} | {"b_rows": 0}
    ((out, _),) = _as_forward(prim, _matmul, {"a": a, "b": b}, fwd).values()
    if shapes["dy"] != out:
        _fail(prim, f"dy has shape {shapes['dy']}; the forward matmul gives {out}")


def _matmul_bar_a(shapes, attrs):
    _rank("matmul_bar_a", shapes, "acc", 3)
    _matmul_shapes("matmul_bar_a", shapes, attrs, shapes["acc"], shapes["b"])
    return _accumulates("matmul_bar_a", shapes, shapes["acc"])


def _matmul_bar_b(shapes, attrs):
    _rank("matmul_bar_b", shapes, "acc", 3)
    _matmul_shapes("matmul_bar_b", shapes, attrs, shapes["a"], shapes["acc"])
    return _accumulates("matmul_bar_b", shapes, shapes["acc"])


def _embedding_bar(shapes, attrs):
    _rank("embedding_bar", shapes, "acc", 2)
    _rank("embedding_bar", shapes, "ids", 1)
    _rows_of_dy("embedding_bar", shapes, shapes["ids"][0], shapes["acc"][1])
    return _accumulates("embedding_bar", shapes, shapes["acc"])


def _norm_kind(prim: str, attrs) -> None:
    if attrs["kind"] not in ("layernorm", "rmsnorm"):
        _fail(prim, f"kind is {attrs['kind']!r}; it must be 'layernorm' or 'rmsnorm'")


def _norm_bar_g(shapes, attrs):
    _norm_kind("norm_bar_g", attrs)
    _rank("norm_bar_g", shapes, "x", 2)
    _static_row("norm_bar_g", shapes)
    _same("norm_bar_g", shapes, "x", "dy")
    return _accumulates("norm_bar_g", shapes, (shapes["x"][1],))


def _mean_pool_bar(shapes, attrs):
    _rank("mean_pool_bar", shapes, "acc", 2)
    if shapes["keep"] != (shapes["acc"][0],) or shapes["dy"] != (shapes["acc"][1],):
        _fail("mean_pool_bar", f"keep {shapes['keep']} and dy {shapes['dy']} must be ({shapes['acc'][0]},) and "
                               f"({shapes['acc'][1]},), the rows and the width of acc {shapes['acc']}")
    return _accumulates("mean_pool_bar", shapes, shapes["acc"])


def _sum_rows(shapes, attrs):
    _rank("sum_rows", shapes, "x", 1)
    return _accumulates("sum_rows", shapes, ())


def _norm_bar_x(name: str, params: tuple[str, ...]):
    def infer(shapes, attrs):
        forward = {"layernorm_bar_x": _layernorm, "rmsnorm_bar_x": _rmsnorm}[name]
        _as_forward(name, forward, {"x": shapes["x"], **{p: shapes["g"] for p in params}}, attrs)
        _same(name, shapes, "x", "dy")
        return {"y": (shapes["x"], "x")}

    return infer


def _softmax_bar(shapes, attrs):
    forward = {"x": shapes["probs"], **({"keep": shapes["keep"]} if attrs["has_keep"] else {})}
    _as_forward("softmax_bar", _softmax, forward, attrs)
    _same("softmax_bar", shapes, "probs", "dy")
    return {"y": (shapes["probs"], "x")}


def _activation_bar(name: str):
    def infer(shapes, attrs):
        _same(name, shapes, "x", "dy")
        return {"y": (shapes["x"], "x")}

    return infer


def _xent(prim: str, shapes) -> None:
    _rank(prim, shapes, "logits", 2)
    if shapes["targets"] != (shapes["logits"][0],):
        _fail(prim, f"targets has shape {shapes['targets']}; it must be ({shapes['logits'][0]},), a target per row")


def _xent_rows(shapes, attrs):
    _xent("xent_rows", shapes)
    return {"y": ((shapes["logits"][0],), "x")}


def _xent_bar(shapes, attrs):
    _xent("xent_bar", shapes)
    if shapes["r"] != ():
        _fail("xent_bar", f"r has shape {shapes['r']}; it is a scalar, 1 ⊘ the count: shape ()")
    return {"y": (shapes["logits"], "x")}


# adamw's host scalars, in the order of its operand h (docs/semantics.md section 17).
ADAMW_SCALARS = ("clip", "decay", "w1", "beta2", "w2", "root", "eps", "step")


def _adamw(shapes, attrs):
    for name in ("g", "m", "v"):
        _same("adamw", shapes, "param", name)
    if shapes["h"] != (len(ADAMW_SCALARS),):
        _fail("adamw", f"h has shape {shapes['h']}; it holds the {len(ADAMW_SCALARS)} scalars "
                       f"{', '.join(ADAMW_SCALARS)}")
    return {out: (shapes["param"], "x") for out in ("param_out", "m_out", "v_out")}


def _p(name, operands, attrs, infer, doc, quiet=(), sites=types.SITE_TYPES, results=("y",)):
    return Primitive(name, tuple(operands), dict(attrs), infer, doc, tuple(quiet), tuple(sites), tuple(results))


X, A, B = Operand("x"), Operand("a"), Operand("b")

T, DY, ACC = TRAINING_SITES, Operand("dy"), Operand("acc")
MATMUL_FLAGS = {"trans_a": False, "trans_b": False, "group": 1}

BACKWARD = [
    _p("linear_bar_x", [X, Operand("w"), DY, ACC], {}, _linear_bar_x,
       "acc with x's terms of linear added: for n in order, acc[m,k] += dy[m,n] w[n,k]", sites=T),
    _p("linear_bar_w", [X, DY, ACC], {}, _linear_bar_w,
       "acc with w's terms of linear added: for m in order, acc[n,k] += dy[m,n] x[m,k]", sites=T),
    _p("linear_bar_b", [DY, ACC], {}, _linear_bar_b,
       "acc with the column sums of dy added, row by row in order (linear's and layernorm's b)", sites=T),
    _p("matmul_bar_a", [B, DY, ACC], MATMUL_FLAGS, _matmul_bar_a,
       "acc with a's terms of matmul added: for n in order", sites=T),
    _p("matmul_bar_b", [A, DY, ACC], MATMUL_FLAGS, _matmul_bar_b,
       "acc with b's terms of matmul added: the heads of each group in order, then m in order", sites=T),
    _p("embedding_bar", [Operand("ids", "i32"), DY, ACC], {}, _embedding_bar,
       "acc with dy[t] added to row ids[t] for t in order (an id outside [0, V) adds nothing)", sites=T),
    _p("norm_bar_g", [X, DY, ACC], {"kind": "layernorm", "eps": 1e-5}, _norm_bar_g,
       "acc with dy[m] * xhat[m] added for the rows m in order, xhat the forward's", sites=T),
    _p("mean_pool_bar", [Operand("keep", "i32"), DY, ACC], {}, _mean_pool_bar,
       "acc with dy / max(n, 1) added to every kept row", sites=T),
    _p("sum_rows", [X, ACC], {}, _sum_rows, "acc with x's elements added in order (the loss total)", sites=T),
    _p("layernorm_bar_x", [X, Operand("g"), DY], {"eps": 1e-5}, _norm_bar_x("layernorm_bar_x", ("g", "b")),
       "layernorm's term of x: ((a - ma) - xhat mb) rstd, a = dy g", sites=T),
    _p("rmsnorm_bar_x", [X, Operand("g"), DY], {"eps": 1e-5}, _norm_bar_x("rmsnorm_bar_x", ("g",)),
       "rmsnorm's term of x: (a - xhat mb) rstd, a = dy g", sites=T),
    _p("softmax_bar", [Operand("probs"), DY, Operand("keep", "i32", optional=True)],
       {"causal": False, "offset": 0, "has_keep": False}, _softmax_bar,
       "softmax's term of x from its output probs: probs (dy - dot), -0 in masked columns", sites=T),
    _p("gelu_tanh_bar", [X, DY], {}, _activation_bar("gelu_tanh_bar"), "gelu_tanh's term of x: dy q", sites=T),
    _p("silu_bar", [X, DY], {}, _activation_bar("silu_bar"), "silu's term of x: dy q", sites=T),
    _p("xent_rows", [Operand("logits"), Operand("targets", "i32")], {"ignore": -100}, _xent_rows,
       "each row's cross-entropy, +0 where the target is ignore", sites=T),
    _p("xent_bar", [Operand("logits"), Operand("targets", "i32"), Operand("r")], {"ignore": -100}, _xent_bar,
       "the logits' terms of the loss, (softmax - onehot) r, +0 in rows that do not count", sites=T),
    _p("adamw", [Operand("param"), Operand("g"), Operand("m"), Operand("v"), Operand("h")], {"decays": False}, _adamw,
       "one AdamW update of param with gradient g and moments m, v; h the step's host scalars", sites=T),
]

PRIMITIVES: dict[str, Primitive] = {
    p.name: p
    for p in [
        _p("add", [A, B], {}, _binary("add"), "y = a + b, elementwise"),
        _p("sub", [A, B], {}, _binary("sub"), "y = a - b, elementwise"),
        _p("mul", [A, B], {}, _binary("mul"), "y = a * b, elementwise"),
        _p("scale", [X], {"s": 1.0}, _unary("scale"), "y = x * s, s a real constant"),
        _p(
            "linear",
            [X, Operand("w"), Operand("b", optional=True)],
            {"has_b": False},
            _linear,
            "y[m,n] = sum_k x[m,k] w[n,k] (+ b[n]); w is (out, in)",
        ),
        _p(
            "matmul",
            [A, B],
            {"trans_a": False, "trans_b": False, "group": 1, "b_rows": 0},
            _matmul,
            "batched y[i] = a[i] @ b[i // group], either operand transposed; b_rows > 0 reads "
            "b's first b_rows rows (axis 1) only",
            quiet=("b_rows",),
        ),
        _p(
            "embedding",
            [Operand("table"), Operand("ids", "i32")],
            {},
            _embedding,
            "y[t] = table[ids[t]]",
        ),
        _p(
            "layernorm",
            [X, Operand("g"), Operand("b")],
            {"eps": 1e-5},
            _layernorm,
            "rows normalized to mean 0 and variance 1, then * g + b",
        ),
        _p("rmsnorm", [X, Operand("g")], {"eps": 1e-5}, _rmsnorm, "x / rms(x) * g, per row"),
        _p(
            "softmax",
            [X, Operand("keep", "i32", optional=True)],
            {"causal": False, "offset": 0, "has_keep": False},
            _softmax,
            "softmax over the last axis with an optional causal and padding mask",
        ),
        _p("gelu_tanh", [X], {}, _unary("gelu_tanh"), "GELU, tanh approximation"),
        _p("gelu_erf", [X], {}, _unary("gelu_erf"), "GELU, exact erf form"),
        _p("silu", [X], {}, _unary("silu"), "x * sigmoid(x)"),
        _p(
            "rope",
            [X],
            {"theta": 10000.0, "pos0": 0, "pairing": "half", "inverse": False},
            _rope,
            "rotary position embedding of x (positions, heads, head_dim); inverse: the rotation by "
            "-angle (its backward)",
            quiet=("inverse",),
        ),
        _p(
            "mean_pool",
            [X, Operand("keep", "i32")],
            {},
            _mean_pool,
            "mean of the rows of x whose keep is non-zero",
        ),
        _p("l2norm", [X], {"eps": 1e-12}, _l2norm, "rows divided by max(their L2 norm, eps)"),
        _p("argmax", [X], {}, _argmax, "first index of the row maximum; the first NaN wins"),
        _p("reshape", [X], {"shape": ()}, _reshape, "the same elements in C order, new shape"),
        _p("transpose", [X], {"perm": ()}, _transpose, "y = x.transpose(perm)"),
        _p(
            "slice",
            [X],
            {"axis": 0, "start": 0, "stop": 1},
            _slice,
            "y = x[..., start:stop, ...] along axis",
        ),
        _p("concat", [A, B], {"axis": 0}, _concat, "a and b joined along axis"),
        _p("fill", [], {"shape": (), "value": 0.0}, _fill, "every element R_A(value): an adjoint's +0, a constant"),
        _p("iota", [], {"start": 0, "length": 1}, _iota, "y[i] = start + i (int32): the rows a slice took"),
        _p(
            "xent_mean",
            [X, Operand("targets", "i32")],
            {"ignore": -100},
            _xent_mean,
            "x / n, n the count of targets (B, T) that are not ignore: the mean loss, and r = 1 / n",
        ),
        _p(
            "cache_write",
            [Operand("cache"), Operand("rows")],
            {"pos": 0},
            _cache_write,
            "cache with rows [pos, pos + R) of axis 1 replaced by rows, written in place",
        ),
        _p(
            "quantize",
            [X],
            {"block": 32},
            _quantize,
            "rows of x to q8: int8 values q and one scale d per block of the row",
            results=("q", "d"),
        ),
        _p(
            "qlinear_w",
            [X, Operand("wq", "q"), Operand("wd", "f32"), Operand("b", optional=True)],
            {"fmt": "q8", "block": 32, "has_b": False},
            _qlinear_w,
            "linear with quantized weights, dequantized in f32 (the weight-only form)",
        ),
        _p(
            "qlinear_i",
            [Operand("xq", "i8"), Operand("xd", "acc"), Operand("wq", "q"), Operand("wd", "f32"),
             Operand("b", optional=True)],
            {"fmt": "q8", "block": 32, "has_b": False},
            _qlinear_i,
            "linear of quantized activations and weights: exact int32 block sums (the integer form)",
        ),
        *BACKWARD,
    ]
}
# The primitives of the backward and the optimizer (docs/semantics.md section 17).
BACKWARD_PRIMITIVES = tuple(p.name for p in BACKWARD)


# Primitives whose output takes the storage of an operand (output -> operand): the kernel
# writes only what changes, and whoever runs it gives the output that operand's buffer.
IN_PLACE = {"cache_write": ("y", "cache")}


def shown_attrs(name: str, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes printed texts show (Primitive.shown_attrs); all of them for a
    name the catalogue does not hold (a hand-made kernel of the IR's tests)."""
    return PRIMITIVES[name].shown_attrs(attrs) if name in PRIMITIVES else dict(attrs)


def get_primitive(name: str) -> Primitive:
    try:
        return PRIMITIVES[name]
    except KeyError:
        raise PrimitiveError(
            f"unknown primitive {name!r}; exactc knows {', '.join(sorted(PRIMITIVES))}"
        ) from None
