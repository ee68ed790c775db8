"""The table of `exactc plan --tune`: for each build (the compiler's executable and
version, the exported Makefile's default flags, the CPU), the layout timed fastest for each
nest signature. `--plan auto` reads it (autoplan.load_plan_option); the timing runs that
write it are the harness's (exactc/verify/tune.py). A table changes speed only: every
layout gives the reference's bits (docs/plans.md).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import time
from pathlib import Path
from typing import Any

TABLE_ENV = "EXACTC_TUNED"
TABLE_VERSION = 1


class TuneError(ValueError):
    """A tune table that cannot be read or written, or a request that cannot be tuned:
    one line, exit code 2."""


# ---- the table ------------------------------------------------------------------------


def table_path() -> Path | None:
    """$EXACTC_TUNED (empty: no table), else tune.json in the cache folder ($EXACTC_CACHE,
    else the user's), found without making it."""
    value = os.environ.get(TABLE_ENV)
    if value is not None:
        return Path(value) if value else None
    from exactc.runtime.toolchain import user_cache_dir

    root = os.environ.get("EXACTC_CACHE")
    return (Path(root) if root else user_cache_dir()) / "tune.json"


def cpu_name() -> str:
    """The CPU -march=native builds for: /proc/cpuinfo's model name, family and model
    (Linux), else what the platform module says."""
    fields = {}
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() in ("model name", "cpu family", "model") and key.strip() not in fields:
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    if "model name" in fields:
        return f"{fields['model name']} (family {fields.get('cpu family', '?')}, model {fields.get('model', '?')})"
    return platform.processor() or platform.machine() or "unknown"


def build_flags(cc: str, march: str = "native") -> tuple[str, ...]:
    """The exported Makefile's default CFLAGS for `cc` on this machine (or, for a
    compile-only check, on the CPU `march` names); STRICT is not among them: it goes on
    every compiler line apart."""
    from exactc.runtime.toolchain import wide_vectors

    return ("-O2", f"-march={march}", *wide_vectors(cc, march))


def build_identity(cc: str) -> str:
    """What a tuned layout was measured for: the compiler's executable (resolved, so `cc`
    and `gcc` name one compiler) and version, the default flags, the CPU."""
    from exactc.runtime.toolchain import compiler_version

    version = compiler_version(cc)
    name = Path(cc).name
    if version.split(" ", 1)[0] == name:  # "cc (Debian 12.2.0-14) 12.2.0": the name invoked
        version = version.split(" ", 1)[1] if " " in version else ""
    executable = os.path.realpath(shutil.which(cc) or cc)
    return f"{executable} {version} | {' '.join(build_flags(cc))} | {cpu_name()}"


def read_table(path: Path) -> dict:
    """The table at `path`, its structure checked (TuneError otherwise)."""
    from exactc.exporter import jsonfile

    try:
        table = jsonfile.load(path)
    except jsonfile.JSONFileError as err:
        raise TuneError(f"{path}: {err}; remove it or run `exactc plan --tune` again") from None
    builds = table.get("builds") if isinstance(table, dict) else None
    if not isinstance(table, dict) or table.get("version") != TABLE_VERSION or not isinstance(builds, dict):
        raise TuneError(f"{path}: not an exactc tune table of version {TABLE_VERSION}; remove it or run "
                        "`exactc plan --tune` again")
    for build, entry in builds.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("nests"), dict):
            raise TuneError(f"{path}: build {build!r} has no nests object")
    return table


def layouts_of(table: dict, identity: str, path: Path) -> dict:
    """The tuned layouts (nest signature -> Layout) of one build of a table."""
    from exactc.exporter.kernels.plans import PlanError, parse_nest_plan

    out = {}
    for signature, entry in table["builds"].get(identity, {"nests": {}})["nests"].items():
        try:
            out[signature] = parse_nest_plan(signature, {"layout": entry["layout"]}).layout
        except (PlanError, KeyError, TypeError) as err:
            raise TuneError(f"{path}: the entry {signature!r} has no valid layout ({err})") from None
    return out


def tuned_layouts(cc: str | None = None) -> dict:
    """The table's layouts for the build `cc` (default $CC, else cc) gives; {} when there
    is no table, or the compiler is not there to name the build."""
    from exactc.runtime.toolchain import CompileError

    path = table_path()
    if path is None or not path.is_file():
        return {}
    table = read_table(path)
    try:
        identity = build_identity(cc or os.environ.get("CC") or "cc")
    except CompileError:
        return {}
    return layouts_of(table, identity, path)


def write_table(path: Path, identity: str, measured: list[Any]) -> None:
    """Merge the winners of one tuning run into the table at `path` (made if absent)."""
    from exactc.exporter.files import replace_file

    table = read_table(path) if path.is_file() else {"version": TABLE_VERSION, "builds": {}}
    entry = table["builds"].setdefault(identity, {"nests": {}})
    for m in measured:
        entry["nests"][m.signature] = {
            "layout": m.winner.to_json(), "seconds": {label: round(s, 9) for label, s in m.seconds.items()},
            "measured": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, (json.dumps(table, indent=1, sort_keys=True) + "\n").encode())
