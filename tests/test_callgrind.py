"""verify/callgrind.py against programs whose counts we can reason about: a loop's count
grows linearly, inclusive = self + callees, and collection is limited to the region."""

import subprocess

import pytest

from exactc.runtime import STRICT_FLAGS
from exactc.verify.callgrind import CallgrindError, parse_callgrind, run_callgrind

pytestmark = pytest.mark.needs("valgrind")  # tests/installed.py

PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) double leaf(double x) { return x * 1.0000001 + 0.5; }
__attribute__((noinline)) double work(long n) {
    double acc = 0.0;
    for (long i = 0; i < n; i++) acc = leaf(acc);
    return acc;
}
__attribute__((noinline)) double outside(long n) {
    double acc = 1.0;
    for (long i = 0; i < n; i++) acc = acc * 0.999;
    return acc;
}
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    printf("%f %f\n", work(n), outside(100000));
    return 0;
}
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cg")
    (folder / "p.c").write_text(PROGRAM)
    subprocess.run(["gcc", *STRICT_FLAGS, "-O1", "-g", "-o", str(folder / "p"), str(folder / "p.c")], check=True)
    return str(folder / "p")


def test_a_loop_grows_linearly_and_collection_is_limited(program):
    counts = [run_callgrind([program, str(n)], toggle_collect="work").total for n in (1000, 2000, 4000)]
    # Fixed part fitted from the data: the increments must double.
    d1, d2 = counts[1] - counts[0], counts[2] - counts[1]
    assert d2 == 2 * d1, counts
    # outside() runs 100000 iterations but is not collected.
    assert counts[0] < 100000, counts


def test_inclusive_is_self_plus_callees(program):
    profile = run_callgrind([program, "500"], toggle_collect="work")
    work, leaf = profile.functions["work"], profile.functions["leaf"]
    assert leaf.calls == 500
    assert work.inclusive_ir == work.self_ir + leaf.inclusive_ir
    assert profile.total == sum(f.self_ir for f in profile.functions.values())


def test_name_compression_and_calls_are_parsed():
    text = "\n".join([
        "version: 1", "events: Ir", "fl=(1) a.c", "fn=(1) main", "3 10",
        "cfn=(2) callee", "calls=2 5", "5 40", "fn=(2)", "6 20", "+1 20", "totals: 50",
    ])
    profile = parse_callgrind(text)
    assert profile.functions["main"].self_ir == 10
    assert profile.functions["main"].inclusive_ir == 50
    assert profile.functions["callee"].self_ir == 40
    assert profile.functions["callee"].calls == 2
    assert profile.total == 50


def test_a_total_that_disagrees_with_the_lines_is_refused():
    with pytest.raises(CallgrindError, match="sum to"):
        parse_callgrind("events: Ir\nfn=(1) f\n1 5\ntotals: 6\n")


REGIONS = r"""
#include <stdlib.h>
#include <valgrind/callgrind.h>
__attribute__((noinline)) double spin(long n) {
    double acc = 0.0;
    for (long i = 0; i < n; i++) acc = acc * 0.5 + 1.0;
    return acc;
}
int main(void) {
    double sink = spin(100000);  /* before any region: not instrumented */
    for (long n = 1000; n <= 2000; n += 1000) {
        CALLGRIND_ZERO_STATS;
        CALLGRIND_START_INSTRUMENTATION;
        sink += spin(n);
        CALLGRIND_STOP_INSTRUMENTATION;
        CALLGRIND_DUMP_STATS_AT(n == 1000 ? "n=1000" : "n=2000");
    }
    return sink < 0.0;
}
"""


@pytest.mark.needs("callgrind.h")
def test_regions_marked_by_client_requests_are_dumped_apart(tmp_path):
    from exactc.verify.callgrind import run_callgrind_parts

    (tmp_path / "r.c").write_text(REGIONS)
    subprocess.run(["gcc", *STRICT_FLAGS, "-O1", "-o", str(tmp_path / "r"), str(tmp_path / "r.c")], check=True)
    parts = run_callgrind_parts([str(tmp_path / "r")])
    assert [label for label, _ in parts] == ["n=1000", "n=2000"]
    small, large = (p.functions["spin"].self_ir for _, p in parts)
    assert small < 20000 and 1.9 < large / small < 2.1, (small, large)
