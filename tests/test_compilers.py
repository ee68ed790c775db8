"""One batch of every primitive x type, built with gcc and clang at -O0, -O2, -O3 and
-march=native: no warning (-Werror), and the same bits as the reference in each build
(design.md, principle 4: the strict flags make optimization invisible)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactc.exporter.primitives import PRIMITIVES
from exactc.exporter.types import SITE_TYPES
from exactc.strategies.cases import Case, cases
from exactc.strategies.quant import ArraySpec
from exactc.strategies.tensors import TensorSpec
from exactc.verify.build import BuildOptions
from exactc.verify.kernels import assert_all_equal, run_cases
from installed import need  # tests/installed.py

COMPILERS = ["gcc", "clang"]
LEVELS = [("-O0", False), ("-O2", False), ("-O3", False), ("-O2", True)]

EVERY_PRIMITIVE_AND_TYPE = st.tuples(*[cases(p, s) for p in sorted(PRIMITIVES) for s in SITE_TYPES])


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
