"""Every primitive x {f64, f32, bf16}: the printed C kernel equals the reference bit for
bit, with NaN-poisoned red zones around every buffer (docs/design.md, principles 1 and 6)."""

import os

import pytest
from hypothesis import given

from exactc.exporter.primitives import PRIMITIVES
from exactc.exporter.types import SITE_TYPES
from exactc.strategies.cases import case_batches
from exactc.verify.kernels import assert_all_equal, run_cases

# Cases compiled together per example: more in the campaign, where a compiler call's
# fixed cost is shared by more cases.
BATCH = 8 if os.environ.get("HYPOTHESIS_PROFILE") == "campaign" else 4


@pytest.mark.parametrize("site", SITE_TYPES)
@pytest.mark.parametrize("primitive", sorted(PRIMITIVES))
def test_c_equals_reference(primitive, site):
    @given(batch=case_batches(primitive, site, max_size=BATCH))
    def check(batch):
        assert_all_equal(run_cases(batch))

    check()


@given(batch=case_batches(max_size=8))
def test_mixed_batches(batch):
    """Kernels of different primitives and types compiled in one library."""
    assert_all_equal(run_cases(batch))
