"""One batch of every primitive x type, built with gcc and clang at -O0, -O2, -O3 and
-march=native: no warning (-Werror), and the same bits as the reference in each build
(design.md, principle 4: the strict flags make optimization invisible)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactc.exporter.primitives import PRIMITIVES
from exactc.exporter.types import SITE_TYPES
from exactc.strategies.cases import Case, cases
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


# gcc's SLP vectorizer fuses a rotation pair stored side by side, (a*c - b*s, a*s + b*c),
# into a multiply and a vfmaddsub with -march=native on x86-64 with FMA or AVX-512,
# -ffp-contract=off notwithstanding (exactc_rt.h, EXACTC_NO_FUSED_ROTATION): rope's
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
