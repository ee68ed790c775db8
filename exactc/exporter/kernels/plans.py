"""Plans: a JSON file that gives a kernel's nests their layout and thread split.

The schema is docs/plans.md. `load_plan` reads and type-checks the JSON, and
`validate_plan` checks it against a kernel, before anything is printed: every error
names the nest, the field and the rule, e.g.

    plan: nest linear, field layout.lanes.k: k is a reduction axis; lanes apply to
    parallel axes only (a reduction runs in index order, always)

`exactc plan --show PRIMITIVE --dtype T --shape x=3,4 ...` lists a kernel's nests with
their axes and the legal choices; `exactc plan --check PLAN.json PRIMITIVE ...` validates
a plan file against that kernel (show_command, add_arguments; cli.py registers them).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping

from exactc.exporter import jsonfile
from exactc.exporter.kernels.ir import REDUCE, Kernel
from exactc.exporter.kernels.layouts import (
    LANE_WIDTHS,
    MAX_LANE_AXES,
    SUM_LANES,
    SUM_PARTS,
    WIDE_LANE_WIDTHS,
    Layout,
    LayoutError,
    integer_sum_rule,
    packable,
    validate_layout,
)
from exactc.exporter.kernels.splits import Split, validate_split

PlanError = LayoutError  # one error type: nest, field, rule

_LAYOUT_FIELDS = ("order", "tiles", "lanes", "packs", "blocks", "sums")
_SPLIT_FIELDS = ("depth", "pieces")


@dataclasses.dataclass(frozen=True)
class NestPlan:
    layout: Layout = Layout()
    split: Split | None = None
    # The layout printed instead where the C is compiled with EXACTC_NARROW_LANES
    # (exactc_rt.h: a target with 16 vector registers where the layout's lanes spill),
    # and the one printed where it is compiled with EXACTC_WIDE_LANES (gcc with
    # AVX-512's 32 registers, where more rows in lanes fit): each differs from `layout`
    # in its outer lanes only (check_variant), so the split and the packed panels are
    # the same. Every layout gives the same bits.
    narrow: Layout | None = None
    wide: Layout | None = None

    def variants(self) -> list[tuple[str, Layout]]:
        """The target variants the plan has, by field name, in the order the C tests them."""
        return [(field, layout) for field, layout in (("narrow", self.narrow), ("wide", self.wide))
                if layout is not None]

    def to_json(self) -> dict:
        out: dict = {"layout": self.layout.to_json()}
        if self.split is not None:
            out["split"] = self.split.to_json()
        for field, layout in self.variants():
            out[field] = layout.to_json()
        return out


@dataclasses.dataclass(frozen=True)
class Plan:
    """Nest name -> its plan; nests not named print plain."""

    nests: tuple[tuple[str, NestPlan], ...] = ()

    def for_nest(self, name: str) -> NestPlan | None:
        for nest, plan in self.nests:
            if nest == name:
                return plan
        return None

    def for_kernel(self, kernel: Kernel, name: str) -> tuple[Plan | None, set[str]]:
        """This plan, given for a whole program, applied to its kernel `name`: the
        entries named `<nest>` (every kernel with that nest) or after a nest's function
        (`function_name`: this kernel only, and it wins), validated; and the entry names
        that applied."""
        names = {n.name for n in kernel.nests}
        functions = {function_name(name, kernel.primitive, n.name): n.name for n in kernel.nests}
        chosen: dict[str, NestPlan] = {}
        used: set[str] = set()
        for entry, nest_plan in self.nests:
            if entry in names and entry not in chosen:
                chosen[entry] = nest_plan
                used.add(entry)
        for entry, nest_plan in self.nests:
            if entry in functions:
                chosen[functions[entry]] = nest_plan
                used.add(entry)
        if not chosen:
            return None, used
        plan = Plan(tuple((n.name, chosen[n.name]) for n in kernel.nests if n.name in chosen))
        validate_plan(kernel, plan)
        return plan, used

    def entry_names(self) -> tuple[str, ...]:
        """The names the plan gives entries to; each must apply somewhere."""
        return tuple(name for name, _ in self.nests)

    def to_json(self) -> dict:
        return {"nests": {name: plan.to_json() for name, plan in self.nests}}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=False)


def function_name(kernel: str, primitive: str, nest: str) -> str:
    """The C function of a nest of the kernel named `kernel`: the kernel's name for the
    nest named after its primitive (most kernels have only that one), else the name with
    the nest's own part: rope's nests rope_table and rope_rotate in the kernel rope_q are
    rope_q_table and rope_q_rotate."""
    if nest == primitive:
        return kernel
    return f"{kernel}_{nest[len(primitive) + 1:] if nest.startswith(primitive + '_') else nest}"


# ---- reading ---------------------------------------------------------------------------


def _int(value, nest: str, field: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(nest, field, f"{what} must be an integer, not {value!r}")
    return value


def _axis_map(value, nest: str, field: str, what: str) -> tuple[tuple[str, int], ...]:
    if not isinstance(value, Mapping):
        raise PlanError(nest, field, f"give an object axis -> {what}, not {value!r}")
    return tuple((str(k), _int(v, nest, f"{field}.{k}", what)) for k, v in value.items())


def _sums(value, nest: str, field: str) -> tuple[tuple[str, int, int], ...]:
    """{axis: {"lanes": W, "parts": P}} (either key optional, 1 by default)."""
    if not isinstance(value, Mapping):
        raise PlanError(nest, field, f"give an object axis -> {{\"lanes\": W, \"parts\": P}}, not {value!r}")
    out = []
    for axis, spec in value.items():
        where = f"{field}.{axis}"
        if not isinstance(spec, Mapping) or set(spec) - {"lanes", "parts"}:
            raise PlanError(nest, where, f"give an object with 'lanes' and/or 'parts', not {spec!r}")
        out.append((str(axis), _int(spec.get("lanes", 1), nest, where, "lanes"),
                    _int(spec.get("parts", 1), nest, where, "parts")))
    return tuple(out)


def _names(value, nest: str, field: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PlanError(nest, field, f"give a list of names, not {value!r}")
    return tuple(value)


def _layout(raw, nest: str, field: str) -> Layout:
    if not isinstance(raw, Mapping):
        raise PlanError(nest, field, f"give an object with fields {', '.join(_LAYOUT_FIELDS)}")
    unknown = sorted(set(raw) - set(_LAYOUT_FIELDS))
    if unknown:
        raise PlanError(nest, f"{field}.{unknown[0]}", f"unknown field; a layout has {', '.join(_LAYOUT_FIELDS)}")
    return Layout(
        order=_names(raw.get("order", []), nest, f"{field}.order"),
        tiles=_axis_map(raw.get("tiles", {}), nest, f"{field}.tiles", "tile size"),
        lanes=_axis_map(raw.get("lanes", {}), nest, f"{field}.lanes", "lane width"),
        packs=_names(raw.get("packs", []), nest, f"{field}.packs"),
        blocks=_axis_map(raw.get("blocks", {}), nest, f"{field}.blocks", "block size"),
        sums=_sums(raw.get("sums", {}), nest, f"{field}.sums"),
    )


def parse_nest_plan(nest: str, value: Any) -> NestPlan:
    if not isinstance(value, Mapping):
        raise PlanError(nest, "nests." + nest, "give an object with 'layout' and/or 'split'")
    unknown = sorted(set(value) - {"layout", "split", "narrow", "wide"})
    if unknown:
        raise PlanError(nest, unknown[0], "unknown field; a nest's plan has 'layout', 'split', 'narrow' and 'wide'")
    layout = _layout(value.get("layout", {}), nest, "layout")
    narrow = _layout(value["narrow"], nest, "narrow") if "narrow" in value else None
    wide = _layout(value["wide"], nest, "wide") if "wide" in value else None
    split = None
    if "split" in value:
        raw = value["split"]
        if not isinstance(raw, Mapping) or not set(_SPLIT_FIELDS) <= set(raw) <= {*_SPLIT_FIELDS, "of"}:
            raise PlanError(nest, "split", "give an object with exactly 'depth' and 'pieces' (and 'of' for "
                                           "an axis that follows the run-time length)")
        pieces = raw["pieces"]
        if not isinstance(pieces, list) or not all(isinstance(p, list) and len(p) == 2 for p in pieces):
            raise PlanError(nest, "split.pieces", "give a list of [lo, hi] pairs")
        split = Split(
            depth=_int(raw["depth"], nest, "split.depth", "depth"),
            pieces=tuple(
                (_int(lo, nest, f"split.pieces.{i}", "lo"), _int(hi, nest, f"split.pieces.{i}", "hi"))
                for i, (lo, hi) in enumerate(pieces)
            ),
            of=_int(raw["of"], nest, "split.of", "of") if "of" in raw else 0,
        )
    return NestPlan(layout, split, narrow, wide)


def parse_plan(value: Any) -> Plan:
    """A Plan from decoded JSON; the types of every field are checked."""
    if not isinstance(value, Mapping) or set(value) - {"nests", "comment"} or "nests" not in value:
        raise PlanError("-", "(top)", "a plan is an object {\"nests\": {...}} (and an optional \"comment\")")
    nests = value["nests"]
    if not isinstance(nests, Mapping):
        raise PlanError("-", "nests", "give an object nest name -> nest plan")
    return Plan(tuple((str(name), parse_nest_plan(str(name), v)) for name, v in nests.items()))


def load_plan(path: str | Path) -> Plan:
    """The plan in a JSON file, read strictly (exporter/jsonfile.py: UTF-8, no key twice)."""
    try:
        value = jsonfile.load(path)
    except jsonfile.JSONFileError as err:
        raise PlanError("-", "(file)", str(err)) from None
    return parse_plan(value)


def plan_text(plan: Any) -> str:
    """What identifies a loaded plan in a cache key: "" for none, "auto", or the plan's JSON."""
    if plan is None:
        return ""
    return plan.dumps() if isinstance(plan, Plan) else plan.text()


def validate_plan(kernel: Kernel, plan: Plan) -> None:
    """Raise PlanError unless every nest the plan names is in `kernel` and its layout and
    split are legal."""
    nests = {n.name: n for n in kernel.nests}
    for name, nest_plan in plan.nests:
        if name not in nests:
            raise PlanError(
                name, f"nests.{name}", f"the kernel {kernel.primitive} has no nest {name}; its nests are "
                + ", ".join(nests)
            )
        validate_layout(nests[name], nest_plan.layout, kernel.buffers)
        if nest_plan.split is not None:
            validate_split(nests[name], nest_plan.layout, nest_plan.split)
        for field, variant in nest_plan.variants():
            check_variant(name, field, nest_plan.layout, variant)
            validate_layout(nests[name], variant, kernel.buffers)
            if nest_plan.split is not None:
                validate_split(nests[name], variant, nest_plan.split)


def check_variant(nest: str, field: str, layout: Layout, variant: Layout) -> None:
    """A narrow or wide layout keeps the layout's loop order, tiles, packs, blocks, sums
    and innermost lane (the split's axis and the panels a program lays out at load are
    then the same for both) and changes only the outer lanes' widths."""
    same = (variant.order == layout.order and variant.tiles == layout.tiles and variant.packs == layout.packs
            and variant.blocks == layout.blocks and variant.sums == layout.sums and bool(layout.lanes)
            and variant.lanes[-1:] == layout.lanes[-1:]
            and [a for a, _ in variant.lanes] == [a for a, _ in layout.lanes])
    if not same:
        raise PlanError(nest, field, f"a {field} layout changes only the widths of the layout's outer lanes "
                                     "(the same order, tiles, packs, blocks, sums and innermost lane)")


# ---- exactc plan ---------------------------------------------------------------------


def describe_choices(kernel: Kernel) -> str:
    """A kernel's nests, their axes and the legal layout and split choices."""
    out = [f"kernel {kernel.primitive} at {kernel.site}"]
    for nest in kernel.nests:
        parallel = ", ".join(a.text() for a in nest.axes)
        out.append(f"nest {nest.name}")
        out.append(f"  parallel axes (outermost first): {parallel}")
        inner = nest.body_axes()
        if inner:
            out.append("  body loops: " + ", ".join(f"{a.kind} {a.text()}" for a in inner))
        names = [a.name for a in nest.axes]
        out.append(f"  layout.order: any order of {', '.join(names)}")
        out.append(f"  layout.tiles: {{axis: size >= 1}} for axes {', '.join(names)}")
        out.append(
            f"  layout.lanes: {{axis: width in {LANE_WIDTHS.start}..{LANE_WIDTHS.stop - 1}}}, up to "
            f"{MAX_LANE_AXES} of {', '.join(names)} (the last innermost); one axis alone may also take "
            f"{', '.join(map(str, WIDE_LANE_WIDTHS))}"
        )
        first_lane = Layout(lanes=((nest.axes[-1].name, 8),))
        packs = [b for b in nest.reads() if packable(nest, first_lane, b, {x.name: x for x in kernel.buffers}) is None]
        out.append(
            "  layout.packs: "
            + (", ".join(packs) + f" (with lanes on {nest.axes[-1].name})" if packs else "none with lanes on "
               + nest.axes[-1].name)
        )
        reductions = [a.name for a in inner if a.kind == REDUCE]
        out.append(
            "  layout.blocks: "
            + (f"{{axis: size >= 1}} for reductions {', '.join(reductions)}" if reductions else "none (no reduction)")
        )
        sums = [a for a in reductions if integer_sum_rule(nest, a) is None]
        out.append(
            "  layout.sums: "
            + (f"{{axis: {{lanes: 1..{SUM_LANES.stop - 1}, parts: 1..{SUM_PARTS.stop - 1}}}}} for integer sums "
               f"{', '.join(sums)} (without lanes)" if sums else "none (no integer sum)")
        )
        depths = ", ".join(f"{d} ({a.text()} in the nest's order)" for d, a in enumerate(nest.axes))
        out.append(f"  split.depth: {depths}; the depth counts the loops of layout.order")
        out.append("  split.pieces: [[lo, hi], ...] covering [0, extent) exactly once (empty pieces allowed)")
        out.append("  split.of: N > 0 when the axis follows the run-time length T: the pieces cover [0, N) and")
        out.append("            run [E * lo / N, E * hi / N) of the extent E at the length the program runs")
    return "\n".join(out)
