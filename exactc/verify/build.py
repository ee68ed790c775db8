"""Compile C into shared libraries, many sources per compiler call, cached by content
hash, and load them with cffi.

The strict flags that bit identity rests on (docs/design.md, principle 4) are kept apart from
the ones a caller may tune (optimization level, -march, warnings, OpenMP).
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Mapping

import cffi

from exactc.runtime import RUNTIME_DIR, STRICT_FLAGS  # STRICT_FLAGS: never changed by a caller
from exactc.runtime.toolchain import CompileError, cache_dir, compiler_version, wide_vectors

# Flags the tests add: a printed kernel must compile without a single warning.
WARNING_FLAGS = ("-Wall", "-Wextra", "-Werror")


@dataclasses.dataclass(frozen=True)
class BuildOptions:
    """The tunable half of a compiler call; STRICT_FLAGS are always added."""

    cc: str = "gcc"
    opt: str = "-O2"
    march_native: bool = False
    openmp: bool = False
    warnings: bool = True
    defines: tuple[str, ...] = ()
    # False for a build whose instructions are counted (verify/probes/counting.py): make coverage
    # never instruments it, so that its counts stay those of the baseline's build.
    instrumentable: bool = True

    def flags(self) -> list[str]:
        flags = [*STRICT_FLAGS, self.opt, "-fPIC", "-shared"]
        if self.march_native:
            flags.append("-march=native")
            flags.extend(wide_vectors(self.cc))  # as the exported Makefile's default build
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


# `make coverage` (tools/coverage.py) sets this to a folder: the runtime sources gcc
# compiles go there with --coverage, each object beside its source and its .gcda counts.
GCOV_ENV = "EXACTC_GCOV_DIR"


def gcov_dir(options: BuildOptions) -> Path | None:
    """The coverage folder when this build is instrumented: under make coverage, gcc at
    the default -O2 (one optimization level, so that gcov numbers a line's branches the
    same way in every object whose counts are merged)."""
    root = os.environ.get(GCOV_ENV)
    plain = options.cc == "gcc" and options.opt == "-O2" and not options.march_native
    return Path(root) if root and plain and options.instrumentable else None


def build_key(sources: Mapping[str, str], options: BuildOptions) -> str:
    h = hashlib.sha256()
    h.update(compiler_version(options.cc).encode())
    h.update("\0".join(options.flags()).encode())
    if gcov_dir(options):  # never a cached plain build, nor one whose counts go to another run's folder
        h.update(b"\0--coverage\0" + str(gcov_dir(options)).encode())
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
    gcov = gcov_dir(options)
    if gcov:  # kept where gcov finds it: the source, the object, and the counts it writes
        source, target = gcov / f"src-{key}" / name, gcov / f"obj-{key}.o"
        source.parent.mkdir(parents=True, exist_ok=True)
        # One compile per object, whatever the workers: the object's name fixes where its
        # counts go (so it cannot be compiled aside and renamed), and two compiles of it
        # at once left notes and counts whose stamps disagree (gcov refuses the pair).
        # -frandom-seed makes the stamp the key's, the same in every compile.
        with open(source.parent / "compile.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not target.exists():
                source.write_text(text)
                flags = [f for f in options.flags() if f != "-shared"] + ["--coverage", f"-frandom-seed={key}"]
                _run_compiler([options.cc, *flags, f"-I{RUNTIME_DIR}", "-c", "-o", str(target), str(source)],
                              source.parent, options)
        return target
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


def compile_shared(sources: Mapping[str, str], options: BuildOptions = BuildOptions(),
                   executable: bool = False) -> Path:
    """Compile `sources` (file name -> C text) in one compiler call into a cached .so
    (or, with `executable`, a program: one source must define main); runtime sources
    come in as cached objects (compile_object)."""
    key = build_key(sources, options)
    target = cache_dir() / (f"exe-{key}" if executable else f"lib-{key}.so")
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
    flags = [f for f in options.flags() if not (executable and f in ("-shared", "-fPIC"))]
    cmd = [options.cc, *flags, f"-I{RUNTIME_DIR}", "-o", str(out), *paths, *objects, "-lm"]
    if gcov_dir(options):
        cmd.append("--coverage")
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
