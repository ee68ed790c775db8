"""The model builder: an entry is a function of parameters and inputs, traced to a graph.

A model is ordinary Python over the primitives of exporter/primitives.py:

    def block(cfg, x, p):                      # p: this layer's parameters
        h = graph.layernorm(x, p["ln_1.weight"], p["ln_1.bias"], eps=cfg.eps)
        ...
        return graph.add(x, h)

    def forward(cfg, params, tokens):
        x = graph.embedding(params["wte"], tokens)                # (T, D)
        layers = graph.group_layers(params, "h.")                 # stacked: (L, ...) each
        x = graph.fold(block, cfg.layers, x, layers, cfg)         # a loop over layers
        return {"logits": graph.call(head, cfg, x, params)}      # a module function

    program = graph.trace("tiny", "forward", forward, param_specs, input_specs, cfg)

Tracing keeps the structure the C host mirrors:

- `call(fn, *args)` traces `fn` once per distinct form (function, static arguments, the
  shapes of its tensor arguments) into a `Function`; every call of that form is a
  `Call` node of the same Function, so a module called fifty times is traced (and
  printed) once.
- `fold(body, count, carry, layers, *shared)` runs `body` once per layer with that
  layer's slice of the stacked parameters `layers` (each of shape (count, ...)); the
  body is traced once, not once per layer. `apart={i: other_body}` gives iterations
  that differ from the others; the host runs them apart from the loop. With
  `rows=True` the body returns (carry, rows) and the fold also gives each row stacked
  over the layers (a decode step's keys and values, as lax.scan's ys).
- every primitive applied is an `Op` (a launch of that primitive's kernel).

Values are symbolic: a shape and a kind ("x", the site type; "i32"). The site type is
chosen when the graph is realized (exported or run), not while tracing, so one trace
serves f64, f32 and bf16. A dimension may follow the run-time sequence length (a
dims.Dim: `T`, `T - 1`): an entry traced with input_ids of shape (T,) is one program
for every length up to T_max, and the models read T from their values' shapes
(`T = x.shape[0]`), never from the config. `evaluate` runs a program traced at a
concrete length.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from exactc.exporter import dims
from exactc.exporter.primitives import CONTRACT_OFF, PrimitiveError, Shape, get_primitive


class GraphError(ValueError):
    """A model that cannot be traced: the message names the value, the rule and the fix."""


# ---- values and nodes ------------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class Value:
    """A tensor in a traced function: its shape, kind ("x" or "i32") and a readable name."""

    shape: Shape
    kind: str
    name: str

    def __repr__(self) -> str:
        return f"<{self.name} {self.kind}{list(self.shape)}>"

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclasses.dataclass(eq=False)
class Op:
    """One primitive applied: a launch of its kernel. `copy` marks a reshape the host
    must materialize (a function output that would otherwise be a view)."""

    primitive: str
    attrs: dict[str, Any]  # full, normalized (plain Python values)
    args: tuple[Value, ...]  # in the catalogue's operand order
    outs: tuple[Value, ...]  # in the catalogue's result order: (y,) for most, (q, d) for quantize
    copy: bool = False

    @property
    def out(self) -> Value:
        """The output of an op of one result (every primitive but quantize)."""
        if len(self.outs) != 1:
            raise GraphError(f"{self.primitive} makes {len(self.outs)} values; read them by name (Op.results)")
        return self.outs[0]

    def operands(self) -> dict[str, Value]:
        names = get_primitive(self.primitive).operand_names(self.attrs)
        return dict(zip(names, self.args))

    def results(self) -> dict[str, Value]:
        """Each output by the kernel's and the reference's name for it: {"y": y} for most."""
        return dict(zip(get_primitive(self.primitive).results, self.outs))


@dataclasses.dataclass(eq=False)
class Call:
    function: "Function"
    args: tuple[Value, ...]
    outs: tuple[Value, ...]


@dataclasses.dataclass(eq=False)
class Fold:
    """`count` iterations of `body(carry, layer, *shared) -> carry`; iteration l sees
    slice l of each stacked value. `apart` maps an iteration index to the Function that
    runs it instead of `body` (same signature). A `reverse` fold runs its layers from
    the last down to 0 (a backward pass): layer l still sees slice l of each stacked
    value and writes slice l of each row."""

    body: "Function"
    count: int
    carry: tuple[Value, ...]
    stacked: tuple[Value, ...]
    shared: tuple[Value, ...]
    outs: tuple[Value, ...]
    apart: dict[int, "Function"] = dataclasses.field(default_factory=dict)
    # `rows` trailing outs are stacked per-layer results (count, ...): iteration l writes
    # slice l of each (the body's outputs after the carry), as lax.scan's ys.
    rows: int = 0
    reverse: bool = False

    @property
    def args(self) -> tuple[Value, ...]:
        return self.carry + self.stacked + self.shared

    @property
    def carry_outs(self) -> tuple[Value, ...]:
        return self.outs[: len(self.outs) - self.rows]

    @property
    def row_outs(self) -> tuple[Value, ...]:
        return self.outs[len(self.outs) - self.rows:]

    def body_of(self, index: int) -> "Function":
        return self.apart.get(index, self.body)

    def order(self) -> range:
        """The layers in the order they run: 0 up, or from the last down when reversed."""
        return range(self.count - 1, -1, -1) if self.reverse else range(self.count)

    def segments(self) -> list[tuple[int, int, "Function"]]:
        """Runs of consecutive iterations with the same body: (start, stop, body)."""
        out: list[tuple[int, int, Function]] = []
        for index in range(self.count):
            body = self.body_of(index)
            if out and out[-1][2] is body:
                out[-1] = (out[-1][0], index + 1, body)
            else:
                out.append((index, index + 1, body))
        return out


Node = Op | Call | Fold


@dataclasses.dataclass(eq=False)
class Function:
    """A traced function: formal inputs, nodes in program order, outputs."""

    name: str
    inputs: tuple[Value, ...]
    nodes: list[Node]
    outputs: tuple[Value, ...]
    doc: str = ""  # the first line of the traced Python function's docstring

    def walk(self) -> Iterator["Function"]:
        """This function and every function it reaches, each once, callees first."""
        seen: set[int] = set()

        def visit(fn: Function) -> Iterator[Function]:
            if id(fn) in seen:
                return
            seen.add(id(fn))
            for node in fn.nodes:
                if isinstance(node, Call):
                    yield from visit(node.function)
                elif isinstance(node, Fold):
                    yield from visit(node.body)
                    for other in node.apart.values():
                        yield from visit(other)
            yield fn

        return visit(self)

    def ops(self) -> Iterator[Op]:
        """Every Op of every function reached, each traced op once."""
        for fn in self.walk():
            for node in fn.nodes:
                if isinstance(node, Op):
                    yield node


# ---- tracing --------------------------------------------------------------------------


class _Trace:
    """The function being traced, and the cache of traced forms."""

    def __init__(self) -> None:
        # the functions being traced, innermost last: each with its taken names and, per
        # base name, the last suffix `fresh` gave it
        self.stack: list[tuple[Function, set[str], dict[str, int]]] = []
        self.forms: dict[tuple, Function] = {}
        self.names: dict[str, int] = {}
        # (an activation, block) -> its quantize's (q, d): the linears of one value
        # (attention's q, k and v) share one quantization of it. Keyed by the Value itself
        # (hashed by identity), which the key keeps alive: no id is ever reused here.
        self.quantized: dict[tuple[Value, int], tuple[Value, Value]] = {}

    def current(self) -> Function:
        if not self.stack:
            raise GraphError("primitives are applied inside a traced entry (graph.trace)")
        return self.stack[-1][0]

    def fresh(self, base: str) -> str:
        """A name unique in the current function (the C host uses it as is): `base`, else
        the first free of base2, base3, ... Names are never freed, so the search for a
        base resumes where its last one stopped (N values of one primitive cost N, not
        N squared)."""
        _, taken, tried = self.stack[-1]
        base = _c_name(base)
        name, k = base, tried.get(base, 1)
        while name in taken:
            k += 1
            name = f"{base}{k}"
        if name != base:
            tried[base] = k
        taken.add(name)
        return name

    def function_name(self, base: str) -> str:
        base = _c_name(base)
        count = self.names.get(base, 0)
        self.names[base] = count + 1
        return base if count == 0 else f"{base}_{count + 1}"


_TRACE: list[_Trace] = []


def _trace() -> _Trace:
    if not _TRACE:
        raise GraphError("primitives are applied inside a traced entry (graph.trace)")
    return _TRACE[-1]


_C_IDENT = re.compile(r"[^A-Za-z0-9_]")
# C's keywords, then the names a printed program uses itself: its functions' common
# parameters, and model.c's own globals and run()'s parameters (a function of the network
# named `weights` or `in` would clash with them, or be hidden inside run()).
_C_RESERVED = frozenset(
    """auto break case char const continue default do double else enum extern float for goto
    if inline int long register restrict return short signed sizeof static struct switch
    typedef union unsigned void volatile while main arena w l lo hi T
    weights Weights map_weights run length in out PARAMS INPUTS OUTPUTS PARAM_BYTES ARENA_BYTES ARENA
    RELEASE SCRATCH BORN IN_PLACE""".split()
)


def _c_name(text: str) -> str:
    name = _C_IDENT.sub("_", text).strip("_") or "v"
    if name[0].isdigit():
        name = "v" + name
    if name in _C_RESERVED or name.startswith("exactc_") or name.startswith("launch_"):
        name = name + "_"
    return name


def _normalize(value: Any) -> Any:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (tuple, list)):
        return tuple(v if dims.is_symbolic(v) else int(v) for v in value)
    return value


def apply(primitive: str, operands: Mapping[str, Value | None], attrs: Mapping[str, Any] | None = None,
          name: str | None = None) -> Value:
    """Apply `primitive` to `operands` (None = an absent optional operand): its one output."""
    (out,) = apply_many(primitive, operands, attrs, name)
    return out


def apply_many(primitive: str, operands: Mapping[str, Value | None], attrs: Mapping[str, Any] | None = None,
               name: str | None = None) -> tuple[Value, ...]:
    """Apply `primitive` to `operands`: its outputs in the catalogue's result order, each
    named `name` (or the primitive's) with the result's name after an underscore when it
    makes more than one (quantize: x_q, x_d)."""
    trace = _trace()
    fn = trace.current()
    prim = get_primitive(primitive)
    full = {k: _normalize(v) for k, v in prim.full_attrs(attrs).items()}
    present = {k: v for k, v in operands.items() if v is not None}
    for key, value in present.items():
        if not isinstance(value, Value):
            raise GraphError(f"{primitive}: operand {key} is a {type(value).__name__}; give a traced Value")
        if value.kind != prim.operand_kind(key, full):
            raise GraphError(
                f"{primitive}: operand {key} ({value.name}) holds {value.kind}; it must hold "
                f"{prim.operand_kind(key, full)}"
            )
    try:
        outputs = prim.outputs({k: v.shape for k, v in present.items()}, full)
    except PrimitiveError as exc:
        names = ", ".join(f"{k}={v.name}{list(v.shape)}" for k, v in present.items())
        raise GraphError(f"in {fn.name}: {exc} (operands {names})") from None
    base = name or primitive
    several = len(prim.results) > 1
    outs = tuple(Value(tuple(outputs[r][0]), outputs[r][1], trace.fresh(f"{base}_{r}" if several else base))
                 for r in prim.results)
    args = tuple(present[k] for k in prim.operand_names(full))
    fn.nodes.append(Op(primitive, full, args, outs))
    return outs


# The primitives, spelled as functions (operands positional, attributes by keyword).


def add(a, b, name=None):
    return apply("add", {"a": a, "b": b}, name=name)


def sub(a, b, name=None):
    return apply("sub", {"a": a, "b": b}, name=name)


def mul(a, b, name=None):
    return apply("mul", {"a": a, "b": b}, name=name)


def scale(x, s, name=None):
    return apply("scale", {"x": x}, {"s": s}, name=name)


def linear(x, w, b=None, name=None):
    """x @ w.T (+ b); a quantized weight (QuantizedWeight) makes it a quantized linear
    (docs/semantics.md, section 15): in the integer form, x quantized to q8 in the
    weight's blocks, then qlinear_i; in the weight-only form, qlinear_w."""
    if isinstance(w, QuantizedWeight):
        attrs = {"fmt": w.fmt, "block": w.block, "has_b": b is not None}
        if w.form == INTEGER:
            xq, xd = quantize(x, w.block)
            return apply("qlinear_i", {"xq": xq, "xd": xd, "wq": w.values, "wd": w.scales, "b": b}, attrs, name=name)
        return apply("qlinear_w", {"x": x, "wq": w.values, "wd": w.scales, "b": b}, attrs, name=name)
    return apply("linear", {"x": x, "w": w, "b": b}, {"has_b": b is not None}, name=name)


def quantize(x, block):
    """x's rows in q8 blocks of `block`: (values, scales). A value is quantized once per
    function and block, however many linears read it."""
    trace = _trace()
    key = (x, block)
    if key not in trace.quantized:
        q, d = apply_many("quantize", {"x": x}, {"block": block}, name=x.name)
        trace.quantized[key] = (q, d)
    return trace.quantized[key]


def matmul(a, b, trans_a=False, trans_b=False, group=1, b_rows=0, name=None):
    attrs = {"trans_a": trans_a, "trans_b": trans_b, "group": group, "b_rows": b_rows}
    return apply("matmul", {"a": a, "b": b}, attrs, name=name)


def embedding(table, ids, name=None):
    return apply("embedding", {"table": table, "ids": ids}, name=name)


def layernorm(x, g, b, eps=1e-5, name=None):
    return apply("layernorm", {"x": x, "g": g, "b": b}, {"eps": eps}, name=name)


def rmsnorm(x, g, eps=1e-5, name=None):
    return apply("rmsnorm", {"x": x, "g": g}, {"eps": eps}, name=name)


def softmax(x, keep=None, causal=False, offset=0, name=None):
    return apply("softmax", {"x": x, "keep": keep}, {"causal": causal, "offset": offset, "has_keep": keep is not None}, name=name)


def gelu_tanh(x, name=None):
    return apply("gelu_tanh", {"x": x}, name=name)


def gelu_erf(x, name=None):
    return apply("gelu_erf", {"x": x}, name=name)


def silu(x, name=None):
    return apply("silu", {"x": x}, name=name)


def rope(x, theta=10000.0, pos0=0, pairing="half", name=None):
    return apply("rope", {"x": x}, {"theta": theta, "pos0": pos0, "pairing": pairing}, name=name)


def mean_pool(x, keep, name=None):
    return apply("mean_pool", {"x": x, "keep": keep}, name=name)


def l2norm(x, eps=1e-12, name=None):
    return apply("l2norm", {"x": x}, {"eps": eps}, name=name)


def argmax(x, name=None):
    return apply("argmax", {"x": x}, name=name)


def reshape(x, shape, name=None):
    return apply("reshape", {"x": x}, {"shape": tuple(shape)}, name=name)


def transpose(x, perm, name=None):
    return apply("transpose", {"x": x}, {"perm": tuple(perm)}, name=name)


def slice(x, axis, start, stop, name=None):  # noqa: A001 - the primitive's name
    return apply("slice", {"x": x}, {"axis": axis, "start": start, "stop": stop}, name=name)


def concat(a, b, axis=0, name=None):
    return apply("concat", {"a": a, "b": b}, {"axis": axis}, name=name)


def cache_write(cache, rows, pos, name=None):
    """cache (B, C, w) with rows (B, R, w) at rows [pos, pos + R) of axis 1; in the C
    program, in the cache's own storage."""
    return apply("cache_write", {"cache": cache, "rows": rows}, {"pos": pos}, name=name)


# ---- quantized weights ---------------------------------------------------------------------

# The forms of a quantized linear (docs/semantics.md, section 15): quantize + qlinear_i, the
# default, or qlinear_w on the activations as they are.
INTEGER, WEIGHT_ONLY = "integer", "weight-only"
FORMS = (INTEGER, WEIGHT_ONLY)


@dataclasses.dataclass(frozen=True)
class QuantizedWeight:
    """A linear's weight held quantized: what an entry finds under the weight's key when
    the program is traced with it quantized. `values` (..., N, row) holds q8 values (i8)
    or q4 bytes (u8), `scales` (..., N, nb) f32, for rows of `k` values in blocks of
    `block`. `linear` takes it as it takes a float weight, in its `form`; it travels
    through calls and folds as the pair of its values (a fold slices both by layer)."""

    values: Any  # a Value (a slot in a skeleton)
    scales: Any
    fmt: str
    block: int
    k: int
    form: str = INTEGER


SCALE_SUFFIX = "_scale"  # the scales of a quantized weight `w` are the tensor `w_scale`


def quantized_specs(spec: "ParamSpec", fmt: str, block: int) -> tuple["ParamSpec", "ParamSpec"]:
    """The ParamSpecs of a (N, K) weight held quantized: its values and its scales."""
    from exactc.exporter.primitives import quantized_row_length, scale_columns

    n, k = spec.shape
    kind = "i8" if fmt == "q8" else "u8"
    values = dataclasses.replace(spec, shape=(n, quantized_row_length(fmt, k, block)), kind=kind)
    scales = dataclasses.replace(spec, name=spec.name + SCALE_SUFFIX, shape=(n, scale_columns(fmt, k, block)),
                                 kind="f32")
    return values, scales


def parameter_reach(program: "Program") -> Iterator[tuple[Op, dict[str, str | None]]]:
    """Every op as the program reaches it (through calls, and folds, where a stacked
    parameter is its layer's slice; a function called twice is reached twice), with the
    parameter (ParamSpec name) each of its operands is, None for any other value."""

    def visit(fn: Function, names: dict[int, str]):
        for node in fn.nodes:
            if isinstance(node, Op):
                yield node, {key: names.get(id(v)) for key, v in node.operands().items()}
            elif isinstance(node, Call):
                yield from visit(node.function, {id(f): names[id(a)] for f, a in zip(node.function.inputs, node.args)
                                                 if id(a) in names})
            else:
                for body in {id(b): b for b in [node.body, *node.apart.values()]}.values():
                    yield from visit(body, {id(f): names[id(a)] for f, a in zip(body.inputs, node.args)
                                            if id(a) in names})

    yield from visit(program.function, {id(v): spec.name for spec, v in zip(program.params, program.param_values)})


def linear_weights(program: "Program") -> list[str]:
    """The parameters (ParamSpec names) that only ever reach `linear` as its weight `w`:
    the ones `--weights q8|q4` quantizes. A weight also read otherwise (a tied head's
    embedding table) stays float."""
    uses: dict[str, set[tuple[str, str]]] = {spec.name: set() for spec in program.params}
    for op, params in parameter_reach(program):
        for key, name in params.items():
            if name is not None:
                uses[name].add((op.primitive, key))
    return [name for name, used in uses.items() if used == {("linear", "w")}]


# ---- pytrees of values: the arguments of calls and folds ---------------------------------


def _flatten(tree: Any, path: str = "") -> tuple[list[tuple[str, Value]], Any]:
    """The Values of a tree (dicts, lists, tuples; other leaves static), each with a path
    for its name, and the tree's skeleton (Values replaced by their position)."""
    leaves: list[tuple[str, Value]] = []

    def walk(node: Any, where: str) -> Any:
        if isinstance(node, Value):
            leaves.append((where or node.name, node))
            return _Slot(len(leaves) - 1)
        if isinstance(node, QuantizedWeight):
            return dataclasses.replace(node, values=walk(node.values, where),
                                       scales=walk(node.scales, where + SCALE_SUFFIX if where else ""))
        if isinstance(node, dict):
            return {k: walk(v, str(k)) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return type(node)(walk(v, "") for v in node)
        return node

    return leaves, walk(tree, path)


@dataclasses.dataclass(frozen=True)
class _Slot:
    index: int


def _arrangement(skeleton: Any) -> str:
    """A skeleton's structure as text, each value `*`: {'a': *, 'b': *} (a list and a tuple
    alike: both go round by position)."""
    if isinstance(skeleton, _Slot):
        return "*"
    if isinstance(skeleton, QuantizedWeight):
        return f"quantized({_arrangement(skeleton.values)}, {_arrangement(skeleton.scales)})"
    if isinstance(skeleton, dict):
        return "{" + ", ".join(f"{k!r}: {_arrangement(v)}" for k, v in skeleton.items()) + "}"
    if isinstance(skeleton, (list, tuple)):
        return "[" + ", ".join(_arrangement(v) for v in skeleton) + "]"
    return repr(skeleton)


def _rebuild(skeleton: Any, values: list[Value]) -> Any:
    if isinstance(skeleton, _Slot):
        return values[skeleton.index]
    if isinstance(skeleton, QuantizedWeight):
        return dataclasses.replace(skeleton, values=_rebuild(skeleton.values, values),
                                   scales=_rebuild(skeleton.scales, values))
    if isinstance(skeleton, dict):
        return {k: _rebuild(v, values) for k, v in skeleton.items()}
    if isinstance(skeleton, (list, tuple)):
        return type(skeleton)(_rebuild(v, values) for v in skeleton)
    return skeleton


def _form_key(fn: Callable, skeleton: Any, leaves: list[tuple[str, Value]], extra: Any = ()) -> tuple:
    shapes = tuple((v.shape, v.kind) for _, v in leaves)
    return (fn.__module__, fn.__qualname__, repr(skeleton), shapes, extra)


def _trace_function(name: str, fn: Callable, formals: list[Value], build: Callable[[], Any]) -> tuple[Function, Any]:
    """Run `build` with a new Function on the trace stack; its outputs become the
    Function's outputs (each materialized if it is not made here)."""
    trace = _trace()
    doc = (fn.__doc__ or "").strip().split("\n\n")[0]
    function = Function(trace.function_name(name), tuple(formals), [], (), " ".join(doc.split()))
    trace.stack.append((function, {v.name for v in formals}, {}))
    try:
        result = build()
        leaves, _ = _flatten(result)
        if not leaves:
            raise GraphError(f"{fn.__qualname__} returned no traced value")
        for _, v in leaves:
            _owned_output(function, v)
        _, skeleton = _flatten(result)
        return function, skeleton
    finally:
        trace.stack.pop()


def _owned_output(function: Function, value: Value) -> Value:
    """An output the function writes itself: an input, a view or a repeated output is
    copied (the host writes each output through its own pointer)."""
    producers = {id(v): n for n in function.nodes if isinstance(n, Op) for v in n.outs}
    # a call's outputs and a fold's stacked rows are written through the pointer given
    # (a fold's carry is not: it alternates between two buffers of the fold's own)
    made_here = {id(v) for n in function.nodes if isinstance(n, Call) for v in n.outs}
    made_here |= {id(v) for n in function.nodes if isinstance(n, Fold) for v in n.row_outs}
    already = {id(v) for v in function.outputs}
    node = producers.get(id(value))
    owned = (node is not None and not (node.primitive == "reshape" and not node.copy)) or id(value) in made_here
    if owned and id(value) not in already:
        function.outputs = function.outputs + (value,)
        return value
    trace = _trace()
    out = Value(value.shape, value.kind, trace.fresh(value.name + "_out"))
    function.nodes.append(Op("reshape", {"shape": tuple(value.shape)}, (value,), (out,), copy=True))
    function.outputs = function.outputs + (out,)
    return out


def call(fn: Callable, *args: Any, name: str | None = None) -> Any:
    """Call module function `fn` on `args` (a tree of Values and static values); traced
    once per form, kept as a call in the graph."""
    trace = _trace()
    caller = trace.current()
    leaves, skeleton = _flatten(list(args))
    key = _form_key(fn, skeleton, leaves, ("call",))
    if key not in trace.forms:
        formals = _unique_names([Value(v.shape, v.kind, _c_name(path)) for path, v in leaves])
        function, out_skeleton = _trace_function(name or fn.__name__, fn, formals, lambda: fn(*_rebuild(skeleton, formals)))
        # A module takes what it reads: arguments it never uses are dropped from its form.
        used = _used_inputs(function)
        keep = tuple(k for k, v in enumerate(formals) if id(v) in used)
        function.inputs = tuple(formals[k] for k in keep)
        trace.forms[key] = (function, out_skeleton, keep)
    function, out_skeleton, keep = trace.forms[key]
    outs = tuple(Value(v.shape, v.kind, trace.fresh(v.name)) for v in function.outputs)
    caller.nodes.append(Call(function, tuple(leaves[k][1] for k in keep), outs))
    return _rebuild(out_skeleton, list(outs))


def _unique_names(formals: list[Value]) -> list[Value]:
    seen: dict[str, int] = {}
    out = []
    for v in formals:
        base = v.name
        k = seen.get(base, 0)
        seen[base] = k + 1
        out.append(v if k == 0 else Value(v.shape, v.kind, f"{base}{k + 1}"))
    return out


def fold(body: Callable, count: int, carry: Any, layers: Mapping[str, Value], *shared: Any,
         apart: Mapping[int, Callable] | None = None, name: str | None = None, rows: bool = False,
         reverse: bool = False) -> Any:
    """Run `body(carry, layer, *shared) -> carry` for layers 0 … count-1, layer l seeing
    slice l of each stacked value in `layers`; the body returns its carry arranged as it
    came (a dict's keys in their order), since the carry goes round by position. Traced
    once; a loop in the host. With
    `rows`, the body returns (carry, rows), a tree of values per layer, and the fold
    returns (carry, the rows stacked: (count, ...) each). With `reverse`, the layers run
    from count-1 down to 0 (layer l still reads and writes slice l)."""
    trace = _trace()
    caller = trace.current()
    if not isinstance(count, int) or count < 1:
        raise GraphError(f"fold of {body.__qualname__}: count {count!r} must be an int >= 1")
    carry_leaves, carry_skel = _flatten(carry, "")
    if not carry_leaves:
        raise GraphError(f"fold of {body.__qualname__}: the carry holds no traced value")
    layer_leaves, layer_skel = _flatten(dict(layers))
    for path, v in layer_leaves:
        if not v.shape or v.shape[0] != count:
            raise GraphError(
                f"fold of {body.__qualname__}: stacked value {path} {v.name}{list(v.shape)} must "
                f"have {count} (the layer count) as its first dimension"
            )
    shared_leaves, shared_skel = _flatten(list(shared))

    def trace_body(fn: Callable) -> Function:
        key = _form_key(fn, (carry_skel, layer_skel, shared_skel),
                        carry_leaves + [(p, Value(v.shape[1:], v.kind, "")) for p, v in layer_leaves] + shared_leaves,
                        ("fold",))
        if key in trace.forms:
            return trace.forms[key][0]
        c = [Value(v.shape, v.kind, _c_name(p or v.name)) for p, v in carry_leaves]
        lay = [Value(v.shape[1:], v.kind, _c_name(p)) for p, v in layer_leaves]
        sh = [Value(v.shape, v.kind, _c_name(p)) for p, v in shared_leaves]
        formals = _unique_names(c + lay + sh)
        c, lay, sh = formals[: len(c)], formals[len(c): len(c) + len(lay)], formals[len(c) + len(lay):]

        def build() -> Any:
            result = fn(_rebuild(carry_skel, c), _rebuild(layer_skel, lay), *_rebuild(shared_skel, sh))
            if rows and not (isinstance(result, tuple) and len(result) == 2):
                raise GraphError(f"fold body {fn.__qualname__} with rows must return (carry, rows)")
            got, got_skeleton = _flatten(result[0] if rows else result)
            if [(v.shape, v.kind) for _, v in got] != [(v.shape, v.kind) for _, v in carry_leaves]:
                raise GraphError(
                    f"fold body {fn.__qualname__} returned {[v for _, v in got]}; it must return "
                    f"a carry shaped as its input {[v for _, v in carry_leaves]}"
                )
            # The carry goes round by position: a dict given back with its keys in another
            # order would hand one layer's `a` to the next as `b`.
            if _arrangement(got_skeleton) != _arrangement(carry_skel):
                raise GraphError(
                    f"fold body {fn.__qualname__} returned its carry as {_arrangement(got_skeleton)}; it must "
                    f"return it arranged as it came, {_arrangement(carry_skel)}"
                )
            return result

        trace.forms[key] = _trace_function(name or fn.__name__, fn, formals, build)
        return trace.forms[key][0]

    function = trace_body(body)
    others = {}
    for index, fn in sorted((apart or {}).items()):
        if not 0 <= index < count:
            raise GraphError(f"fold of {body.__qualname__}: apart iteration {index} is not in [0, {count})")
        others[index] = trace_body(fn)
    outs = tuple(Value(v.shape, v.kind, trace.fresh(v.name + "_out")) for _, v in carry_leaves)
    row_values = function.outputs[len(carry_leaves):]  # the body's outputs after the carry
    shapes = [(v.shape, v.kind) for v in function.outputs]
    if any([(v.shape, v.kind) for v in other.outputs] != shapes for other in others.values()):
        raise GraphError(f"fold of {body.__qualname__}: an apart body's outputs differ from the body's")
    stacked_rows = tuple(Value((count,) + tuple(v.shape), v.kind, trace.fresh(v.name + "_rows")) for v in row_values)
    caller.nodes.append(
        Fold(function, count, tuple(v for _, v in carry_leaves), tuple(v for _, v in layer_leaves),
             tuple(v for _, v in shared_leaves), outs + stacked_rows, others, len(stacked_rows), reverse)
    )
    carried = _rebuild(carry_skel, list(outs))
    return (carried, list(stacked_rows)) if rows else carried


# ---- entries ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """A parameter: its checkpoint name (with `{l}` where the layer index goes, for
    stacked parameters), its shape per layer, the number of layers it is stacked over
    (0: not stacked), how it is drawn ("normal", "gain": around 1), and its kind: "x"
    (the site type), or "i8"/"u8" and "f32" for a quantized weight's values and scales."""

    name: str
    shape: Shape
    layers: int = 0
    init: str = "normal"
    std: float = 0.02
    kind: str = "x"

    @property
    def full_shape(self) -> Shape:
        return ((self.layers,) if self.layers else ()) + tuple(self.shape)

    @property
    def key(self) -> str:
        """The name without the layer placeholder: `h.{l}.attn.w` -> `h.attn.w`."""
        return self.name.replace(".{l}", "").replace("{l}.", "").replace("{l}", "")

    def layer_name(self, layer: int) -> str:
        return self.name.replace("{l}", str(layer))


@dataclasses.dataclass(frozen=True)
class InputSpec:
    name: str
    shape: Shape
    kind: str  # "x" (site type) or "i32"
    # A (1,) i32 input whose value is the run-time length, this dims.Dim (a decode step's
    # position T, when no input's shape follows it: its cache has a fixed capacity).
    length: Any = None


@dataclasses.dataclass(eq=False)
class Program:
    """A traced entry: the top Function, whose inputs are the parameters (in `params`
    order) then the entry inputs; its outputs are named."""

    model: str
    entry: str
    function: Function
    params: tuple[ParamSpec, ...]
    inputs: tuple[InputSpec, ...]
    output_names: tuple[str, ...]
    config: Any = None  # the architecture's Config, when built from one
    quantized: dict[str, tuple[str, int]] = dataclasses.field(default_factory=dict)  # weight -> (fmt, block)
    form: str = INTEGER  # the form of its quantized linears (FORMS), when it has any
    # Outputs written in place over an input (output -> input): a decode step's caches.
    # A C program gives each the input's buffer; the reference returns a new array.
    in_place: dict[str, str] = dataclasses.field(default_factory=dict)
    contract: str = CONTRACT_OFF  # the realization (semantics.md section 18): "fma" fuses FUSED_PRIMITIVES

    @property
    def param_values(self) -> tuple[Value, ...]:
        return self.function.inputs[: len(self.params)]

    @property
    def input_values(self) -> tuple[Value, ...]:
        return self.function.inputs[len(self.params):]

    def parameter_count(self) -> int:
        return sum(math.prod(p.full_shape) for p in self.params)

    @property
    def max_length(self) -> int | None:
        """T_max when the program's inputs take a run-time length (dims.Dim), else None."""
        return dims.top_of([spec.shape for spec in self.inputs], [spec.length for spec in self.inputs])


def trace(model: str, entry: str, fn: Callable, params: list[ParamSpec], inputs: list[InputSpec],
          *static: Any, quantized: Mapping[str, tuple[str, int]] | None = None, form: str = INTEGER) -> Program:
    """Trace `fn(*static, params, *inputs)` where `params` maps each ParamSpec.key (the
    stacked ones grouped: see `group_layers`) to a Value. `quantized` maps weights (by
    ParamSpec name) to (fmt, block): each is held as its values and scales (two
    parameters, quantized_specs) and the entry finds a QuantizedWeight under its key, whose
    linears take `form` (FORMS). Returns the Program."""
    if form not in FORMS:
        raise GraphError(f"form {form!r}: a quantized linear takes the form {' or '.join(FORMS)}")
    quantized = dict(quantized or {})
    wanted = dict(quantized)
    held: list[tuple[ParamSpec, ...]] = []  # per given spec, the parameters that hold it
    for p in params:
        held.append(quantized_specs(p, *wanted.pop(p.name)) if p.name in wanted else (p,))
    if wanted:
        raise GraphError(f"{model}.{entry}: no parameter {', '.join(wanted)} to quantize")
    flat = [spec for specs in held for spec in specs]
    state = _Trace()
    _TRACE.append(state)
    try:
        param_values = [Value(p.full_shape, p.kind, _c_name(p.key)) for p in flat]
        input_values = [Value(tuple(i.shape), i.kind, _c_name(i.name)) for i in inputs]
        formals = _unique_names(param_values + input_values)
        by_key: dict[str, Any] = {}
        at = 0
        for p, specs in zip(params, held):
            if len(specs) == 1:
                by_key[p.key] = formals[at]
            else:
                fmt, block = quantized[p.name]
                by_key[p.key] = QuantizedWeight(formals[at], formals[at + 1], fmt, block, p.shape[-1], form)
            at += len(specs)
        params = flat

        def build() -> Any:
            result = fn(*static, by_key, *formals[len(params):])
            if isinstance(result, dict):
                _ENTRY_NAMES.append(tuple(result))
                return tuple(result.values())
            _ENTRY_NAMES.append(None)
            return result

        function, _ = _trace_function(entry, fn, formals, build)
        names = _ENTRY_NAMES.pop()
        if names is None:
            names = tuple(v.name for v in function.outputs)
        _rename_clashes(function)
        used = _used_inputs(function)
        unused = [p.name for p, v in zip(params, formals) if id(v) not in used]
        if unused:
            raise GraphError(f"{model}.{entry}: parameter(s) {', '.join(unused)} are never used; drop them")
        return Program(model, entry, function, tuple(params), tuple(inputs), tuple(names), quantized=quantized,
                       form=form)
    finally:
        _TRACE.pop()


_ENTRY_NAMES: list[Any] = []


def _rename_clashes(top: Function) -> None:
    """A value named as a function (a `next_token` output of `next_token`) gets a `_`
    suffix: in C, a local of that name would hide the function."""
    functions = {fn.name for fn in top.walk()}
    for fn in top.walk():
        values = list(fn.inputs) + list(fn.outputs)
        for node in fn.nodes:
            values += list(node.outs)
        taken = {v.name for v in values}
        for v in values:
            if v.name in functions:
                name = v.name + "_"
                while name in taken or name in functions:
                    name += "_"
                taken.add(name)
                v.name = name


def _used_inputs(function: Function) -> set[int]:
    used: set[int] = set()
    for node in function.nodes:
        for v in node.args:
            used.add(id(v))
    return used


def group_layers(params: Mapping[str, Value], prefix: str) -> dict[str, Value]:
    """The stacked parameters under `prefix` (e.g. "transformer.h."), keyed by the rest
    of their name ("attn.c_attn.weight"): the `layers` argument of a fold."""
    return {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}


# ---- the reference backend over a whole graph -------------------------------------------


def run_length(program: Program, inputs: Mapping[str, np.ndarray]) -> int:
    """The run-time length T the inputs give a program whose inputs follow it (1 <= T <=
    T_max, the same in every input); 0 for a program without one. A GraphError names the
    input and the rule otherwise."""
    top = program.max_length
    if top is None:
        return 0
    found: int | None = None
    for spec in program.inputs:
        array = np.asarray(inputs[spec.name])
        if spec.length is not None:
            if array.shape != (1,) or array.dtype != np.int32 or not 1 <= int(array[0]) <= top:
                raise GraphError(f"input {spec.name}: give one int32 in [1, {top}] (the run-time length T)")
            if found is not None and int(array[0]) != found:
                raise GraphError(f"input {spec.name} gives the length {int(array[0])}; another input gives {found}")
            found = int(array[0])
            continue
        if array.ndim != len(spec.shape):
            raise GraphError(f"input {spec.name} has shape {array.shape}; the program takes {spec.shape}")
        for want, got in zip(spec.shape, array.shape):
            if not dims.is_symbolic(want):
                continue
            if want != dims.length(top):
                raise GraphError(f"input {spec.name}: a dimension {want} is not the run-time length T itself")
            if not 1 <= got <= top:
                raise GraphError(f"input {spec.name} has shape {array.shape}: its length {got} is outside "
                                 f"[1, {top}] (the program takes 1 to T_max = {top} positions)")
            if found is not None and got != found:
                raise GraphError(f"input {spec.name} has length {got}; another input has {found}: they must agree")
            found = got
    return found or 0
