"""Compile C into shared libraries, many sources per compiler call, cached by content
hash, and load them with cffi.

The strict flags that bit identity rests on (docs/design.md, principle 4) are kept apart from
the ones a caller may tune (optimization level, -march, warnings, OpenMP).
"""

from __future__ import annotations

import dataclasses
import fcntl
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


@dataclasses.dataclass(frozen=True)
class BuildOptions:
    """The tunable half of a compiler call; STRICT_FLAGS are always added."""

    cc: str = "gcc"
    opt: str = "-O2"
    march_native: bool = False
    openmp: bool = False
    warnings: bool = True
    defines: tuple[str, ...] = ()
    # False for a build whose instructions are counted (verify/probes.py): make coverage
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
