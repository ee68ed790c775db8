"""Hypothesis profiles, the `needs` marker, and the count of skips.

Hypothesis profiles, chosen by HYPOTHESIS_PROFILE:

- ci (the default, `make test`): derandomized, bounded, prints the reproduction blob;
- campaign (`make verify`): many examples, random, still printing blobs;
- mutmut (tools/mutmut_campaign.py's runs): ci's examples, but a failing example is not
  shrunk and nothing is saved: a mutant is killed by its first failing example, and the
  shrinking (tens of runs of the test, for a verdict already known) is left out; and the
  tests run fastest first (pytest_collection_modifyitems).

`@pytest.mark.needs("valgrind", ...)` names what a test needs from the machine
(tests/installed.py): missing, it is a skip by hand and a failure under `make test`.
The last line of a run counts the skips and their reasons.
"""

import collections
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

from installed import need, torch_on_one_thread  # tests/installed.py

_COMMON = dict(
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

settings.register_profile("ci", max_examples=8, derandomize=True, **_COMMON)
settings.register_profile("campaign", max_examples=40, **_COMMON)
settings.register_profile("mutmut", max_examples=8, derandomize=True, database=None,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate], **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# `--plan auto` follows the tune table of `exactc plan --tune` (exactc/verify/tune.py): the tests
# see autoplan's own choices, whatever this machine's table holds (tests/test_tune.py
# names a table of its own).
os.environ["EXACTC_TUNED"] = ""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "needs(*pieces): what the test needs from the machine (tests/installed.py)"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    torch_on_one_thread()  # whatever loaded it: the kernel harness forks after torch's oracles
    for mark in item.iter_markers("needs"):
        for name in mark.args:
            need(name)


def mutmut_durations(stats=Path("mutmut-stats.json")) -> dict[str, float]:
    """Each test's time in mutmut's stats run, read from the stats file in the folder a
    mutmut run works in (tools/mutmut_campaign.py's stage); {} elsewhere."""
    if os.environ.get("HYPOTHESIS_PROFILE") != "mutmut" or not stats.is_file():
        return {}
    return json.loads(stats.read_text()).get("duration_by_test", {})


def pytest_collection_modifyitems(config, items):
    """Under mutmut, the fastest tests first: a mutant's run stops at its first failing
    test (-x), and mutmut hands over its tests in no useful order, so a mutant that the
    printed text (tests/test_printed_text.py) or a quick check would kill in a tenth of
    a second waited behind tests that build C for seconds."""
    durations = mutmut_durations()
    if durations:
        items.sort(key=lambda item: durations.get(item.nodeid, float("inf")))


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, (tuple, list)) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


def skip_summary(reports) -> str:
    """`skips: N (reason: count, ...)`, the most frequent reason first."""
    reasons = collections.Counter(_skip_reason(r) for r in reports)
    if not reasons:
        return "skips: 0"
    listed = ", ".join(f"{reason}: {count}" for reason, count in reasons.most_common())
    return f"skips: {sum(reasons.values())} ({listed})"


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session):
    """After pytest's own summary: the count of skips with their reasons, the last line."""
    result = yield
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and not hasattr(session.config, "workerinput"):
        reporter.write_line(skip_summary(reporter.stats.get("skipped", [])))
    return result
