"""Exported programs, built and run: the one way exactc (`exactc run`, `exactc embed`),
the tests, the probes and tools/ turn an export into a running program.

    make(root, Build(cc="gcc", openmp=False))   make in an exported directory: a Program
    exported(ExportSpec(...), Build())          the export and its build, from the cache

`make` runs the directory's own Makefile. Its results (the program, the conformance
comparer and libmodel.so, the library exactc.Program loads) are cached in the cache folder under `builds/`, keyed by the compiler, the make
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

Every entry of the three holds a manifest (MANIFEST: each file's size, mode, times and
sha256), written before the rename, and is checked against it on every use: an entry
that fails (a file changed, missing, no longer executable; no manifest) is set aside and
rebuilt, with one line saying so. When an entry is added, the least recently used ones
go until the three fit in $EXACTC_CACHE_MAX_MB; never one that a running command holds
(a shared lock on the entry's folder, taken when it is used: _hold).
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from exactc.exporter import export
from exactc.exporter.files import replace_file
from exactc.runtime.toolchain import CacheError, CompileError, cache_dir, compiler_version

COMPARER = "conformance/compare"  # the comparer check.sh runs (runtime/exactc_compare.c)
LIBRARY = "libmodel.so"  # the network as a library (runtime/model.h), for exactc.Program in process


def load_outputs(folder: Path) -> dict[str, np.ndarray]:
    """The .npy files a program wrote into `folder`, by name."""
    return {p.stem: np.load(p, allow_pickle=False) for p in sorted(Path(folder).glob("*.npy"))}


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


def make(root: Path, build: Build = Build(), *, refuse_warnings: bool = False, cached: bool = True,
         note: Callable[[str], None] | None = None) -> Program:
    """`make -C root` with `build`'s arguments: the Program. From the cache unless
    `cached` is False (timings). The targets are removed first, so that make builds them
    with this compiler and these flags (it compares times, not arguments). `note` hears
    of a cache entry that failed its check (default: a line on stderr)."""
    root = Path(root)
    products = (build.program, COMPARER, LIBRARY)
    key = build_digest(root, build)
    store = cache_dir() / "builds" / key
    held = _usable(store, products, note) if cached else None
    if held is not None:
        try:
            for p in products:
                shutil.copy2(store / p, root / p)
        finally:
            os.close(held)
        return Program(root, build)
    for p in products:
        (root / p).unlink(missing_ok=True)
    objects = cache_dir() / "objects" / runtime_objects_digest(root, build)
    _copy_objects(objects, root / OBJECTS, note)
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
    made = " ".join(_quoted(build.make_args()))
    _store(store, {p: root / p for p in products}, f"build: {' and '.join(products)}, make {made}")
    if not objects.is_dir() and "warning" not in done.stderr:  # a cached object compiled without a word
        _store(objects, {str(o.relative_to(root / OBJECTS)): o for o in _runtime_objects(root)},
               f"the runtime's objects, make {made}")
    return Program(root, build)


def _store(final: Path, files: dict[str, Path], what: str) -> None:
    """Copy `files` (name in the entry -> file) into the cache entry `final` with its
    manifest, whole or not at all; then make room (_reclaim)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        for name, path in files.items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, work / name)
        _record(work, what)
        _rename_or_drop(work, final)
    except BaseException:  # an error, Ctrl-C or SIGTERM: no half-copied entry left in the cache
        shutil.rmtree(work, ignore_errors=True)
        raise
    _reclaim(final)


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


def _copy_objects(entry: Path, objects: Path, note: Callable[[str], None] | None = None) -> None:
    """Put a cached entry's objects where make looks for them, newer than the sources
    (copied, not linked: a build never writes into the cache). Objects already there
    are left alone; an entry that fails its check is not used (make compiles them)."""
    held = _usable(entry, (), note)
    if held is None:
        return
    try:
        for cached in entry.glob("*/*.o"):
            target = objects / cached.relative_to(entry)
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(cached, target)
    finally:
        os.close(held)


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
             refuse_warnings: bool = False, note: Callable[[str], None] | None = None) -> Program:
    """The built export of `spec`: from the cache folder's `exports/`, or exported, built
    (make) and renamed into it. `progress` hears what takes time on a first use, `note`
    of a cache entry that failed its check and is rebuilt (default: a line on stderr).
    The entry is held until this process ends: no other command removes it meanwhile."""
    request = f"{spec.digest()}\0{build.compiler()}\0{this_cpu()}\0{build.make_args()}"
    key = hashlib.sha256(request.encode()).hexdigest()[:24]
    final = cache_dir() / "exports" / key
    max_bytes()  # a malformed bound is refused before the work, not after it
    held = _usable(final, (build.program, COMPARER, LIBRARY), note)
    if held is not None:
        _keep_held(final, held)
        return Program(final, build)
    if progress is not None:
        progress(f"exporting {spec.model}.{spec.entry} at {spec.site} and building it into {final} ...")
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{key}.build-", dir=final.parent))
    try:
        root = export.write(spec.prepare(), work / "program")
        make(root, build, refuse_warnings=refuse_warnings, note=note)
        checkpoint = f" of {spec.checkpoint.name}" if spec.checkpoint is not None else ""
        _record(root, f"export: {spec.model}.{spec.entry} at {spec.site}{checkpoint}, "
                      f"make {' '.join(_quoted(build.make_args()))}")
        # Held across the rename: no other command's _reclaim can take the new entry
        # before this process holds it by its name.
        building = _lock(root)
        try:
            _rename_or_drop(root, final)
            held = _hold(final)
        finally:
            if building is not None:
                os.close(building)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if held is not None:
        _keep_held(final, held)
    _reclaim(final)
    return Program(final, build)


# ---- the cache's entries: checked on use, bounded in size ----------------------------------------

MANIFEST = ".exactc-cache.json"  # in every entry: what it is, and each file's size, mode, times, sha256
SECTIONS = ("exports", "builds", "objects")  # the folders of cache_dir() whose entries these are
MAX_MB = "EXACTC_CACHE_MAX_MB"
DEFAULT_MAX_MB = 4000  # a few dozen small exports, or one 1B-parameter checkpoint's
_TRASH = ".removed-"  # an entry renamed aside, to be deleted when no process holds it
_HELD: dict[Path, int] = {}  # the exports this process uses: a shared lock on each until it exits


def max_bytes() -> int:
    """The bound of the entries' total size: $EXACTC_CACHE_MAX_MB megabytes (10^6 bytes),
    else DEFAULT_MAX_MB; a CacheError if it is not a whole number."""
    text = os.environ.get(MAX_MB, "").strip()
    if not text:
        return DEFAULT_MAX_MB * 10**6
    if not text.isdigit():
        raise CacheError(f"{MAX_MB}={text}: give the cache's size bound in megabytes, a whole number "
                         f"(default {DEFAULT_MAX_MB})")
    return int(text) * 10**6


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _fields(st: os.stat_result) -> dict[str, int]:
    """What a file's stat says of it. The kernel sets the change time (ctime) on every
    write, truncation, chmod and utime, and no call sets it back: equal fields mean the
    file was not changed through the file system since they were recorded."""
    return {"size": st.st_size, "mode": stat.S_IMODE(st.st_mode), "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns, "inode": st.st_ino}


def _record(entry: Path, what: str) -> None:
    """Write `entry`'s manifest: `what` it is, and each of its files' stat fields and
    sha256. Called in the temporary folder, before the rename into place: an entry in
    place always has one."""
    files = {}
    for path in sorted(entry.rglob("*")):
        if path.is_file() and path.name != MANIFEST:
            files[path.relative_to(entry).as_posix()] = dict(_fields(path.stat()), sha256=_sha256(path))
    replace_file(entry / MANIFEST, json.dumps({"what": what, "files": files}, indent=1).encode())


def _manifest(entry: Path) -> dict | None:
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and isinstance(manifest.get("files"), dict) else None


def check_entry(entry: Path, needed: Sequence[str] = ()) -> str | None:
    """Why the cache entry `entry` must not be used (`needed`: files it must have), or
    None. Each file's stat fields are compared with its manifest's; the file is hashed
    only when its times or inode differ (a copied cache folder), and those fields are
    then recorded anew if the bytes are the same."""
    manifest = _manifest(entry)
    if manifest is None:
        return "it has no manifest" if not (entry / MANIFEST).exists() else "its manifest is not readable"
    files = manifest["files"]
    for name in needed:
        if name not in files:
            return f"{name} is not in its manifest"
    moved = {}
    for name, want in files.items():
        try:
            st = (entry / name).lstat()
        except OSError:
            return f"{name} is missing"
        have = _fields(st)
        if not stat.S_ISREG(st.st_mode) or have["size"] != want.get("size"):
            return f"{name} changed"
        if have["mode"] != want.get("mode"):
            return f"{name}'s mode is {have['mode']:o}, not {want.get('mode', 0):o}"
        if any(have[k] != want.get(k) for k in have):
            try:
                digest = _sha256(entry / name)
            except OSError as exc:
                return f"{name} cannot be read ({exc.strerror or exc})"
            if digest != want.get("sha256"):
                return f"{name} changed"
            moved[name] = dict(have, sha256=digest)
    if moved:  # the same bytes under new times: checked by their stat alone again next time
        try:
            replace_file(entry / MANIFEST, json.dumps(dict(manifest, files={**files, **moved}),
                                                             indent=1).encode())
        except OSError:
            pass  # a read-only entry is checked by hashing again next time; nothing is wrong with it
    return None


def _say(note: Callable[[str], None] | None, message: str) -> None:
    if note is not None:
        note(message)
    else:
        print(f"exactc: {message}", file=sys.stderr, flush=True)


def _lock(folder: Path, exclusive: bool = False) -> int | None:
    """A descriptor of `folder` holding a lock on it (shared: waits while a remover holds
    it; exclusive: None at once if anyone holds it), or None if it is gone. The lock
    goes with the folder's inode, through renames, until the descriptor is closed."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB if exclusive else fcntl.LOCK_SH)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _same(folder: Path, fd: int) -> bool:
    """Whether `folder` is still the folder `fd` was opened on (not removed or replaced)."""
    try:
        return os.stat(folder).st_ino == os.fstat(fd).st_ino
    except OSError:
        return False


def _hold(entry: Path) -> int | None:
    """A shared lock on the cache entry `entry` as it is now (a descriptor), or None if
    it is gone or was replaced while the lock was awaited."""
    fd = _lock(entry)
    if fd is not None and not _same(entry, fd):
        os.close(fd)
        return None
    return fd


def _keep_held(entry: Path, fd: int) -> None:
    """Hold `entry` until this process ends (the program's paths name it)."""
    earlier = _HELD.pop(entry, None)
    if earlier is not None:
        os.close(earlier)
    _HELD[entry] = fd


def _usable(entry: Path, needed: Sequence[str], note: Callable[[str], None] | None) -> int | None:
    """The cache entry `entry`, held (the descriptor: close it when done) and checked,
    its last use now; or None if there is none. One that fails its check is renamed
    aside and `note` says so on one line: the caller makes it again."""
    if not entry.is_dir():
        return None
    fd = _hold(entry)
    if fd is None:
        return None
    reason = check_entry(entry, needed)
    if reason is None:
        try:
            os.utime(entry)  # its last use: the size bound removes the least recently used first
        except OSError:
            pass
        return fd
    _say(note, f"cache entry {entry} failed its check ({reason}); rebuilding")
    _discard(entry, fd)
    return None


def _trash_name(entry: Path) -> Path:
    return entry.parent / f".{entry.name}{_TRASH}{os.getpid()}-{time.monotonic_ns()}"


def _discard(entry: Path, fd: int) -> None:
    """Rename the entry `fd` holds aside, in use or not (what it holds is wrong), and
    delete it if no one else holds it. Renamed only if it is still the one checked:
    another command may have put a rebuilt one in its place meanwhile."""
    trash = _trash_name(entry)
    try:
        if _same(entry, fd):
            os.rename(entry, trash)
    except OSError:
        pass
    finally:
        os.close(fd)
    _delete_if_free(trash)


def _size(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        try:
            total += path.lstat().st_size if not path.is_dir() else 0
        except OSError:
            pass
    return total


def _delete_if_free(folder: Path) -> int | None:
    """Delete `folder` if no process holds it: the bytes freed, or None."""
    fd = _lock(folder, exclusive=True)
    if fd is None:
        return None
    try:
        size = _size(folder)
        shutil.rmtree(folder, ignore_errors=True)
        return size
    finally:
        os.close(fd)


def _evict(entry: Path) -> int | None:
    """Remove the cache entry `entry` unless a command holds it: the bytes freed, or None.
    Renamed aside first, under an exclusive lock: a command that opens it meanwhile
    finds it gone (and rebuilds it), never half-deleted."""
    fd = _lock(entry, exclusive=True)
    if fd is None:
        return None
    trash = _trash_name(entry)
    try:
        if not _same(entry, fd):
            return None
        size = _size(entry)
        os.rename(entry, trash)
    except OSError:
        return None
    finally:
        os.close(fd)
    shutil.rmtree(trash, ignore_errors=True)
    return size


@dataclasses.dataclass(frozen=True)
class CacheEntry:
    path: Path
    size: int  # bytes
    last_use: float  # seconds since the epoch: the entry folder's modification time
    what: str


def cache_entries() -> list[CacheEntry]:
    """Every entry of exports/, builds/ and objects/ in the cache folder, least recently
    used first (not the temporary folders of builders, whose names begin with a dot)."""
    found = []
    for section in SECTIONS:
        folder = cache_dir() / section
        for entry in sorted(folder.iterdir()) if folder.is_dir() else ():
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            try:
                last_use = entry.stat().st_mtime
            except OSError:
                continue  # removed meanwhile
            manifest = _manifest(entry)
            what = str(manifest.get("what", "")) if manifest else "(no manifest: made by an older exactc)"
            found.append(CacheEntry(entry, _size(entry), last_use, what))
    return sorted(found, key=lambda e: e.last_use)


def _sweep_trash() -> int:
    """Delete the entries renamed aside that no process holds any more: the bytes freed."""
    freed = 0
    for section in SECTIONS:
        for trash in (cache_dir() / section).glob(f".*{_TRASH}*"):
            freed += _delete_if_free(trash) or 0
    return freed


def _reclaim(keep: Path) -> None:
    """Remove the least recently used entries until all fit in max_bytes(): never `keep`
    (the entry just added), nor one that a running command holds."""
    bound = max_bytes()
    _sweep_trash()
    entries = cache_entries()
    total = sum(e.size for e in entries)
    for e in entries:
        if total <= bound:
            break
        if e.path != keep and _evict(e.path) is not None:
            total -= e.size


def clear_cache() -> tuple[int, int, int]:
    """Remove every entry no command holds: (entries removed, bytes freed, entries kept
    because a command holds them)."""
    removed = kept = 0
    freed = _sweep_trash()
    for e in cache_entries():
        size = _evict(e.path)
        if size is None:
            kept += 1
        else:
            removed += 1
            freed += size
    return removed, freed, kept
