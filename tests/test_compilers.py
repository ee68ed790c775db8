"""One batch of every primitive x type, built with gcc and clang at -O0, -O2, -O3 and
-march=native: no warning (-Werror), and the same bits as the reference in each build
(docs/design.md, principle 4: the strict flags make optimization invisible)."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactc.exporter.primitives import FUSED_PRIMITIVES, PRIMITIVES
from exactc.exporter.types import SITE_TYPES
from exactc.strategies.cases import Case, cases, fused_cases
from exactc.strategies.quant import ArraySpec, KQuantSpec, ScaleSpec, ValueSpec
from exactc.strategies.tensors import TensorSpec
from exactc.verify.build import BuildOptions
from exactc.verify.kernels import assert_all_equal, run_cases
from installed import need  # tests/installed.py

COMPILERS = ["gcc", "clang"]
LEVELS = [("-O0", False), ("-O2", False), ("-O3", False), ("-O2", True)]

EVERY_PRIMITIVE_AND_TYPE = st.tuples(*[cases(p, s) for p in sorted(PRIMITIVES) for s in PRIMITIVES[p].sites])
EVERY_FUSED_PRIMITIVE_AND_TYPE = st.tuples(*[fused_cases(p, s) for p in FUSED_PRIMITIVES for s in SITE_TYPES])


@pytest.mark.parametrize("cc", COMPILERS)
@pytest.mark.parametrize("opt,native", LEVELS, ids=["O0", "O2", "O3", "O2-native"])
def test_every_build_gives_the_reference_bits(cc, opt, native):
    need(cc)
    options = BuildOptions(cc=cc, opt=opt, march_native=native)

    @settings(max_examples=2)
    @given(batch=EVERY_PRIMITIVE_AND_TYPE)
    def check(batch):
        assert_all_equal(run_cases(list(batch), options))

    check()


@pytest.mark.parametrize("cc", COMPILERS)
@pytest.mark.parametrize("opt,native", LEVELS, ids=["O0", "O2", "O3", "O2-native"])
def test_every_build_gives_the_fused_reference_bits(cc, opt, native):
    """The fused kernels' fma/fmaf: a call of the C library's at -O0 and without
    -march, an FMA instruction (inlined, vectorized) with -march=native here; the
    reference's fma_A bits in each."""
    need(cc)
    options = BuildOptions(cc=cc, opt=opt, march_native=native)

    @settings(max_examples=2)
    @given(batch=EVERY_FUSED_PRIMITIVE_AND_TYPE)
    def check(batch):
        assert_all_equal(run_cases(list(batch), options))

    check()


# gcc's vectorizer fuses a rotation pair stored side by side, (a*c - b*s, a*s + b*c),
# into a multiply and a vfmaddsub with -march=native on x86-64 with FMA or AVX-512,
# -ffp-contract=off notwithstanding (exactc_rt.h, EXACTC_GCC_NO_VECTORS_WITH_FMA): rope's
# rotation with its pairs side by side, interleaved or of a head dimension of 2 (and, beside
# them, half pairing at 8, which gcc vectorizes unfused).
ROTATIONS = [Case("rope", site, (("pairing", pairing), ("pos0", 7), ("theta", 10000.0)),
                  (("x", TensorSpec((3, 2, dim), site, seed, "normal", 1.0)),))
             for site in ("f64", "f32") for pairing, dim in (("interleaved", 8), ("half", 2), ("half", 8)) for seed in (0, 1)]


@pytest.mark.parametrize("cc", COMPILERS)
@pytest.mark.parametrize("opt", ["-O2", "-O3"])
def test_rotation_pairs_are_not_fused_with_march_native(cc, opt):
    need(cc)
    assert_all_equal(run_cases(ROTATIONS, BuildOptions(cc=cc, opt=opt, march_native=True)))


def q4_integer_case(rows: int, cols: int, k: int, seed: int = 0) -> Case:
    """qlinear_i with q4 weights in blocks of 32, drawn values (a decode step's shape)."""
    rng = np.random.default_rng(seed)
    blocks = k // 32
    operands = {
        "xq": ArraySpec(tuple(map(tuple, rng.integers(-127, 128, (rows, k)).tolist())), "int8"),
        "xd": ArraySpec(tuple(map(tuple, rng.uniform(0.001, 0.01, (rows, blocks)).tolist())), "f32"),
        "wq": ArraySpec(tuple(map(tuple, rng.integers(0, 256, (cols, k // 2)).tolist())), "uint8"),
        "wd": ArraySpec(tuple(map(tuple, rng.uniform(0.001, 0.01, (cols, blocks)).tolist())), "f32"),
    }
    return Case("qlinear_i", "f32", (("block", 32), ("fmt", "q4"), ("has_b", False)), tuple(operands.items()))


@pytest.mark.parametrize("cc", COMPILERS)
def test_the_integer_q4_linear_is_not_miscompiled_with_march_native(cc):
    """gcc 12.2 at -O2 with AVX-VNNI (-march=native on an Intel Xeon with it) computes
    wrong sums for the plain q4 integer linear's nibble products (every output wrong, no
    undefined behaviour in the C: the same text is right at -O0, at -O3, without VNNI and
    with clang); its function is compiled without gcc's vectorizer (exactc_rt.h)."""
    need(cc)
    for opt in ("-O2", "-O3"):
        assert_all_equal(run_cases([q4_integer_case(1, 768, 288), q4_integer_case(3, 40, 64, 1)],
                                   BuildOptions(cc=cc, opt=opt, march_native=True)))


def block_kernel_case(fmt: str, k: int, seed: int) -> Case:
    """qlinear_i in blocks of 32 (whole blocks summed by exactc_dot.h, a short last one by
    its loops) at the extremes: activations of -128, -127 and 127, q8 weights of -128 and
    127, q4 nibbles 0 and 15, random nibbles in the padding."""
    from exactc.strategies.quant import ScaleSpec, ValueSpec

    nb = -(-k // 32)
    specs = (("xq", ValueSpec(4, k, "q8", 32, seed, ("min", "max", "limit", "random"))),
             ("xd", ScaleSpec((4, nb), "f32", seed + 1, ("power",))),
             ("wq", ValueSpec(9, k, fmt, 32, seed + 2, ("limit", "min", "max", "random"), garbage_padding=True)),
             ("wd", ScaleSpec((9, nb), "f32", seed + 3, ("power", "normal"))))
    return Case("qlinear_i", "f32", (("block", 32), ("fmt", fmt), ("has_b", False)), specs)


BLOCK_KERNEL_BUILDS = [(opt, native) for opt in ("-O2", "-O3") for native in (False, True)]


@pytest.mark.parametrize("cc", COMPILERS)
@pytest.mark.parametrize("opt,native", BLOCK_KERNEL_BUILDS, ids=["O2", "O2-native", "O3", "O3-native"])
def test_the_block_kernels_give_the_reference_bits_in_every_build(cc, opt, native):
    """exactc_dot.h's plain loops (without -march) and this CPU's vector path (with it)
    inside the printed qlinear_i, q8 and q4, one row a call (the plain body), 8 (n in
    lanes of 8), a tile of 4 x 8 (m in lanes of 4 over n in lanes of 8, the automatic
    plan's on a prompt; its 9th output by the plain body), and 8 read from wq's block
    panel (the automatic plan's on one row: a kernel alone copies it in the order a
    program lays it out at load, the rows' blocks a run apart):
    the reference's bits in each build."""
    from exactc.exporter.kernels.layouts import Layout
    from exactc.exporter.kernels.plans import NestPlan, Plan

    need(cc)
    batch = [block_kernel_case(fmt, k, seed) for fmt in ("q8", "q4") for k, seed in ((96, 0), (120, 5))]
    rows = Plan((("qlinear_i", NestPlan(Layout(order=("n", "m"), lanes=(("n", 8),)))),))
    tile = Plan((("qlinear_i", NestPlan(Layout(order=("n", "m"), lanes=(("m", 4), ("n", 8))))),))
    panels = Plan((("qlinear_i", NestPlan(Layout(order=("n", "m"), lanes=(("n", 8),), packs=("wq", "wd")))),))
    whole = [block_kernel_case(fmt, 96, seed) for fmt, seed in (("q8", 0), ("q4", 3))]  # packs need whole blocks
    plans = [None] * len(batch) + [rows] * len(batch) + [tile] * len(batch) + [panels] * len(whole)
    options = BuildOptions(cc=cc, opt=opt, march_native=native)
    assert_all_equal(run_cases(batch * 3 + whole, options, plans=plans))


def k_quant_cases(rows: int, cols: int, blocks: int, seed: int = 0) -> list[Case]:
    """qlinear_w and qlinear_i over Q4_K, Q5_K and Q6_K weights of `blocks` super-blocks,
    drawn bytes with their own f16 fields (strategies/quant.py), a decode step's shape."""
    out = []
    for fmt in ("q4_k", "q5_k", "q6_k"):
        wq = KQuantSpec(cols, blocks, fmt, seed, ("random", "ones"), ("random", "one"))
        weights = (("wq", wq), ("wd", dataclasses.replace(wq, part="fields")))
        attrs = (("block", 256), ("fmt", fmt), ("has_b", False))
        x = TensorSpec((rows, 256 * blocks), "f32", seed, "normal", 1.0)
        xq = ValueSpec(rows, 256 * blocks, "q8", 256, seed, ("random", "max", "min"))
        out.append(Case("qlinear_w", "f32", attrs, (("x", x), *weights)))
        out.append(Case("qlinear_i", "f32", attrs,
                        (("xq", xq), ("xd", ScaleSpec((rows, blocks), "f32", seed, ("normal",))), *weights)))
    return out


@pytest.mark.parametrize("cc", COMPILERS)
def test_the_k_quant_linears_keep_their_bits_at_every_optimization(cc):
    """Both forms over each k-quant, at -O2 and -O3, for this CPU (-march=native) and the
    baseline x86-64: the reference's bits, whatever the compiler makes of the bit fields
    and the int32 sums."""
    need(cc)
    for opt in ("-O2", "-O3"):
        for native in (True, False):
            assert_all_equal(run_cases(k_quant_cases(1, 96, 2) + k_quant_cases(3, 8, 1, 1),
                                       BuildOptions(cc=cc, opt=opt, march_native=native)))


@pytest.mark.parametrize("cc", COMPILERS)
def test_the_k_quant_super_block_kernels_keep_their_bits_at_every_optimization(cc):
    """qlinear_i over each k-quant under the automatic plan (exactc_dot.h's super-block
    kernels, 8 rows a call, the rest one a call), at -O2 and -O3, for this CPU or not."""
    from exactc.exporter.kernels.autoplan import auto_kernel_plan
    from exactc.exporter.kernels.lower import lower

    need(cc)
    batch = [case for case in k_quant_cases(1, 20, 2) + k_quant_cases(3, 8, 1, 1) if case.primitive == "qlinear_i"]
    plans = [auto_kernel_plan(lower(c.primitive, c.site, c.shapes, c.attr_dict)) for c in batch]
    assert all(plan is not None for plan in plans)
    for opt in ("-O2", "-O3"):
        for native in (True, False):
            assert_all_equal(run_cases(batch, BuildOptions(cc=cc, opt=opt, march_native=native), plans=plans))


# ---- foreign targets, compile only ----------------------------------------------------
# CI runs on whichever CPU the machine has that day, and a break that only one target shows
# must show on every host: gcc's GNU mode predefines FLT_EVAL_METHOD as 16 for a CPU with
# AVX512-FP16 (sapphirerapids), and exactc_rt.h then stops the build, so a compiler call
# without STRICT fails there only. Each target's compiler preprocesses exactc_rt.h as
# `exactc plan --tune` does, then builds two exported programs with their own Makefile
# (warnings refused); nothing is run. clang-19 knows Zen 4 and Zen 5, gcc 12 does not.
FOREIGN_TARGETS = [
    ("gcc", "sapphirerapids"),
    ("gcc", "icelake-server"),
    ("gcc", "x86-64-v2"),
    ("clang-19", "sapphirerapids"),
    ("clang-19", "znver4"),
    ("clang-19", "znver5"),
    ("aarch64-linux-gnu-gcc", "armv8.2-a"),
]
FOREIGN_PROGRAMS = {
    "gpt-forward-auto": dict(model="gpt", entry="forward", site="f32", plan="auto"),
    "llama-decode-q4-auto": dict(model="llama", entry="decode", site="f32", plan="auto", weights=("q4", 32)),
}
FOREIGN_SIZES = {
    "gpt": {"vocab": 40, "positions": 10, "dim": 32, "heads": 2, "layers": 2, "mlp": 40, "tokens": 6},
    "llama": {"vocab": 40, "dim": 64, "heads": 4, "kv_heads": 2, "layers": 2, "mlp": 96, "tokens": 6},
}


@pytest.fixture(scope="module")
def foreign_exports(tmp_path_factory):
    """The two programs, exported once: the GPT's laned f32 kernels and the Llama's
    integer sums (their VNNI paths) under the automatic plan."""
    from exactc.exporter import export

    root = tmp_path_factory.mktemp("foreign")
    return {name: export.write(export.ExportSpec(overrides=FOREIGN_SIZES[spec["model"]], **spec).prepare(),
                               root / name)
            for name, spec in FOREIGN_PROGRAMS.items()}


@pytest.mark.parametrize("cc,march", FOREIGN_TARGETS, ids=[f"{cc}-{march}" for cc, march in FOREIGN_TARGETS])
def test_foreign_targets_preprocess_and_build(cc, march, foreign_exports, tmp_path):
    import shutil


    from exactc.verify import tune
    from exactc import programs
    from exactc.runtime.toolchain import target_macros

    need(cc)
    # The tuner's preprocessing of the header, for this target (a TuneError if it stops):
    # the lanes exactc_rt.h picks, narrow for clang on x86 without AVX-512, wide for gcc with it.
    macros = target_macros(cc, march)
    assert macros, f"{cc} does not know -march={march}"
    avx512 = "__AVX512F__" in macros
    x86 = "__x86_64__" in macros
    expected = ("narrow" if x86 and not avx512 else None) if "clang" in cc else ("wide" if avx512 else None)
    assert tune.compiled_variant(cc, march) == expected
    flags = " ".join(tune.build_flags(cc, march))
    assert f"-march={march}" in flags
    for name, folder in foreign_exports.items():
        copy = shutil.copytree(folder, tmp_path / name)
        # OpenMP where the target's runtime is installed: gcc's libgomp (native and cross);
        # clang-19 has no libomp here, and a program without OpenMP is the same source.
        build = programs.Build(cc=cc, openmp=cc != "clang-19", cflags=flags)
        program = programs.make(copy, build, refuse_warnings=True, cached=False)
        assert program.path.is_file(), f"{name}: {program.make_line()}"
