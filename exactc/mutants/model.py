"""What a mutant and a check are.

A mutant is one small, real mistake in exactc's own source: a file, an anchor (text that
must occur exactly once in it) and its replacement. It is applied to a temporary copy of
the tree, never to the working tree. A check is a named pytest selection; a mutant lists
the checks expected to catch it, and the runner reports which did.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path


class CatalogError(RuntimeError):
    """A mutant that no longer fits the source (its anchor is gone or ambiguous)."""


@dataclasses.dataclass(frozen=True)
class Check:
    """A named pytest selection, run in the mutated copy."""

    name: str
    paths: tuple[str, ...]  # test files, relative to the tree
    select: str = ""  # a pytest -k expression, empty for all

    def pytest_args(self) -> list[str]:
        args = list(self.paths)
        if self.select:
            args += ["-k", self.select]
        return args


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One deliberate mistake and the checks that must catch it."""

    name: str
    description: str
    path: str  # file relative to the checkout, e.g. exactc/exporter/graph.py
    anchor: str  # exact text, occurring once
    replacement: str
    checks: tuple[str, ...]  # names in CHECKS
    family: str = ""
    # Paths that must exist for the mutant to apply (its feature exists); when one is
    # missing the outcome is "does not apply", not an error.
    requires: tuple[str, ...] = ()
    # What the CPU must have for the mistake to show, as macros gcc -march=native
    # predefines on it ("__AVX512F__"; "__AVXVNNI__|__AVX512VNNI__" for either): a mistake
    # in code compiled only for AVX-512 cannot be seen on a CPU without it, and is "does
    # not apply" there, not NOT CAUGHT.
    cpu: tuple[str, ...] = ()
    # The same mistake made in other files too, each (path, anchor, replacement): a mistake
    # both backends share (the C runtime and its numpy reference written the same wrong
    # way), which only an outside oracle can see.
    also: tuple[tuple[str, str, str], ...] = ()

    def edits(self) -> list[tuple[str, str, str]]:
        """Every (path, anchor, replacement) this mutant makes, its own file's first."""
        return [(self.path, self.anchor, self.replacement), *self.also]

    def apply(self, root: Path) -> None:
        """Patch the copy at `root`; a missing or ambiguous anchor is a CatalogError."""
        for path, anchor, replacement in self.edits():
            self._apply_one(root, path, anchor, replacement)

    def _apply_one(self, root: Path, path: str, anchor: str, replacement: str) -> None:
        target = root / path
        if not target.exists():
            raise CatalogError(f"mutant {self.name}: file {path} does not exist")
        text = target.read_text()
        count = text.count(anchor)
        if count != 1:
            where = "no longer occurs" if count == 0 else f"occurs {count} times"
            raise CatalogError(f"mutant {self.name}: its anchor {anchor[:60]!r} {where} in {path}; update the catalog")
        target.write_text(text.replace(anchor, replacement))

    def applies(self, root: Path) -> bool:
        return not self.missing(root)

    def missing(self, root: Path) -> list[str]:
        """What this mutant needs and the copy at `root` or this CPU lacks."""
        from exactc.runtime.toolchain import native_macros

        gone = [p for p in self.requires if not (root / p).exists()]
        lacking = [need for need in self.cpu if not set(need.split("|")) & native_macros("gcc")]
        return gone + [f"a CPU whose gcc -march=native defines {' or '.join(need.split('|'))}" for need in lacking]
