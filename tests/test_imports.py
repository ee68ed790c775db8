"""The floors of docs/design.md, read from the imports: a module imports only from its own
floor or the ones below it, the reference backend and the kernel lowering never import
each other (principle 1), and no modules import each other in a circle.

Every import counts, those inside functions too: an import put off to call time is still
a dependency. `from package import module` is an import of that module, not of the
package's __init__.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import exactc

PACKAGE = Path(exactc.__file__).parent

# From the bottom: (floor, the modules on it by dotted prefix). A module takes the floor of
# its longest matching prefix.
FLOORS = [
    ("runtime", ("exactc", "exactc.runtime")),
    ("exporter", ("exactc.exporter",)),
    ("commands", ("exactc.commands", "exactc.embed", "exactc.generate", "exactc.library", "exactc.plan", "exactc.programs",
                  "exactc.serve", "exactc.tokenizer_bin", "exactc.train")),
    ("harness", ("exactc.verify", "exactc.strategies", "exactc.mutants")),
    ("face", ("exactc.cli", "exactc.__main__")),
]
# The package's own namespace names the application API (exactc.Program,
# exactc.SentenceEmbedder), imported on first use of the name (exactc/__init__.py's
# __getattr__): that one edge, from the package to the module that defines them, is no
# import of a floor below by one above, and `import exactc` itself loads nothing
# (test_importing_the_package_loads_no_other_module).
LAZY_EXPORTS = {("exactc", "exactc.library"), ("exactc", "exactc.embed")}
# Two implementations of docs/semantics.md, written apart: neither may import the other.
APART = ("exactc.exporter.reference", "exactc.exporter.kernels")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> list[tuple[str, int]]:
    """The exactc modules `name` imports, each with the line of its first import."""
    found: dict[str, int] = {}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
            targets = submodules if len(submodules) == len(node.names) else [base, *submodules]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.startswith("exactc") and target != name and (name, target) not in LAZY_EXPORTS:
                found.setdefault(target, node.lineno)
    return sorted(found.items())


def floor(name: str) -> int:
    level, longest = -1, -1
    for index, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > longest:
                level, longest = index, len(prefix)
    return level


def graph() -> dict[str, list[tuple[str, int]]]:
    found = modules()
    return {name: imports(name, path, set(found)) for name, path in found.items()}


def test_every_module_has_a_floor():
    assert [name for name in modules() if floor(name) < 0] == []


def back_arrows(edges: dict[str, list[tuple[str, int]]]) -> list[str]:
    out = []
    for name, targets in edges.items():
        for target, line in targets:
            if floor(target) > floor(name):
                out.append(f"{name} (line {line}, floor {FLOORS[floor(name)][0]}) imports {target} "
                           f"(floor {FLOORS[floor(target)][0]})")
            apart = [side for side in APART if name.startswith(side)]
            if apart and any(target.startswith(side) for side in APART if side != apart[0]):
                out.append(f"{name} (line {line}) imports {target}: the reference and the lowering stay apart")
    return out


def circles(edges: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w, _ in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_from_a_floor_above_its_own():
    assert back_arrows(graph()) == []


def test_no_modules_import_each_other_in_a_circle():
    assert circles(graph()) == []


@pytest.mark.parametrize("edges,words", [
    ({"exactc.exporter.graph": [("exactc.verify.build", 3)], "exactc.verify.build": []},
     "exactc.exporter.graph (line 3, floor exporter) imports exactc.verify.build (floor harness)"),
    ({"exactc.exporter.reference.ops": [("exactc.exporter.kernels.lower", 9)], "exactc.exporter.kernels.lower": []},
     "the reference and the lowering stay apart"),
])
def test_a_back_arrow_is_named_with_its_line(edges, words):
    assert any(words in line for line in back_arrows(edges))


def test_a_circle_is_named_whole():
    edges = {"exactc.a": [("exactc.b", 1)], "exactc.b": [("exactc.c", 1)], "exactc.c": [("exactc.a", 1)],
             "exactc.d": [("exactc.a", 1)]}
    assert circles(edges) == [["exactc.a", "exactc.b", "exactc.c"]]


def test_from_a_package_import_a_module_is_that_module(tmp_path):
    path = tmp_path / "exactc" / "x" / "y.py"
    path.parent.mkdir(parents=True)
    path.write_text("from exactc.x import z\nfrom exactc.x import Thing\nfrom . import z\n")
    known = {"exactc", "exactc.x", "exactc.x.y", "exactc.x.z"}
    assert imports("exactc.x.y", path, known) == [("exactc.x", 2), ("exactc.x.z", 1)]


def test_importing_the_package_loads_no_other_module():
    """exactc.Program and exactc.SentenceEmbedder come from exactc.library on first use:
    `import exactc` loads no other exactc module, and the names resolve."""
    code = ("import sys, exactc; before = sorted(m for m in sys.modules if m.startswith('exactc')); "
            "assert exactc.Program.__module__ == 'exactc.library'; print(before)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "['exactc']", done.stdout + done.stderr
