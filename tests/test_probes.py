"""Instruction-count probes (exactc/verify/probes/), at the quick sizes: costs that must grow
linearly do, the structured host's text is constant in the layers, and no count rose
against this toolchain's baseline. These are the only checks that see a mistake which
changes no output (an exporter pass gone quadratic, a fold unrolled, a kernel that
computes twice); the mutant catalog's probes family proves each can fail.

`make probes` runs the full sizes (L up to 16 and 32, T up to 64) and prints the table.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from exactc.exporter.launches import launched_ops
from exactc.verify import probes

QUICK = probes.SIZES["quick"]
needs_valgrind = pytest.mark.needs("valgrind", "callgrind.h")  # tests/installed.py


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("probes")


# Each probe is measured once per module (callgrind is the slow part); the tests judge the
# counts as measured and with a fault planted in them.


@pytest.fixture(scope="module")
def layers(workdir) -> probes.Measured:
    return probes.measure_layers(workdir, QUICK["layers"])


@pytest.fixture(scope="module")
def tokens(workdir) -> probes.Measured:
    return probes.measure_tokens(workdir, QUICK["tokens"])


@pytest.fixture(scope="module")
def grad_layers(workdir) -> probes.Measured:
    return probes.measure_grad_layers(workdir, QUICK["grad_layers"])


@pytest.fixture(scope="module")
def grad_tokens(workdir) -> probes.Measured:
    return probes.measure_grad_tokens(workdir, QUICK["grad_tokens"])


@pytest.fixture(scope="module")
def decode(workdir) -> probes.Measured:
    return probes.measure_decode(workdir, QUICK["decode"])


@pytest.fixture(scope="module")
def generate(workdir) -> probes.Measured:
    return probes.measure_generate(workdir, QUICK["generate"])


@pytest.fixture(scope="module")
def exporter() -> probes.Measured:
    return probes.measure_exporter(QUICK["exporter"])


@pytest.fixture(scope="module")
def nodes() -> probes.Measured:
    return probes.measure_nodes(QUICK["nodes"])


@pytest.fixture(scope="module")
def text() -> probes.Measured:
    return probes.measure_text(QUICK["text"])


@pytest.fixture(scope="module")
def quantized_linear() -> dict[str, probes.Measured]:
    return {size: probes.measure_quantized_linear(size, QUICK[f"quant_{size}"]) for size in ("k", "n")}


def _explain(growth: probes.Growth) -> str:
    return "\n".join(growth.lines() + [f"command: {growth.command}", f"toolchain: {probes.key_text(probes.probe_key())}"])


def _printed_ratios(growth: probes.Growth) -> None:
    """How many ratios the report prints for this series: one a doubling of the size (sizes
    - 1), one fewer for the exporter's increments (sizes - 2: d(2s)/d(s) needs three), and
    one a size for loss_grad's ratio to the forward (a value at each size)."""
    printed = sum("ratio" in line for line in growth.lines()[1:])
    unpaired = 2 if growth.name.startswith("exporter/") else 0 if growth.name == "program/grad-over-forward" else 1
    expected = len(growth.sizes) - unpaired
    assert printed == expected, f"{printed} ratios printed for {len(growth.sizes)} sizes\n" + _explain(growth)


def _holds(table, measured: probes.Measured) -> None:
    for growth in probes.judge(table, measured):
        _printed_ratios(growth)
        assert growth.holds, _explain(growth)


def planted(measured: probes.Measured, series: probes.Series, factor: float) -> probes.Measured:
    """The counts with a cost planted in one series at its largest size only: the part of
    the last count that the series' ratio sees (above the fitted fixed part, above the
    count before it for increments) grows `factor` times. Factor 2 is a cost growing one
    power faster than the rule expects there: linear gone quadratic, constant gone linear."""
    counts = measured.counts[series.name]
    fitted = probes.fitted_ratios(measured.sizes, counts)[0]
    base = {"counts": 0.0, "values": 0.0, "fitted": fitted, "increments": counts[-2]}
    fixed = base[series.rule.of]
    last = round(fixed + factor * (counts[-1] - fixed))
    return dataclasses.replace(measured, counts={**measured.counts, series.name: [*counts[:-1], last]})


# Each series' tolerance as docs/probes.md states it, written here and not read from the
# rule: a fault of three tolerances must fail, so a rule whose tolerance widened fails the test.
TOLERANCE = {
    "program/layers": 0.05,
    "program/tokens-linear": 0.05,
    "program/tokens-attention": 0.25,
    "program/grad-layers": 0.05,
    "program/grad-over-forward": 0.25,
    "program/grad-tokens-linear": 0.05,
    "program/grad-tokens-attention": 0.25,
    "program/decode-attention": 0.05,
    "program/decode-rest": 0.01,
    "program/generate-rest": 0.05,
    "exporter/": 0.3,  # every exporter series: increments at most 2.3
    "text/structured": 0.01,
    "text/straight-line": 0.05,
    "kernel/qlinear_i-": 0.05,
}


def _stated_tolerance(name: str) -> float:
    return next(tolerance for prefix, tolerance in TOLERANCE.items() if name.startswith(prefix))


def _planted_faults_fail(table, measured: probes.Measured) -> None:
    """Every series of the probe fails on two faults planted at its largest size: a cost one
    power faster (factor 2), and one just past its rule (the largest ratio moved by about
    three of its stated tolerances, which a tolerance ten times wider would pass). The
    verdict names the series and the ratio of the largest doubling, and every ratio is
    still printed."""
    for series in table:
        for factor in (2.0, 1 + 3 * _stated_tolerance(series.name) / series.rule.target):
            growth = probes.judge([series], planted(measured, series, factor))[0]
            _printed_ratios(growth)
            named = f"ratio {growth.ratios[-1]:.3f} at {growth.size} = {growth.sizes[-1]}"
            head = growth.lines()[0]
            assert not growth.holds, f"planted factor {factor:g} passed\n" + _explain(growth)
            assert head.startswith(series.name) and "FAILS" in head and named in head, (named, _explain(growth))


# ---- growth ----------------------------------------------------------------------------------


@needs_valgrind
def test_growth_program_instructions_double_with_the_layers(layers):
    _holds(probes.LAYERS, layers)


@needs_valgrind
def test_growth_layers_fail_with_a_planted_fault_at_the_largest_size(layers):
    _planted_faults_fail(probes.LAYERS, layers)


@needs_valgrind
def test_growth_program_linear_parts_double_and_attention_quadruples_with_the_tokens(tokens):
    _holds(probes.TOKENS, tokens)


@needs_valgrind
def test_growth_tokens_and_attention_fail_with_a_planted_fault_at_the_largest_size(tokens):
    _planted_faults_fail(probes.TOKENS, tokens)


@needs_valgrind
def test_loss_grad_instructions_double_with_the_layers_at_a_stated_ratio_to_the_forward(grad_layers):
    _holds(probes.GRAD_LAYERS, grad_layers)


@needs_valgrind
def test_loss_grad_layers_and_ratio_fail_with_a_planted_fault_at_the_largest_size(grad_layers):
    _planted_faults_fail(probes.GRAD_LAYERS, grad_layers)


@needs_valgrind
def test_loss_grad_linear_parts_double_and_attention_quadruples_with_the_tokens(grad_tokens):
    _holds(probes.GRAD_TOKENS, grad_tokens)


@needs_valgrind
def test_loss_grad_tokens_fail_with_a_planted_fault_at_the_largest_size(grad_tokens):
    _planted_faults_fail(probes.GRAD_TOKENS, grad_tokens)


@needs_valgrind
def test_growth_exporter_cost_is_linear_in_the_graph(exporter):
    _holds(probes.EXPORTER, exporter)


@needs_valgrind
def test_growth_exporter_against_layers_fails_with_a_planted_fault_at_the_largest_size(exporter):
    _planted_faults_fail(probes.EXPORTER, exporter)


@needs_valgrind
def test_growth_quantized_linear_is_linear_in_k_and_n(quantized_linear):
    for size, measured in quantized_linear.items():
        _holds([probes.QUANTIZED_LINEAR[size]], measured)


@needs_valgrind
def test_growth_quantized_linear_fails_with_a_planted_fault_at_the_largest_size(quantized_linear):
    for size, measured in quantized_linear.items():
        _planted_faults_fail([probes.QUANTIZED_LINEAR[size]], measured)


@needs_valgrind
def test_exporter_cost_is_linear_in_one_functions_node_count(nodes):
    """One function of N primitives (a chain, and diamonds with a skip): the exporter's
    instructions grow linearly in N, so no pass over a function's nodes rescans them."""
    _holds(probes.NODE_SERIES, nodes)


@needs_valgrind
def test_exporter_against_a_functions_node_count_fails_with_a_planted_fault(nodes):
    _planted_faults_fail(probes.NODE_SERIES, nodes)


def test_growth_structured_text_is_constant_and_straight_line_text_linear_in_the_layers(text):
    _holds(probes.TEXT, text)


def test_growth_text_fails_with_a_planted_fault_at_the_largest_size(text):
    _planted_faults_fail(probes.TEXT, text)


# ---- regression against the baseline ----------------------------------------------------------


@pytest.mark.needs("valgrind", "callgrind.h", "probe-baseline")
def test_regression_against_the_baseline(workdir):
    key = probes.probe_key()
    current = probes.measure_baseline(workdir)
    result = probes.check_regression(current, key, probes.DEFAULT_THRESHOLD)
    assert result.holds, "\n".join(result.lines)


def test_a_count_2_percent_higher_fails_with_its_function_named(tmp_path):
    baseline = {"gpt.forward.f32": {"forward (entry, inclusive)": 1_000_000, "linear_qkv": 400_000, "layernorm": 5000}}
    current = {"gpt.forward.f32": {"forward (entry, inclusive)": 1_008_000, "linear_qkv": 408_000, "layernorm": 4990}}
    changes, failures = probes.compare(baseline, current, threshold=1.0)
    assert [c.row for c in failures] == ["linear_qkv"]
    assert len(changes) == 3  # every change is reported, the 0.8 % and the decrease too
    # through the JSON file and the key, as make probes reads it
    key = {"compiler": "cc 1", "flags": "-O2", "valgrind": "v", "arch": "a", "libc": "l"}
    path = tmp_path / "baselines.json"
    probes.write_baseline(key, baseline, path)
    result = probes.check_regression(current, key, 1.0, path)
    failing = [line for line in result.lines if "linear_qkv" in line and "FAILS" in line]
    assert not result.holds and failing, "\n".join(result.lines)
    # a looser threshold is a setting
    assert probes.check_regression(current, key, 2.5, path).holds


def test_a_missing_baseline_fails_the_regression_check_naming_make_probes_baseline(tmp_path):
    """Another toolchain, no baseline: not a pass, a failure that says how to record one."""
    key = {"compiler": "cc 1", "flags": "-O2", "valgrind": "v", "arch": "a", "libc": "l"}
    path = tmp_path / "baselines.json"
    probes.write_baseline(key, {"gpt.forward.f32": {"forward (entry, inclusive)": 1000}}, path)
    other = probes.check_regression({"gpt.forward.f32": {"forward (entry, inclusive)": 1000}},
                                    dict(key, compiler="cc 2"), 1.0, path)
    assert not other.holds, "\n".join(other.lines)
    assert "no baseline for this toolchain" in other.lines[0]
    assert any("`make probes-baseline` records one" in line for line in other.lines), other.lines


@needs_valgrind
def test_a_kernel_made_2_percent_slower_fails_the_regression_check(workdir):
    """Patch a generated kernel with extra work (a spin loop worth >2 % of its count):
    the comparison with the unpatched program fails and names that kernel."""
    root, entry = probes.export_program(workdir, "gpt", "forward", "f32", probes.SMALL["gpt"])
    before = probes.count_program(root, entry)
    linears = [n for n in sorted(before.profile.functions) if n.startswith("linear_")]
    name = max(linears, key=lambda n: before.profile.functions[n].self_ir)  # the spin loop's fixed part stays small
    extra = int(before.profile.functions[name].self_ir * 0.02) // 4 + 100  # >= 4 instructions per turn
    source = next(p for p in sorted((root / "kernels").glob("*.c")) if f"\nvoid {name}(" in p.read_text())
    text = source.read_text()
    head = next(line for line in text.splitlines() if line.startswith(f"void {name}(") and not line.endswith(";"))
    opening = text.index("{", text.index(head))
    source.write_text(text[:opening + 1] + f"\n    for (volatile int spin = 0; spin < {extra}; spin++) {{ }}"
                      + text[opening + 1:])
    after = probes.count_program(root, entry)
    rows = lambda c: {name: c.profile.functions[name].self_ir, "entry": c.entry_count}  # noqa: E731
    changes, failures = probes.compare({"gpt": rows(before)}, {"gpt": rows(after)}, 1.0)
    assert name in [c.row for c in failures], probes.change_table(changes, 1.0)
    assert 1.02 <= next(c.ratio for c in failures if c.row == name) < 1.1


@needs_valgrind
def test_growth_decode_step_attention_is_linear_and_the_rest_constant_in_the_position(decode):
    _holds(probes.DECODE_SERIES, decode)


@pytest.mark.parametrize("model", ["gpt", "llama"])
def test_a_decode_step_runs_no_loop_over_the_position_but_attention(model):
    # no copy of the cache's past rows (the concat a step used to run, a whole-cache copy)
    from exactc.exporter import graph, models

    config = {k: v for k, v in probes.DECODE.items() if model == "llama" or k != "kv_heads"}
    program = models.build(model, "decode", dict(config, tokens=9))
    assert probes.decode_loops_over_position(program) == []
    assert [op.primitive for op in launched_ops(program) if op.primitive == "cache_write"] == ["cache_write"] * 2
    # quantized weights in the integer form: the step's quantize runs over its one row
    quantized = models.build(model, "decode", dict(config, tokens=9),
                             quantized={name: ("q8", 32) for name in graph.linear_weights(program)})
    assert "quantize" in {op.primitive for op in launched_ops(quantized)}
    assert probes.decode_loops_over_position(quantized) == []


@needs_valgrind
def test_growth_decode_step_fails_with_a_planted_fault_at_the_largest_position(decode):
    _planted_faults_fail(probes.DECODE_SERIES, decode)


@needs_valgrind
def test_growth_generate_loop_costs_the_same_per_token_but_attention(generate):
    _holds(probes.GENERATE, generate)


@needs_valgrind
def test_growth_generate_loop_fails_with_a_planted_fault_at_the_longest_generation(generate):
    _planted_faults_fail(probes.GENERATE, generate)
