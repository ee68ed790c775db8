"""Plan files (exporter/kernels/plans.py): a nest's plan read field by field, a program's
plan applied to one kernel, every field refused by nest and field, the narrow and wide
variants' rule, and `exactc plan` in process."""

from __future__ import annotations

import argparse
import importlib
import json

import pytest

from exactc.exporter.kernels import splits
from exactc.exporter.kernels.layouts import Layout
from exactc.exporter.kernels.lower import lower
from exactc.exporter.kernels.autoplan import load_plan_option
from exactc.exporter.kernels.plans import NestPlan, Plan, PlanError, describe_choices, parse_plan, validate_plan
from exactc.plan import add_arguments, show_command
from exactc.exporter.primitives import PrimitiveError

from test_cli import run_cli
from test_layouts import ADD

# ---- plan files: a nest's plan read field by field (kernels/plans.py parse_nest_plan)


def test_a_nest_plan_reads_its_narrow_and_wide_layouts_and_refuses_each_bad_field_by_name():
    from exactc.exporter.kernels.plans import PlanError, parse_plan

    plan = parse_plan({"nests": {"linear": {"layout": {"lanes": {"m": 8}}, "narrow": {"lanes": {"m": 4}},
                                            "wide": {"lanes": {"m": 16}},
                                            "split": {"depth": 0, "pieces": [[0, 1], [1, 2]], "of": 2}}}})
    assert plan.nests == (("linear", NestPlan(Layout(lanes=(("m", 8),)), splits.Split(0, ((0, 1), (1, 2)), of=2),
                                               Layout(lanes=(("m", 4),)), Layout(lanes=(("m", 16),)))),)
    for nest, message in (
            ({"zz": 1, "yy": 2}, "field yy: unknown field; a nest's plan has 'layout', 'split', 'narrow' and 'wide'"),
            ({"split": {"depth": 0, "pieces": [[0, 1, 2]]}}, "field split.pieces: give a list of [lo, hi] pairs"),
            ({"split": {"depth": 0, "pieces": 3}}, "field split.pieces: give a list of [lo, hi] pairs"),
            ({"split": {"depth": 0, "pieces": [[0, 1], [1, "a"]]}},
             "field split.pieces.1: hi must be an integer, not 'a'"),
            ({"split": {"depth": 0, "pieces": [["a", 1]]}}, "field split.pieces.0: lo must be an integer, not 'a'"),
            ({"narrow": {"lanes": [["m", 4]]}},
             "field narrow.lanes: give an object axis -> lane width, not [['m', 4]]"),
            ({"wide": {"lanes": [["m", 16]]}},
             "field wide.lanes: give an object axis -> lane width, not [['m', 16]]")):
        with pytest.raises(PlanError) as caught:
            parse_plan({"nests": {"linear": nest}})
        assert str(caught.value) == f"plan: nest linear, {message}"


# ---- plan files, continued (kernels/plans.py): a program's plan applied to one kernel, every
# field's refusal whole, the narrow and wide variants' rule, `exactc plan` in process


def _rope():
    # two nests: rope_table (i) and rope_rotate (t, hd, i); in a program named rope_q
    # their functions are rope_q_table and rope_q_rotate
    return lower("rope", "f32", {"x": (4, 2, 6)})


def test_a_programs_plan_applies_to_a_kernel_by_nest_and_by_function_and_is_validated():
    from exactc.exporter.kernels.plans import PlanError
    kernel = _rope()
    by_nest = NestPlan(Layout(order=("hd", "t", "i")))
    by_function = NestPlan(Layout(order=("i", "t", "hd")))
    table = NestPlan(Layout(tiles=(("i", 2),)))
    plan = Plan((("rope_rotate", by_nest), ("rope_q_rotate", by_function), ("rope_table", table),
                 ("rope_table", NestPlan(Layout(tiles=(("i", 3),)))), ("gelu_tanh", by_nest)))
    # the first entry of a nest's name counts; the function's entry wins over the nest's
    assert plan.for_kernel(kernel, "rope_q") == (
        Plan((("rope_table", table), ("rope_rotate", by_function))), {"rope_table", "rope_rotate", "rope_q_rotate"})
    assert plan.for_kernel(kernel, "rope_k") == (
        Plan((("rope_table", table), ("rope_rotate", by_nest))), {"rope_table", "rope_rotate"})
    assert Plan((("gelu_tanh", by_nest),)).for_kernel(kernel, "rope_q") == (None, set())
    bad = Plan((("rope_q_table", NestPlan(Layout(order=("p",)))),))
    with pytest.raises(PlanError) as caught:
        bad.for_kernel(kernel, "rope_q")
    assert str(caught.value) == ("plan: nest rope_table, field layout.order.p: the nest has no axis 'p'; its "
                                 "parallel axes are i")


def test_a_layouts_fields_are_refused_whole_with_their_nest_and_field():
    from exactc.exporter.kernels.plans import PlanError, parse_plan
    for layout, message in (
            ({"order": "mn"}, "field layout.order: give a list of names, not 'mn'"),
            ({"order": ["m", 1]}, "field layout.order: give a list of names, not ['m', 1]"),
            ({"packs": "w"}, "field layout.packs: give a list of names, not 'w'"),
            ({"tiles": {"m": "a"}}, "field layout.tiles.m: tile size must be an integer, not 'a'"),
            ({"lanes": {"m": 2.0}}, "field layout.lanes.m: lane width must be an integer, not 2.0"),
            ({"blocks": {"k": True}}, "field layout.blocks.k: block size must be an integer, not True"),
            ({"blocks": [1]}, "field layout.blocks: give an object axis -> block size, not [1]"),
            ({"sums": {"k": {"parts": "a"}}}, "field layout.sums.k: parts must be an integer, not 'a'"),
            ({"sums": {"k": {"lanes": None}}}, "field layout.sums.k: lanes must be an integer, not None"),
            ({"zz": 1, "yy": 2}, "field layout.yy: unknown field; a layout has order, tiles, lanes, packs, "
                                 "blocks, sums")):
        with pytest.raises(PlanError) as caught:
            parse_plan({"nests": {"linear": {"layout": layout}}})
        assert str(caught.value) == f"plan: nest linear, {message}"
    # a sum's lanes and parts are 1 each unless given
    plan = parse_plan({"nests": {"linear": {"layout": {"sums": {"k": {}, "j": {"lanes": 4, "parts": 2}}}}}})
    assert plan.nests[0][1].layout.sums == (("k", 1, 1), ("j", 4, 2))


def test_a_plan_files_top_level_and_the_file_itself_refused_whole(tmp_path):
    from exactc.exporter.kernels.plans import PlanError, load_plan, parse_plan, plan_text
    assert parse_plan({"nests": {}, "comment": "tuned by hand"}) == Plan(())
    for value in ({"nests": {}, "extra": 1}, ["nests"], {"comment": "c"}):
        with pytest.raises(PlanError) as caught:
            parse_plan(value)
        assert str(caught.value) == ('plan: nest -, field (top): a plan is an object {"nests": {...}} (and an '
                                     'optional "comment")')
    path = tmp_path / "plan.json"
    path.write_text('{"nests": {}, "nests": {}}')
    with pytest.raises(PlanError) as caught:
        load_plan(path)
    assert str(caught.value).startswith(f"plan: nest -, field (file): {path}: ")
    assert plan_text(None) == ""
    plan = Plan((("linear", NestPlan(Layout(lanes=(("n", 8),)))),))
    assert plan_text(plan) == plan.dumps() == '{"nests": {"linear": {"layout": {"lanes": {"n": 8}}}}}'


def test_plan_auto_takes_the_tune_tables_layouts(tmp_path, monkeypatch):
    from exactc.exporter.kernels import tuned
    from exactc.exporter.kernels.autoplan import load_plan_option
    path = tmp_path / "tune.json"
    path.write_text(json.dumps({"version": tuned.TABLE_VERSION, "builds": {tuned.build_identity("cc"): {"nests": {
        "linear m=3 n=5 k=4": {"layout": {"lanes": {"n": 4}}, "seconds": {}, "measured": ""}}}}}))
    monkeypatch.setenv(tuned.TABLE_ENV, str(path))
    monkeypatch.delenv("CC", raising=False)
    auto = load_plan_option("auto")
    assert auto.tuned == {"linear m=3 n=5 k=4": Layout(lanes=(("n", 4),))}
    assert auto.text().startswith("auto+tuned:")


def test_a_narrow_or_wide_layout_changes_only_its_outer_lanes_widths():
    from exactc.exporter.kernels.plans import PlanError, check_variant
    layout = Layout(order=("a", "b", "c"), lanes=(("a", 8), ("b", 8), ("c", 8)))
    check_variant("n", "narrow", layout, Layout(order=("a", "b", "c"), lanes=(("a", 4), ("b", 2), ("c", 8))))
    for variant in (Layout(order=("b", "a", "c"), lanes=layout.lanes),  # another order, the same lanes
                    Layout(order=layout.order, lanes=layout.lanes, tiles=(("a", 2),)),
                    Layout(order=layout.order, lanes=layout.lanes, packs=("w",)),
                    Layout(order=layout.order, lanes=layout.lanes, blocks=(("k", 4),)),
                    Layout(order=layout.order, lanes=layout.lanes, sums=(("k", 2, 1),)),
                    Layout(order=layout.order, lanes=(("a", 8), ("b", 8), ("c", 4))),  # the innermost lane
                    Layout(order=layout.order, lanes=(("b", 8), ("a", 8), ("c", 8)))):
        with pytest.raises(PlanError) as caught:
            check_variant("n", "wide", layout, variant)
        assert str(caught.value) == ("plan: nest n, field wide: a wide layout changes only the widths of the "
                                     "layout's outer lanes (the same order, tiles, packs, blocks, sums and "
                                     "innermost lane)")


def test_plan_option_values_split_at_their_first_equals_sign():
    import argparse

    from exactc.plan import _attr_arg, _shape_arg
    assert _attr_arg("pairing=a=b") == ("pairing", "a=b")
    assert _attr_arg("has_b=true") == ("has_b", True)
    assert _shape_arg("x=3,4,") == ("x", (3, 4))
    with pytest.raises(argparse.ArgumentTypeError, match=r"--shape 'x=y=3,4': give name=d0,d1"):
        _shape_arg("x=y=3,4")


def test_exactc_plan_in_process_check_tune_and_help(tmp_path, capsys):
    from exactc import cli
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text('{"nests": {"linear": {"layout": {"lanes": {"n": 4}}}}}')
    bad.write_text('{"nests": {"linear": {"layout": {"lanes": {"k": 4}}}}}')
    shapes = ["--shape", "x=3,4", "--shape", "w=5,4"]
    assert cli.main(["plan", "linear", "--check", str(good), *shapes]) == 0
    assert capsys.readouterr().out == f"plan {good}: valid for linear at f32\n"
    assert cli.main(["plan", "linear", "--check", str(bad), *shapes]) == 2
    assert capsys.readouterr().err == ("exactc plan: error: plan: nest linear, field layout.lanes.k: k is a "
                                       "reduction axis; lanes apply to parallel axes only (a reduction runs in "
                                       "index order, always)\n")
    assert cli.main(["plan", "--tune", "llama", "--dtype", "f32"]) == 2
    assert capsys.readouterr().err == ("exactc plan: error: plan: nest -, field --tune: name the program: exactc "
                                       "plan --tune MODEL --entry ENTRY --dtype TYPE\n")
    with pytest.raises(SystemExit):
        cli.main(["plan", "--help"])
    assert "the primitive, e.g. linear" in capsys.readouterr().out


def test_exactc_plans_options_parse_to_their_types_and_defaults():
    import argparse

    from exactc.plan import add_arguments
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["llama", "--tune", "--entry", "forward"])
    assert (args.set, args.weights, args.block, args.shape, args.attr, args.dtype, args.rounds) == (
        [], "float", None, [], [], "f32", 5)
    assert (args.cc, args.length, args.table, args.checkpoint) == ("cc", None, None, None)
    args = parser.parse_args(["llama", "--tune", "--set", "dim=8", "--set", "layers=1", "--block", "32", "--rounds",
                              "3", "--length", "7"])
    assert (args.set, args.block, args.rounds, args.length) == (["dim=8", "layers=1"], 32, 3, 7)


def test_a_plans_variants_are_validated_with_its_split_and_packs_and_refused_by_nest():
    from exactc.exporter.kernels.plans import PlanError
    kernel = lower("linear", "f32", {"x": (6, 4), "w": (8, 4)})

    def lanes(m, n=4):
        return Layout(lanes=(("m", m), ("n", n)), packs=("w",))
    split = splits.Split(0, ((0, 2), (2, 6)))
    validate_plan(kernel, Plan((("linear", NestPlan(lanes(2), split, narrow=lanes(3), wide=lanes(4))),)))
    for plan, message in (
            (NestPlan(lanes(2), split, wide=lanes(99)), "field layout.lanes.m: lane width 99 must be an integer in "
             "2..16, or one of 32, 64, 128, 256 on a nest's only lane axis"),
            (NestPlan(lanes(2), None, narrow=lanes(2, 8)), "field narrow: a narrow layout changes only the widths "
             "of the layout's outer lanes (the same order, tiles, packs, blocks, sums and innermost lane)")):
        with pytest.raises(PlanError) as caught:
            validate_plan(kernel, Plan((("linear", plan),)))
        assert str(caught.value) == f"plan: nest linear, {message}"
    with pytest.raises(PlanError) as caught:
        validate_plan(kernel, Plan((("lin", NestPlan(lanes(2))),)))
    assert str(caught.value) == "plan: nest lin, field nests.lin: the kernel linear has no nest lin; its nests are linear"


def test_a_plan_with_splits_and_variants_is_written_whole_and_read_back():
    from exactc.exporter.kernels.plans import parse_plan
    wide_only = NestPlan(wide=Layout(lanes=(("i", 8),)))
    plan = Plan((("linear", NestPlan(Layout(lanes=(("m", 2), ("n", 4))), splits.Split(0, ((0, 2), (2, 6))),
                                     narrow=Layout(lanes=(("m", 3), ("n", 4))), wide=Layout(lanes=(("m", 4), ("n", 4))))),
                 ("softmax", wide_only)))
    assert plan.dumps() == (
        '{"nests": {"linear": {"layout": {"lanes": {"m": 2, "n": 4}}, "split": {"depth": 0, "pieces": [[0, 2], '
        '[2, 6]]}, "narrow": {"lanes": {"m": 3, "n": 4}}, "wide": {"lanes": {"m": 4, "n": 4}}}, "softmax": '
        '{"layout": {}, "wide": {"lanes": {"i": 8}}}}}')
    assert parse_plan(json.loads(plan.dumps())) == plan
    assert plan.for_nest("softmax") is wide_only and plan.for_nest("gelu") is None
    assert wide_only.variants() == [("wide", wide_only.wide)]


# ---- `exactc plan` at its edges (kernels/plans.py): --show lists a pack at the limit of its
# panel with lanes of 8 on n, and a refusal lists a kernel's nests whole


def _shown_linear(k):
    # describe_choices' whole text for linear x (3, k), w (5, k) at f32, but its packs line
    return [
        "kernel linear at f32",
        "nest linear",
        "  parallel axes (outermost first): m<3, n<5",
        f"  body loops: reduce k<{k}",
        "  layout.order: any order of m, n",
        "  layout.tiles: {axis: size >= 1} for axes m, n",
        "  layout.lanes: {axis: width in 2..16}, up to 2 of m, n (the last innermost); one axis alone may also "
        "take 32, 64, 128, 256",
        "  layout.blocks: {axis: size >= 1} for reductions k",
        "  layout.sums: none (no integer sum)",
        "  split.depth: 0 (m<3 in the nest's order), 1 (n<5 in the nest's order); the depth counts the loops of "
        "layout.order",
        "  split.pieces: [[lo, hi], ...] covering [0, extent) exactly once (empty pieces allowed)",
        "  split.of: N > 0 when the axis follows the run-time length T: the pieces cover [0, N) and",
        "            run [E * lo / N, E * hi / N) of the extent E at the length the program runs",
    ]


@pytest.mark.parametrize("k, packs", [
    (8192, "  layout.packs: w (with lanes on n)"),  # 8 lanes of 8192: 65536 elements, the most a pack holds
    (8193, "  layout.packs: none with lanes on n"),  # 65544: one row of 8 too many
], ids=["at-the-limit", "past-it"])
def test_plan_show_lists_a_pack_up_to_its_limit_with_lanes_of_8(capsys, k, packs):
    """--show probes the packs with lanes of 8 on the last axis: w's panel is 8 * K
    elements, so w is listed up to K = 8192 (a probe of 9 lanes would stop at 7281)."""
    code, out, err = run_cli(capsys, "plan", "--show", "linear", "--shape", f"x=3,{k}", "--shape", f"w=5,{k}")
    assert (code, err) == (0, "")
    want = _shown_linear(k)
    want.insert(7, packs)
    assert out == "\n".join(want) + "\n"


def test_plan_check_refuses_a_nest_the_kernel_lacks_listing_its_nests_whole(tmp_path, capsys):
    """A plan naming rope's primitive instead of its nests: the refusal lists both of
    rope's nests, in the kernel's order, comma-separated."""
    plan = tmp_path / "plan.json"
    plan.write_text('{"nests": {"rope": {"layout": {}}}}')
    assert run_cli(capsys, "plan", "rope", "--check", str(plan), "--shape", "x=4,2,6") == (
        2, "", "exactc plan: error: plan: nest rope, field nests.rope: the kernel rope has no nest rope; its nests "
               "are rope_table, rope_rotate\n")


# ---- plan files and `exactc plan`


SPLIT_RULE = ("give an object with exactly 'depth' and 'pieces' (and 'of' for an axis that follows the run-time "
              "length)")

# (decoded JSON, the whole message)
PLAN_FILES = [
    pytest.param([], 'plan: nest -, field (top): a plan is an object {"nests": {...}} (and an optional "comment")',
                 id="not-an-object"),
    pytest.param({"nests": []}, "plan: nest -, field nests: give an object nest name -> nest plan", id="nests-list"),
    pytest.param({"nests": {"linear": 3}},
                 "plan: nest linear, field nests.linear: give an object with 'layout' and/or 'split'",
                 id="nest-number"),
    pytest.param({"nests": {"linear": {"layout": []}}},
                 "plan: nest linear, field layout: give an object with fields order, tiles, lanes, packs, blocks, sums",
                 id="layout-list"),
    pytest.param({"nests": {"linear": {"layout": {"sums": [1]}}}},
                 'plan: nest linear, field layout.sums: give an object axis -> {"lanes": W, "parts": P}, not [1]',
                 id="sums-list"),
    pytest.param({"nests": {"linear": {"layout": {"sums": {"k": {"lanes": 1.5}}}}}},
                 "plan: nest linear, field layout.sums.k: lanes must be an integer, not 1.5", id="sum-lanes-float"),
    pytest.param({"nests": {"linear": {"layout": {"tiles": [["n", 4]]}}}},
                 "plan: nest linear, field layout.tiles: give an object axis -> tile size, not [['n', 4]]",
                 id="tiles-list"),
    pytest.param({"nests": {"linear": {"split": [0]}}}, f"plan: nest linear, field split: {SPLIT_RULE}",
                 id="split-list"),
    pytest.param({"nests": {"linear": {"split": {"depth": 0}}}}, f"plan: nest linear, field split: {SPLIT_RULE}",
                 id="split-without-pieces"),
    pytest.param({"nests": {"linear": {"split": {"depth": 0, "pieces": [[0, 5]], "cut": 1}}}},
                 f"plan: nest linear, field split: {SPLIT_RULE}", id="split-unknown-field"),
    pytest.param({"nests": {"linear": {"split": {"depth": 0, "pieces": [[0, 5.0]]}}}},
                 "plan: nest linear, field split.pieces.0: hi must be an integer, not 5.0", id="piece-float"),
    pytest.param({"nests": {"linear": {"split": {"depth": 0, "pieces": [[0, 5]], "of": "2"}}}},
                 "plan: nest linear, field split.of: of must be an integer, not '2'", id="of-text"),
]


@pytest.mark.parametrize("value, message", PLAN_FILES)
def test_a_badly_typed_plan_is_refused_by_nest_and_field(value, message):
    with pytest.raises(PlanError) as caught:
        parse_plan(value)
    assert str(caught.value) == message


def test_a_plan_option_naming_no_file_is_refused(tmp_path):
    missing = tmp_path / "plan.json"
    with pytest.raises(PlanError) as caught:
        load_plan_option(str(missing))
    assert str(caught.value) == (f"plan: nest -, field (file): {missing}: no such file; "
                                 "give a plan file, `auto` or `none`")
    assert load_plan_option(None) is None and load_plan_option("none") is None


def plan_arguments(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="exactc plan")
    add_arguments(parser)
    return parser.parse_args(argv)


def test_plan_arguments_read_shapes_and_json_attributes():
    """An --attr value is JSON when it parses as JSON, else the text itself."""
    args = plan_arguments("rope", "--shape", "x=2,1,4", "--shape", "s=", "--attr", "pairing=interleaved",
                          "--attr", "pos0=3", "--attr", "has_b=true")
    assert args.shape == [("x", (2, 1, 4)), ("s", ())]
    assert args.attr == [("pairing", "interleaved"), ("pos0", 3), ("has_b", True)]


@pytest.mark.parametrize("argv, message", [
    (("--shape", "x"), "argument --shape: --shape 'x': give name=d0,d1,... (e.g. x=3,4)"),
    (("--shape", "x=3,four"), "argument --shape: --shape 'x=3,four': give name=d0,d1,... (e.g. x=3,4)"),
    (("--attr", "has_b"), "argument --attr: --attr 'has_b': give name=value (JSON value, e.g. has_b=true)"),
])
def test_a_malformed_plan_argument_is_a_usage_error(argv, message, capsys):
    with pytest.raises(SystemExit) as caught:
        plan_arguments("linear", *argv)
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


def test_plan_show_without_a_primitive_is_refused():
    with pytest.raises(PrimitiveError) as caught:
        show_command(plan_arguments())
    assert str(caught.value) == "name a primitive (--show linear --shape x=3,4 --shape w=5,4)"


@pytest.mark.parametrize("argv, message", [
    (("add", "--dtype", "f16", "--shape", "a=2", "--shape", "b=2"),
     "add: unknown site type 'f16'; exactc knows f64, f32, bf16"),
    (("--show", "linear", "--shape", "x=2,3"),
     "linear: operands ['x'] given; with these attributes it takes ['x', 'w']"),
])
def test_plan_show_passes_a_refused_call_on_whole(argv, message):
    with pytest.raises(PrimitiveError) as caught:
        show_command(plan_arguments(*argv))
    assert str(caught.value) == message


@pytest.mark.parametrize("attr, message", [
    ('pairing=["half"]', "rope: attribute pairing is ['half']; a list attribute holds ints (a shape, a permutation)"),
    ("theta=1" + "0" * 400, "rope: attribute theta is an integer of 401 digits; it must be a real number within "
                            "f64's range"),
])
def test_plan_show_refuses_an_attribute_the_lowering_cannot_read(attr, message):
    """An attribute list of names, or an integer past f64's range: a refusal naming the
    attribute and the rule (the CLI's exit 2 with one line), not a bare ValueError."""
    with pytest.raises(PrimitiveError) as caught:
        show_command(plan_arguments("rope", "--shape", "x=2,1,4", "--attr", attr))
    assert str(caught.value) == message


def test_plan_show_turns_any_other_lowering_error_into_a_refusal(monkeypatch):
    """A ValueError or KeyError of the lowering that is not a PrimitiveError becomes one,
    its cause suppressed: one line, whatever the lowering raised."""
    lowering = importlib.import_module("exactc.exporter.kernels.lower")  # the module, not its function

    def broken(*args, **kwargs):
        raise KeyError("nests")

    monkeypatch.setattr(lowering, "lower", broken)
    with pytest.raises(PrimitiveError) as caught:
        show_command(plan_arguments("--show", "add", "--shape", "a=3", "--shape", "b=3"))
    assert "nests" in str(caught.value) and caught.value.__suppress_context__


def test_plan_show_lists_no_body_loops_for_a_nest_without_them(capsys):
    assert show_command(plan_arguments("--show", "add", "--shape", "a=3", "--shape", "b=3")) == 0
    shown = capsys.readouterr().out
    assert shown == describe_choices(ADD) + "\n"
    assert shown.splitlines()[:4] == ["kernel add at f32", "nest add", "  parallel axes (outermost first): i<3",
                                      "  layout.order: any order of i"]
    assert "body loops" not in shown
