"""The libFuzzer harnesses of fuzz/ replay their seed corpora under the sanitizers.

`make fuzz` runs the harnesses for minutes; here each is built the two ways it can be
(replay.c's main under gcc and clang, and libFuzzer's main with -runs=0) with
AddressSanitizer and UBSan, and every seed input goes through it once: the readers'
promises (the same verdict from memory and from a stream, the round trips, every tensor
found and read) hold on the corpus, and the harnesses build warning-free, so that
`make fuzz` cannot find them broken. The corpus itself holds files both readers accept
and files they refuse.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from exactc.verify.build import load_library, runtime_source
from exactc.runtime.toolchain import have_compiler

FUZZ = Path(__file__).resolve().parent.parent / "fuzz"
_spec = importlib.util.spec_from_file_location("exactc_fuzz_run", FUZZ / "run.py")
run = sys.modules.setdefault("exactc_fuzz_run", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(run)


def replay_env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, EXACTC_FUZZ_DIR=str(tmp_path))


@pytest.mark.parametrize("cc", ["gcc", "clang"])
@pytest.mark.parametrize("harness", run.HARNESSES)
def test_the_seed_corpus_replays_clean_under_asan_and_ubsan(tmp_path, harness, cc):
    if not have_compiler(cc):
        pytest.fail(f"{cc} is missing: `make install` installs it")
    exe = run.build(harness, tmp_path / f"{harness}_replay", cc=cc, libfuzzer=False)
    seeds = run.corpus_files(harness)
    done = subprocess.run([str(exe), *map(str, seeds)], capture_output=True, text=True, timeout=300,
                          env=replay_env(tmp_path))
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip() == f"replay: {len(seeds)} inputs"


@pytest.mark.parametrize("harness", run.HARNESSES)
def test_the_libfuzzer_build_runs_the_corpus(tmp_path, harness):
    """What `make fuzz` builds, run over the seeds once (-runs=0): it links (clang's
    libFuzzer runtime is installed) and no seed crashes it."""
    exe = run.build(harness, tmp_path / f"{harness}_fuzz")
    done = subprocess.run([str(exe), "-runs=0", f"-dict={FUZZ / (harness + '.dict')}", str(FUZZ / "corpus" / harness)],
                          capture_output=True, text=True, timeout=300, env=replay_env(tmp_path))
    assert done.returncode == 0, done.stderr[-4000:]
    assert "INITED" in done.stderr and "dictionary" in done.stderr.lower(), done.stderr[-2000:]


CDEF = """
typedef struct { int dtype; int ndim; int64_t shape[8]; void *data; size_t nbytes; } exactc_array;
int exactc_npy_parse(const unsigned char *buf, size_t len, exactc_array *out, char *err, size_t errlen);
void exactc_array_free(exactc_array *a);
typedef struct { char *name; char dtype[12]; int ndim; int64_t shape[8]; uint64_t begin, end; } exactc_st_tensor;
typedef struct { const unsigned char *bytes; size_t len; size_t data_start; exactc_st_tensor *tensors; size_t count;
                 int owned; } exactc_safetensors;
int exactc_st_parse(const unsigned char *buf, size_t len, exactc_safetensors *st, char *err, size_t errlen);
void exactc_st_close(exactc_safetensors *st);
"""


def test_the_corpus_holds_files_read_and_refused():
    """Seeds on both sides of each rule: a corpus of refusals only would never reach the
    round trips, one of good files only would never reach the refusals. The file names
    say which is which (refused-*)."""
    lib = load_library({name: runtime_source(name) for name in ("exactc_npy.c", "exactc_safetensors.c")}, CDEF)
    ffi = lib.ffi
    for harness in run.HARNESSES:
        for seed in run.corpus_files(harness):
            data = seed.read_bytes()
            if harness == "npy":
                out = ffi.new("exactc_array *")
                accepted = lib.lib.exactc_npy_parse(data, len(data), out, ffi.NULL, 0) == 0
                lib.lib.exactc_array_free(out)
            else:
                st = ffi.new("exactc_safetensors *")
                accepted = lib.lib.exactc_st_parse(data, len(data), st, ffi.NULL, 0) == 0
                lib.lib.exactc_st_close(st)
            assert accepted != seed.name.startswith("refused-"), seed
        names = [s.name for s in run.corpus_files(harness)]
        assert sum(n.startswith("refused-") for n in names) >= 5 and sum(not n.startswith("refused-") for n in names) >= 5
