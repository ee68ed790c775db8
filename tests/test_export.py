"""The export (exporter/export.py): an entry's inputs checked, exactc.json and the README
written whole, where and how an export is written (never over the current directory, the
earlier export moved aside, signals held), the digests and the cache key."""

from __future__ import annotations

import io
import json
import os
import signal
import threading
from pathlib import Path

import numpy as np
import pytest

from exactc.exporter import checkpoints, dims, export, graph, types

from exactc.exporter import templates

from exactc.exporter import files

from exactc.exporter.reference import walk

from test_checkpoints import drawn, hf_config, hf_tensors, write_hf
from test_llama2c import tiny_llama2c
from test_prepack import one_weight_two_linears
from test_programs import SMALL

# ---- exactc.json: what was exported, every field


def test_export_manifest_whole():
    from exactc.exporter import export
    tiny = {"vocab": 16, "positions": 8, "dim": 8, "heads": 2, "layers": 1, "mlp": 8, "tokens": 4}
    p = export.ExportSpec("gpt", "forward", "f32", 3, tiny).prepare()
    figures = {"arena_peak": p.printed.arena_peak, "structured_arena_peak": p.printed.structured_peak,
               "straight_line_arena_peak": p.printed.straight_peak, "kernels": p.printed.kernels,
               "nests": p.printed.nests, "launches": p.printed.launches}
    assert p.manifest() == {
        "model": "gpt", "entry": "forward", "dtype": "f32", "seed": 3, "checkpoint": None, "host": "structured",
        "planned": False, "config": {**tiny, "eps": 1e-05, "tied": True}, "weights": None,
        "inputs": {"input_ids": {"shape": ["T"], "kind": "i32"}},
        "outputs": {"logits": {"shape": ["T", 16], "kind": "x"}},
        # wte 16x8, wpe 8x8, ln_f 2x8, the layer: two norms 4x8, c_attn 8x24 + 24, c_proj 8x8 + 8, fc, proj
        "parameters": 128 + 64 + 16 + 32 + 216 + 72 + 72 + 72, "max_length": 4, "conformance_lengths": [1, 2, 4],
        **figures}
    assert figures["arena_peak"] == figures["structured_arena_peak"] < figures["straight_line_arena_peak"]
    assert figures["kernels"] > 1 and figures["launches"] > figures["kernels"]
    q = export.ExportSpec("llama", "decode", "bf16", 0, {"vocab": 16, "dim": 8, "heads": 2, "kv_heads": 1,
                                                          "layers": 1, "mlp": 8, "tokens": 5},
                          plan="auto", straight=True, weights=("q8", 4)).prepare()
    m = q.manifest()
    assert (m["host"], m["planned"], m["arena_peak"]) == ("straight-line", True, q.printed.straight_peak)
    layer = "model.layers.{l}."
    assert m["weights"] == {"format": "q8", "block": 4, "form": "integer", "tensors": ["lm_head.weight", *(
        layer + n + ".weight" for n in ("mlp.down_proj", "mlp.gate_proj", "mlp.up_proj", "self_attn.k_proj",
                                         "self_attn.o_proj", "self_attn.q_proj", "self_attn.v_proj"))]}
    assert m["inputs"] == {"token": {"shape": [1], "kind": "i32"}, "position": {"shape": [1], "kind": "i32", "value": "T"},
                           "past_k": {"shape": [1, 1, 5, 4], "kind": "x"}, "past_v": {"shape": [1, 1, 5, 4], "kind": "x"}}
    assert m["outputs"] == {"logits": {"shape": [1, 16], "kind": "x"},
                            "k": {"shape": [1, 1, 5, 4], "kind": "x", "written_over": "past_k"},
                            "v": {"shape": [1, 1, 5, 4], "kind": "x", "written_over": "past_v"}}
    assert (m["max_length"], m["conformance_lengths"]) == (4, [1, 2, 4])


def test_export_npy_bytes_round_trip_with_bf16_widened():
    from exactc.exporter import export
    x = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]  # not contiguous
    for array, want in [(x, x), (np.array([1, -2], np.int32), np.array([1, -2], np.int32)),
                        (x.astype(types.BF16), x), (np.float64(2.5) * np.ones(()), np.array(2.5))]:
        back = np.load(io.BytesIO(export.npy_bytes(array)), allow_pickle=False)
        assert back.dtype == want.dtype and (back == want).all() and back.flags.c_contiguous
        assert back.shape == want.shape  # a 0-d output (loss_grad's loss) stays 0-d
    assert export.npy_bytes(x)[:6] == b"\x93NUMPY"
    assert export.npy_value(x) is x and export.npy_value(x.astype(types.BF16)).dtype == np.float32


def test_export_replace_file_beside_the_target_with_the_umask_s_mode(tmp_path, monkeypatch):
    from exactc.exporter import export
    from exactc.exporter import files
    target = tmp_path / "out.bin"
    old = os.umask(0o027)
    try:
        files.replace_file(target, b"abc")
    finally:
        os.umask(old)
    assert target.read_bytes() == b"abc" and (target.stat().st_mode & 0o777) == 0o640
    old = os.umask(0o022)  # a mask that leaves others' bits: none is set that 0o666 does not give
    try:
        files.replace_file(target, b"abc")
    finally:
        os.umask(old)
    assert (target.stat().st_mode & 0o777) == 0o644
    moved = []
    real = export.os.replace

    def replace(src, dst):
        moved.append(Path(src))
        return real(src, dst)
    monkeypatch.setattr(export.os, "replace", replace)
    files.replace_file(str(target), b"de")  # a str path too
    assert target.read_bytes() == b"de" and moved[0].parent == tmp_path
    assert moved[0].name.startswith(".out.bin.partial-")

    def vanish_then_fail(src, dst):
        Path(src).unlink()
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(export.os, "replace", vanish_then_fail)
    with pytest.raises(OSError) as caught:
        files.replace_file(target, b"xyz")
    assert caught.value.errno == 28 and target.read_bytes() == b"de"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


# ---- the whole exported directory


def test_export_writes_the_whole_directory(tmp_path):
    """Every file of an exported directory, its bytes and its mode: the printed sources,
    the runtime, the weights, every conformance array (lengths below T_max too), check.sh,
    the Makefile, exactc.json, the README and the marker."""
    from exactc.exporter import export
    from exactc.runtime import RUNTIME_DIR
    p = export.ExportSpec("llama", "forward", "bf16", 2, {"vocab": 16, "dim": 8, "heads": 2, "kv_heads": 1,
                                                          "layers": 1, "mlp": 8, "tokens": 4}).prepare()
    old = os.umask(0o022)
    try:
        root = export.write(p, tmp_path / "a" / "b" / "out")  # folders made
    finally:
        os.umask(old)
    assert root == tmp_path / "a" / "b" / "out" and (root.stat().st_mode & 0o777) == 0o755
    for name, text in p.printed.files.items():
        assert (root / name).read_text() == text, name
    for name in export.RUNTIME_FILES:
        assert (root / name).read_bytes() == (RUNTIME_DIR / name).read_bytes(), name
    assert (root / "weights.safetensors").read_bytes() == export.safetensors_bytes(
        export.weight_tensors(p.program, p.params, "bf16"))
    load = lambda path: np.load(io.BytesIO(path.read_bytes()), allow_pickle=False)  # noqa: E731
    conf = root / "conformance"
    for part, arrays in (("inputs", p.inputs), ("expected", p.expected)):
        assert sorted(f.name for f in (conf / part).iterdir()) == sorted(f"{n}.npy" for n in arrays)
        for name, array in arrays.items():
            assert (load(conf / part / f"{name}.npy") == export.npy_value(array)).all()
    assert sorted(p.lengths) == [1, 2] and sorted(f.name for f in (conf / "lengths").iterdir()) == ["T1", "T2"]
    for length, (inputs, expected) in p.lengths.items():
        for part, arrays in (("inputs", inputs), ("expected", expected)):
            for name, array in arrays.items():
                got = load(conf / "lengths" / f"T{length}" / part / f"{name}.npy")
                assert got.shape == array.shape and (got == export.npy_value(array)).all()
    check = conf / "check.sh"
    assert check.read_text() == templates.CHECK_SH.replace("@SITE@", "bf16") and (check.stat().st_mode & 0o777) == 0o755
    assert "@SITE@" not in check.read_text()
    assert (root / "Makefile").read_text() == templates.MAKEFILE
    assert (root / "exactc.json").read_text() == json.dumps(p.manifest(), indent=2, sort_keys=True) + "\n"
    assert (root / "README.md").read_text() == templates.readme(p.manifest())
    assert (root / export.MARKER).read_text() == export.MARKER_TEXT
    assert not [f for f in (tmp_path / "a" / "b").iterdir() if f.name != "out"]  # no temporary left


# ---- the exported README.md: every figure, row and choice (exporter/export.py)


_README_MANIFEST = {
    "model": "llama", "entry": "decode", "dtype": "bf16", "seed": 7, "config": {"dim": 4, "vocab": 5},
    "checkpoint": {"name": "m.bin", "format": "llama2c"}, "parameters": 99, "host": "structured", "kernels": 3,
    "nests": 4, "launches": 5, "arena_peak": 123, "straight_line_arena_peak": 456, "planned": True,
    "inputs": {"token": {"shape": [1], "kind": "i32"}, "past_k": {"shape": [2, "T"], "kind": "x"}},
    "outputs": {"logits": {"shape": [1, 5], "kind": "x"}, "k": {"shape": [1, 2], "kind": "x"},
                "next": {"shape": [1], "kind": "i32"}}}


def test_export_readme_pins_every_figure_row_and_choice():
    text = templates.readme(_README_MANIFEST)
    lines = text.splitlines()
    assert lines[0] == "# llama `decode` at bf16, exported by exactc"
    assert lines[7:12] == [
        "- model: `llama` (dim=4, vocab=5), entry `decode`, site type `bf16`,",
        "  parameters from the checkpoint `m.bin` (llama2c), inputs drawn from seed 7 (99 values)",
        "- host: structured; 3 kernels, 4 nest functions, 5 launches per run",
        "- arena: 123 bytes (the peak computed from the host's structure; the",
        "  straight-line host would need 456)"]
    assert "(`STRICT`: `-std=c11 -ffp-contract=off -fno-fast-math`)" in text
    assert [line for line in lines if line.startswith("| `")] == [
        "| `token` | input | (1,) | int32 (`<i4`) |",
        "| `past_k` | input | (2, 'T') | f32 (`<f4`), rounded to bf16 |",
        "| `logits` | output | (1, 5) | f32 (`<f4`), bf16 values widened |",
        "| `k` | output | (1, 2) | f32 (`<f4`), bf16 values widened |",
        "| `next` | output | (1,) | int32 (`<i4`) |"]
    assert ("This export follows a plan: the nests it splits run their pieces on an\nOpenMP team (one after another "
            "without OpenMP); the others run on the calling thread.") in text
    plain = templates.readme(dict(_README_MANIFEST, dtype="f32", checkpoint=None, planned=False, config=None))
    lines = plain.splitlines()
    assert lines[7:9] == ["- model: `llama` (), entry `decode`, site type `f32`,",
                          "  parameters drawn from seed 7 (99 values)"]
    assert [line for line in lines if line.startswith("| `")] == [
        "| `token` | input | (1,) | int32 (`<i4`) |", "| `past_k` | input | (2, 'T') | f32 (`<f4`) |",
        "| `logits` | output | (1, 5) | f32 (`<f4`) |", "| `k` | output | (1, 2) | f32 (`<f4`) |",
        "| `next` | output | (1,) | int32 (`<i4`) |"]
    assert ("This export runs each nest over its whole range on the calling thread; a\nplan (`exactc export --plan`) "
            "splits them.") in plain
    assert [line for line in templates.readme(dict(_README_MANIFEST, dtype="f64")).splitlines()
            if line.startswith("| `p")] == ["| `past_k` | input | (2, 'T') | f64 (`<f8`) |"]
    assert "run-time length T" not in text and "in place" not in text
    # a decode step's position and its caches written in place, each said under the table
    step = dict(_README_MANIFEST, max_length=3,
                inputs={"position": {"shape": [1], "kind": "i32", "value": "T"}, "past_k": {"shape": [2], "kind": "x"}},
                outputs={"k": {"shape": [2], "kind": "x", "written_over": "past_k"}})
    assert ("| `k` | output | (2,) | f32 (`<f4`), bf16 values widened |\n\n"
            "`position` holds the run-time length T (1 to 3) as its value.\n"
            "`k` is written in place over `past_k`: the program writes its new rows where\n"
            "`past_k` lies, and `k.npy` is that buffer after the run.\n\nbf16 values") in templates.readme(step)


def test_export_check_target_refusals_whole(tmp_path, monkeypatch):
    from exactc.exporter import export
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "a.c").write_text("")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / export.MARKER).write_text(export.MARKER_TEXT)
    for target, force, message in (
            ("", True, "-o '': give the name of the directory to write"),
            ("mine", False, f"{tmp_path}/mine exists; choose another directory or pass --force"),
            ("a.c", True, f"{tmp_path}/a.c is not a directory; --force replaces only a directory exactc export wrote"),
            ("mine", True, f"{tmp_path}/mine was not written by exactc export (it has no .exactc-export file): --force "
                           "replaces only such a directory; remove it yourself or choose another")):
        with pytest.raises(export.ExportError) as caught:
            export.check_target(target, force)
        assert str(caught.value) == message
    with pytest.raises(export.ExportError, match="old exists; choose another"):
        export.check_target("old")  # not forced by default
    assert export.check_target("old", True) == tmp_path / "old"
    assert export.check_target("new/deeper") == tmp_path / "new" / "deeper"


def test_export_write_works_beside_the_target_and_cleans_up(tmp_path, monkeypatch):
    import errno

    from exactc.exporter import export


    tiny = {"vocab": 16, "positions": 8, "dim": 8, "heads": 2, "layers": 1, "mlp": 8, "tokens": 4}
    p = export.ExportSpec("gpt", "forward", "f32", 3, tiny).prepare()
    seen, replaced = [], []
    fill, replace = export._fill, export.os.replace
    monkeypatch.setattr(export, "_fill", lambda e, work: seen.append(work) or fill(e, work))
    monkeypatch.setattr(export.os, "replace", lambda a, b: replaced.append((Path(a), Path(b))) or replace(a, b))
    target = tmp_path / "a" / "out"  # its parent made on the way
    assert export.write(p, target) == target and (target / export.MARKER).is_file()
    assert seen[0].parent == tmp_path / "a" and seen[0].name.startswith(".out.partial-")
    assert replaced == [(seen[0], target)]
    with pytest.raises(export.ExportError, match="exists; choose another directory or pass --force"):
        export.write(p, target)  # not forced by default
    replaced.clear()
    assert export.write(p, target, force=True) == target
    old = replaced[0][1].parent  # the earlier export moved aside, beside the target, then removed
    assert replaced[0] == (target, old / "dir") and old.parent == tmp_path / "a" and old.name.startswith(".out.old-")
    assert replaced[1] == (seen[1], target) and sorted(os.listdir(tmp_path / "a")) == ["out"]

    def full(message_path):
        def fail(e, work):
            raise OSError(errno.ENOSPC, "No space left on device", message_path(work))
        return fail
    for where, suffix in ((lambda work: str(work / "weights.safetensors"), ""),
                          (lambda work: "/elsewhere/file", " (/elsewhere/file)")):
        monkeypatch.setattr(export, "_fill", full(where))
        with pytest.raises(export.ExportError) as caught:
            export.write(p, tmp_path / "b")
        assert str(caught.value) == f"cannot write {tmp_path / 'b'}: No space left on device{suffix}"
        assert sorted(os.listdir(tmp_path)) == ["a"]  # the partial directory removed
    q8 = export.trace("llama", "forward", {"vocab": 16, "dim": 16, "heads": 2, "kv_heads": 1, "layers": 1,
                                           "mlp": 16, "tokens": 4}, ("q8", 8))
    assert q8.config.dim == 16 and q8.quantized  # the overrides kept when traced again with its weights


def test_export_digest_tells_every_request_apart_and_ignores_the_order_of_overrides(tmp_path):
    from exactc.exporter import checkpoints, export
    tiny = {"vocab": 16, "positions": 8, "dim": 8, "heads": 2, "layers": 1, "mlp": 8, "tokens": 4}
    base = export.ExportSpec("gpt", "forward", "f32", 3, tiny)
    same = export.ExportSpec("gpt", "forward", "f32", 3, dict(reversed(list(tiny.items()))))
    assert base.digest() == same.digest() and len(base.digest()) == 24
    loaded = [checkpoints.load(tiny_llama2c(tmp_path / f"m{seed}.bin", seed), None) for seed in (5, 6)]
    variants = [base, export.ExportSpec("gpt", "forward", "f32", 4, tiny),
                export.ExportSpec("gpt", "forward", "f32", 3, dict(tiny, dim=16)),       # a value
                export.ExportSpec("gpt", "forward", "f32", 3, {"dim": 8}),
                export.ExportSpec("gpt", "forward", "f32", 3, {"mlp": 8}),               # a key
                export.ExportSpec("gpt", "forward", "f32", 3, tiny, plan="auto"),
                export.ExportSpec("gpt", "forward", "f32", 3, tiny, straight=True),
                export.ExportSpec("gpt", "forward", "f32", 3, tiny, weights=("q8", 8)),
                export.ExportSpec("gpt", "forward", "f32", 3, tiny, weights=("q8", 8), form="weight-only"),
                export.ExportSpec("gpt", "forward", "f32", 3, tiny, inputs={"input_ids": np.array([1, 2], np.int32)}),
                export.ExportSpec("llama", "forward", "f32", 0, {}, checkpoint=loaded[0]),
                export.ExportSpec("llama", "forward", "f32", 0, {}, checkpoint=loaded[1])]
    digests = [v.digest() for v in variants]
    assert len(set(digests)) == len(digests)
    # the integer form named or left to its default is one program
    quantized = export.ExportSpec("gpt", "forward", "f32", 3, tiny, weights=("q8", 8), form="integer")
    assert quantized.digest() == variants[7].digest()


def test_export_sources_digest_reads_every_exporter_and_runtime_source(tmp_path, monkeypatch):
    import exactc
    from exactc.exporter import export
    files = ["exporter/a.py", "exporter/sub/b.py", "runtime/x.c", "runtime/y.h"]
    for name in files + ["runtime/notes.txt", "other.py"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    monkeypatch.setattr(exactc, "__file__", str(tmp_path / "__init__.py"))
    first = export.sources_digest()
    assert len(first) == 16 and first == export.sources_digest()
    for name in ("runtime/notes.txt", "other.py"):  # not a source of the exported directory
        (tmp_path / name).write_text("changed")
        assert export.sources_digest() == first
    for name in files:
        (tmp_path / name).write_text("changed " + name)
        assert export.sources_digest() != first, name
        (tmp_path / name).write_text(name)
    assert export.sources_digest() == first
    (tmp_path / "exporter/a.py").rename(tmp_path / "exporter/c.py")  # the same bytes under another name
    assert export.sources_digest() != first


def test_export_safetensors_header_is_compact_sorted_and_padded_to_8():
    import struct

    from exactc.exporter import export


    image = export.safetensors_bytes({"b": ("F32", np.ones((2,), np.float32)), "a": ("I8", np.zeros((3,), np.int8))})
    (n,) = struct.unpack("<Q", image[:8])
    header = image[8:8 + n]
    want = (b'{"__metadata__":{"format":"pt"},"a":{"data_offsets":[0,3],"dtype":"I8","shape":[3]},'
            b'"b":{"data_offsets":[3,11],"dtype":"F32","shape":[2]}}')
    assert header == want + b" " * (-len(want) % 8) and n % 8 == 0
    assert image[8 + n:] == bytes(3) + np.ones((2,), np.float32).tobytes()
    for length in range(1, 10):  # a header of every length modulo 8, padded with spaces
        image = export.safetensors_bytes({"x" * length: ("I8", np.zeros((1,), np.int8))})
        (n,) = struct.unpack("<Q", image[:8])
        assert n % 8 == 0 and image[8:8 + n].rstrip(b" ").endswith(b"}") and n - len(image[8:8 + n].rstrip()) < 8


def test_export_check_inputs_rounds_bf16_through_f32_and_names_every_extra():
    from exactc.exporter import export, types
    program = one_weight_two_linears()
    # 1 + 2^-8 + 2^-30: bf16 from f64 directly rounds up, through f32 it is a tie, to even (1.0)
    x = np.full((1, 32), 1 + 2.0**-8 + 2.0**-30)
    z = np.zeros((3, 32))
    out = export.check_inputs(program, "bf16", {"x": x, "z": z})
    assert (out["x"] == types.f32_to_bf16(np.full((1, 32), 1.0, np.float32))).all()
    assert (export.check_inputs(program, "f32", {"x": x, "z": z})["x"] == np.float32(1 + 2.0**-8)).all()
    with pytest.raises(export.ExportError) as caught:
        export.check_inputs(program, "f32", {"x": x, "z": z, "u": z, "v": z})
    assert str(caught.value) == "m.e takes no input named u, v"


# ---- what the export prepares and builds: defaults, lengths, a plan, a checkpoint's own
# blocks, quantized reals


def test_export_prepare_defaults_lengths_plan_and_a_checkpoint_s_own_blocks(tmp_path, monkeypatch):
    import dataclasses

    from exactc.exporter import checkpoints, export, models


    from exactc.exporter.kernels.autoplan import AutoPlan

    from test_quant_programs import _llama2c_v2
    tiny = {"vocab": 16, "positions": 8, "dim": 8, "heads": 2, "layers": 1, "mlp": 8, "tokens": 8}
    p = export.prepare("gpt", "forward", "f32", overrides=tiny)
    m = p.manifest()
    assert (m["seed"], m["host"], m["planned"], m["checkpoint"]) == (0, "structured", False, None)
    assert sorted(p.lengths) == [1, 2, 7] and all(
        p.lengths[t][0]["input_ids"].shape == (t,) and p.lengths[t][1]["logits"].shape == (t, 16) for t in p.lengths)
    assert (p.lengths[2][0]["input_ids"] == models.draw_inputs(p.program, 0, 2)["input_ids"]).all()
    planned = export.prepare("llama", "forward", "f32", 0, {"vocab": 16, "dim": 16, "heads": 2, "kv_heads": 1,
                                                             "layers": 1, "mlp": 16, "tokens": 4}, plan=AutoPlan())
    assert planned.manifest()["planned"] and "exactc_pack_panels(" in planned.printed.files["model.c"]
    # a quantized checkpoint: its own blocks (here with one tensor's scales doubled) reach the program
    v2 = checkpoints.load(_llama2c_v2(tmp_path, 4))
    own = type(v2).quantized_weights
    changed = {}

    def doubled(self, program):
        given = own(self, program)
        name = sorted(given)[0]
        changed[name] = dataclasses.replace(given[name], scales=given[name].scales * 2)
        return {**given, **changed}
    monkeypatch.setattr(type(v2), "quantized_weights", doubled)
    q = export.ExportSpec("llama", "forward", "f32", 5, {"tokens": 6}, checkpoint=v2).prepare()
    ((name, qt),) = changed.items()
    assert (q.params[name + graph.SCALE_SUFFIX] == qt.scales).all() and (q.params[name] == qt.values).all()
    assert q.manifest()["checkpoint"] == {"path": str(v2.path), "format": v2.format, "name": v2.name}
    assert export.checkpoint_request(v2, "forward", {"tokens": 6}, ("q8", 4))[1] == ("q8", 4)
    assert export.checkpoint_request(v2, "forward", {"tokens": 6}, None)[1] == ("q8", 4)
    assert int(export.checkpoint_request(v2, "forward", {"tokens": 3}, None)[0]["tokens"]) == 3  # the request's T_max
    with pytest.raises(export.ExportError) as caught:
        export.checkpoint_request(v2, "forward", {"tokens": 6}, ("q4", 32))
    assert str(caught.value) == (f"--weights q4 --block 32: {v2.path.name} holds its weights as q8 in blocks of 4; "
                                 "exactc exports them as they are (leave --weights out)")


def test_export_build_program_quantizes_the_reals_and_names_bad_blocks_and_tags(tmp_path, monkeypatch):
    import dataclasses

    from exactc.exporter import checkpoints, export, models, quant


    from exactc.exporter.printer import host
    tiny = {"vocab": 16, "dim": 16, "heads": 2, "kv_heads": 1, "layers": 1, "mlp": 16, "tokens": 4}
    program, params = export.build_program("llama", "forward", "bf16", 0, tiny, None, ("q8", 8))
    reals = models.draw_parameters(models.build("llama", "forward", tiny), 0, "f64")  # quantized from f64, not bf16
    want = quant.quantize_parameters(program, reals, "bf16")
    assert all((params[name] == want[name]).all() for name in want)
    tags = {name: tag for name, (tag, _) in export.weight_tensors(program, params, "bf16").items()}
    assert tags["model.layers.0.self_attn.q_proj.weight"] == "I8" and tags["model.norm.weight"] == "BF16"
    assert tags["model.layers.0.self_attn.q_proj.weight_scale"] == "F32"
    with pytest.raises(export.ExportError) as caught:
        export.with_weights(program, "llama", "forward", tiny, ("q8", 0))
    assert str(caught.value) == f"--weights q8 --block 0: block 0 must be an int in 1..{quant.MAX_BLOCK}"
    # a checkpoint that refuses the entry is refused before anything is drawn
    refusing = dataclasses.replace(checkpoints.load(tiny_llama2c(tmp_path / "m.bin"), None),
                                   entries={"forward": "no forward in this file"})
    with pytest.raises(checkpoints.CheckpointError, match="no forward in this file"):
        export.build_program("llama", "forward", "f32", 0, {"tokens": 2}, refusing, None)
    # a traced program of no model config: its manifest says so
    synthetic = one_weight_two_linears()
    ps = models.draw_parameters(synthetic, 0, "f32")
    ins = {"x": np.ones((1, 32), np.float32), "z": np.ones((3, 32), np.float32)}
    e = export.Export(synthetic, "f32", 0, host.print_program(synthetic, "f32"), ps, ins,
                      walk.evaluate(synthetic, "f32", ps, ins), False)
    assert e.manifest()["config"] is None
    same = {"input_ids": np.array([1, 2], np.int32)}
    a = export.ExportSpec("gpt", "forward", "f32", 3, {"tokens": 4}, inputs=same).digest()
    assert a == export.ExportSpec("gpt", "forward", "f32", 3, {"tokens": 4}, inputs={k: v.copy() for k, v in same.items()}).digest()
    assert a != export.ExportSpec("gpt", "forward", "f32", 3, {"tokens": 4},
                                  inputs={"input_ids": np.array([1, 3], np.int32)}).digest()  # the values count


def ids(*shape: int, dtype=np.int32) -> np.ndarray:
    return np.zeros(shape, dtype)


def cache(rows: int = 6, hd: int = 8) -> np.ndarray:
    """A key or value cache of SMALL["gpt"]'s decode step: (layers, heads, tokens, head dim)."""
    return np.zeros((2, 2, rows, hd))


# ---- an entry's inputs


# (entry of gpt at SMALL, the inputs given, the whole message)
INPUT_REFUSALS = [
    ("forward", {}, "gpt.forward: input input_ids is missing"),
    ("forward", {"input_ids": ids(3), "mask": ids(3)}, "gpt.forward takes no input named mask"),
    ("forward", {"input_ids": ids(2, 3)}, "input input_ids has shape (2, 3); the program takes (T,)"),
    ("forward", {"input_ids": ids(0)},
     "input input_ids has shape (0,): its length 0 is outside [1, 6] (the program takes 1 to T_max = 6 positions)"),
    ("forward", {"input_ids": ids(7)},
     "input input_ids has shape (7,): its length 7 is outside [1, 6] (the program takes 1 to T_max = 6 positions)"),
    ("forward", {"input_ids": ids(3, dtype=np.int64)}, "input input_ids is int64; it must be int32"),
    ("decode", {"token": ids(1), "position": np.array([3], np.int32), "past_k": cache(hd=9), "past_v": cache()},
     "input past_k has shape (2, 2, 6, 9); the program takes (2, 2, 6, 8) at length 3"),
    ("decode", {"token": ids(1), "position": np.array([3], np.int32), "past_k": cache(5), "past_v": cache()},
     "input past_k has shape (2, 2, 5, 8); the program takes (2, 2, 6, 8) at length 3"),
    ("decode", {"token": ids(1), "past_k": cache(), "past_v": cache()}, "gpt.decode: input position is missing"),
    ("decode", {"token": ids(1), "position": np.array([6], np.int32), "past_k": cache(), "past_v": cache()},
     "input position: give one int32 in [1, 5] (the run-time length T)"),
    ("decode", {"token": ids(1), "position": np.array([0, 1], np.int32), "past_k": cache(), "past_v": cache()},
     "input position: give one int32 in [1, 5] (the run-time length T)"),
]


@pytest.mark.parametrize("entry,inputs,message", INPUT_REFUSALS, ids=[m for _, _, m in INPUT_REFUSALS])
def test_an_export_refuses_its_inputs_naming_the_input_and_the_rule(entry, inputs, message):
    with pytest.raises(export.ExportError) as refused:
        export.ExportSpec("gpt", entry, "f32", overrides=SMALL["gpt"], inputs=inputs).prepare()
    assert str(refused.value) == message


def silu_each(params, *inputs):
    return {f"y{k}": graph.silu(x) for k, x in enumerate(inputs)}


T5 = dims.length(5)

# (the traced program's inputs, the inputs given, the whole message)
TRACED_REFUSALS = [
    ([graph.InputSpec("x", (3, 7), "x")], {"x": np.zeros((3, 6))},
     "input x has shape (3, 6); the program takes (3, 7)"),  # no run-time length: no "at length"
    ([graph.InputSpec("x", (T5, 4), "x"), graph.InputSpec("y", (2 * T5, 4), "x")],
     {"x": np.zeros((3, 4)), "y": np.zeros((6, 4))},
     "input y: a dimension 2 * T is not the run-time length T itself"),
]


@pytest.mark.parametrize("specs,inputs,message", TRACED_REFUSALS, ids=[m for _, _, m in TRACED_REFUSALS])
def test_a_traced_program_refuses_its_inputs_naming_the_input_and_the_rule(specs, inputs, message):
    program = graph.trace("m", "e", silu_each, [], specs)
    with pytest.raises(export.ExportError) as refused:
        export.check_inputs(program, "f64", inputs)
    assert str(refused.value) == message


# ---- where and how an export is written


@pytest.mark.parametrize("target", [".", "..", "sub/.."])
def test_an_export_is_never_written_over_the_current_directory_or_one_holding_it(tmp_path, monkeypatch, target):
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    path = Path(target).resolve()
    with pytest.raises(export.ExportError) as refused:
        export.check_target(target, force=True)
    assert str(refused.value) == (f"{path} is the current directory or holds it; an export is written to a "
                                  "directory of its own")


def test_once_the_current_directory_is_gone_only_an_absolute_target_names_a_place(tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    with pytest.raises(export.ExportError) as refused:
        export.check_target("out")
    assert str(refused.value) == ("-o out: the current directory no longer exists, so a relative path names "
                                  "nothing; give an absolute one")
    assert export.check_target(tmp_path / "out") == tmp_path / "out"


def test_a_target_under_folders_not_made_yet_is_taken_unless_a_file_is_in_the_way(tmp_path):
    assert export.check_target(tmp_path / "a" / "b" / "out") == tmp_path / "a" / "b" / "out"
    (tmp_path / "file").write_text("")
    with pytest.raises(export.ExportError) as refused:
        export.check_target(tmp_path / "file" / "b" / "out")
    assert str(refused.value) == f"cannot write {tmp_path}/file/b/out: {tmp_path}/file is not a directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing made


def _a_folder(path: Path) -> object:
    path.mkdir()
    (path / "kept").write_bytes(b"old")
    return b"new"


def _an_earlier_file(path: Path) -> object:
    path.write_bytes(b"old")
    return "text, not bytes"


# (what makes the write fail: makes what is at the path, gives the data; the exception)
FAILED_WRITES = [
    ("a folder holds the name", _a_folder, IsADirectoryError),
    ("the data is text", _an_earlier_file, TypeError),
]


@pytest.mark.parametrize("case,make,raised", FAILED_WRITES, ids=[c for c, _, _ in FAILED_WRITES])
def test_a_failed_replace_file_propagates_and_leaves_what_was_there(tmp_path, case, make, raised):
    path = tmp_path / "weights.bin"
    data = make(path)
    with pytest.raises(raised):
        files.replace_file(path, data)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["weights.bin"]  # no temporary left
    assert (path / "kept" if path.is_dir() else path).read_bytes() == b"old"


def test_a_failed_swap_puts_the_earlier_export_back(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / export.MARKER).write_text(export.MARKER_TEXT)
    with pytest.raises(FileNotFoundError):
        export._swap(tmp_path / "never-written", target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the old folder removed too
    assert (target / export.MARKER).read_text() == export.MARKER_TEXT


@pytest.fixture
def recorded_signals():
    """SIGINT and SIGTERM noted in a list instead of acted on, for the test's length."""
    seen: list[int] = []
    previous = {n: signal.signal(n, lambda number, frame: seen.append(number)) for n in (signal.SIGINT, signal.SIGTERM)}
    yield seen
    for number, handler in previous.items():
        signal.signal(number, handler)


# (the signals sent inside the block, those raised after it, in order)
HELD = [
    ([signal.SIGTERM], [signal.SIGTERM]),
    ([signal.SIGTERM, signal.SIGTERM], [signal.SIGTERM]),  # one of a kind, however many came
    ([signal.SIGINT, signal.SIGTERM], [signal.SIGINT, signal.SIGTERM]),
]


@pytest.mark.parametrize("sent,raised", HELD, ids=["one", "twice", "both"])
def test_signals_are_held_through_the_block_and_raised_once_each_after_it(recorded_signals, sent, raised):
    with files.signals_held():
        for number in sent:
            os.kill(os.getpid(), number)
        inside = list(recorded_signals)
    assert inside == []
    assert recorded_signals == raised


def test_outside_the_main_thread_nothing_is_held(recorded_signals):
    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    def hold() -> None:
        with files.signals_held():
            seen.append(signal.getsignal(signal.SIGTERM))

    worker = threading.Thread(target=hold)
    worker.start()
    worker.join()
    assert seen == [before]
    with files.signals_held():  # the main thread's block does hold: another handler
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


# ---- what an export is made from


# (T_max, the run-time lengths conformance/ holds)
LENGTHS = [(None, []), (0, []), (1, [1]), (2, [1, 2]), (5, [1, 2, 5]), (7, [1, 2, 7]), (16, [1, 2, 7, 16])]


@pytest.mark.parametrize("top,lengths", LENGTHS, ids=[str(t) for t, _ in LENGTHS])
def test_conformance_lengths_are_1_2_7_and_t_max_those_at_most_t_max(top, lengths):
    assert export.conformance_lengths(top) == lengths


def test_the_export_cache_key_follows_the_quantized_weights():
    def digest(weights):
        return export.ExportSpec("gpt", "forward", "f32", overrides=SMALL["gpt"], weights=weights).digest()

    keys = [digest(w) for w in (None, ("q8", 4), ("q8", 8), ("q4", 4))]
    assert len(set(keys)) == 4, keys
    assert digest(("q8", 4)) == keys[1]


def test_a_checkpoint_s_nonfinite_weight_is_refused_when_quantized(tmp_path):
    program, params = drawn("llama")
    tensors = hf_tensors("llama", program, params)
    tensors["model.layers.1.mlp.up_proj.weight"][3, 7] = np.inf
    folder = write_hf(tmp_path / "llama", "llama", hf_config("llama", program.config), tensors)
    spec = export.ExportSpec("llama", "forward", "f32", checkpoint=checkpoints.load(folder), weights=("q8", 4))
    with pytest.raises(export.ExportError) as refused:
        spec.prepare()
    assert str(refused.value) == ("tensor model.layers.{l}.mlp.up_proj.weight: element at index (1, 3, 7) is inf; "
                                  "quantized weights must be finite (1 element(s) are not)")


def test_loss_grad_from_a_checkpoint_takes_its_batch_and_no_other_field(tmp_path):
    program, params = drawn("gpt")
    folder = write_hf(tmp_path / "gpt", "gpt", hf_config("gpt", program.config), hf_tensors("gpt", program, params))
    ckpt = checkpoints.load(folder)
    batched, _ = export.build_program("gpt", "loss_grad", "f32", 0, {"tokens": 4, "batch": 3}, ckpt, None)
    assert [(spec.name, spec.shape[0]) for spec in batched.inputs] == [("tokens", 3), ("targets", 3)]
    with pytest.raises(checkpoints.CheckpointError, match="--set batch: with a checkpoint"):
        export.build_program("gpt", "forward", "f32", 0, {"batch": 3}, ckpt, None)
