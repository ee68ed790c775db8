"""Building exported directories with their own Makefile, cached by what goes into the
build: the compiler, the make arguments and the directory's C sources and Makefile.
The tests and the probes build the same directories many times; a second build of the
same sources copies the cached program instead of compiling it again."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Sequence

from exactc.verify.build import cache_dir, compiler_version


class ProgramBuildError(RuntimeError):
    """make failed in an exported directory, or warned where no warning is allowed."""


def build_digest(root: Path, make_args: Sequence[str], cc: str) -> str:
    """The cache key of a build of `root` with `make_args`."""
    h = hashlib.sha256()
    h.update(compiler_version(cc).encode())
    h.update("\0".join(make_args).encode())
    for path in sorted(root.rglob("*")):
        if path.suffix in (".c", ".h") or path.name == "Makefile":
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:24]


def build_program(root: Path, make_args: Sequence[str], *, cc: str, program: str = "model",
                  refuse_warnings: bool = False) -> Path:
    """`make -C root make_args` (cached): the path of the built `program`. `cc` must be
    the compiler the arguments select (it is part of the key)."""
    built = root / program
    cached = cache_dir() / "programs" / build_digest(root, make_args, cc)
    if cached.is_file():
        shutil.copy2(cached, built)
        return built
    proc = subprocess.run(["make", "-s", "-C", str(root), *make_args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ProgramBuildError(f"make {' '.join(make_args)} failed in {root}:\n{proc.stderr}")
    if refuse_warnings and "warning" in proc.stderr:
        raise ProgramBuildError(f"make {' '.join(make_args)} in {root} warned:\n{proc.stderr}")
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".{os.getpid()}")
    shutil.copy2(built, tmp)
    os.replace(tmp, cached)
    return built
