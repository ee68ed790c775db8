"""make verify's generate campaign, the exported side (each program builds in about a
minute, too slow for make test): the exported prefill and decode programs against the
reference, and `exactc generate --backend c` against `--backend reference`, byte for byte.
exactc.verify.campaign runs this file; tests/test_generation.py is the reference side.
"""

from __future__ import annotations

import pytest

from exactc.exporter import export
from exactc import programs as built
from exactc.verify import conformance
from exactc.verify.kernels import record_checks
from test_generation import TINY


@pytest.mark.parametrize("model,site", [(m, s) for m in sorted(TINY) for s in ("f32", "bf16")])
def test_exported_prefill_and_decode_match_the_reference(tmp_path, model, site):
    """The exported prefill and decode programs, structured and straight-line hosts, at
    every run-time length the export's conformance/ holds, on 1 and 2 threads, against
    the reference."""
    for entry, straight in (("prefill", False), ("decode", False), ("prefill", True), ("decode", True)):
        prepared = export.ExportSpec(model, entry, site, 3, TINY[model], straight=straight).prepare()
        program = built.make(export.write(prepared, tmp_path / f"{entry}{'-straight' if straight else ''}"),
                             built.Build())
        for threads in (1, 2):
            try:
                conformance.assert_conforms(program, prepared, threads=threads)
                status = "equal"
            except conformance.ProgramMismatch as mismatch:
                status = "mismatch"
                report = str(mismatch)
            host = "straight-line" if straight else "structured"
            record_checks("generate", f"{model} {entry} {host}", [status] * (1 + len(prepared.lengths)))
            assert status == "equal", report


@pytest.mark.parametrize("model", ["gpt", "llama"])
def test_generate_command_gives_the_same_bytes_from_both_backends(tmp_path, monkeypatch, model):
    """--backend c against --backend reference: byte-identical --json, sampled and greedy,
    on 1 and 2 threads."""
    from exactc import cli

    argv = ["generate", model, "--set", "layers=2", "--set", "dim=16", "--set", "heads=2", "--set", "vocab=40",
            "--set", "mlp=20", "--prompt-ids", "4,5", "-n", "5"]
    if model == "llama":
        argv += ["--set", "kv_heads=1"]
    for options in (["--temperature", "0"], ["--temperature", "0.9", "--top-k", "8", "--seed", "3"]):
        assert cli.main([*argv, *options, "--json", str(tmp_path / "ref.json")]) == 0
        want = (tmp_path / "ref.json").read_bytes()
        for threads in ("1", "2"):
            monkeypatch.setenv("OMP_NUM_THREADS", threads)
            assert cli.main([*argv, *options, "--backend", "c", "--json", str(tmp_path / "c.json")]) == 0
            same = (tmp_path / "c.json").read_bytes() == want
            record_checks("generate", f"{model} exactc generate --backend c", ["equal" if same else "mismatch"])
            assert same
