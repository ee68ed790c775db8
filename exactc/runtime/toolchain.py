"""The C toolchain as the product meets it: which compiler this is, what it predefines for
a target, and the cache folder where built programs and compiled objects live.

Every compiler call carries STRICT_FLAGS (exactc/runtime/__init__.py; docs/design.md,
principle 4), the probes of a compiler's macros included: gcc's GNU mode predefines other
values than -std=c11 does (FLT_EVAL_METHOD 16 on a CPU with AVX512-FP16).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

from exactc.runtime import STRICT_FLAGS


class CacheError(ValueError):
    """The cache folder ($EXACTC_CACHE, else the user's) cannot be made or written: the
    user's to fix (exit code 2)."""


class CompileError(RuntimeError):
    """The compiler refused a source; the message holds its diagnostics and the path of
    the kept source so that the failure can be reproduced by hand."""


def user_cache_dir() -> Path:
    """The platform's per-user cache folder for exactc: $XDG_CACHE_HOME/exactc (else
    ~/.cache/exactc) on Linux and the BSDs, ~/Library/Caches/exactc on macOS,
    %LOCALAPPDATA%\\exactc\\Cache on Windows."""
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "exactc"
    if os.name == "nt":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "exactc" / "Cache"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "exactc"


def cache_dir() -> Path:
    """Where compiled libraries, built programs and reproductions live: $EXACTC_CACHE,
    else the user's cache folder (user_cache_dir). Never inside the installed package.
    Made readable by its owner only (0700) when it is made here."""
    root = os.environ.get("EXACTC_CACHE")
    path = Path(root) if root else user_cache_dir()
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)  # the user's own: programs and their inputs
    except OSError as exc:
        origin = f"EXACTC_CACHE={root}" if root else "the cache folder"
        raise CacheError(f"{origin}: cannot make {path} ({exc.strerror or exc}); set EXACTC_CACHE to a folder "
                         "you can write") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise CacheError(f"the cache folder {path} is not writable; set EXACTC_CACHE to a folder you can write")
    return path


@functools.lru_cache(maxsize=None)
def compiler_version(cc: str) -> str:
    """The first line of `cc --version`; it is part of every cache key."""
    path = shutil.which(cc)
    if path is None:
        raise CompileError(f"compiler {cc!r} not found on PATH (run `make install`)")
    out = subprocess.run([path, "--version"], capture_output=True, text=True, errors="replace")
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        raise CompileError(f"`{cc} --version` " + (f"exited with {out.returncode}" if out.returncode else
                                                   "printed nothing") + "; is it a C compiler?")
    return lines[0].strip()


def have_compiler(cc: str) -> bool:
    try:
        compiler_version(cc)
        return True
    except (CompileError, subprocess.CalledProcessError):
        return False


@functools.lru_cache(maxsize=None)
def target_macros(cc: str = "gcc", march: str = "native") -> frozenset[str]:
    """The macros `cc -march=MARCH` predefines under STRICT (__AVX512F__, __AVXVNNI__,
    ...): what a build for that target may use; empty if the compiler cannot be run or
    does not know the target. STRICT is on the line as on every compiler call: gcc's GNU
    mode predefines other values (FLT_EVAL_METHOD 16 on a CPU with AVX512-FP16)."""
    try:
        done = subprocess.run([cc, *STRICT_FLAGS, f"-march={march}", "-dM", "-E", "-x", "c", os.devnull],
                              capture_output=True, text=True)
    except OSError:
        return frozenset()
    if done.returncode != 0:
        return frozenset()
    return frozenset(line.split()[1] for line in done.stdout.splitlines() if line.startswith("#define "))


def native_macros(cc: str = "gcc") -> frozenset[str]:
    """The macros `cc -march=native` predefines: what the default build targets on this CPU."""
    return target_macros(cc, "native")


@functools.lru_cache(maxsize=None)
def wide_vectors(cc: str, march: str = "native") -> tuple[str, ...]:
    """What the exported Makefile's default adds to -march=native (its WIDE), for a build
    for `march`: the preference for 512-bit vectors, on a target with AVX-512 where the
    compiler takes it."""
    try:
        wide = subprocess.run([cc, *STRICT_FLAGS, "-mprefer-vector-width=512", "-x", "c", "-c", "-o", os.devnull,
                               os.devnull], capture_output=True)
    except OSError:
        return ()
    return ("-mprefer-vector-width=512",) if "__AVX512F__" in target_macros(cc, march) and wide.returncode == 0 else ()
