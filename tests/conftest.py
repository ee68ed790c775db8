"""Hypothesis profiles, chosen by HYPOTHESIS_PROFILE:

- ci (the default, `make test`): derandomized, bounded, prints the reproduction blob;
- campaign (`make verify`): many examples, random, still printing blobs.
"""

import os

from hypothesis import HealthCheck, settings

_COMMON = dict(
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

settings.register_profile("ci", max_examples=8, derandomize=True, **_COMMON)
settings.register_profile("campaign", max_examples=40, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
