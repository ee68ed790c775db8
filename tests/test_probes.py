"""Instruction-count probes (verify/probes.py), at the quick sizes: costs that must grow
linearly do, the structured host's text is constant in the layers, and no count rose
against this toolchain's baseline. These are the only checks that see a mistake which
changes no output (an exporter pass gone quadratic, a fold unrolled, a kernel that
computes twice); the mutant catalog's probes family proves each can fail.

`make probes` runs the full sizes (L up to 16 and 32, T up to 64) and prints the table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exactc.exporter.launches import launched_ops
from exactc.verify import probes

QUICK = probes.SIZES["quick"]
needs_valgrind = pytest.mark.needs("valgrind", "callgrind.h")  # tests/installed.py


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("probes")


def _explain(growth: probes.Growth) -> str:
    return "\n".join(growth.lines() + [f"command: {growth.command}", f"toolchain: {probes.key_text(probes.probe_key())}"])


# ---- growth ----------------------------------------------------------------------------------


@needs_valgrind
def test_growth_program_instructions_double_with_the_layers(workdir):
    growth = probes.probe_layers(workdir, QUICK["layers"])
    assert growth.holds, _explain(growth)


@needs_valgrind
def test_growth_program_linear_parts_double_and_attention_quadruples_with_the_tokens(workdir):
    for growth in probes.probe_tokens(workdir, QUICK["tokens"]):
        assert growth.holds, _explain(growth)


@needs_valgrind
def test_growth_exporter_cost_is_linear_in_the_graph():
    growth = probes.probe_exporter(QUICK["exporter"])
    assert growth.holds, _explain(growth)


@needs_valgrind
def test_growth_quantized_linear_is_linear_in_k_and_n():
    for growth in probes.probe_quantized_linear(QUICK["quant_k"], QUICK["quant_n"]):
        assert growth.holds, _explain(growth)


@needs_valgrind
def test_exporter_cost_is_linear_in_one_functions_node_count():
    """One function of N primitives (a chain, and diamonds with a skip): the exporter's
    instructions grow linearly in N, so no pass over a function's nodes rescans them."""
    for growth in probes.probe_nodes(QUICK["nodes"]):
        assert growth.holds, _explain(growth)


def test_growth_structured_text_is_constant_and_straight_line_text_linear_in_the_layers():
    for growth in probes.probe_text(QUICK["text"]):
        assert growth.holds, _explain(growth)


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
def test_growth_decode_step_attention_is_linear_and_the_rest_constant_in_the_position(workdir):
    for growth in probes.probe_decode(workdir, QUICK["decode"]):
        assert growth.holds, _explain(growth)


@pytest.mark.parametrize("model", ["gpt", "llama"])
def test_a_decode_step_runs_no_loop_over_the_position_but_attention(model):
    # no copy of the cache's past rows (the concat a step used to run, a whole-cache copy)
    from exactc.exporter import models

    config = {k: v for k, v in probes.DECODE.items() if model == "llama" or k != "kv_heads"}
    program = models.build(model, "decode", dict(config, tokens=9))
    assert probes.decode_loops_over_position(program) == []
    assert [op.primitive for op in launched_ops(program) if op.primitive == "cache_write"] == ["cache_write"] * 2


@needs_valgrind
def test_growth_generate_loop_costs_the_same_per_token_but_attention(workdir):
    for growth in probes.probe_generate(workdir, QUICK["generate"]):
        assert growth.holds, _explain(growth)
