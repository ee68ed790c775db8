"""The builds `make coverage` instruments (verify/build.py, EXACTC_GCOV_DIR): an
instrumented library writes its counts into this run's folder, never into a folder of an
earlier run through a cached build, and the builds whose instructions are counted (the
probes' kernels) are never instrumented, so that their counts stay the baseline's."""

from __future__ import annotations

import pytest

from exactc.verify import build
from exactc.verify.build import BuildOptions

SOURCE = {"exactc_gcov_probe.c": "int exactc_gcov_twice(int x) { return x > 0 ? 2 * x : -x; }\n"}
CDEF = "int exactc_gcov_twice(int x);"


def _counts(folder) -> list:
    return sorted(p.name for p in folder.rglob("*.gcda"))


def test_each_run_of_make_coverage_gets_its_own_instrumented_build(tmp_path, monkeypatch):
    plain = build.build_key(SOURCE, BuildOptions())
    keys = []
    for run in ("first", "second"):
        folder = tmp_path / run
        monkeypatch.setenv(build.GCOV_ENV, str(folder))
        keys.append(build.build_key(SOURCE, BuildOptions()))
        library = build.load_library(SOURCE, CDEF, BuildOptions(warnings=False))
        assert library.lib.exactc_gcov_twice(3) == 6
        del library
    assert len({plain, *keys}) == 3, "an instrumented build shares a cache key with another run's or a plain one"
    # gcov writes the counts at the process's exit beside each object: the second run's
    # objects are in the second run's folder
    assert list((tmp_path / "second").rglob("*.o")), "the second run linked the first run's objects"


@pytest.mark.needs("valgrind", "callgrind.h")
def test_the_probes_kernels_are_never_instrumented(tmp_path, monkeypatch):
    from exactc.exporter.kernels.lower import lower
    from exactc.verify import probes

    monkeypatch.setenv(build.GCOV_ENV, str(tmp_path / "gcov"))
    assert build.gcov_dir(BuildOptions()) == tmp_path / "gcov"
    assert build.gcov_dir(BuildOptions(instrumentable=False)) is None
    kernel = lower("linear", "f32", {"x": (2, 8), "w": (3, 8)}, {"has_b": False})
    assert probes.count_kernel(kernel) > 0
    made = list((tmp_path / "gcov").rglob("*")) if (tmp_path / "gcov").exists() else []
    assert not made, f"a counted build was instrumented: {[p.name for p in made][:4]}"
