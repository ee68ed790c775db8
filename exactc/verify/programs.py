"""Exported programs, built and run: the one way exactc (`exactc run`, `exactc embed`),
the tests, the probes and tools/ turn an export into a running program.

    make(root, Build(cc="gcc", openmp=False))   make in an exported directory: a Program
    exported(ExportSpec(...), Build())          the export and its build, from the cache

`make` runs the directory's own Makefile. Its results (the program and the conformance
comparer) are cached in the cache folder under `builds/`, keyed by the compiler, the make
arguments and the directory's C sources and Makefile, so a second build of the same
sources copies instead of compiling. The objects of the runtime's sources, the same in
every export, are cached under `objects/` (keyed by the compiler, the CPU, the make
arguments, the Makefile and the runtime's files): a build of a new export compiles only
its model.c and kernels. `exported` keeps whole built directories under
`exports/`, keyed by the export's request (ExportSpec.digest: exactc's sources, the
model, the plan's and the checkpoint's content, the inputs) and the build: a cached one
is used without tracing, printing or running the reference again. Both write beside
their destination and rename into place, so concurrent builders of one key are
harmless: the first rename wins and the others use its result.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from exactc.exporter import export
from exactc.verify.build import CompileError, cache_dir, compiler_version

COMPARER = "conformance/compare"  # the comparer check.sh runs (runtime/exactc_compare.c)


class ProgramFailure(RuntimeError):
    """A build or a run that failed: `summary` says so on one line (the command and its
    last words), the message adds everything it printed."""

    def __init__(self, summary: str, detail: str = ""):
        self.summary = summary
        super().__init__(summary + (f"\n{detail}" if detail else ""))


class ProgramBuildError(ProgramFailure):
    """make failed in an exported directory, or warned where no warning is allowed."""


class ProgramRunError(ProgramFailure):
    """An exported program exited with an error."""


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or ["(no message)"])[-1].strip()


@dataclasses.dataclass(frozen=True)
class Build:
    """The make arguments of a build of an exported directory (its Makefile keeps the
    STRICT flags apart: nothing here can change a bit)."""

    cc: str = "cc"
    openmp: bool = True
    checking: bool = False  # model-checking: NaN-filled arena, bounds, layer traces
    cflags: str | None = None  # None: the Makefile's default, -O2 -march=native (this CPU)

    @property
    def program(self) -> str:
        return "model-checking" if self.checking else "model"

    def make_args(self) -> list[str]:
        args = [f"CC={self.cc}", f"OPENMP={int(self.openmp)}"] + (["CHECKING=1"] if self.checking else [])
        return args + ([f"CFLAGS={self.cflags}"] if self.cflags is not None else [])

    def compiler(self) -> str:
        """The compiler's first line of --version; a ProgramBuildError if it is missing."""
        try:
            return compiler_version(self.cc)
        except (CompileError, subprocess.CalledProcessError) as exc:
            raise ProgramBuildError(f"CC={self.cc}: {exc}") from None


@dataclasses.dataclass(frozen=True)
class Program:
    """A built exported directory."""

    root: Path
    build: Build

    @property
    def path(self) -> Path:
        return self.root / self.build.program

    def make_line(self) -> str:
        """The command that rebuilds it, and the compiler it names."""
        return f"make -C {self.root} {' '.join(_quoted(self.build.make_args()))}  ({self.build.compiler()})"

    def run(self, pairs: Sequence[tuple[Path, Path]] | None = None, threads: int | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run it on (INPUT_DIR, OUTPUT_DIR) pairs, in one process (the weights load
        once); the output folders are created."""
        if not pairs:
            raise ValueError("give at least one (input folder, output folder) pair")
        args = [str(self.path), str(self.root / "weights.safetensors")]
        for inputs, outputs in pairs:
            Path(outputs).mkdir(parents=True, exist_ok=True)
            args += [str(inputs), str(outputs)]
        try:
            return subprocess.run(args, capture_output=True, text=True, env=_env(threads, env))
        except OSError as exc:  # not a program (empty, garbage) or not executable: one line, not a traceback
            raise ProgramRunError(f"{self.path} cannot be run: {exc.strerror or exc}") from None

    def run_or_fail(self, pairs: Sequence[tuple[Path, Path]], threads: int | None = None,
                    env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """run, raising a ProgramRunError (the program's last words) if it fails."""
        done = self.run(pairs, threads, env)
        if done.returncode != 0:
            raise ProgramRunError(f"{self.path} exited with {done.returncode}: {_last_line(done.stderr)}",
                                  done.stderr)
        return done

    def generate(self, inputs: Path, outputs: Path, options: Sequence[str] = (), threads: int | None = None,
                 env: dict[str, str] | None = None, on_token: Callable[[int], None] | None = None) -> str:
        """A decode program's whole generation loop (`model generate`, runtime/exactc_generate.c)
        on inputs/prompt_ids.npy and seed.npy (or key.npy), `options` its flags; each token
        goes to `on_token` as the program prints it. Returns its stderr (the timing line);
        a ProgramRunError (the program's last words) if it fails."""
        outputs.mkdir(parents=True, exist_ok=True)
        args = [str(self.path), "generate", str(self.root / "weights.safetensors"), str(inputs), str(outputs),
                *options]
        try:
            child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=_env(threads, env))
        except OSError as exc:  # as in run
            raise ProgramRunError(f"{self.path} cannot be run: {exc.strerror or exc}") from None
        with child:
            for line in child.stdout:
                if on_token is not None:
                    on_token(int(line))
            stderr = child.stderr.read()
        if child.returncode != 0:
            raise ProgramRunError(f"{self.path} generate exited with {child.returncode}: {_last_line(stderr)}",
                                  stderr)
        return stderr

    def run_conformance_inputs(self, out: Path, threads: int | None = None,
                               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return self.run([(self.root / "conformance" / "inputs", out)], threads, env)

    def check(self, threads: int | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """conformance/check.sh on this program: the spec's comparison, in C."""
        return subprocess.run([str(self.root / "conformance" / "check.sh"), str(self.path)],
                              capture_output=True, text=True, env=_env(threads, env))


def _env(threads: int | None, extra: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ, **(extra or {}))
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def _quoted(args: list[str]) -> list[str]:
    return [f"'{a}'" if " " in a else a for a in args]


# ---- make ------------------------------------------------------------------------------------


def this_cpu() -> str:
    """The processor the default build targets (-march=native): /proc/cpuinfo's model
    name and flags of the first processor, or the machine's architecture where there is
    none. Part of every cache key, so a cache folder shared between machines never hands
    one CPU a program built for another."""
    try:
        lines = Path("/proc/cpuinfo").read_text().split("\n\n")[0].splitlines()
    except OSError:
        return os.uname().machine
    fields = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in lines)}
    return " ".join(fields.get(k, "") for k in ("model name", "flags"))


def build_digest(root: Path, build: Build) -> str:
    """The cache key of `build` in `root`: the compiler, the CPU, the make arguments, the
    sources."""
    h = hashlib.sha256()
    h.update(build.compiler().encode())
    h.update(this_cpu().encode())
    h.update("\0".join(build.make_args()).encode())
    for path in sorted(root.rglob("*")):
        if path.suffix in (".c", ".h") or path.name == "Makefile":
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:24]


def make(root: Path, build: Build = Build(), *, refuse_warnings: bool = False, cached: bool = True) -> Program:
    """`make -C root` with `build`'s arguments: the Program. From the cache unless
    `cached` is False (timings). The targets are removed first, so that make builds them
    with this compiler and these flags (it compares times, not arguments)."""
    root = Path(root)
    products = (build.program, COMPARER)
    key = build_digest(root, build)
    store = cache_dir() / "builds" / key
    if cached and all((store / p).is_file() for p in products):
        for p in products:
            shutil.copy2(store / p, root / p)
        return Program(root, build)
    for p in products:
        (root / p).unlink(missing_ok=True)
    objects = cache_dir() / "objects" / runtime_objects_digest(root, build)
    _copy_objects(objects, root / OBJECTS)
    command = ["make", "-s", "-C", str(root), *build.make_args()]
    try:
        done = subprocess.run(command, capture_output=True, text=True)
    except FileNotFoundError:
        raise ProgramBuildError("make is not installed: an exported program builds with make and a C compiler") from None
    line = f"make -C {root} {' '.join(_quoted(build.make_args()))}"
    if done.returncode != 0:
        raise ProgramBuildError(f"{line} failed (exit {done.returncode}): {_last_line(done.stderr)}", done.stderr)
    if refuse_warnings and "warning" in done.stderr:
        raise ProgramBuildError(f"{line} warned: {_last_line(done.stderr)}", done.stderr)
    _store(store, {p: root / p for p in products})
    if not objects.is_dir() and "warning" not in done.stderr:  # a cached object compiled without a word
        _store(objects, {str(o.relative_to(root / OBJECTS)): o for o in _runtime_objects(root)})
    return Program(root, build)


def _store(final: Path, files: dict[str, Path]) -> None:
    """Copy `files` (name in the entry -> file) into the cache entry `final`, whole or
    not at all."""
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        for name, path in files.items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, work / name)
        _rename_or_drop(work, final)
    except BaseException:  # an error, Ctrl-C or SIGTERM: no half-copied entry left in the cache
        shutil.rmtree(work, ignore_errors=True)
        raise


# ---- the runtime's objects, shared by every export -------------------------------------------

OBJECTS = "build"  # the exported Makefile's object folders: build/<checksum of the compile line>/


def _runtime_sources() -> list[str]:
    return [name for name in export.RUNTIME_FILES if name.endswith(".c")]


def runtime_objects_digest(root: Path, build: Build) -> str:
    """The cache key of the runtime's objects of `build` in `root`: the compiler, the CPU,
    the make arguments, the Makefile (its compile lines name the object folders) and
    every runtime file (the sources and the headers they include)."""
    h = hashlib.sha256()
    h.update(build.compiler().encode())
    h.update(this_cpu().encode())
    h.update("\0".join(build.make_args()).encode())
    for name in ("Makefile", *export.RUNTIME_FILES):
        h.update(name.encode() + b"\0" + (root / name).read_bytes())
    return h.hexdigest()[:24]


def _runtime_objects(root: Path) -> list[Path]:
    """The objects make compiled from the runtime's sources, in every object folder."""
    stems = {Path(name).stem for name in _runtime_sources()}
    return sorted(o for o in (root / OBJECTS).glob("*/*.o") if o.stem in stems)


def _copy_objects(entry: Path, objects: Path) -> None:
    """Put a cached entry's objects where make looks for them, newer than the sources
    (copied, not linked: a build never writes into the cache). Objects already there
    are left alone."""
    if not entry.is_dir():
        return
    for cached in entry.glob("*/*.o"):
        target = objects / cached.relative_to(entry)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(cached, target)


def _rename_or_drop(work: Path, final: Path) -> None:
    """Rename `work` to `final`; if another builder got there first, keep theirs."""
    try:
        os.replace(work, final)
    except OSError:
        if not final.is_dir():
            raise
        shutil.rmtree(work, ignore_errors=True)


# ---- export and build, cached ------------------------------------------------------------------


def exported(spec: export.ExportSpec, build: Build = Build(), progress: Callable[[str], None] | None = None,
             refuse_warnings: bool = False) -> Program:
    """The built export of `spec`: from the cache folder's `exports/`, or exported, built
    (make) and renamed into it. `progress` hears what takes time on a first use."""
    request = f"{spec.digest()}\0{build.compiler()}\0{this_cpu()}\0{build.make_args()}"
    key = hashlib.sha256(request.encode()).hexdigest()[:24]
    final = cache_dir() / "exports" / key
    if (final / build.program).is_file() and (final / COMPARER).is_file():
        return Program(final, build)
    if progress is not None:
        progress(f"exporting {spec.model}.{spec.entry} at {spec.site} and building it into {final} ...")
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{key}.build-", dir=final.parent))
    try:
        root = export.write(spec.prepare(), work / "program")
        make(root, build, refuse_warnings=refuse_warnings)
        _rename_or_drop(root, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Program(final, build)
