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


def test_an_instrumented_object_is_compiled_once_whatever_the_workers(tmp_path, monkeypatch):
    """Two workers asking for one instrumented object at once: one compiles it, the other
    waits and takes it. Compiled twice at once, its notes and counts carried stamps that
    disagreed and gcov refused them."""
    import threading
    import time

    monkeypatch.setenv(build.GCOV_ENV, str(tmp_path / "gcov"))
    real, calls = build._run_compiler, []

    def slow_compiler(cmd, work, options):
        calls.append(cmd)
        time.sleep(0.3)  # long enough for the other worker to arrive
        real(cmd, work, options)

    monkeypatch.setattr(build, "_run_compiler", slow_compiler)
    (name, text), = SOURCE.items()
    objects = []
    workers = [threading.Thread(target=lambda: objects.append(build.compile_object(name, text, BuildOptions())))
               for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(calls) == 1, f"the object was compiled {len(calls)} times"
    assert len(set(objects)) == 1 and objects[0].exists()
    assert any(flag.startswith("-frandom-seed=") for flag in calls[0]), "the notes' stamp is the compile's time"
