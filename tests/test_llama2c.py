"""llama2.c files (exporter/checkpoints/llama2c.py): headers at their edges, the first tensor
where each version puts it, the refusals naming the field, heads wider than two read back,
and the writer tests and benches use."""

from __future__ import annotations

import re
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from exactc.exporter import checkpoints
from exactc.exporter.checkpoints import CheckpointError, llama2c
from exactc.strategies.files import llama_configs

from test_checkpoints import (LLAMA_FIELDS, assert_logits_of_its_fields, drawn, hf_tensors, llama_of_fields,
                              llama_tensors)

# ---- a tiny llama2.c file of a config no default has (test_tune.py and test_export.py read it
# too)


# A llama2.c file of a tiny Llama whose config no default has (mlp 8).
TINY_LLAMA2C = {"vocab": 4, "dim": 4, "heads": 1, "kv_heads": 1, "layers": 1, "mlp": 8}


def tiny_llama2c(path: Path, seed: int = 5) -> Path:
    from exactc.exporter import models
    from exactc.exporter.checkpoints import llama2c

    from test_checkpoints import hf_tensors
    program = models.build("llama", "forward", dict(TINY_LLAMA2C, tokens=2))
    return llama2c.write(path, hf_tensors("llama", program, models.draw_parameters(program, seed, "f32")),
                         TINY_LLAMA2C, seq_len=4)


# ---- a llama2.c file of drawn header fields: its program against the program of those fields


@given(fields=llama_configs(), seed=st.integers(0, 2**16), version=st.sampled_from([0, 1]))
@example(fields={"vocab": 9, "dim": 16, "heads": 4, "kv_heads": 2, "layers": 2, "mlp": 7, "eps": 1e-5,
                 "theta": 10000.0, "tied": False, "context": 5}, seed=3, version=0)
def test_a_llama2c_file_of_drawn_fields_gives_the_logits_of_those_fields(fields, seed, version):
    """Every field the header holds drawn (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
    vocab_size and its sign, seq_len) in both header versions; eps and theta are llama2.c's
    run.c's own (1e-5, 10000). The file's program gives the bits of the program built
    from the fields themselves, at f32 and f64."""
    fields = dict(fields, eps=1e-5, theta=10000.0)
    program, params, tensors = llama_of_fields(fields, seed)
    with tempfile.TemporaryDirectory() as folder:
        path = llama2c.write(Path(folder) / "m.bin", tensors, fields, seq_len=fields["context"], version=version,
                             shared=fields["tied"])
        ckpt = checkpoints.load(path)
        assert ckpt.max_tokens == fields["context"]
        assert_logits_of_its_fields(ckpt, program, params)


# ---- llama2.c's headers at their edges, and heads wider than two read back
# (exporter/checkpoints/llama2c.py)


def test_a_llama2c_file_is_known_by_its_magic_or_its_suffix(tmp_path):
    import struct

    from exactc.exporter.checkpoints import llama2c
    cases = {"magic.dat": struct.pack("<I", llama2c.MAGIC) + b"\x01", "three.dat": struct.pack("<I", llama2c.MAGIC)[:3],
             "zero.dat": bytes(8), "any.bin": b""}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    assert {n: llama2c.looks_like(tmp_path / n) for n in cases} == {
        "magic.dat": True, "three.dat": False, "zero.dat": False, "any.bin": True}
    assert llama2c.looks_like(tmp_path / "none.dat") is False


def test_llama2c_headers_read_at_their_edges_and_refused_whole(tmp_path):
    import struct

    from exactc.exporter.checkpoints import CheckpointError, llama2c
    path = tmp_path / "m.bin"

    def header(data):
        path.write_bytes(data)
        try:
            return llama2c.read_header(path)
        except CheckpointError as err:
            return str(err)
    fields = (8, 16, 1, 2, 2, 5, 4)
    legacy = struct.pack("<7i", *fields)
    params = dict(zip(llama2c.FIELDS, fields))
    assert header(legacy) == (params, 0, True, 28)  # exactly the seven int32s
    assert header(struct.pack("<7i", *fields[:5], 1, 4)) == ({**params, "vocab_size": 1}, 0, True, 28)
    assert header(struct.pack("<7i", *fields[:5], -5, 4)) == (params, 0, False, 28)
    assert header(legacy[:27]) == f"{path}: too short for llama2.c's header of seven int32s"
    magic = struct.pack("<I", llama2c.MAGIC)
    assert header(magic + struct.pack("<i", 1)) == f"{path}: a version-1 header is 256 bytes; the file has 8"
    assert header(magic + struct.pack("<i", -1)) == (
        f"{path}: llama2.c version -1 is not supported (exactc reads the legacy header, version 1 (f32) and "
        "version 2 (int8 groups))")
    v1 = magic + struct.pack("<i", 1) + struct.pack("<7i", -8, *fields[1:]) + b"\x01"
    assert header(v1.ljust(256, b"\x00")) == f"{path}: header field dim=-8 must be positive"
    v2 = magic + struct.pack("<i", 2) + legacy + b"\x00" + struct.pack("<i", -4)
    assert header(v2.ljust(256, b"\x00")) == f"{path}: header field group_size=-4 must be positive"
    v2 = magic + struct.pack("<i", 2) + legacy + b"\x00" + struct.pack("<i", 4)
    assert header(v2.ljust(256, b"\x00")) == ({**params, "group_size": 4}, 2, False, 256)


def test_a_llama2c_file_with_heads_wider_than_two_reads_back_each_tensor(tmp_path):
    """Heads of 4 (a head of 2 makes the pair permutation the identity): every tensor
    written under its Hugging Face name reads back the same, q and k rows included, in
    each version (version 2's quantized weights as exactc's q8 of the same rows)."""
    from exactc.exporter import checkpoints, quant
    from exactc.exporter.checkpoints import llama2c
    tensors, fields = llama_tensors(LLAMA_FIELDS), LLAMA_FIELDS
    for version in (0, 1, 2):
        ckpt = checkpoints.load(llama2c.write(tmp_path / f"v{version}.bin", tensors, fields, seq_len=4,
                                              version=version, group=4))
        assert set(ckpt.tensors) == set(tensors)
        for name, values in tensors.items():
            want = values.astype(np.float32).astype(np.float64)
            if version == 2 and ckpt.tensors[name].blocks is not None:
                want = quant.quantize_tensor(name, want, "q8", 4).dequantize().astype(np.float64)
            assert np.array_equal(ckpt.tensors[name].read(), want), (version, name)
        # version 2 names a quantized tensor of one layer without its index
        assert ckpt.tensors["model.layers.0.self_attn.q_proj.weight"].source == ("wq" if version == 2 else "wq[0]")


# ---- llama2.c files as stored (exporter/checkpoints/llama2c.py): where the first tensor lies
# in each version, what a checkpoint says of its file, the refusals whole


def test_a_llama2c_files_first_tensor_lies_where_its_version_puts_it(tmp_path):
    """The legacy file starts with the token embedding, version 1 with the final norm:
    read from the bytes, not through the reader (which shares the writer's layout)."""
    from exactc.exporter.checkpoints import llama2c

    tensors, fields = llama_tensors(LLAMA_FIELDS), LLAMA_FIELDS
    for version, start, first in ((0, 28, "model.embed_tokens.weight"), (1, 256, "model.norm.weight")):
        data = llama2c.write(tmp_path / f"v{version}.bin", tensors, fields, seq_len=4, version=version).read_bytes()
        want = tensors[first].astype(np.float32)
        assert np.array_equal(np.frombuffer(data, "<f4", want.size, start).reshape(want.shape), want), version


def test_a_llama2c_checkpoint_says_what_its_file_holds(tmp_path):
    from exactc.exporter import checkpoints
    from exactc.exporter.checkpoints import llama2c

    fields = dict(LLAMA_FIELDS, layers=2)
    tensors = llama_tensors(fields)
    v0 = checkpoints.load(llama2c.write(tmp_path / "v0.bin", tensors, fields, seq_len=4, version=0))
    assert (v0.name, v0.ignored, v0.weights, v0.max_tokens) == ("v0.bin", ["freq_cis_real", "freq_cis_imag"], None, 4)
    assert {v0.tensors[n].source for n in ("model.norm.weight", "model.embed_tokens.weight", "lm_head.weight")} == {
        "rms_final_weight", "token_embedding_table", "wcls"}
    assert v0.tensors["model.layers.1.self_attn.q_proj.weight"].source == "wq[1]"
    v2 = checkpoints.load(llama2c.write(tmp_path / "v2.bin", tensors, fields, seq_len=4, version=2, group=4))
    assert (v2.ignored, v2.weights) == ([], ("q8", 4))
    q = v2.tensors["model.layers.1.self_attn.q_proj.weight"]
    assert (q.dtype, q.source, v2.tensors["model.layers.0.mlp.up_proj.weight"].source) == ("Q8", "wq[1]", "w3[0]")
    assert v2.tensors["model.norm.weight"].dtype == "F32"


def test_a_llama2c_file_of_the_wrong_size_or_straddling_groups_is_refused_whole(tmp_path):
    from exactc.exporter import checkpoints
    from exactc.exporter.checkpoints import CheckpointError, llama2c

    described = "dim=8, hidden_dim=8, n_layers=1, n_heads=2, n_kv_heads=1, vocab_size=5, seq_len=4"
    for version, shared, header, kind in (
            (0, True, f"legacy; {described}; shared", "f32 weights"),
            (1, False, f"version 1; {described}; separate", "f32 weights"),
            (2, False, f"version 2; {described}, group_size=4; separate", "f32 norms and int8 groups of 4")):
        tensors, fields = llama_tensors(LLAMA_FIELDS), LLAMA_FIELDS
        if shared:
            tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
        path = llama2c.write(tmp_path / f"v{version}.bin", tensors, fields, seq_len=4, version=version, group=4)
        size = path.stat().st_size
        path.write_bytes(path.read_bytes()[:-1])
        with pytest.raises(CheckpointError) as caught:
            checkpoints.load(path)
        assert str(caught.value) == (f"{path}: the header ({header} classifier) needs {size} bytes of header and "
                                     f"{kind}; the file has {size - 1}")
    data = bytearray(llama2c.write(tmp_path / "g.bin", llama_tensors(LLAMA_FIELDS), LLAMA_FIELDS, seq_len=4,
                                   version=2, group=4).read_bytes())
    data[37:41] = (3).to_bytes(4, "little")  # group_size 3: the rows hold 8 values
    (tmp_path / "g.bin").write_bytes(bytes(data))
    with pytest.raises(CheckpointError) as caught:
        checkpoints.load(tmp_path / "g.bin")
    assert str(caught.value) == (f"{tmp_path / 'g.bin'}: group_size 3 does not divide the rows of "
                                 "token_embedding_table (8 values): runq.c's groups would straddle rows, and "
                                 "exactc's q8 blocks are per row")


# ---- the llama2.c writer tests and benches use: defaults, the header's packing, the legacy
# rope tables, dtypes, a non-finite weight refused


def test_a_llama2c_file_written_with_no_version_named_is_legacy_and_version_2_groups_64(tmp_path):
    """No version named: the legacy file (seven int32s, a negative vocab_size for a
    classifier apart), byte for byte the one written as version 0; version 2 with no
    group named: groups of 64 in the header's bytes 37-40."""
    from exactc.exporter.checkpoints import llama2c

    tensors, fields = llama_tensors(LLAMA_FIELDS), LLAMA_FIELDS
    plain = llama2c.write(tmp_path / "plain.bin", tensors, fields, seq_len=4).read_bytes()
    assert plain[:28] == struct.pack("<7i", 8, 8, 1, 2, 1, -5, 4)
    assert plain == llama2c.write(tmp_path / "v0.bin", tensors, fields, seq_len=4, version=0).read_bytes()
    v2 = llama2c.write(tmp_path / "v2.bin", tensors, fields, seq_len=4, version=2).read_bytes()
    assert struct.unpack("<i", v2[37:41]) == (64,)
    assert v2 == llama2c.write(tmp_path / "g64.bin", tensors, fields, seq_len=4, version=2, group=64).read_bytes()


def test_a_llama2c_header_holds_its_fields_as_int32s(tmp_path):
    """Versions 1 and 2 pack the header's seven fields as int32 (struct's "i"): a
    seq_len of -1 is written as its two's complement, and the reader refuses the file
    by that field."""
    from exactc.exporter.checkpoints import CheckpointError, llama2c

    tensors, fields = llama_tensors(LLAMA_FIELDS), LLAMA_FIELDS
    for version in (1, 2):
        path = llama2c.write(tmp_path / f"v{version}.bin", tensors, fields, seq_len=-1, version=version, group=4)
        data = path.read_bytes()
        assert data[:37] == struct.pack("<Ii7iB", llama2c.MAGIC, version, 8, 8, 1, 2, 1, 5, -1, 0), version
        assert data[32:36] == b"\xff\xff\xff\xff"
        with pytest.raises(CheckpointError) as caught:
            llama2c.read_header(path)
        assert str(caught.value) == f"{path}: header field seq_len=-1 must be positive"


def test_a_legacy_llama2c_files_rope_tables_are_llama2cs(tmp_path):
    """freq_cis_real and freq_cis_imag (seq_len, head_size/2), as llama2.c's export.py
    writes them (model.py precompute_freqs_cis, in f32): freq_i = 1 / 10000^(2i/head_size),
    the angle t * freq_i at position t, then cos and sin of the f32 angle, in f32. Heads
    of 64 and 128 positions, so that a frequency or an angle computed in f64 shows."""
    from exactc.exporter.checkpoints import llama2c

    fields = {"vocab": 5, "dim": 64, "heads": 1, "kv_heads": 1, "layers": 1, "mlp": 8}
    tensors = llama_tensors(fields)
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]  # shared: the tables end the file
    seq_len, hd = 128, 64
    data = llama2c.write(tmp_path / "m.bin", tensors, fields, seq_len=seq_len).read_bytes()
    f32 = np.float32
    freq = f32(1.0) / f32(10000.0) ** (np.arange(0, hd, 2, dtype=f32) / f32(hd))
    angles = np.arange(seq_len, dtype=f32)[:, None] * freq[None, :]
    assert freq.dtype == angles.dtype == np.float32 and angles.shape == (seq_len, hd // 2)
    n = seq_len * hd // 2
    real = np.frombuffer(data, "<f4", n, len(data) - 8 * n).reshape(seq_len, hd // 2)
    imag = np.frombuffer(data, "<f4", n, len(data) - 4 * n).reshape(seq_len, hd // 2)
    assert np.array_equal(real.view(np.uint32), np.cos(angles).view(np.uint32))
    assert np.array_equal(imag.view(np.uint32), np.sin(angles).view(np.uint32))
    assert (real[0] == 1).all() and (imag[0] == 0).all() and real[1, 0] == np.cos(f32(1)) and freq[0] == 1
    assert len(data) == 28 + 4 * sum(v.size for k, v in tensors.items() if k != "lm_head.weight") + 8 * n


def test_llama2c_write_rounds_f64_tensors_to_f32_before_judging_the_classifier_shared(tmp_path):
    """An f64 classifier that differs from the f64 embedding only below f32's precision
    is the embedding once rounded to f32: the file is the one written from the f32
    tensors with the classifier shared (a positive vocab_size, no wcls)."""
    from exactc.exporter.checkpoints import llama2c

    tensors, fields = llama_tensors(LLAMA_FIELDS), LLAMA_FIELDS
    f32 = {k: v.astype(np.float32) for k, v in tensors.items()}
    f32["lm_head.weight"] = f32["model.embed_tokens.weight"]
    f64 = {k: v.astype(np.float64) for k, v in f32.items()}
    f64["lm_head.weight"] = f64["model.embed_tokens.weight"] * (1 + 2.0 ** -40)
    assert not np.array_equal(f64["lm_head.weight"], f64["model.embed_tokens.weight"])
    data = llama2c.write(tmp_path / "f64.bin", f64, fields, seq_len=4).read_bytes()
    assert data[:28] == struct.pack("<7i", 8, 8, 1, 2, 1, 5, 4)
    assert data == llama2c.write(tmp_path / "f32.bin", f32, fields, seq_len=4).read_bytes()


def test_llama2c_write_refuses_a_non_finite_weight_by_its_llama2c_name(tmp_path):
    from exactc.exporter import quant
    from exactc.exporter.checkpoints import llama2c

    fields = dict(LLAMA_FIELDS, layers=2)
    tensors = llama_tensors(fields)
    tensors["model.layers.1.mlp.down_proj.weight"][2, 3] = np.inf
    with pytest.raises(quant.QuantError) as caught:
        llama2c.write(tmp_path / "m.bin", tensors, fields, seq_len=4, version=2, group=4)
    assert str(caught.value) == ("tensor w2[1]: element at index (2, 3) is inf; quantized weights must be finite "
                                 "(1 element(s) are not)")


# ---- llama2.c files


def test_a_llama2c_path_that_cannot_be_read_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match=f"^{re.escape(str(tmp_path))}: not readable \\(Is a directory\\)$"):
        llama2c.load(tmp_path)


@pytest.fixture(scope="module")
def llama():
    """A drawn Llama (SMALL of tests/test_checkpoints.py: dim 24, mlp 20, vocab 40) under
    Hugging Face's names, and its exactc Config fields."""
    program, params = drawn("llama")
    cfg = program.config
    fields = {"vocab": cfg.vocab, "dim": cfg.dim, "heads": cfg.heads, "kv_heads": cfg.kv_heads,
              "layers": cfg.layers, "mlp": cfg.mlp}
    return hf_tensors("llama", program, params), fields


@pytest.mark.parametrize("change, options, message", [
    ({}, {"version": 3}, "llama2.c version 3: write 0 (legacy), 1 or 2"),
    ({"vocab": 41}, {}, "model.embed_tokens.weight is (40, 24); llama2.c's token_embedding_table is (41, 24)"),
    ({"mlp": 21}, {"version": 1}, "model.layers.{l}.mlp.gate_proj.weight is (2, 20, 24); llama2.c's w1 is (2, 21, 24)"),
], ids=["version 3", "vocab not the table's", "mlp not the weights'"])
def test_the_llama2c_writer_refuses_what_it_cannot_write(tmp_path, llama, change, options, message):
    tensors, fields = llama
    path = tmp_path / "m.bin"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        llama2c.write(path, tensors, dict(fields, **change), seq_len=16, **options)
    assert not path.exists()


def test_a_version_2_file_with_a_shared_classifier_stores_none(tmp_path, llama):
    tensors, fields = llama
    group = 4  # divides dim 24 and mlp 20
    shared = llama2c.write(tmp_path / "shared.bin", tensors, fields, seq_len=16, version=2, shared=True, group=group)
    apart = llama2c.write(tmp_path / "apart.bin", tensors, fields, seq_len=16, version=2, shared=False, group=group)
    V, D = fields["vocab"], fields["dim"]
    assert apart.stat().st_size - shared.stat().st_size == V * D + 4 * V * (D // group)  # wcls: int8s and scales
    ckpt = checkpoints.load(shared)
    assert ckpt.weights == ("q8", group)
    assert ckpt.tensors["lm_head.weight"] is ckpt.tensors["model.embed_tokens.weight"]
    assert ckpt.tensors["lm_head.weight"].source == "token_embedding_table"
    blocks = ckpt.tensors["lm_head.weight"].blocks()
    assert blocks.fmt == "q8" and blocks.block == group and blocks.shape == (V, D)
