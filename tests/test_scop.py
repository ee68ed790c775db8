"""SCoP mode (exporter/printer/scop.py and the export's SCoP directory): every nest of
each architecture's forward at every type, of bert's embed and of gpt's and llama's loss_grad keeps
the reference's bits when run by the directory's own driver; exactc's verdict per nest
agrees with Polly's (verify/scop.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from exactc.exporter import dims, export
from exactc.exporter.kernels import lower
from exactc.exporter.printer import scop
from exactc.verify import scop as polly

from installed import need  # tests/installed.py

SMALL = {"layers": 1}
# Each architecture's forward at one type and every type once, bert's embed (its
# mean_pool selects two scalars on a mask: the selection Polly must see as data), and
# each causal LM's loss_grad (the backward kernels: a scatter, a label's gather). The
# file stays near a minute; `make scop` (verify/scop.py) runs every entry at every type.
DIRECTORIES = [
    ("gpt", "forward", "f32"),
    ("bert", "forward", "bf16"),
    ("llama", "forward", "f64"),
    ("bert", "embed", "f32"),
    ("gpt", "loss_grad", "f32"),
    ("llama", "loss_grad", "f64"),
]
IDS = [f"{m}-{e}-{s}" for m, e, s in DIRECTORIES]
# The bits of every architecture's forward at every type (the driver alone: cheap beside
# Polly's detection, which the DIRECTORIES above run).
EVERY_FORWARD = [(m, "forward", s) for m in ("gpt", "bert", "llama") for s in ("f64", "f32", "bf16")]
BITS = DIRECTORIES + [d for d in EVERY_FORWARD if d not in DIRECTORIES]


@pytest.fixture(scope="module")
def directory(tmp_path_factory):
    """The SCoP directory of (model, entry, site), exported once for the module."""
    made: dict[tuple[str, str, str], Path] = {}

    def get(model: str, entry: str, site: str) -> Path:
        if (model, entry, site) not in made:
            target = tmp_path_factory.mktemp("scop") / f"{model}-{entry}-{site}"
            export.write(export.prepare_scop(model, entry, site, overrides=SMALL), target)
            made[(model, entry, site)] = target
        return made[(model, entry, site)]

    return get


# ---- the bits -------------------------------------------------------------------------------


@pytest.mark.parametrize("model,entry,site", BITS, ids=[f"{m}-{e}-{s}" for m, e, s in BITS])
def test_every_nest_keeps_the_reference_bits(directory, model, entry, site):
    need("gcc")
    problem = polly.run_driver(directory(model, entry, site))
    assert problem is None, problem


def test_the_driver_reports_an_output_that_differs(directory, tmp_path):
    need("gcc")
    source = directory("gpt", "forward", "f32")
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(source), str(copy)], check=True)
    expected = copy / "expected" / scop.npy_name("layernorm", "y")
    data = bytearray(expected.read_bytes())
    data[-1] ^= 0x01  # a bit of the last f32 element's exponent
    expected.write_bytes(bytes(data))
    problem = polly.run_driver(copy)
    assert problem is not None and "DIFFERS  layernorm.y.npy: 1 of" in problem, problem
    assert "scop_check: 19 nests in 19 kernels, 19 outputs, 1 differ" in problem


# ---- the printed C --------------------------------------------------------------------------


def nest_text(primitive: str, shapes: dict, attrs: dict | None = None) -> str:
    (printed,) = scop.scop_nests(primitive, lower(primitive, "f32", shapes, attrs or {}))
    return printed.source


def test_arrays_have_literal_dimensions_indexed_one_axis_at_a_time():
    text = nest_text("linear", {"x": (3, 7), "w": (5, 7)})
    assert "void linear(const float x[restrict 3][7], const float w[restrict 5][7], float y[restrict 3][5]) {" in text
    assert "acc = acc + (x[m][k] * w[n][k]);" in text
    assert "for (int64_t k = 0; k < 7; k++) { /* reduction: in index order */" in text
    assert text.index("#pragma scop") < text.index("for (int64_t m = 0; m < 3; m++)") < text.index("#pragma endscop")
    before, after = text.split("void linear(")
    assert before.rstrip().endswith('#pragma GCC diagnostic ignored "-Wunknown-pragmas"')
    assert after.rstrip().endswith("#pragma GCC diagnostic pop")


def test_a_scalar_branch_is_a_selection_its_condition_computed_once():
    text = nest_text("softmax", {"x": (1, 2, 4)}, {"causal": True})
    assert "const int select = v > mx;" in text
    assert "const float mx_new = v;" in text and "mx = select ? mx_new : mx;" in text
    assert "if (v > mx)" not in text


def test_the_transcendentals_and_conversions_are_declared_const():
    header = scop.scop_header()
    for fn in ("exactc_exp", "exactc_tanhf", "exactc_bf16_to_f32", "exactc_f32_to_bf16", "sqrtf"):
        lines = [line for line in header.splitlines() if f" {fn}(" in line]
        assert lines and lines[0].startswith("__attribute__((const)) "), fn


def test_the_verdict_names_a_gather_and_a_branch_on_data():
    (embedding,) = lower("embedding", "f32", {"table": (9, 4), "ids": (3,)}, {}).nests
    assert scop.nest_verdict(embedding) == scop.Verdict(False, "a gather: table read at an index read from an array")
    (masked,) = lower("softmax", "f32", {"x": (1, 2, 4), "keep": (4,)}, {"has_keep": True}).nests
    assert scop.nest_verdict(masked) == scop.Verdict(False, "a branch on data that does more than select scalars")
    (linear,) = lower("linear", "f32", {"x": (3, 7), "w": (5, 7)}, {}).nests
    assert scop.nest_verdict(linear) == scop.Verdict(True)


def test_the_backward_nests_that_are_not_static_control_and_why(directory):
    table = json.loads((directory("gpt", "loss_grad", "f32") / "scop.json").read_text())["nests"]
    verdicts = {row["function"]: (row["static"], row["why"]) for row in table}
    # the scatter-adds of the token table's gradient and of the position table's (its rows
    # after T kept where they lie: docs/semantics.md section 17)
    scatters = {"embedding_bar_transformer_wpe_weight_bar2", "embedding_bar_transformer_wte_weight_bar3"}
    assert {name for name, (static, _) in verdicts.items() if not static} == {
        "embedding",
        *scatters,
        "xent_rows",
        "xent_bar",
    }
    for name in scatters:
        assert verdicts[name] == (False, "a scatter: y written at an index read from an array")
    assert verdicts["xent_rows"] == (False, "a gather: logits read at an index read from an array")
    assert verdicts["xent_bar"] == (False, "a branch on data that does more than select scalars")
    # the mean's count tests each target but only selects the count's next value
    assert verdicts["xent_mean"] == (True, "")


def test_a_kernel_lowered_at_a_run_time_length_is_refused():
    kernel = lower("scale", "f32", {"x": (dims.length(8), 4)}, {"s": 2.0})
    with pytest.raises(ValueError, match="SCoP mode takes kernels lowered at a run-time length"):
        scop.scop_nests("scale", kernel)


# ---- Polly's verdict --------------------------------------------------------------------------


@pytest.mark.parametrize("model,entry,site", DIRECTORIES, ids=IDS)
def test_exactc_verdict_agrees_with_polly(directory, model, entry, site):
    need("polly")
    rows = polly.check_directory(directory(model, entry, site))
    wrong = [polly.disagreement(row) for row in rows if not row.agree]
    assert not wrong, "\n".join(wrong)
    assert any(not row.exactc for row in rows)  # the embedding's gather: not one SCoP for either


def test_polly_static_means_one_scop_over_the_whole_nest():
    span = (20, 31)  # the outermost for, the function's closing brace
    assert polly.polly_static([(19, 31)], span)
    assert not polly.polly_static([], span)
    assert not polly.polly_static([(22, 29)], span)  # an inner loop only
    assert not polly.polly_static([(19, 25), (26, 31)], span)  # the nest cut in two


def test_the_nest_begins_past_lines_that_leave_no_instruction():
    source = "\n".join(
        [
            "void xent_mean(const int32_t t[restrict 1][16], float y[restrict 1]) {",
            "#pragma scop",
            "    for (int64_t i = 0; i < 1; i++) {",  # one iteration: its test folds away
            "        int64_t count = 0;",
            "        float mx = (-HUGE_VALF);",
            "        for (int64_t t = 0; t < 16; t++) {",
            "            y[0] = 1.0f;",
            "        }",
            "    }",
            "#pragma endscop",
            "}",
        ]
    )
    assert polly.nest_span(source) == (6, 11)
    assert polly.nest_span(source.replace("i < 1;", "i < 2;")) == (3, 11)


def test_a_missing_polly_names_make_install():
    assert "`make install`" in (polly.polly_missing("exactc-no-such-clang") or "")


def test_make_verify_checks_a_reduced_set_of_make_scops_directories():
    assert set(polly.REDUCED) <= set(polly.requests())
    assert {model for model, *_ in polly.REDUCED} == set(polly.MODELS)
    assert any(entry == "loss_grad" for _, entry, *_ in polly.REDUCED)
