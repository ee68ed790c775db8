"""Whole programs with quantized linear weights (`exactc export --weights q8|q4`): every
architecture and entry gives the numpy reference's bytes built by gcc and clang, with and
without OpenMP, on 1 and 2 threads, with the automatic plan and without, in the integer
form (the default) and the weight-only one; the weights file holds each linear weight as
I8 or U8 values and F32 scales, and everything else at the site type; what is
quantized is what reaches `linear` as its weight and nothing else (a tied head stays
float). Small dimensions, so that a case builds and runs in seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from exactc.exporter import export, graph, models, quant
from exactc import programs
from exactc.verify import conformance
from exactc.verify.compare import assert_bits_equal

SMALL = {
    "gpt": {"vocab": 48, "positions": 8, "dim": 16, "heads": 2, "layers": 2, "mlp": 24, "tokens": 6},
    "bert": {"vocab": 48, "positions": 8, "dim": 16, "heads": 2, "layers": 2, "mlp": 24, "tokens": 6},
    "llama": {"vocab": 48, "dim": 16, "heads": 4, "kv_heads": 2, "layers": 2, "mlp": 20, "tokens": 6},
}
# (model, entry, site, fmt, block, compilers, plan, form): each architecture and entry
# (forward, prefill, decode, next_token: generate's; embed), both formats and forms; blocks
# that divide K, that leave a short last block (mlp 20, 24 by 16) and that pass K (20 >
# 16). Two cases go through gcc and clang, one with the automatic plan and one without
# (and gcc without OpenMP); the others through gcc with OpenMP, to keep make test's time.
EVERY = (("gcc", True), ("clang", True), ("gcc", False))
INTEGER, WEIGHT_ONLY = graph.FORMS
CASES = [
    ("llama", "forward", "f32", "q4", 32, EVERY, "auto", INTEGER),
    ("llama", "decode", "f32", "q8", 32, EVERY[:2], None, INTEGER),
    ("gpt", "prefill", "f32", "q8", 32, EVERY[:1], None, INTEGER),
    ("gpt", "decode", "f32", "q4", 16, EVERY[:1], "auto", INTEGER),
    ("bert", "embed", "f32", "q4", 16, EVERY[:1], "auto", INTEGER),
    ("llama", "next_token", "bf16", "q8", 20, EVERY[:1], "auto", INTEGER),
    ("gpt", "forward", "f32", "q8", 32, EVERY[:1], "auto", WEIGHT_ONLY),
]


def _prepared(model: str, entry: str, site: str, fmt: str, block: int, plan=None, form=None,
              **overrides) -> export.Export:
    return export.ExportSpec(model, entry, site, 5, dict(SMALL[model], **overrides), plan=plan,
                             weights=(fmt, block), form=form).prepare()


@pytest.mark.needs("clang", "libomp")
@pytest.mark.parametrize("model,entry,site,fmt,block,builds,plan,form", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[3]}-g{c[4]}-{c[6] or 'none'}-{c[7]}" for c in CASES])
def test_quantized_program_matches_reference(tmp_path, model, entry, site, fmt, block, builds, plan, form):
    prepared = _prepared(model, entry, site, fmt, block, plan=plan, form=form)
    linears = {op.primitive for op in prepared.program.function.ops()} & {"qlinear_i", "qlinear_w"}
    assert linears == {"qlinear_i" if form == INTEGER else "qlinear_w"}
    root = export.write(prepared, tmp_path / "q")
    for cc, openmp in builds:
        program = programs.make(root, programs.Build(cc=cc, openmp=openmp), refuse_warnings=True)
        for threads in (1, 2):
            try:
                conformance.assert_conforms(program, prepared, threads=threads)
            except conformance.ProgramMismatch as mismatch:
                pytest.fail(f"{cc} openmp={openmp} threads={threads}: {mismatch}", pytrace=False)
    done = programs.make(root, programs.Build(cc="gcc")).check(2)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("fmt", ["q8", "q4"])
def test_a_decode_program_reading_block_panels_laid_out_at_load_matches_reference(tmp_path, fmt):
    """Rows of whole blocks of 32 under the automatic plan: every integer-form linear
    reads its values as block panels laid out at load (exactc_pack_block_panels), the x8
    kernel handed each block's 8 rows a run apart, and the program keeps the reference's
    bytes on 1 and 2 threads (its split pieces start on whole chunks of 8 rows)."""
    prepared = _prepared("llama", "decode", "f32", fmt, 32, plan="auto", dim=64, mlp=64)
    root = export.write(prepared, tmp_path / "q")
    run = 32 if fmt == "q8" else 16
    kernels = {path.name: path.read_text() for path in (root / "kernels").glob("qlinear_i_*.c")}
    assert kernels and all(f"&wq_p[blk * {8 * run}], {run}, s_rows);" in text for text in kernels.values()), kernels
    model_c = (root / "model.c").read_text()
    assert model_c.count("exactc_pack_block_panels(") == 8  # q, k, v, o, gate, up, down (stacked), the head
    program = programs.make(root, programs.Build(cc="gcc", openmp=True), refuse_warnings=True)
    for threads in (1, 2):
        conformance.assert_conforms(program, prepared, threads=threads)


@pytest.mark.parametrize("site", ["f32", "bf16"])
def test_the_weights_file_holds_values_and_scales_and_float_for_the_rest(tmp_path, site):
    """Read back with the safetensors package: each linear weight is U8 (q4) values with
    its F32 `_scale`, exactc's quantizer of the weight rounded to f32 (whatever the site:
    a bf16 export does not quantize bf16 values); embeddings and norms are at the site
    type, as in the float export."""
    from safetensors.numpy import load_file

    prepared = _prepared("llama", "forward", site, "q4", 32)
    root = export.write(prepared, tmp_path / "q")
    loaded = load_file(str(root / "weights.safetensors"))
    floats = export.ExportSpec("llama", "forward", "f32", 5, SMALL["llama"]).prepare().params
    at_site = export.ExportSpec("llama", "forward", site, 5, SMALL["llama"]).prepare().params
    for name in ("model.layers.1.mlp.down_proj.weight", "lm_head.weight"):
        layer = "model.layers.1." in name
        want = quant.quantize_tensor(name, floats[name.replace("1.", "{l}.")][1] if layer else floats[name], "q4", 32)
        assert loaded[name].dtype == np.uint8 and loaded[name + graph.SCALE_SUFFIX].dtype == np.float32
        assert_bits_equal(want.values, loaded[name], name, every_bit=True)
        assert_bits_equal(want.scales, loaded[name + graph.SCALE_SUFFIX], name + "_scale", every_bit=True)
    for name in ("model.embed_tokens.weight", "model.layers.0.input_layernorm.weight", "model.norm.weight"):
        key = name.replace("0.", "{l}.")
        want = at_site[key][0] if key != name else at_site[name]
        assert_bits_equal(want, loaded[name], name, every_bit=True)
    manifest = json.loads((root / "exactc.json").read_text())
    assert manifest["weights"]["format"] == "q4" and manifest["weights"]["block"] == 32
    assert manifest["weights"]["form"] == INTEGER  # the default
    assert len(manifest["weights"]["tensors"]) == 8  # q, k, v, o, gate, up, down and the head


def test_only_weights_that_reach_linear_alone_are_quantized():
    tied = models.build("gpt", "forward", dict(SMALL["gpt"]))
    untied = models.build("gpt", "forward", dict(SMALL["gpt"], tied=False))
    assert "transformer.wte.weight" not in graph.linear_weights(tied)  # the embedding table too
    assert "lm_head.weight" in graph.linear_weights(untied)
    assert sorted(graph.linear_weights(models.build("bert", "embed", SMALL["bert"]))) == sorted(
        f"encoder.layer.{{l}}.{n}.weight" for n in ("attention.self.query", "attention.self.key",
                                                        "attention.self.value", "attention.output.dense",
                                                        "intermediate.dense", "output.dense"))


def exactc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "exactc.cli", *args], capture_output=True, text=True)


@pytest.mark.parametrize("args,message", [
    (["--block", "16"], "--block G goes with --weights q8 or q4"),
    (["--weights", "q4", "--block", "15"], "--weights q4 --block 15: block 15: a q4 block holds an even number"),
    (["--weights", "q8", "--block", "0"], "block 0 must be an int in 1..65536"),
    (["--form", "integer"], "--form integer goes with quantized weights: --weights q8 or q4"),
])
def test_weights_options_are_refused_on_one_line(tmp_path, args, message):
    done = exactc("export", "llama", "--entry", "forward", "--dtype", "f32", *args, "-o", str(tmp_path / "out"))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and message in lines[0], done.stderr
    assert not (tmp_path / "out").exists()


def _logits(form: str | None, fmt: str, site: str = "f32") -> np.ndarray:
    weights = None if form is None else (fmt, 32)
    prepared = export.ExportSpec("llama", "forward", site, 5, SMALL["llama"], weights=weights, form=form).prepare()
    return prepared.expected["logits"].astype(np.float64)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def test_the_integer_form_stays_as_close_to_the_float_logits_as_the_weight_only_one():
    """Each qlinear_i reads the quantization of its own activations: its q8 logits agree
    with the f64 float program's as the weight-only ones do (measured: every row's cosine
    0.99986 against 0.99992; argmax equal). A linear that read another value's quantized
    activations of the same shape gives cosines below 0."""
    exact = _logits(None, "q8", "f64")
    for form in graph.FORMS:
        got = _logits(form, "q8")
        assert np.min(_cosines(got, exact)) > 0.9995, form
        assert np.array_equal(got.argmax(-1), exact.argmax(-1)), form


def test_a_value_read_by_several_linears_is_quantized_once_per_block():
    """Attention's q, k and v read one quantization of the normed activations; the
    weight-only form quantizes nothing."""
    integer = models.build("llama", "forward", SMALL["llama"], form=INTEGER,
                           quantized={n: ("q8", 16) for n in graph.linear_weights(
                               models.build("llama", "forward", SMALL["llama"]))})
    for fn in integer.function.walk():
        made = {id(v): op for op in fn.nodes if isinstance(op, graph.Op) for v in op.outs}
        readers: dict[int, list[str]] = {}
        for op in fn.nodes:
            if isinstance(op, graph.Op) and op.primitive == "qlinear_i":
                quantize = made[id(op.operands()["xq"])]
                assert quantize is made[id(op.operands()["xd"])] and quantize.primitive == "quantize"
                readers.setdefault(id(quantize), []).append(op.outs[0].name)
        if fn.name.startswith("attention"):
            assert sorted(map(len, readers.values())) == [1, 3], readers  # (q, k, v) then the output's
    quantizes = [op for op in integer.function.ops() if op.primitive == "quantize"]
    assert quantizes and all(op.attrs["block"] == 16 for op in quantizes)


def test_a_nonfinite_weight_is_refused_naming_the_tensor_and_index():
    program = models.build("llama", "forward", SMALL["llama"])
    reals = models.draw_parameters(program, 0, "f64")
    reals["model.layers.{l}.mlp.up_proj.weight"][1, 3, 7] = np.inf
    quantized = models.build("llama", "forward", SMALL["llama"],
                             quantized={n: ("q8", 32) for n in graph.linear_weights(program)})
    with pytest.raises(quant.QuantError, match=r"tensor model.layers.\{l\}.mlp.up_proj.weight: element at index "
                                               r"\(1, 3, 7\) is inf"):
        quant.quantize_parameters(quantized, reals, "f32")


# ---- real quantized checkpoints: llama2.c version 2 ------------------------------------------


def _llama2c_v2(tmp_path: Path, group: int, version: int = 2) -> Path:
    """A llama2.c file of the small Llama's drawn f32 parameters (separate classifier)."""
    from exactc.exporter.checkpoints import llama2c

    program = models.build("llama", "forward", SMALL["llama"])
    params = models.draw_parameters(program, 7, "f32")
    tensors = {name: array for name, (_, array) in export.weight_tensors(program, params, "f32").items()}
    fields = {k: SMALL["llama"][k] for k in ("vocab", "dim", "heads", "kv_heads", "layers", "mlp")}
    return llama2c.write(tmp_path / f"v{version}-g{group}.bin", tensors, fields, seq_len=6, version=version,
                         shared=False, group=group)


@pytest.mark.parametrize("group", [2, 4])
def test_a_llama2c_version_2_file_exports_its_own_blocks(tmp_path, group):
    """The group size comes from the header; every linear weight reaches the program as the
    file's int8 values and f32 scales (wq and wk rows permuted with their scales), which
    are the blocks exactc's quantizer gives the same f32 weights from a version-1 file;
    the embedding is dequantized; the program conforms."""
    from exactc.exporter import checkpoints

    v2 = checkpoints.load(_llama2c_v2(tmp_path, group))
    assert v2.weights == ("q8", group)
    prepared = export.ExportSpec("llama", "forward", "f32", 5, {"tokens": 6}, checkpoint=v2).prepare()
    v1 = checkpoints.load(_llama2c_v2(tmp_path, group, version=1))
    requantized = export.ExportSpec("llama", "forward", "f32", 5, {"tokens": 6}, checkpoint=v1,
                                    weights=("q8", group)).prepare()
    assert sorted(prepared.program.quantized) == sorted(requantized.program.quantized)
    for name in prepared.program.quantized:
        for key in (name, name + graph.SCALE_SUFFIX):
            assert_bits_equal(requantized.params[key], prepared.params[key], key, every_bit=True)
    embedding = "model.embed_tokens.weight"
    blocks = v2.tensors[embedding].blocks()
    assert_bits_equal(blocks.dequantize(), prepared.params[embedding], embedding, every_bit=True)
    if group == 4:  # one build is enough to show the file's program conforms
        root = export.write(prepared, tmp_path / "q")
        done = programs.make(root, programs.Build(cc="gcc")).check(2)
        assert done.returncode == 0, done.stdout + done.stderr
    with pytest.raises(export.ExportError, match=r"holds its weights as q8 in blocks of"):
        export.ExportSpec("llama", "forward", "f32", 5, {"tokens": 6}, checkpoint=v2, weights=("q4", 32)).prepare()


def test_a_llama2c_version_2_file_whose_groups_straddle_rows_is_refused(tmp_path):
    from exactc.exporter import checkpoints
    from exactc.exporter.checkpoints import CheckpointError

    path = _llama2c_v2(tmp_path, 4)
    data = bytearray(path.read_bytes())
    data[37:41] = (8).to_bytes(4, "little")  # mlp 20 is not a multiple of 8
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"group_size 8 does not divide the rows of w1 \(16 values\)|"
                                              r"group_size 8 does not divide the rows of w2 \(20 values\)"):
        checkpoints.load(path)


# ---- real quantized checkpoints: GGUF (llama.cpp) ----------------------------------------------

GGUF_LLAMA = {"vocab": 48, "dim": 32, "heads": 4, "kv_heads": 2, "layers": 2, "mlp": 64}  # rows of whole blocks of 32


def _lattice(shape: tuple[int, int], fmt: str, rng: np.random.Generator) -> np.ndarray:
    """Weights on which exactc's quantizer and gguf-py's agree exactly: per block of 32, a
    power-of-two scale d (exact in f16, 1/d exact) times integers, with one element at the
    format's extreme (127 or -8 times d), so that every quotient is an exact integer."""
    rows, k = shape
    top, low, high = (127, -126, 126) if fmt == "q8" else (-8, -7, 7)
    ints = rng.integers(low, high + 1, (rows, k // 32, 32))
    ints[..., 0] = top * np.where(rng.random((rows, k // 32)) < 0.5, 1, -1) if fmt == "q8" else top
    d = 2.0 ** rng.integers(-9, -3, (rows, k // 32, 1))
    return (ints * d).reshape(rows, k).astype(np.float32)


def _gguf(path: Path, qtype: str | None, fmt: str, seed: int = 3) -> tuple[Path, dict[str, np.ndarray]]:
    """A GGUF Llama written with the gguf package as llama.cpp's converter writes one
    (llama.cpp names, attn_q and attn_k rows permuted to the interleaved order), its linear
    weights lattice values (_lattice) stored as `qtype` (None: F32), the rest F32; and
    its tensors under Hugging Face's names, in Hugging Face's row order."""
    from exactc.exporter.checkpoints import gguf_file

    cfg = GGUF_LLAMA
    program = models.build("llama", "forward", dict(cfg, tokens=6))
    rng = np.random.default_rng(seed)
    params = models.draw_parameters(program, seed, "f32")
    linear = set(graph.linear_weights(program))
    hf_order, quantized = {}, set()
    for spec in program.params:
        for layer in range(spec.layers or 1):
            array = params[spec.name][layer] if spec.layers else params[spec.name]
            if spec.name in linear:
                array = _lattice(array.shape, fmt, rng)
                quantized.add(spec.layer_name(layer))
            hf_order[spec.layer_name(layer)] = array
    gguf_file.write(path, dict(cfg, tokens=6), hf_order, qtype, quantized)
    return path, hf_order


@pytest.mark.parametrize("qtype,fmt", [("Q8_0", "q8"), ("Q4_0", "q4")])
def test_a_gguf_file_holds_the_blocks_exactc_makes_of_its_f32_twin(tmp_path, qtype, fmt):
    """Where the rules match (_lattice), exactc's quantizer of the f32 GGUF model gives the
    very blocks llama.cpp's format holds (values, nibble order, scales); the quantized
    file's program conforms; attn_q and attn_k come back in Hugging Face's row order."""
    from exactc.exporter import checkpoints

    path, _ = _gguf(tmp_path / "f32.gguf", None, fmt)
    floats = checkpoints.load(path)
    path, hf_order = _gguf(tmp_path / f"{qtype}.gguf", qtype, fmt)
    blocks = checkpoints.load(path)
    assert floats.weights is None and blocks.weights == (fmt, 32) and blocks.format == "gguf"
    ours = export.ExportSpec("llama", "forward", "f32", 5, {"tokens": 6}, checkpoint=floats, weights=(fmt, 32)).prepare()
    theirs = export.ExportSpec("llama", "forward", "f32", 5, {"tokens": 6}, checkpoint=blocks).prepare()
    assert sorted(ours.program.quantized) == sorted(theirs.program.quantized) and len(ours.program.quantized) == 8
    for name in theirs.program.quantized:
        for key in (name, name + graph.SCALE_SUFFIX):
            assert_bits_equal(ours.params[key], theirs.params[key], key, every_bit=True,
                              labels=("exactc's quantizer", f"the {qtype} file"))
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.1.self_attn.k_proj.weight"):
        read = blocks.tensors[name].read().astype(np.float32)  # the lattice: exact in f32
        assert_bits_equal(hf_order[name], read, name, every_bit=True)
    if fmt == "q4":
        root = export.write(theirs, tmp_path / "q")
        done = programs.make(root, programs.Build(cc="gcc")).check(2)
        assert done.returncode == 0, done.stdout + done.stderr


def test_a_gguf_tensor_of_another_type_is_refused_by_name(tmp_path):
    import gguf

    from exactc.exporter import checkpoints
    from exactc.exporter.checkpoints import CheckpointError

    path = tmp_path / "q5.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    for add, value in (("add_block_count", 1), ("add_embedding_length", 32), ("add_feed_forward_length", 64),
                       ("add_head_count", 4), ("add_context_length", 6), ("add_layer_norm_rms_eps", 1e-5)):
        getattr(writer, add)(value)
    kind = gguf.GGMLQuantizationType.Q5_0
    writer.add_tensor("blk.0.attn_q.weight", gguf.quants.quantize(np.ones((32, 32), np.float32), kind),
                      raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(CheckpointError, match=r"tensor blk.0.attn_q.weight is Q5_0; exactc reads F32, F16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K"):
        checkpoints.load(path)


@pytest.mark.parametrize("fmt", ["q8", "q4"])
def test_a_llama_prefill_under_the_automatic_plan_takes_the_tile_kernel(tmp_path, fmt):
    """A llama prefill of 6 tokens with linears of whole blocks of 32 (dim 64, mlp 96):
    the automatic plan puts each qlinear_i's rows in lanes of 4 over its outputs in lanes
    of 8, so the printed source calls exactc_dot.h's tile kernel (the first 4 rows of a
    chunk of 8 outputs; the last 2 rows take the x8 kernel), and the program conforms at
    1 and 2 threads, built by gcc and clang."""
    prepared = _prepared("llama", "prefill", "f32", fmt, 32, plan="auto", dim=64, mlp=96)
    root = export.write(prepared, tmp_path / "q")
    source = "\n".join(path.read_text() for path in sorted(root.rglob("*.c")))
    assert f"exactc_qtile_{fmt}(4, " in source and f"exactc_dot_{fmt}_32x8(" in source
    for cc in ("gcc", "clang"):
        program = programs.make(root, programs.Build(cc=cc, openmp=True), refuse_warnings=True)
        for threads in (1, 2):
            try:
                conformance.assert_conforms(program, prepared, threads=threads)
            except conformance.ProgramMismatch as mismatch:
                pytest.fail(f"{cc} threads={threads}: {mismatch}", pytrace=False)
