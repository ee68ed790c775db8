"""Compile C into shared libraries, many sources per compiler call, cached by content
hash, and load them with cffi.

The strict flags that bit identity rests on (design.md, principle 4) are kept apart from
the ones a caller may tune (optimization level, -march, warnings, OpenMP).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Mapping

import cffi

from exactc.runtime import RUNTIME_DIR, STRICT_FLAGS  # STRICT_FLAGS: never changed by a caller

# Flags the tests add: a printed kernel must compile without a single warning.
WARNING_FLAGS = ("-Wall", "-Wextra", "-Werror")


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
    else the user's cache folder (user_cache_dir). Never inside the installed package."""
    root = os.environ.get("EXACTC_CACHE")
    path = Path(root) if root else user_cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path


@functools.lru_cache(maxsize=None)
def compiler_version(cc: str) -> str:
    """The first line of `cc --version`; it is part of every cache key."""
    path = shutil.which(cc)
    if path is None:
        raise CompileError(f"compiler {cc!r} not found on PATH (run `make install`)")
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()[0].strip()


def have_compiler(cc: str) -> bool:
    try:
        compiler_version(cc)
        return True
    except (CompileError, subprocess.CalledProcessError):
        return False


@dataclasses.dataclass(frozen=True)
class BuildOptions:
    """The tunable half of a compiler call; STRICT_FLAGS are always added."""

    cc: str = "gcc"
    opt: str = "-O2"
    march_native: bool = False
    openmp: bool = False
    warnings: bool = True
    defines: tuple[str, ...] = ()

    def flags(self) -> list[str]:
        flags = [*STRICT_FLAGS, self.opt, "-fPIC", "-shared"]
        if self.march_native:
            flags.append("-march=native")
        if self.openmp:
            flags.append("-fopenmp")
        if self.warnings:
            flags.extend(WARNING_FLAGS)
        flags.extend(f"-D{d}" for d in self.defines)
        return flags

    def describe(self) -> str:
        return f"{self.cc} {' '.join(self.flags())}"


# The far ends of the builds a runtime source must give the same bits under: each
# compiler unoptimized or plain, and fully optimized for this CPU.
EXTREME_BUILDS = (
    BuildOptions(cc="gcc", opt="-O0"),
    BuildOptions(cc="gcc", opt="-O3", march_native=True),
    BuildOptions(cc="clang", opt="-O2"),
    BuildOptions(cc="clang", opt="-O3", march_native=True),
)


def build_label(options: BuildOptions) -> str:
    """A short name for a test id: gcc-O3-native."""
    return f"{options.cc}{options.opt}{'-native' if options.march_native else ''}"


@dataclasses.dataclass
class Library:
    """A loaded shared library: its cffi handle and where it lives."""

    ffi: cffi.FFI
    lib: object
    path: Path
    sources: dict[str, str]
    options: BuildOptions


def _runtime_headers_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(RUNTIME_DIR.glob("*.h")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def build_key(sources: Mapping[str, str], options: BuildOptions) -> str:
    h = hashlib.sha256()
    h.update(compiler_version(options.cc).encode())
    h.update("\0".join(options.flags()).encode())
    h.update(_runtime_headers_digest().encode())
    for name in sorted(sources):
        h.update(name.encode() + b"\0" + sources[name].encode() + b"\0")
    return h.hexdigest()[:24]


def runtime_source(name: str) -> str:
    """The text of one runtime source file, e.g. runtime_source('exactc_libm.c')."""
    return (RUNTIME_DIR / name).read_text()


def _is_runtime_source(name: str) -> bool:
    """Runtime sources (exactc_libm.c, ...) change rarely: each is compiled once per
    build options into a cached object and linked, not recompiled with every batch."""
    return name.startswith("exactc_") and name.endswith(".c")


def _run_compiler(cmd: list[str], work: Path, options: BuildOptions) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or (options.warnings and proc.stderr.strip()):
        raise CompileError(
            f"{options.cc} failed (exit {proc.returncode}); sources kept in {work}\n"
            f"command: {' '.join(cmd)}\n{proc.stderr}"
        )


def compile_object(name: str, text: str, options: BuildOptions) -> Path:
    """One source compiled to a cached position-independent object."""
    key = build_key({name: text}, options)
    target = cache_dir() / f"obj-{key}.o"
    if target.exists():
        return target
    work = Path(tempfile.mkdtemp(prefix=f"build-{key}-", dir=cache_dir()))
    source = work / name
    source.write_text(text)
    flags = [f for f in options.flags() if f != "-shared"]
    out = work / "obj.o"
    _run_compiler([options.cc, *flags, f"-I{RUNTIME_DIR}", "-c", "-o", str(out), str(source)], work, options)
    os.replace(out, target)
    shutil.rmtree(work, ignore_errors=True)
    return target


def compile_shared(sources: Mapping[str, str], options: BuildOptions = BuildOptions()) -> Path:
    """Compile `sources` (file name -> C text) in one compiler call into a cached .so;
    runtime sources come in as cached objects (compile_object)."""
    key = build_key(sources, options)
    target = cache_dir() / f"lib-{key}.so"
    if target.exists():
        return target
    objects = [str(compile_object(n, t, options)) for n, t in sorted(sources.items()) if _is_runtime_source(n)]
    work = Path(tempfile.mkdtemp(prefix=f"build-{key}-", dir=cache_dir()))
    paths = []
    for name, text in sorted(sources.items()):
        if _is_runtime_source(name):
            continue
        path = work / name
        path.write_text(text)
        paths.append(str(path))
    out = work / "lib.so"
    cmd = [options.cc, *options.flags(), f"-I{RUNTIME_DIR}", "-o", str(out), *paths, *objects, "-lm"]
    _run_compiler(cmd, work, options)
    os.replace(out, target)  # atomic: a concurrent builder of the same key is harmless
    shutil.rmtree(work, ignore_errors=True)
    return target


def load_library(
    sources: Mapping[str, str], cdef: str, options: BuildOptions = BuildOptions()
) -> Library:
    """Compile (or take from the cache) and dlopen; `cdef` declares what Python calls."""
    path = compile_shared(sources, options)
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    lib = ffi.dlopen(str(path))
    return Library(ffi=ffi, lib=lib, path=path, sources=dict(sources), options=options)


def pointer(ffi: cffi.FFI, array, ctype: str | None = None):
    """A C pointer to a contiguous numpy array's first element."""
    if not array.flags["C_CONTIGUOUS"]:
        raise ValueError("pointer() needs a C-contiguous array")
    return ffi.cast(f"{ctype or 'void'} *", array.ctypes.data)
