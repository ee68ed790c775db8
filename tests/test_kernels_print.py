"""The kernel lowering and the C printer: every primitive at every site type lowers,
prints the same bytes every time, and compiles without a warning under gcc and clang;
the printed shape of each function (IR comment, lo/hi, bounds and strides written with
the named extents) holds; bad
calls are refused by name; and a few kernels run, by hand-computed values.

The full differential check against the numpy reference lives elsewhere; the values
here are small enough to compute by hand (integers, exact quotients, bit patterns).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from exactc.exporter import types
from exactc.exporter.kernels import IRError, ir, lower
from exactc.exporter.kernels.lower import INV_SQRT_2, SQRT_2_OVER_PI
from exactc.exporter.primitives import PRIMITIVES, PrimitiveError
from exactc.exporter.printer.kernels import print_kernel
from exactc.exporter.printer.nests import array_loop, prefix_guard
from exactc.verify.build import BuildOptions, load_library, pointer
from exactc.verify.compare import assert_bits_equal

from installed import need, need_module  # tests/installed.py

SITES = ("f64", "f32", "bf16")

# (primitive, operand shapes, attributes): every primitive, every attribute branch.
FORWARD_CASES = [
    ("add", {"a": (2, 3), "b": (2, 3)}, {}),
    ("add", {"a": (), "b": ()}, {}),
    ("sub", {"a": (7,), "b": (7,)}, {}),
    ("mul", {"a": (2, 2, 2), "b": (2, 2, 2)}, {}),
    ("scale", {"x": (5,)}, {"s": 0.125}),
    ("scale", {"x": (2, 3)}, {"s": -0.1}),
    ("linear", {"x": (3, 7), "w": (5, 7)}, {}),
    ("linear", {"x": (3, 7), "w": (5, 7), "b": (5,)}, {"has_b": True}),
    ("matmul", {"a": (2, 3, 4), "b": (2, 4, 5)}, {}),
    ("matmul", {"a": (2, 4, 3), "b": (2, 5, 4)}, {"trans_a": True, "trans_b": True}),
    ("matmul", {"a": (4, 3, 4), "b": (2, 5, 4)}, {"trans_b": True, "group": 2}),
    ("matmul", {"a": (4, 1, 4), "b": (2, 7, 4)}, {"trans_b": True, "group": 2, "b_rows": 5}),
    ("matmul", {"a": (4, 1, 5), "b": (2, 7, 4)}, {"group": 2, "b_rows": 5}),
    ("embedding", {"table": (10, 4), "ids": (6,)}, {}),
    ("layernorm", {"x": (3, 8), "g": (8,), "b": (8,)}, {"eps": 1e-5}),
    ("rmsnorm", {"x": (3, 8), "g": (8,)}, {"eps": 1e-6}),
    ("l2norm", {"x": (3, 8)}, {}),
    ("softmax", {"x": (2, 3, 5)}, {}),
    ("softmax", {"x": (2, 3, 5)}, {"causal": True, "offset": 1}),
    ("softmax", {"x": (2, 3, 5), "keep": (5,)}, {"has_keep": True}),
    ("softmax", {"x": (1, 4, 4), "keep": (4,)}, {"causal": True, "offset": -2, "has_keep": True}),
    ("gelu_tanh", {"x": (9,)}, {}),
    ("gelu_erf", {"x": (9,)}, {}),
    ("silu", {"x": (9,)}, {}),
    ("rope", {"x": (4, 2, 6)}, {}),
    ("rope", {"x": (4, 2, 6)}, {"pairing": "interleaved", "pos0": 3, "theta": 500000.0}),
    ("mean_pool", {"x": (4, 3), "keep": (4,)}, {}),
    ("argmax", {"x": (3, 5)}, {}),
    ("reshape", {"x": (2, 3, 4)}, {"shape": (4, 6)}),
    ("reshape", {"x": ()}, {"shape": (1, 1)}),
    ("transpose", {"x": (2, 3, 4)}, {"perm": (2, 0, 1)}),
    ("transpose", {"x": (3, 5)}, {"perm": (1, 0)}),
    ("slice", {"x": (3, 6, 2)}, {"axis": 1, "start": 2, "stop": 5}),
    ("concat", {"a": (2, 3), "b": (4, 3)}, {"axis": 0}),
    ("concat", {"a": (2, 1, 3), "b": (2, 1, 2)}, {"axis": 2}),
    ("cache_write", {"cache": (2, 5, 3), "rows": (2, 2, 3)}, {"pos": 3}),
    ("quantize", {"x": (2, 7)}, {"block": 3}),
    ("qlinear_w", {"x": (2, 7), "wq": (3, 4), "wd": (3, 2), "b": (3,)}, {"fmt": "q4", "block": 4, "has_b": True}),
    ("qlinear_i", {"xq": (2, 7), "xd": (2, 3), "wq": (3, 7), "wd": (3, 3)}, {"fmt": "q8", "block": 3}),
]

# The backward (docs/semantics.md section 17), at f64 and f32; rope's inverse its rope.
BACKWARD_CASES = [
    ("rope", {"x": (4, 2, 6)}, {"inverse": True}),
    ("linear_bar_x", {"x": (3, 7), "w": (5, 7), "dy": (3, 5), "acc": (3, 7)}, {}),
    ("linear_bar_w", {"x": (3, 7), "dy": (3, 5), "acc": (5, 7)}, {}),
    ("linear_bar_b", {"dy": (3, 5), "acc": (5,)}, {}),
    ("matmul_bar_a", {"b": (2, 5, 4), "dy": (4, 3, 5), "acc": (4, 3, 4)}, {"trans_b": True, "group": 2}),
    ("matmul_bar_a", {"b": (2, 4, 5), "dy": (2, 3, 5), "acc": (2, 4, 3)}, {"trans_a": True}),
    ("matmul_bar_b", {"a": (4, 3, 4), "dy": (4, 3, 5), "acc": (2, 5, 4)}, {"trans_b": True, "group": 2}),
    ("matmul_bar_b", {"a": (2, 4, 3), "dy": (2, 3, 5), "acc": (2, 4, 5)}, {"trans_a": True}),
    ("embedding_bar", {"ids": (6,), "dy": (6, 4), "acc": (10, 4)}, {}),
    ("norm_bar_g", {"x": (3, 8), "dy": (3, 8), "acc": (8,)}, {"kind": "layernorm"}),
    ("norm_bar_g", {"x": (3, 8), "dy": (3, 8), "acc": (8,)}, {"kind": "rmsnorm", "eps": 1e-6}),
    ("mean_pool_bar", {"keep": (4,), "dy": (3,), "acc": (4, 3)}, {}),
    ("sum_rows", {"x": (7,), "acc": ()}, {}),
    ("layernorm_bar_x", {"x": (3, 8), "g": (8,), "dy": (3, 8)}, {}),
    ("rmsnorm_bar_x", {"x": (3, 8), "g": (8,), "dy": (3, 8)}, {"eps": 1e-6}),
    ("softmax_bar", {"probs": (2, 3, 5), "dy": (2, 3, 5)}, {}),
    ("softmax_bar", {"probs": (1, 4, 4), "dy": (1, 4, 4), "keep": (4,)}, {"causal": True, "offset": -2, "has_keep": True}),
    ("gelu_tanh_bar", {"x": (9,), "dy": (9,)}, {}),
    ("silu_bar", {"x": (9,), "dy": (9,)}, {}),
    ("xent_rows", {"logits": (3, 5), "targets": (3,)}, {}),
    ("xent_bar", {"logits": (3, 5), "targets": (3,), "r": ()}, {"ignore": 0}),
    ("adamw", {"param": (2, 3), "g": (2, 3), "m": (2, 3), "v": (2, 3), "h": (8,)}, {}),
    ("adamw", {"param": (7,), "g": (7,), "m": (7,), "v": (7,), "h": (8,)}, {"decays": True}),
]
# The loss_grad graph's own (exporter/backprop.py): its +0s and 1, the loss's mean.
LOSS_GRAD_CASES = [
    ("fill", {}, {"shape": (2, 3)}),
    ("fill", {}, {"shape": (), "value": 1.0}),
    ("xent_mean", {"x": (), "targets": (2, 5)}, {}),
    ("iota", {}, {"start": 0, "length": 5}),
    ("iota", {}, {"start": 3, "length": 2}),
]
CASES = FORWARD_CASES + BACKWARD_CASES + LOSS_GRAD_CASES

# quantize: the full blocks, then the short last block (3 does not divide 7)
# norm_bar_g: the forward's row stats, then the sum over the rows
NESTS_PER_PRIMITIVE = {p: 1 for p in PRIMITIVES} | {"rope": 2, "concat": 2, "quantize": 2, "norm_bar_g": 2}


def printed_cases():
    """(prefix, kernel, printed) for every case at every site type it is defined at."""
    out = []
    for n, (prim, shapes, attrs) in enumerate(CASES):
        for site in PRIMITIVES[prim].sites:
            kernel = lower(prim, site, shapes, attrs)
            prefix = f"k{n}_{site}"
            out.append((prefix, kernel, print_kernel(kernel, prefix)))
    return out


def digest(printed) -> str:
    h = hashlib.sha256()
    for prefix, _, p in printed:
        h.update(prefix.encode() + b"\0" + p.source.encode() + b"\0" + p.cdef.encode() + b"\0")
    return h.hexdigest()


@pytest.fixture(scope="module")
def printed():
    return printed_cases()


# Stand-ins for exactc_libm.c, renamed by macro so that they can never interpose on
# (or be interposed by) the real functions: the kernels here are compiled and loaded,
# and only the softmax test below calls one (an exp that always gives 1).
STUB_LIBM = """\
#include "exactc_rt.h"
double exactc_exp(double x) { (void)x; return 1.0; }
double exactc_log(double x) { return x; }
double exactc_tanh(double x) { return x; }
double exactc_erf(double x) { return x; }
double exactc_sin(double x) { return x; }
double exactc_cos(double x) { return x; }
void exactc_exp_array(const double *restrict x, double *restrict y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = exactc_exp(x[i]);
}
void exactc_expf_array(const float *restrict x, float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = (float)exactc_exp((double)x[i]);
}
void exactc_sin_array(const double *restrict x, double *restrict y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = exactc_sin(x[i]);
}
void exactc_cos_array(const double *restrict x, double *restrict y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = exactc_cos(x[i]);
}
"""
STUB_DEFINES = tuple(
    f"exactc_{f}=exactc_test_stub_{f}"
    for f in ("exp", "log", "tanh", "erf", "sin", "cos", "exp_array", "expf_array", "sin_array", "cos_array")
)


# ---- the catalogue is covered --------------------------------------------------------


def test_every_primitive_is_lowered_at_every_site(printed):
    assert {k.primitive for _, k, _ in printed} == set(PRIMITIVES)
    for _, kernel, p in printed:
        assert len(kernel.nests) == NESTS_PER_PRIMITIVE[kernel.primitive]
        assert len(p.functions) == len(kernel.launches) == len(kernel.nests)


def test_buffers_follow_the_interface():
    kernel = lower("linear", "bf16", {"x": (3, 7), "w": (5, 7), "b": (5,)}, {"has_b": True})
    assert [(b.name, b.ctype, b.shape, b.role) for b in kernel.buffers] == [
        ("x", "exactc_bf16", (3, 7), "input"),
        ("w", "exactc_bf16", (5, 7), "input"),
        ("b", "exactc_bf16", (5,), "input"),
        ("y", "exactc_bf16", (3, 5), "output"),
    ]
    (launch,) = kernel.launches
    assert launch.args == ("x", "w", "b", "y") and launch.extent == 3
    rope = lower("rope", "f64", {"x": (4, 2, 6)})
    assert [(b.name, b.role, b.shape, b.ctype) for b in rope.buffers if b.role == "temp"] == [
        ("cos_table", "temp", (4, 3), "double"),
        ("sin_table", "temp", (4, 3), "double"),
    ]
    assert [l.args for l in rope.launches] == [
        ("cos_table", "sin_table"),
        ("x", "cos_table", "sin_table", "y"),
    ]
    argmax = lower("argmax", "bf16", {"x": (2, 5)})
    assert argmax.buffer("y").ctype == "int32_t"


# ---- determinism ---------------------------------------------------------------------

_DIGEST_SCRIPT = """
import importlib.util, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))  # tests/, as pytest puts it first
spec = importlib.util.spec_from_file_location("case_module", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(module.digest(module.printed_cases()))
"""


def test_printing_is_deterministic(printed):
    again = printed_cases()
    assert [p.source for _, _, p in again] == [p.source for _, _, p in printed]
    assert [p.cdef for _, _, p in again] == [p.cdef for _, _, p in printed]
    expected = digest(printed)
    for seed in ("0", "4242"):  # string hashing differs between these processes
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", _DIGEST_SCRIPT, __file__],
            capture_output=True, text=True, env=env, check=True,
        )
        assert out.stdout.strip() == expected


# ---- the printed shape of each function ----------------------------------------------

_FOR = re.compile(r"for \(int64_t (\w+) = (\w+); (\w+) < (\w+); (\w+)\+\+\)")


def _definition(source: str, name: str) -> tuple[str, str]:
    """(the text before the definition of `name`, its body)."""
    start = source.index(f"\nvoid {name}(")
    end = source.index("\n}\n", start)
    return source[:start], source[start:end]


def test_ir_text_is_the_comment_above_each_function(printed):
    for _, kernel, p in printed:
        for name, launch in zip(p.functions, kernel.launches):
            before, _ = _definition(p.source, name)
            block = before[before.rindex("/* nest ") :].splitlines()
            assert block[-1] == " */"
            text = [block[0][3:]] + [line[3:] for line in block[1:-1]]
            assert text == launch.nest.text().splitlines()


def test_outer_loop_runs_lo_to_hi_and_other_bounds_are_the_extents(printed):
    """Every other bound is its axis's extent: the number, or an enum constant of the
    function that holds it; an array loop (a laned form's calls) ends at its extent or
    before."""
    for _, kernel, p in printed:
        for name, launch in zip(p.functions, kernel.launches):
            _, body = _definition(p.source, name)
            enum = re.search(r"enum \{ (.*) \};", body)
            named = {k: int(v) for k, v in re.findall(r"(\w+) = (\d+)", enum.group(1))} if enum else {}
            extents = {a.name: a.extent for a in list(launch.nest.axes) + launch.nest.body_axes()}
            arrays = {s.axis.name for s in ir.walk_statements(launch.nest.body)
                      if isinstance(s, ir.Loop) and array_loop(s)}
            loops = _FOR.findall(body)
            assert loops, body
            var, start, cond_var, stop, step_var = loops[0]
            assert (var, start, stop) == (launch.nest.axes[0].name, "lo", "hi")
            # a guarded loop (nests.prefix_guard) runs [0, split), and [split, extent) if it has an else
            guards = {s.axis.name: prefix_guard(s) for s in ir.walk_statements(launch.nest.body)
                      if isinstance(s, ir.Loop) and prefix_guard(s) and not array_loop(s)}
            for var, start, cond_var, stop, step_var in loops[1:]:
                assert var == cond_var == step_var
                if var in guards and stop == f"{var}_split":
                    assert start == "0", body
                    continue
                assert start == (f"{var}_split" if var in guards else "0"), body
                assert (int(stop) if stop.isdigit() else named[stop]) == extents[var], body
            for var in arrays:
                stop = re.search(rf"const int64_t {var}_end = (?:.* )?(\w+);", body).group(1)
                assert (int(stop) if stop.isdigit() else named[stop]) == extents[var], body
            for var in guards:
                stop = re.search(rf"const int64_t {var}_split = .* (\w+);", body).group(1)
                assert (int(stop) if stop.isdigit() else named[stop]) == extents[var], body
            rests = sum(1 for _, _, orelse in guards.values() if orelse)
            assert len(loops) == len(launch.nest.axes) + len(launch.nest.body_axes()) - len(arrays) + rests


def test_strides_are_products_of_the_named_extents():
    source = print_kernel(lower("matmul", "f32", {"a": (2, 3, 4), "b": (2, 4, 5)}, {}), "k").source
    assert "enum { M = 3, N = 5, K = 4 };" in source
    assert "a[i * M * K + m * K + k]" in source and "y[i * M * N + m * N + n]" in source
    # a dimension no axis runs over whole keeps its number: the source of a slice
    source = print_kernel(lower("slice", "f32", {"x": (3, 6, 2)}, {"axis": 1, "start": 2, "stop": 5}), "k").source
    assert "x[i0 * 6 * I2 + i1 * I2 + i2 + 4]" in source and "y[i0 * I1 * I2 + i1 * I2 + i2]" in source


@pytest.mark.parametrize("site", ["f64", "f32", "bf16"])
def test_rope_tables_call_the_laned_forms(site):
    """rope's cos and sin tables are computed by exactc_cos_array and exactc_sin_array on
    the positions (chunks of 64), f64 in and out, each result then rounded to the table's
    type: the scalar functions, one call per entry, cost 4 to 5 times more (Zen 4)."""
    source = print_kernel(lower("rope", site, {"x": (100, 2, 8)}), "k").source
    for fn, p in (("cos", "t"), ("sin", "u")):
        assert re.search(rf"exactc_{fn}_array\({p}_x, {p}_y, {p}_w\);", source), source
        assert re.search(rf"double {p}_x\[64\], {p}_y\[64\];", source), source
        rounded = "" if site == "f64" else r"\(float\)"
        assert re.search(rf"{fn}_table\[{p} \* I \+ i\] = {rounded}{p}_y\[{p} - {p}_c\];", source), source
    code = re.sub(r"/\*.*?\*/", "", source, flags=re.S)
    assert "exactc_cos(" not in code and "exactc_sin(" not in code, source


def test_constants_are_exact_hex_literals_of_the_accumulator_type():
    f32 = print_kernel(lower("layernorm", "f32", {"x": (2, 8), "g": (8,), "b": (8,)}), "k").source
    assert "0x1.4f8b58p-17f" in f32  # R_A(1e-5): the f32 nearest to the f64 nearest
    assert float.fromhex("0x1.4f8b58p-17") == float(np.float32(1e-5))
    f64 = print_kernel(lower("layernorm", "f64", {"x": (2, 8), "g": (8,), "b": (8,)}), "k").source
    assert (1e-5).hex() == "0x1.4f8b588e368f1p-17"
    assert re.search(r"\+ 0x1\.4f8b588e368f1p-17 /\* 1e-05 \*/\)", f64)  # no f suffix at f64
    assert "float s = 0.0f;" in f32 and "double s = 0.0;" in f64
    silu = print_kernel(lower("silu", "bf16", {"x": (3,)}), "k").source
    assert "exactc_expf(-v)" in silu and "exactc_f32_to_bf16(" in silu
    assert "exactc_bf16_to_f32(x[i])" in silu
    assert "0x1.4f8b58p-17f /* 1e-05 */" in f32 and "0x1.4f8b588e368f1p-17 /* 1e-05 */" in f64


def test_real_constants_are_correctly_rounded():
    mpmath = need_module("mpmath")
    with mpmath.workprec(200):
        assert SQRT_2_OVER_PI == float(mpmath.sqrt(2 / mpmath.pi))
        assert INV_SQRT_2 == float(1 / mpmath.sqrt(2))


def test_canonical_nan_is_written_as_bits():
    for site, pattern in (("f64", "0x7ff8000000000000"), ("f32", "0x7fc00000"), ("bf16", "0x7fc0u")):
        source = print_kernel(lower("embedding", site, {"table": (3, 2), "ids": (4,)}), "k").source
        assert pattern in source
        assert "0.0 / 0.0" not in source and "NAN" not in source


# ---- compilers -----------------------------------------------------------------------

COMPILE_CONFIGS = [
    (cc, opt, native)
    for cc in ("gcc", "clang")
    for opt, native in (("-O0", False), ("-O2", False), ("-O3", True))
]


@pytest.mark.parametrize("cc,opt,native", COMPILE_CONFIGS, ids=lambda v: str(v))
def test_every_kernel_compiles_warning_free(printed, cc, opt, native):
    need(cc)
    sources = {f"{prefix}.c": p.source for prefix, _, p in printed}
    sources["stub_libm.c"] = STUB_LIBM
    cdef = "".join(p.cdef for _, _, p in printed)
    options = BuildOptions(cc=cc, opt=opt, march_native=native, defines=STUB_DEFINES)
    library = load_library(sources, cdef, options)  # one compiler call for all kernels
    for _, _, p in printed:
        for name in p.functions:
            assert callable(getattr(library.lib, name))


# ---- errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call,needle",
    [
        (("conv2d", "f32", {"x": (2,)}), "conv2d"),
        (("add", "f16", {"a": (2,), "b": (2,)}), "f16"),
        (("add", "f32", {"a": (2,)}), "b"),
        (("add", "f32", {"a": (2,), "b": (3,)}), "b (3,)"),
        (("linear", "f32", {"x": (3, 7), "w": (5, 6)}), "w (5, 6)"),
        (("linear", "f32", {"x": (3, 7, 1), "w": (5, 7)}), "x has shape"),
        (("linear", "f32", {"x": (3, 7), "w": (5, 7), "b": (4,)}, {"has_b": True}), "b has shape"),
        (("matmul", "f32", {"a": (3, 2, 4), "b": (2, 4, 5)}, {"group": 2}), "a has 3 batches"),
        (("embedding", "f32", {"table": (3, 0), "ids": (2,)}), "table"),
        (("layernorm", "f32", {"x": (2, 4), "g": (4,), "b": (5,)}), "b has shape"),
        (("softmax", "f32", {"x": (1, 2, 3), "keep": (4,)}, {"has_keep": True}), "keep"),
        (("rope", "f32", {"x": (2, 1, 3)}), "even"),
        (("scale", "f32", {"x": (2,)}, {"s": float("nan")}), "s is NaN"),
        (("scale", "f32", {"x": (2,)}, {"s": "2"}), "attribute s"),
        (("rmsnorm", "f32", {"x": (2, 4), "g": (4,)}, {"epsilon": 1e-6}), "epsilon"),
        (("transpose", "f32", {"x": (2, 3)}, {"perm": (0, 0)}), "perm"),
        (("slice", "f32", {"x": (2, 3)}, {"axis": 1, "start": 2, "stop": 2}), "axis 1"),
        (("reshape", "f32", {"x": (2, 3)}, {"shape": (4, 2)}), "x (2, 3)"),
        (("concat", "f32", {"a": (2, 3), "b": (3, 3)}, {"axis": 1}), "differ off axis 1"),
        (("mean_pool", "f32", {"x": (4, 3), "keep": (3,)}), "keep"),
        (("argmax", "f32", {"x": (4,)}), "x has shape"),
    ],
    ids=lambda v: v[0] if isinstance(v, tuple) else None,
)
def test_illegal_calls_are_refused_by_name(call, needle):
    with pytest.raises(PrimitiveError) as info:
        lower(*call)
    assert needle in str(info.value)


def test_the_ir_checker_can_fail():
    x = ir.Buffer("x", "float", (4,), "input")
    y = ir.Buffer("y", "float", (4,), "output")
    i = ir.Affine.var("i")

    def kernel(body, extent=4, buffers=(x, y)):
        nest = ir.Nest("n", (ir.Axis("i", extent),), tuple(body))
        return ir.Kernel("copy", "f32", {}, buffers, (nest,), (ir.launch(nest, buffers),))

    good = [ir.Write(ir.Access("y", "f32", (i,)), ir.Load(ir.Access("x", "f32", (i,))))]
    kernel(good)
    with pytest.raises(IRError, match=r"outside \[0, 4\)"):
        kernel(good, extent=5)
    with pytest.raises(IRError, match="writes input"):
        kernel([ir.Write(ir.Access("x", "f32", (i,)), ir.Load(ir.Access("x", "f32", (i,))))])
    with pytest.raises(IRError, match="never read"):
        kernel([ir.Declare(ir.Var("t", "f32"), ir.Const(0.0, "f32")), *good])
    with pytest.raises(IRError, match="operator"):
        ir.Binary("+", ir.Const(1.0, "f64"), ir.Const(1.0, "f32"))
    with pytest.raises(IRError, match="not an f32 value"):
        ir.Const(0.1, "f32")
    with pytest.raises(IRError, match="writing a f64"):
        ir.Write(ir.Access("y", "f32", (i,)), ir.Const(1.0, "f64"))


# ---- running kernels -------------------------------------------------------------------

_NUMPY = {"double": np.float64, "float": np.float32, "exactc_bf16": np.uint16, "int32_t": np.int32}


def site_array(values, site):
    """Reals rounded to the site type, as the array a kernel takes (bf16 as uint16 bits)."""
    array = types.round_to_site(np.asarray(values, dtype=np.float64), site)
    return array.view(np.uint16) if site == "bf16" else array


def site_values(array, site):
    """A kernel's output as f64 values (bf16 read from its bits)."""
    if site == "bf16":
        return array.view(types.BF16).astype(np.float64)
    return array.astype(np.float64)


def run(library, kernel, printed, inputs, pieces=None):
    """Allocate the output and temps (NaN-filled), run every launch over (0, extent),
    or over `pieces` (lo, hi) of it, and return y."""
    arrays = dict(inputs)
    for buf in kernel.buffers:
        if buf.role == "input":
            assert arrays[buf.name].dtype == _NUMPY[buf.ctype], buf.name
            assert arrays[buf.name].shape == buf.shape, buf.name
            continue
        fill = 0x7FBF if buf.ctype == "exactc_bf16" else (-1 if buf.ctype == "int32_t" else np.nan)
        arrays[buf.name] = np.full(buf.shape, fill, dtype=_NUMPY[buf.ctype])
    for name, item in zip(printed.functions, kernel.launches):
        args = [pointer(library.ffi, arrays[a]) for a in item.args]
        for lo, hi in pieces or [(0, item.extent)]:
            getattr(library.lib, name)(*args, lo, hi)
    return arrays["y"]


SMOKE = {
    "add_f32": ("add", "f32", {"a": (2, 3), "b": (2, 3)}, {}),
    "sub_bf16": ("sub", "bf16", {"a": (4,), "b": (4,)}, {}),
    "mul_f64": ("mul", "f64", {"a": (3,), "b": (3,)}, {}),
    "scale_bf16": ("scale", "bf16", {"x": (3,)}, {"s": 0.25}),
    "linear_f64": ("linear", "f64", {"x": (2, 2), "w": (3, 2), "b": (3,)}, {"has_b": True}),
    "matmul_f32": ("matmul", "f32", {"a": (4, 2, 3), "b": (2, 4, 3)}, {"trans_b": True, "group": 2}),
    "argmax_f32": ("argmax", "f32", {"x": (6, 4)}, {}),
    "argmax_bf16": ("argmax", "bf16", {"x": (2, 3)}, {}),
    "emb_f64": ("embedding", "f64", {"table": (3, 2), "ids": (4,)}, {}),
    "emb_f32": ("embedding", "f32", {"table": (3, 2), "ids": (4,)}, {}),
    "emb_bf16": ("embedding", "bf16", {"table": (3, 2), "ids": (4,)}, {}),
    "mean_pool_f32": ("mean_pool", "f32", {"x": (3, 2), "keep": (3,)}, {}),
    "l2norm_f64": ("l2norm", "f64", {"x": (2, 2)}, {}),
    "layernorm_f32": ("layernorm", "f32", {"x": (1, 4), "g": (4,), "b": (4,)}, {"eps": 0.0}),
    "rmsnorm_bf16": ("rmsnorm", "bf16", {"x": (1, 4), "g": (4,)}, {"eps": 0.0}),
    "transpose_f32": ("transpose", "f32", {"x": (2, 3, 4)}, {"perm": (2, 0, 1)}),
    "slice_f64": ("slice", "f64", {"x": (3, 4)}, {"axis": 1, "start": 1, "stop": 3}),
    "concat_f32": ("concat", "f32", {"a": (2, 3), "b": (2, 1)}, {"axis": 1}),
    "reshape_f32": ("reshape", "f32", {"x": (2, 3)}, {"shape": (3, 2)}),
    "softmax_f32": ("softmax", "f32", {"x": (1, 3, 4), "keep": (4,)}, {"causal": True, "offset": 0, "has_keep": True}),
    "softmax_bf16": ("softmax", "bf16", {"x": (2, 2, 3)}, {"causal": True, "offset": -1}),
}


@pytest.fixture(scope="module")
def smoke():
    kernels = {key: lower(*call) for key, call in SMOKE.items()}
    printed = {key: print_kernel(k, key) for key, k in kernels.items()}
    sources = {f"{key}.c": p.source for key, p in printed.items()}
    sources["stub_libm.c"] = STUB_LIBM
    cdef = "".join(p.cdef for p in printed.values())
    library = load_library(sources, cdef, BuildOptions(defines=STUB_DEFINES))

    def go(key, pieces=None, **inputs):
        return run(library, kernels[key], printed[key], inputs, pieces)

    return go


def test_elementwise_by_hand(smoke):
    a = site_array([[1, 2, 3], [4, 5, 6]], "f32")
    b = site_array([[10, 20, 30], [40, 50, -6]], "f32")
    y = smoke("add_f32", a=a, b=b)
    assert y.tolist() == [[11, 22, 33], [44, 55, 0]]
    assert not np.signbit(y[1, 2])  # 6 + -6 = +0
    y = smoke("sub_bf16", a=site_array([1, 2, 3, 256], "bf16"), b=site_array([3, 2, 0.5, -1], "bf16"))
    assert site_values(y, "bf16").tolist() == [-2, 0, 2.5, 256]  # 257 rounds to even: 256
    y = smoke("mul_f64", a=site_array([3, -0.0, 1e300], "f64"), b=site_array([0.5, 2, 1e10], "f64"))
    assert y[0] == 1.5 and y[1] == 0 and np.signbit(y[1]) and np.isinf(y[2])
    y = smoke("scale_bf16", x=site_array([4, -8, 3], "bf16"))
    assert site_values(y, "bf16").tolist() == [1, -2, 0.75]


def test_linear_and_matmul_by_hand(smoke):
    y = smoke(
        "linear_f64",
        x=site_array([[1, 2], [3, 4]], "f64"),
        w=site_array([[1, 0], [1, 1], [0, 2]], "f64"),
        b=site_array([0.5, -1, 2], "f64"),
    )
    assert y.tolist() == [[1.5, 2, 6], [3.5, 6, 10]]
    a = np.arange(24, dtype=np.float32).reshape(4, 2, 3) - 7
    b = np.arange(24, dtype=np.float32).reshape(2, 4, 3) % 5
    expected = [[[sum(int(a[i, m, k]) * int(b[i // 2, n, k]) for k in range(3)) for n in range(4)] for m in range(2)] for i in range(4)]
    assert smoke("matmul_f32", a=a, b=b).tolist() == expected
    # a thread split: the pieces of the outer range give the whole, bit for bit
    assert smoke("matmul_f32", pieces=[(1, 2), (0, 1)], a=a, b=b).tolist() == expected


def test_argmax_first_nan_then_first_maximum(smoke):
    nan, inf = math.nan, math.inf
    rows = [
        [1, 3, 3, 2],  # ties: the first
        [1, 3, nan, 5],  # a NaN wins over any value
        [nan, 1, nan, 2],  # the first NaN
        [-0.0, 0.0, -1, -2],  # -0 == +0: the first
        [-inf, -inf, -inf, -inf],
        [-5, -inf, inf, inf],
    ]
    y = smoke("argmax_f32", x=site_array(rows, "f32"))
    assert y.tolist() == [1, 2, 0, 0, 0, 2]
    y = smoke("argmax_bf16", x=site_array([[1, 2, 2], [7, nan, 7]], "bf16"))
    assert y.tolist() == [1, 1]


def test_embedding_copies_bits_and_gives_nan_out_of_range(smoke):
    ids = np.array([2, -1, 3, 0], dtype=np.int32)
    for site, nan_bits in (("f64", 0x7FF8000000000000), ("f32", 0x7FC00000), ("bf16", 0x7FC0)):
        table = site_array([[1, 2], [3, 4], [5, 6]], site)
        y = smoke(f"emb_{site}", table=table, ids=ids)
        bits = types.bits(y) if site != "bf16" else y
        assert site_values(y[[0, 3]], site).tolist() == [[5, 6], [1, 2]]
        assert bits[1].tolist() == [nan_bits] * 2 and bits[2].tolist() == [nan_bits] * 2


def test_reductions_by_hand(smoke):
    y = smoke("mean_pool_f32", x=site_array([[1, 2], [30, 40], [5, 8]], "f32"), keep=np.array([1, 0, 7], dtype=np.int32))
    assert y.tolist() == [3, 5]
    y = smoke("mean_pool_f32", x=site_array([[1, 2], [3, 4], [5, 6]], "f32"), keep=np.zeros(3, dtype=np.int32))
    assert y.tolist() == [0, 0] and not np.signbit(y).any()  # no kept token: +0
    y = smoke("l2norm_f64", x=site_array([[3, -4], [0, 0]], "f64"))
    assert y.tolist() == [[0.6, -0.8], [0, 0]]
    y = smoke("layernorm_f32", x=site_array([[0, 2, 0, 2]], "f32"), g=site_array([1, 2, 3, 4], "f32"), b=site_array([0.5, 0, 0, 0], "f32"))
    assert y.tolist() == [[-0.5, 2, -3, 4]]  # mean 1, var 1, rstd 1
    y = smoke("rmsnorm_bf16", x=site_array([[2, -2, 2, 2]], "bf16"), g=site_array([1, 1, 3, 0.5], "bf16"))
    assert site_values(y, "bf16").tolist() == [[1, -1, 3, 0.5]]  # rms 2


def test_views_copy_every_bit(smoke):
    signaling = np.array([0x7F800001], dtype=np.uint32).view(np.float32)[0]
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x[1, 2, 3] = signaling
    y = smoke("transpose_f32", x=x)
    assert_bits_equal(np.ascontiguousarray(x.transpose(2, 0, 1)), y, "transpose", every_bit=True)
    x64 = np.arange(12, dtype=np.float64).reshape(3, 4)
    assert smoke("slice_f64", x=x64).tolist() == x64[:, 1:3].tolist()
    a, b = np.ones((2, 3), np.float32), np.full((2, 1), signaling, np.float32)
    y = smoke("concat_f32", a=a, b=b)
    assert_bits_equal(np.concatenate([a, b], axis=1), y, "concat", every_bit=True)
    x = np.array([[1, 2, 3], [4, 5, signaling]], np.float32)
    assert_bits_equal(x.reshape(3, 2), smoke("reshape_f32", x=x), "reshape", every_bit=True)


def test_softmax_masks_by_rule(smoke):
    # With the stub exp (always 1) every visible column gets 1/(visible count): the
    # mask, the zeros of masked columns and the all-masked rows are what is checked.
    nan = math.nan
    x = site_array([[[9, nan, 2, 3], [1, nan, 2, 3], [4, 5, 6, 7]]], "f32")
    keep = np.array([1, 0, 1, 1], dtype=np.int32)
    y = smoke("softmax_f32", x=x, keep=keep)  # causal, offset 0: row i sees j <= i
    assert y.tolist() == [[[1, 0, 0, 0], [1, 0, 0, 0], [0.5, 0, 0.5, 0]]]
    assert not np.signbit(y).any()  # masked columns are +0; column 1 (NaN) never read
    x = site_array(np.arange(12).reshape(2, 2, 3), "bf16")
    y = smoke("softmax_bf16", x=x)  # causal, offset -1: row 0 sees nothing
    assert y.tolist() == [[[0, 0, 0], [0x3F80, 0, 0]]] * 2  # bf16 bits: 1.0 = 0x3F80


# ---- a kernel's name: a C identifier, or refused naming it


def test_a_kernel_name_must_be_a_c_identifier():
    from exactc.exporter.printer.kernels import print_kernel

    kernel = lower("add", "f32", {"a": (2,), "b": (2,)}, {})
    for name in ("1add", "2add", "add-1", "", "add 1", 7, None):
        with pytest.raises(IRError) as caught:
            print_kernel(kernel, name)
        shown = repr(name) if isinstance(name, str) else name
        assert str(caught.value) == f"kernel name {shown} is not a C identifier"
    assert print_kernel(kernel, "_add1").functions == ("_add1",)


def test_whole_blocks_of_32_call_the_block_kernel():
    """qlinear_i's whole blocks of G = 32 print as one call of exactc_dot.h's kernel at the
    block's first value and byte, the file includes the header; a short last block and
    any other G keep their loops."""
    def source(fmt: str, k: int, block: int) -> str:
        nb = -(-k // block)
        row = k if fmt == "q8" else nb * block // 2
        shapes = {"xq": (2, k), "xd": (2, nb), "wq": (3, row), "wd": (3, nb)}
        return print_kernel(lower("qlinear_i", "f32", shapes, {"fmt": fmt, "block": block, "has_b": False}), "q").source

    q8 = source("q8", 77, 32)
    assert '#include "exactc_dot.h"' in q8
    assert "s = s + exactc_dot_q8_32(&xq[m * 77 + blk * 32], &wq[n * 77 + blk * 32]);" in q8
    assert "for (int64_t t = 0; t < 13; t++)" in q8 and "for (int64_t k = 0;" not in q8
    q4 = source("q4", 88, 32)
    assert "s = s + exactc_dot_q4_32(&xq[m * 88 + blk * 32], &wq[n * 48 + blk * 16]);" in q4
    assert "for (int64_t th = 0; th < TH; th++)" in q4 and "for (int64_t kh = 0;" not in q4
    for other in (source("q8", 128, 64), source("q4", 128, 64), source("q8", 32, 16), source("q4", 32, 16)):
        assert "exactc_dot" not in other


def test_eight_rows_in_lanes_call_the_rows_kernel():
    """n alone in lanes of 8 with the weight read in place: each block's 8 sums one call of
    the x8 kernel at the chunk's first row (the row length its stride), added lane by
    lane; with wq packed, the call at the chunk's block in its block panel (the block's
    bytes its stride); with n in lanes of 16, the laned loops stay."""
    from exactc.exporter.kernels.layouts import Layout
    from exactc.exporter.kernels.plans import NestPlan, Plan, validate_plan

    def source(fmt: str, layout: Layout) -> str:
        row = 96 if fmt == "q8" else 48
        shapes = {"xq": (2, 96), "xd": (2, 3), "wq": (40, row), "wd": (40, 3)}
        kernel = lower("qlinear_i", "f32", shapes, {"fmt": fmt, "block": 32, "has_b": False})
        plan = Plan((("qlinear_i", NestPlan(layout)),))
        validate_plan(kernel, plan)
        return print_kernel(kernel, "q", plan).source

    rows = Layout(order=("n", "m"), lanes=(("n", 8),), packs=("wd",))
    q8, q4 = source("q8", rows), source("q4", rows)
    assert "exactc_dot_q8_32x8(&xq[m * 96 + blk * 32], &wq[n_c * 96 + blk * 32], 96, s_rows);" in q8
    assert "exactc_dot_q4_32x8(&xq[m * 96 + blk * 32], &wq[n_c * 48 + blk * 16], 48, s_rows);" in q4
    assert "s[n_l] = s[n_l] + s_rows[n_l];" in q8
    panels = Layout(order=("n", "m"), lanes=(("n", 8),), packs=("wq", "wd"))
    assert "exactc_dot_q8_32x8(&xq[m * 96 + blk * 32], &wq_p[blk * 256], 32, s_rows);" in source("q8", panels)
    assert "exactc_dot_q4_32x8(&xq[m * 96 + blk * 32], &wq_p[blk * 128], 16, s_rows);" in source("q4", panels)
    kept = source("q8", Layout(order=("n", "m"), lanes=(("n", 16),)))
    assert "_32x8(" not in kept and "for (int64_t k = 0; k < K; k++)" in kept
