"""The cache folder's built programs (programs.py): each entry checked against its
manifest on use and rebuilt, with one line, when it fails; the least recently used
removed first when the entries outgrow $EXACTC_CACHE_MAX_MB, never one that a running
command holds; `exactc cache --list | --clear`.

Every breakage here is made in a real entry of the smallest GPT (test_bad_inputs.SMALL),
built once for the module and copied for each test.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exactc import programs
from test_bad_inputs import SMALL

RUN = ("run", "gpt", "--entry", "forward", "--dtype", "f32", *(f"--set={k}={v}" for k, v in SMALL["gpt"].items()),
       "--backend", "c", "--cc", "gcc")


def exactc(cache: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "exactc.cli", *args], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, EXACTC_CACHE=str(cache), **(env or {})))


def entry(cache: Path, section: str = "exports") -> Path:
    (found,) = [p for p in (cache / section).iterdir() if not p.name.startswith(".")]
    return found


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[Path, bytes]:
    """A cache folder holding the small GPT's export, build and objects, and the logits
    its program wrote."""
    cache = tmp_path_factory.mktemp("pristine") / "cache"
    out = cache.parent / "out"
    done = exactc(cache, *RUN, "-o", str(out))
    assert done.returncode == 0, done.stderr
    return cache, (out / "logits.npy").read_bytes()


@pytest.fixture
def cache(pristine, tmp_path) -> Path:
    """A copy of the pristine cache, used once: its manifests then hold this copy's
    inodes and times, so that what a test changes is judged by stat first."""
    copy = tmp_path / "cache"
    shutil.copytree(pristine[0], copy)
    done = exactc(copy, *RUN, "-o", str(tmp_path / "first"))
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return copy


def run_again(cache: Path, out: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    done = exactc(cache, *RUN, "-o", str(out))
    return done, done.stderr.strip().splitlines()


def flip_in_place(path: Path, offset: int, mask: int) -> None:
    """XOR one byte of `path` in place, then set its times back: the size and the
    modification time are as they were."""
    before = path.stat()
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ mask]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def tensor_offset(weights: Path, name: str) -> int:
    """Where `name`'s first element starts in the safetensors file."""
    data = weights.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    return 8 + length + json.loads(data[8:8 + length])[name]["data_offsets"][0]


def test_cache_a_weights_byte_flipped_with_its_time_restored_is_caught_and_rebuilt(pristine, cache, tmp_path):
    weights = entry(cache) / "weights.safetensors"
    # The exponent's top bit of ln_f's first scale: every position's logits change with it.
    flip_in_place(weights, tensor_offset(weights, "transformer.ln_f.weight") + 3, 0x40)
    done, lines = run_again(cache, tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert lines == [f"exactc run: cache entry {entry(cache)} failed its check (weights.safetensors changed); "
                     "rebuilding"]
    assert (tmp_path / "out" / "logits.npy").read_bytes() == pristine[1]
    done, lines = run_again(cache, tmp_path / "again")  # the rebuilt entry passes
    assert done.returncode == 0 and lines == [], done.stderr
    assert not [p for p in (cache / "exports").iterdir() if p.name.startswith(".")], "a set-aside entry was left"


def empty(path: Path) -> None:
    path.write_bytes(b"")


def garbage(path: Path) -> None:
    path.write_bytes(b"\x7fELF but not a program\n" * 8)


def not_executable(path: Path) -> None:
    path.chmod(0o644)


def no_manifest(path: Path) -> None:
    (path.parent / programs.MANIFEST).unlink()


@pytest.mark.parametrize("section,breakage,reason", [
    ("exports", empty, "model changed"),
    ("exports", garbage, "model changed"),
    ("exports", not_executable, "model's mode is 644, not {mode:o}"),
    ("exports", no_manifest, "it has no manifest"),
    ("builds", garbage, "model changed"),  # what make copies into a new export
], ids=lambda v: getattr(v, "__name__", None))
def test_cache_a_broken_program_is_rebuilt_on_one_line(pristine, cache, tmp_path, section, breakage, reason):
    broken = entry(cache, section)
    mode = json.loads((broken / programs.MANIFEST).read_text())["files"]["model"]["mode"]
    reason = reason.format(mode=mode)
    breakage(broken / "model")
    if section == "builds":  # the export is made again, and its build taken from builds/
        shutil.rmtree(entry(cache))
    done, lines = run_again(cache, tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert lines == [f"exactc run: cache entry {broken} failed its check ({reason}); rebuilding"]
    assert (tmp_path / "out" / "logits.npy").read_bytes() == pristine[1]
    assert programs.check_entry(entry(cache, section), ("model",)) is None


def test_a_program_that_cannot_be_run_fails_on_one_line(tmp_path):
    """What the cache's check keeps from `exactc run`, said by the Program itself: a
    file that is not a program, or not executable, is a ProgramRunError, not an OSError."""
    program = programs.Program(tmp_path, programs.Build())
    garbage(program.path)
    program.path.chmod(0o755)
    for words in ("Exec format error", "Permission denied"):
        with pytest.raises(programs.ProgramRunError, match=f"^{program.path} cannot be run: {words}$"):
            program.run_or_fail([(tmp_path, tmp_path / "out")])
        not_executable(program.path)


# ---- the size bound ----------------------------------------------------------------------------


HOLD = """
import sys
from pathlib import Path
from exactc import programs
fd = programs._hold(Path(sys.argv[1]))
print("held" if fd is not None else "gone", flush=True)
sys.stdin.read()
"""


def holder(folder: Path, cache: Path) -> subprocess.Popen:
    """Another process holding the entry `folder`, as a command that uses it does,
    until its stdin closes."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=dict(os.environ, EXACTC_CACHE=str(cache)))
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_cache_the_least_recently_used_entries_go_first_when_one_is_added(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("EXACTC_CACHE", str(cache))
    monkeypatch.delenv(programs.MAX_MB, raising=False)
    blob, small = tmp_path / "blob", tmp_path / "small"
    blob.write_bytes(b"\1" * 400_000)
    small.write_bytes(b"\2" * 100_000)
    now = time.time()
    # a the newest, b the oldest, c between them; e older still, but held by a running command
    for name, source, age in (("a", blob, 100), ("b", blob, 400), ("c", blob, 300), ("e", small, 500)):
        programs._store(cache / "builds" / name, {"blob": source}, f"entry {name}")
        os.utime(cache / "builds" / name, (now - age, now - age))
    assert [e.path.name for e in programs.cache_entries()] == ["e", "b", "c", "a"]
    proc = holder(cache / "builds" / "e", cache)
    try:
        monkeypatch.setenv(programs.MAX_MB, "1")  # 1.7 MB with d: b and c must go for it to fit
        programs._store(cache / "builds" / "d", {"blob": blob}, "entry d")
    finally:
        proc.communicate("")
    assert sorted(p.name for p in (cache / "builds").iterdir()) == ["a", "d", "e"]
    assert sum(e.size for e in programs.cache_entries()) <= 1_000_000


def test_cache_an_entry_larger_than_the_bound_is_kept_when_added(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("EXACTC_CACHE", str(cache))
    monkeypatch.setenv(programs.MAX_MB, "0")
    (tmp_path / "blob").write_bytes(b"\1" * 1000)
    for name in ("a", "b"):
        programs._store(cache / "builds" / name, {"blob": tmp_path / "blob"}, f"entry {name}")
    assert [e.path.name for e in programs.cache_entries()] == ["b"]


def test_cache_a_malformed_bound_is_refused_on_one_line(tmp_path):
    for command in (("cache", "--list"), (*RUN, "-o", str(tmp_path / "out"))):
        done = exactc(tmp_path / "cache", *command, env={programs.MAX_MB: "4 GB"})
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and lines == [
            f"exactc {command[0]}: error: EXACTC_CACHE_MAX_MB=4 GB: give the cache's size bound in megabytes, "
            f"a whole number (default {programs.DEFAULT_MAX_MB})"], done.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache" / "exports").exists()


# ---- exactc cache --------------------------------------------------------------------------------

USE = """
import sys
from exactc.exporter import export
from exactc import programs
from test_bad_inputs import SMALL
spec = export.ExportSpec("gpt", "forward", "f32", 0, SMALL["gpt"], plan="auto", cc="gcc")  # as `exactc run` asks
program = programs.exported(spec, programs.Build(cc="gcc"))
print(program.root, flush=True)
sys.stdin.read()  # the program runs after the cache is cleared under it
program.run_or_fail([(program.root / "conformance" / "inputs", program.root.parent.parent.parent / "used")])
"""


def test_cache_command_lists_and_clears_but_not_what_a_running_command_uses(cache, tmp_path):
    listed = exactc(cache, "cache", "--list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.strip().splitlines()
    assert len(lines) == 4 and lines[-1].startswith(f"3 entries in {cache}, ")
    export_line = next(line for line in lines if line.startswith("exports/"))
    size = programs._size(entry(cache)) / 1e6
    assert f"  {size:.1f} MB  used " in export_line and export_line.endswith(
        "export: gpt.forward at f32, make CC=gcc OPENMP=1")
    assert {line.split("/")[0] for line in lines[:3]} == {"exports", "builds", "objects"}
    env = dict(os.environ, EXACTC_CACHE=str(cache), PYTHONPATH=os.pathsep.join([str(Path(__file__).parent),
                                                                                 os.environ.get("PYTHONPATH", "")]))
    user = subprocess.Popen([sys.executable, "-c", USE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert Path(user.stdout.readline().strip()) == entry(cache)
        cleared = exactc(cache, "cache", "--clear")
        assert cleared.returncode == 0, cleared.stderr
        assert cleared.stdout.startswith(f"removed 2 entries from {cache}, freed ")
        assert cleared.stdout.strip().endswith("; kept 1 that a running command uses")
    finally:
        _, err = user.communicate("", timeout=600)
    assert user.returncode == 0, err  # its program ran from the entry kept
    assert (tmp_path / "used" / "logits.npy").is_file()
    size = programs._size(entry(cache))
    cleared = exactc(cache, "cache", "--clear")
    assert cleared.stdout.strip() == f"removed 1 entry from {cache}, freed {size / 1e6:.1f} MB"
    assert exactc(cache, "cache", "--list").stdout.strip().startswith(f"0 entries in {cache}, 0.0 MB of at most")
    assert sorted(os.listdir(cache / "exports")) == []
