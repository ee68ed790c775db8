"""Bad input, one line: every malformed checkpoint, config value and plan file in the
table below is refused with a message that names the file, the field and the rule,
through the Python API (a CheckpointError, ModelError or PlanError, never another
exception) and through `exactc export` (exit code 2, one line on stderr, nothing written,
the input left as it was).

Each row is an input that once ended in a traceback, a silently wrong reading (a shape
[16.0] read as 16, overlapping tensors, a name given twice whose last entry won) or a
MemoryError. The C readers' refusals are in tests/test_safetensors.py and tests/test_npy.py.

The second table, DOORS, is the command line's other doors: options, output paths, the
environment, `--force`. Each row is run as a command in a working folder of its own, and
must end in one line, its exit code (2: the user's input; 1: a build or a program that
failed), and the working folder as it was: nothing written, nothing removed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from exactc.exporter import checkpoints, export, models
from exactc.exporter.checkpoints import CheckpointError, gguf_file, llama2c
from exactc.exporter.kernels import plans
from exactc.exporter.kernels.plans import PlanError
from exactc.exporter.models import ModelError

SMALL = {
    "gpt": {"vocab": 40, "positions": 10, "dim": 16, "heads": 2, "layers": 2, "mlp": 24, "tokens": 6},
    "llama": {"vocab": 40, "dim": 24, "heads": 4, "kv_heads": 2, "layers": 2, "mlp": 20, "tokens": 6},
}
QUANT_LLAMA = {"vocab": 40, "dim": 32, "heads": 4, "kv_heads": 2, "layers": 1, "mlp": 32, "tokens": 6}  # rows of 32
REFUSALS = (CheckpointError, ModelError, PlanError)


# ------------------------------------------------------------------------------------
# The good inputs every bad one starts from
# ------------------------------------------------------------------------------------


@dataclasses.dataclass
class Goods:
    gpt: Path  # a GPT-2 Hugging Face folder
    llama: Path  # a Llama Hugging Face folder
    bin: Path  # the same Llama as a llama2.c file (legacy header)
    bin_v2: Path  # the same Llama as a llama2.c version-2 file (int8 groups of 4)
    gguf: Path  # the same Llama as a GGUF file (F32)
    gguf_q8: Path  # a Llama of QUANT_LLAMA as GGUF, its linear weights Q8_0
    gguf_q4: Path  # the same, Q4_0


@pytest.fixture(scope="module")
def goods(tmp_path_factory) -> Goods:
    root = tmp_path_factory.mktemp("goods")
    folders = {}
    for model, config in (("gpt", _gpt_config), ("llama", _llama_config)):
        program = models.build(model, "forward", SMALL[model])
        params = models.draw_parameters(program, 5, "f32")
        tensors = {name: array for name, (_, array) in export.weight_tensors(program, params, "f32").items()}
        if model == "gpt":  # Conv1D weights as GPT-2 stores them, (in, out)
            tensors = {k: np.ascontiguousarray(v.T) if k.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight"))
                       else v for k, v in tensors.items()}
        folder = root / model
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config(program.config)))
        (folder / "model.safetensors").write_bytes(
            export.safetensors_bytes({k: ("F32", v) for k, v in tensors.items()}))
        folders[model] = (folder, tensors)
    llama_folder, llama_tensors = folders["llama"]
    fields = checkpoints.load(llama_folder).fields
    binary = llama2c.write(root / "llama.bin", llama_tensors, fields, seq_len=16)
    binary_v2 = llama2c.write(root / "llama-v2.bin", llama_tensors, fields, seq_len=16, version=2, group=4)
    gguf_f32 = gguf_file.write(root / "llama.gguf", SMALL["llama"], llama_tensors)
    program = models.build("llama", "forward", QUANT_LLAMA)
    params = models.draw_parameters(program, 5, "f32")
    tensors = {name: array for name, (_, array) in export.weight_tensors(program, params, "f32").items()}
    linear = {name for name, array in tensors.items() if array.ndim == 2 and name != "model.embed_tokens.weight"}
    quantized = [gguf_file.write(root / f"llama-{qtype}.gguf", QUANT_LLAMA, tensors, qtype, linear)
                 for qtype in ("Q8_0", "Q4_0")]
    return Goods(folders["gpt"][0], llama_folder, binary, binary_v2, gguf_f32, *quantized)


def _gpt_config(cfg) -> dict:
    return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": cfg.vocab,
            "n_positions": cfg.positions, "n_embd": cfg.dim, "n_head": cfg.heads, "n_layer": cfg.layers,
            "n_inner": cfg.mlp, "layer_norm_epsilon": cfg.eps, "activation_function": "gelu_new"}


def _llama_config(cfg) -> dict:
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": cfg.vocab,
            "hidden_size": cfg.dim, "num_attention_heads": cfg.heads, "num_key_value_heads": cfg.kv_heads,
            "num_hidden_layers": cfg.layers, "intermediate_size": cfg.mlp, "rms_norm_eps": cfg.eps,
            "rope_theta": cfg.theta, "hidden_act": "silu", "max_position_embeddings": 64}


# ------------------------------------------------------------------------------------
# Making a bad input: a copy of a good one, one thing changed
# ------------------------------------------------------------------------------------


def copy_folder(good: Path, work: Path) -> Path:
    folder = work / "ckpt"
    shutil.copytree(good, folder)
    return folder


def with_config(model: str, change: Callable[[dict], object] | bytes | str):
    """A folder whose config.json is changed by `change` (a function of the dict, or
    the file's whole new bytes or text)."""

    def make(goods: Goods, work: Path) -> list[str]:
        folder = copy_folder(getattr(goods, model), work)
        path = folder / "config.json"
        if isinstance(change, bytes):
            path.write_bytes(change)
        elif isinstance(change, str):
            path.write_text(change)
        else:
            config = json.loads(path.read_text())
            change(config)
            path.write_text(json.dumps(config))
        return ["--checkpoint", str(folder)]

    return make


def split_safetensors(data: bytes) -> tuple[dict, bytes]:
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + n]), data[8 + n:]


def safetensors_image(header: dict | bytes, body: bytes, length_delta: int = 0) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text) + length_delta) + text + body


def first_tensors(header: dict) -> list[str]:
    """The tensor names in data order."""
    return sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"])


def with_weights(change: Callable[[dict, bytes], bytes] | bytes):
    """A GPT-2 folder whose model.safetensors is changed by `change` (a function of the
    header dict and the data bytes giving the whole file, or the file's new bytes)."""

    def make(goods: Goods, work: Path) -> list[str]:
        folder = copy_folder(goods.gpt, work)
        path = folder / "model.safetensors"
        path.write_bytes(change if isinstance(change, bytes) else change(*split_safetensors(path.read_bytes())))
        return ["--checkpoint", str(folder)]

    return make


def entry_changed(**fields):
    """The first tensor's header entry with `fields` replaced."""

    def change(header: dict, body: bytes) -> bytes:
        header[first_tensors(header)[0]].update(fields)
        return safetensors_image(header, body)

    return change


def first_begin_written(text: str):
    """The first tensor's data_offsets with its begin (0) written as `text` ("-0", "00"):
    JSON Python's json module reads as 0, or refuses."""

    def change(header: dict, body: bytes) -> bytes:
        header[first_tensors(header)[0]]["data_offsets"][0] = "BEGIN"
        return safetensors_image(json.dumps(header).encode().replace(b'"BEGIN"', text.encode()), body)

    return change


def second_moved(delta: int):
    """The second tensor's data_offsets moved by `delta` bytes (an overlap or a gap)."""

    def change(header: dict, body: bytes) -> bytes:
        entry = header[first_tensors(header)[1]]
        entry["data_offsets"] = [entry["data_offsets"][0] + delta, entry["data_offsets"][1] + delta]
        return safetensors_image(header, body + bytes(max(delta, 0)))

    return change


def name_twice(header: dict, body: bytes) -> bytes:
    """The first tensor named again for the second one's bytes (different data)."""
    first, second = first_tensors(header)[:2]
    again = dict(header[second], shape=header[first]["shape"])
    again["data_offsets"] = [again["data_offsets"][0], again["data_offsets"][0] + 4 * int(np.prod(again["shape"]))]
    text = json.dumps(header).encode()[:-1] + b", " + json.dumps(first).encode() + b": " + json.dumps(again).encode()
    return safetensors_image(text + b"}", body)


def weights_replaced(make_in_place: Callable[[Path], None]):
    """A GPT-2 folder whose model.safetensors is replaced by what `make_in_place` makes at
    its path (a FIFO, a folder, a symlink)."""

    def make(goods: Goods, work: Path) -> list[str]:
        folder = copy_folder(goods.gpt, work)
        (folder / "model.safetensors").unlink()
        make_in_place(folder / "model.safetensors")
        return ["--checkpoint", str(folder)]

    return make


def checkpoint_made(make_at: Callable[[Path], None]):
    """--checkpoint FILE naming what `make_at` makes (a FIFO, a symlink to /dev/zero): the
    format is sniffed from the file's first bytes, which must not block or never end."""

    def make(goods: Goods, work: Path) -> list[str]:
        make_at(work / "model.bin")
        return ["--checkpoint", str(work / "model.bin")]

    return make


def sharded(index: dict | list | Callable[[dict], dict]):
    """A GPT-2 folder in two shards with a model.safetensors.index.json given by `index`
    (a dict, or a function of the true weight_map)."""

    def make(goods: Goods, work: Path) -> list[str]:
        folder = copy_folder(goods.gpt, work)
        header, body = split_safetensors((folder / "model.safetensors").read_bytes())
        (folder / "model.safetensors").unlink()
        names = first_tensors(header)
        halves = {"a.safetensors": names[: len(names) // 2], "b.safetensors": names[len(names) // 2 - 1:]}
        for file, part in halves.items():
            tensors = {}
            for k in part:
                lo, hi = header[k]["data_offsets"]
                tensors[k] = ("F32", np.frombuffer(body[lo:hi], "<f4").reshape(header[k]["shape"]))
            (folder / file).write_bytes(export.safetensors_bytes(tensors))
        weight_map = {k: file for file, part in halves.items() for k in part}
        (folder / "model.safetensors.index.json").write_text(
            json.dumps(index(weight_map) if callable(index) else index))
        return ["--checkpoint", str(folder)]

    return make


def with_bin(change: Callable[[bytes], bytes], good: str = "bin"):
    def make(goods: Goods, work: Path) -> list[str]:
        path = work / "model.bin"
        path.write_bytes(change(getattr(goods, good).read_bytes()))
        return ["--checkpoint", str(path)]

    return make


def with_bin_v2(change: Callable[[bytes], bytes]):
    return with_bin(change, "bin_v2")


def legacy_header(**fields) -> Callable[[bytes], bytes]:
    """llama2.c's legacy header with some of its seven int32s replaced."""

    def change(data: bytes) -> bytes:
        values = dict(zip(llama2c.FIELDS, struct.unpack("<7i", data[:28])))
        values.update(fields)
        return struct.pack("<7i", *values.values()) + data[28:]

    return change


def v2_scale(row: int, group: int, value: float) -> Callable[[bytes], bytes]:
    """llama2.c version 2: the f32 scale of group `group` of row `row` of the token
    embedding (the first quantized tensor: after the header and the f32 norms, its int8
    values, then its scales) set to `value`."""

    def change(data: bytes) -> bytes:
        p = dict(zip(llama2c.FIELDS, struct.unpack("<7i", data[8:36])))
        (group_size,) = struct.unpack("<i", data[37:41])
        D, L, V = p["dim"], p["n_layers"], p["vocab_size"]
        at = llama2c.HEADER_V1 + 4 * (2 * L * D + D) + V * D + 4 * (row * (D // group_size) + group)
        return data[:at] + struct.pack("<f", value) + data[at + 4:]

    return change


def with_gguf(good: str, change: Callable[[bytearray, "gguf.GGUFReader"], None]):  # noqa: F821
    """A copy of a GGUF good (goods.gguf, gguf_q8, gguf_q4) changed in place by `change`
    (the file's bytes, the gguf package's reading of the good)."""

    def make(goods: Goods, work: Path) -> list[str]:
        import gguf

        source = getattr(goods, good)
        data = bytearray(source.read_bytes())
        change(data, gguf.GGUFReader(source))
        path = work / "model.gguf"
        path.write_bytes(bytes(data))
        return ["--checkpoint", str(path)]

    return make


def gguf_tensor(reader, name: str):
    return next(t for t in reader.tensors if t.name == name)


def gguf_offset(name: str, offset: int):
    """Tensor `name`'s data offset (a uint64 in its tensor info, the field's last part)
    written as `offset`."""

    def change(data: bytearray, reader) -> None:
        field = gguf_tensor(reader, name).field
        at = field.offset + sum(int(part.nbytes) for part in field.parts[:-1])
        data[at:at + 8] = struct.pack("<Q", offset)

    return change


def gguf_scale(name: str, row: int, block: int, bits: int):
    """The f16 scale of block `block` of row `row` of Q8_0 or Q4_0 tensor `name` (each
    block its scale, then its values) set to the f16 of `bits`."""

    def change(data: bytearray, reader) -> None:
        t = gguf_tensor(reader, name)
        rows = int(t.shape[1])
        block_bytes = t.n_bytes // (rows * (int(t.shape[0]) // 32))
        at = reader.data_offset + int(t.field.parts[-1][0]) + block_bytes * (row * (int(t.shape[0]) // 32) + block)
        data[at:at + 2] = struct.pack("<H", bits)

    return change


F16_INF, F16_NAN = 0x7C00, 0x7E00


def setting(*items: str, model: str = "gpt"):
    def make(goods: Goods, work: Path) -> list[str]:
        return [model] + [f"--set={item}" for item in items]

    return make


def checkpoint_setting(*items: str):
    def make(goods: Goods, work: Path) -> list[str]:
        return ["--checkpoint", str(copy_folder(goods.gpt, work))] + [f"--set={item}" for item in items]

    return make


def with_plan(content: bytes):
    def make(goods: Goods, work: Path) -> list[str]:
        (work / "plan.json").write_bytes(content)
        return ["gpt", "--plan", str(work / "plan.json")]

    return make


# ------------------------------------------------------------------------------------
# The table: (kind, case, maker, words of the one-line message)
# ------------------------------------------------------------------------------------

NESTED = struct.pack("<Q", 200_000) + b"[" * 100_000 + b"]" * 100_000
HEADER_ONLY = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'

TABLE = [
    # config.json
    ("config.json", "a JSON list", with_config("gpt", "[1, 2]"), "config.json: the top level is a list; an object"),
    ("config.json", "model_type a list", with_config("gpt", lambda c: c.update(model_type=["gpt2"])),
     "model_type ['gpt2'] is not one exactc reads"),
    ("config.json", "architectures a string",
     with_config("gpt", lambda c: c.update(architectures="GPT2LMHeadModel")),
     "architectures='GPT2LMHeadModel' must be a list of class names"),
    ("config.json", "not UTF-8", with_config("gpt", b'{"model_type": "gpt2\xff"}'), "config.json: not UTF-8 (byte 20"),
    ("config.json", "a key twice", with_config("gpt", '{"model_type": "gpt2", "model_type": "bert"}'),
     "key 'model_type' appears twice in one object"),
    ("config.json", "nested 100,000 deep", with_config("gpt", "[" * 100_000 + "]" * 100_000),
     "nested too deep for Python's JSON parser"),
    ("config.json", "not JSON", with_config("gpt", "{model_type: gpt2}"), "config.json: not JSON"),
    ("config.json", "n_embd a string", with_config("gpt", lambda c: c.update(n_embd="16")),
     "n_embd='16' must be a positive integer"),
    ("config.json", "n_layer 0", with_config("gpt", lambda c: c.update(n_layer=0)), "n_layer=0 must be a positive"),
    ("config.json", "layer_norm_epsilon -1", with_config("gpt", lambda c: c.update(layer_norm_epsilon=-1)),
     "layer_norm_epsilon=-1 must be a positive number"),
    ("config.json", "tie_word_embeddings a string", with_config("gpt", lambda c: c.update(tie_word_embeddings="no")),
     "tie_word_embeddings='no' must be true or false"),
    ("config.json", "vocab_size 2^40", with_config("gpt", lambda c: c.update(vocab_size=2**40)),
     "config.json: vocab_size=1099511627776 must be a positive integer (at most 2,147,483,647)"),
    ("config.json", "rope_scaling a list", with_config("llama", lambda c: c.update(rope_scaling=["linear"])),
     "rope_scaling must be an object, not a list"),
    ("config.json", "num_key_value_heads not dividing", with_config("llama", lambda c: c.update(num_key_value_heads=3)),
     "heads 4 is not a multiple of kv_heads 3"),
    # the safetensors header (the Python checkpoint reader)
    ("safetensors header", "nested 100,000 deep", with_weights(NESTED), "nested too deep for Python's JSON parser"),
    ("safetensors header", "a dtype that is a list", with_weights(entry_changed(dtype=["F32"])),
     "dtype ['F32'] must be a string"),
    ("safetensors header", "offsets that are strings", with_weights(entry_changed(data_offsets=["0", "64"])),
     "data_offsets ['0', '64'] must be [begin, end], integers"),
    ("safetensors header", "offsets that end before they begin", with_weights(entry_changed(data_offsets=[64, 0])),
     "data_offsets [64, 0] must be [begin, end], integers with 0 <= begin <= end"),
    # -0 is 0 to Python's json module; the safetensors library (serde_json) reads the float -0.0 and refuses it
    ("safetensors header", "data_offsets [-0, 192]", with_weights(first_begin_written("-0")),
     "data_offsets [-0.0, 192] must be [begin, end], integers with 0 <= begin <= end"),
    ("safetensors header", "data_offsets [00, 192] (a leading zero)", with_weights(first_begin_written("00")),
     "the header: not JSON"),
    ("safetensors header", "a shape of [16.9]", with_weights(entry_changed(shape=[16.9])),
     "shape [16.9] must be a list of non-negative integers"),
    ("safetensors header", "a shape of [16.0]", with_weights(entry_changed(shape=[16.0])),
     "shape [16.0] must be a list of non-negative integers"),
    ("safetensors header", "a shape of [2**70]", with_weights(entry_changed(shape=[2**70])),
     "a F32 tensor of shape (1180591620717411303424,) needs 4722366482869645213696"),
    ("safetensors header", "a shape of ['16']", with_weights(entry_changed(shape=["16"])),
     "shape ['16'] must be a list of non-negative integers"),
    ("safetensors header", "overlapping data_offsets", with_weights(second_moved(-4)), "overlap tensor"),
    ("safetensors header", "a gap between tensors", with_weights(second_moved(+4)), "to no tensor; a file's tensors must tile"),
    ("safetensors header", "a name twice, other data", with_weights(name_twice), "appears twice in one object"),
    ("safetensors header", "trailing bytes", with_weights(lambda h, b: safetensors_image(h, b + b"\0")),
     "the file goes on (a header length too small, or trailing bytes)"),
    ("safetensors header", "header length one too many, the next byte a space",
     with_weights(lambda h, b: safetensors_image(h, b" " + b[1:], +1)), "outside the"),
    ("safetensors header", "header length one too many", with_weights(lambda h, b: safetensors_image(h, b, +1)),
     "the header: not UTF-8"),
    ("safetensors header", "header length one too few", with_weights(lambda h, b: safetensors_image(h, b, -1)),
     "the header: not JSON"),
    ("safetensors header", "header length past the library's limit", with_weights(struct.pack("<Q", 100_000_001)),
     "header length 100000001 is more than the 100,000,000 bytes"),
    ("safetensors header", "a header that is a list", with_weights(safetensors_image(b"[]", b"")),
     "the header: the top level is a list; an object is expected"),
    ("safetensors header", "a tensor entry that is a string", with_weights(safetensors_image(b'{"a": "F32"}', b"")),
     "tensor a has no dtype, shape and data_offsets"),
    ("safetensors header", "__metadata__ of numbers",
     with_weights(safetensors_image(b'{"__metadata__": {"k": 1}}', b"")), "__metadata__ must be an object of strings"),
    ("safetensors header", "not UTF-8", with_weights(safetensors_image(b'{"\xff": 1}', b"")), "the header: not UTF-8"),
    ("safetensors header", "four bytes long", with_weights(b"\0\0\0\0"), "4 bytes, too short for a .safetensors file"),
    ("safetensors header", "a digit string Python will not convert",
     with_weights(safetensors_image(b'{"a": ' + b"9" * 5000 + b"}", b"")), "a value JSON allows but Python cannot hold"),
    # model.safetensors that is no regular file (reported as missing; a FIFO must not block)
    ("weights file", "a FIFO", weights_replaced(os.mkfifo),
     "model.safetensors is a FIFO, not a regular file"),
    ("weights file", "a folder", weights_replaced(os.mkdir), "model.safetensors is a folder, not a regular file"),
    ("weights file", "a symlink to /dev/zero", weights_replaced(lambda path: path.symlink_to("/dev/zero")),
     "model.safetensors is a character device (a symlink to /dev/zero), not a regular file"),
    ("weights file", "--checkpoint FILE a FIFO", checkpoint_made(os.mkfifo), "model.bin is a FIFO, not a regular file"),
    ("weights file", "--checkpoint FILE a symlink to /dev/zero", checkpoint_made(lambda p: p.symlink_to("/dev/zero")),
     "model.bin is a character device (a symlink to /dev/zero), not a regular file"),
    # the sharded index
    ("index", "weight_map a list", sharded({"weight_map": ["a.safetensors"]}), "weight_map must be an object"),
    ("index", "no weight_map", sharded({"metadata": {}}), "weight_map must be an object tensor name -> shard file name, not null"),
    ("index", "a shard outside the folder", sharded(lambda m: {"weight_map": dict(m, x="../model.safetensors")}),
     "weight_map names the shard '../model.safetensors'"),
    ("index", "a tensor in two shards", sharded(lambda m: {"weight_map": m}), "is also in"),
    ("index", "the index a list", sharded([]), "model.safetensors.index.json: the top level is a list"),
    # llama2.c's header
    ("llama2.c header", "dim negative", with_bin(legacy_header(dim=-24)), "header field dim=-24 must be positive"),
    ("llama2.c header", "dimensions whose product overflows int64",
     with_bin(legacy_header(dim=2**30, hidden_dim=2**30, n_heads=2**29)), "needs"),
    ("llama2.c header", "cut inside the header", with_bin(lambda d: d[:20]), "too short for llama2.c's header"),
    ("llama2.c header", "version 3", with_bin(lambda d: struct.pack("<Ii", 0x616B3432, 3) + bytes(300)),
     "llama2.c version 3 is not supported"),
    ("llama2.c header", "version 2 of zero dimensions", with_bin(lambda d: struct.pack("<Ii", 0x616B3432, 2) + bytes(300)),
     "header field dim=0 must be positive"),
    ("llama2.c header", "heads that do not divide dim", with_bin(legacy_header(n_heads=5)),
     "dim 24 / n_heads 5 must be an even integer"),
    # GGUF files: offsets llama.cpp refuses (the gguf package read them as other bytes), and
    # block scales that are not finite (a QuantError traceback)
    ("GGUF", "an offset not a multiple of the alignment", with_gguf("gguf", gguf_offset("blk.0.attn_q.weight", 4)),
     "model.gguf: tensor blk.0.attn_q.weight: offset 4 is not a multiple of the alignment 32 (general.alignment"),
    ("GGUF", "an offset inside another tensor", with_gguf("gguf", gguf_offset("blk.0.attn_q.weight", 32)),
     "tensor blk.0.attn_q.weight: offset 32 overlaps tensor token_embd.weight's bytes [0, 3840)"),
    ("GGUF", "an offset of 2^64 - 32 (it wrapped to before the data section)",
     with_gguf("gguf", gguf_offset("blk.0.attn_q.weight", 2**64 - 32)),
     "tensor blk.0.attn_q.weight: offset 18446744073709551584 and its 2304 bytes end past the data section's"),
    ("GGUF", "a Q8_0 block scale of inf", with_gguf("gguf_q8", gguf_scale("blk.0.attn_v.weight", 1, 0, F16_INF)),
     "tensor blk.0.attn_v.weight: the scale of block 0 of row 1 is inf; every scale must be finite"),
    ("GGUF", "a Q4_0 block scale of NaN", with_gguf("gguf_q4", gguf_scale("blk.0.ffn_down.weight", 3, 0, F16_NAN)),
     "tensor blk.0.ffn_down.weight: the scale of block 0 of row 3 is nan; every scale must be finite"),
    # llama2.c version 2: int8 groups whose f32 scale is not finite (were read as inf and NaN weights)
    ("llama2.c groups", "a group scale of inf", with_bin_v2(v2_scale(2, 1, float("inf"))),
     "model.bin: tensor token_embedding_table: the scale of group 1 of row 2 is inf; every scale must be finite"),
    ("llama2.c groups", "a group scale of NaN", with_bin_v2(v2_scale(0, 5, float("nan"))),
     "tensor token_embedding_table: the scale of group 5 of row 0 is nan"),
    # --set
    ("--set", "eps=-1", setting("eps=-1"), "gpt config field eps=-1.0 must be a positive finite number"),
    ("--set", "eps=nan", setting("eps=nan"), "eps=nan must be a positive finite number"),
    ("--set", "eps=inf", setting("eps=inf"), "eps=inf must be a positive finite number"),
    ("--set", "dim=0", setting("dim=0"), "dim=0 must be an integer from 1 to 2,147,483,647"),
    ("--set", "heads=0", setting("heads=0"), "heads=0 must be an integer from 1"),
    ("--set", "tokens=-5", setting("tokens=-5"), "tokens=-5 must be an integer from 1"),
    ("--set", "vocab=2000000000", setting("vocab=2000000000"),
     "the parameters have 128,000,204,160 elements; exactc exports at most 4,294,967,296"),
    ("--set", "layers=3000000000", setting("layers=3000000000"), "layers=3000000000 must be an integer from 1"),
    ("--set", "theta=-1 (llama)", setting("theta=-1", model="llama"), "theta=-1.0 must be a positive finite number"),
    ("--set", "tied=maybe", setting("tied=maybe"), "tied='maybe' is not a bool"),
    ("--set", "dim=16.9", setting("dim=16.9"), "dim='16.9' is not a int"),
    ("--set", "tokens=abc with a checkpoint", checkpoint_setting("tokens=abc"),
     "tokens='abc' must be a positive integer"),
    ("--set", "tokens=0 with a checkpoint", checkpoint_setting("tokens=0"), "tokens=0 must be a positive integer"),
    # plan files
    ("plan", "not UTF-8", with_plan(b'{"nests": {"\xff": {}}}'), "plan.json: not UTF-8 (byte 12 is 0xff)"),
    ("plan", "nested 100,000 deep", with_plan(b"[" * 100_000 + b"]" * 100_000), "nested too deep"),
    ("plan", "a key twice", with_plan(b'{"nests": {}, "nests": {}}'), "key 'nests' appears twice"),
    ("plan", "not JSON", with_plan(b'{"nests": }'), "plan.json: not JSON"),
    ("plan", "a list", with_plan(b"[]"), "a plan is an object"),
    ("plan", "pieces of floats", with_plan(b'{"nests": {"x": {"split": {"depth": 0, "pieces": [[0.5, 2]]}}}}'),
     "lo must be an integer, not 0.5"),
]

IDS = [f"{kind}: {case}" for kind, case, _, _ in TABLE]


def through_api(args: list[str]) -> object:
    """What `exactc export ARGS --entry forward --dtype f32` does before it writes, as
    Python calls: load the plan and the checkpoint, build the program at the config,
    read the parameters."""
    model = args[0] if not args[0].startswith("-") else None
    options = {"--checkpoint": None, "--plan": None}
    sets: dict[str, str] = {}
    rest = args[1:] if model else args
    for k, arg in enumerate(rest):
        if arg.startswith("--set="):
            key, _, value = arg[len("--set="):].partition("=")
            sets[key] = value
        elif arg in options:
            options[arg] = rest[k + 1]
    if options["--plan"]:
        plans.load_plan(options["--plan"])
    if options["--checkpoint"] is None:
        return models.build(model, "forward", sets)
    ckpt = checkpoints.load(options["--checkpoint"], model)
    program = models.build(ckpt.model, "forward", ckpt.overrides(sets))
    return ckpt.parameters(program, "f32")


def tree_digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        h.update(str(p.relative_to(path)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


class Blocked(Exception):
    """A read that waited on a FIFO with no writer (or a file without end) past its time."""


def _blocked(signum, frame):
    raise Blocked("the read blocked: a FIFO opened, or a file without end read")


@pytest.mark.parametrize("kind,case,make,words", TABLE, ids=IDS)
def test_refused_on_one_line_through_the_api(goods, tmp_path, kind, case, make, words):
    args = make(goods, tmp_path)
    # In process, a FIFO opened for reading waits for a writer forever: the alarm turns that
    # into this test's failure instead of a run that never ends.
    previous = signal.signal(signal.SIGALRM, _blocked)
    signal.alarm(60)
    try:
        with pytest.raises(REFUSALS) as info:
            through_api(args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    message = str(info.value)
    assert "\n" not in message and words in message, message


@pytest.mark.parametrize("kind,case,make,words", TABLE, ids=IDS)
def test_refused_on_one_line_by_exactc_export_with_exit_2(goods, tmp_path, kind, case, make, words):
    work = tmp_path / "work"
    work.mkdir()
    args = make(goods, work)
    before = tree_digest(work)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "exactc.cli", "export", *args, "--entry", "forward", "--dtype", "f32",
                           "-o", str(out)], capture_output=True, text=True, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and words in lines[0], done.stderr[-2000:]
    assert lines[0].startswith("exactc export: error: ")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["work"]
    assert tree_digest(work) == before


def test_the_table_covers_every_kind():
    kinds = {kind for kind, *_ in TABLE}
    assert kinds == {"config.json", "safetensors header", "weights file", "index", "llama2.c header",
                     "llama2.c groups", "GGUF", "--set", "plan"}
    assert len(IDS) == len(set(IDS))


# ------------------------------------------------------------------------------------
# The command line's other doors: options, output paths, the environment, --force
# ------------------------------------------------------------------------------------

EXPORT = ("export", "gpt", "--entry", "forward", "--dtype", "f32", *(f"--set={k}={v}" for k, v in SMALL["gpt"].items()))


def user_files(work: Path) -> None:
    """A folder of the user's: the current directory with a file, and a directory of theirs."""
    (work / "a.c").write_text("int main(void) { return 0; }\n")
    (work / "mine").mkdir()
    (work / "mine" / "notes.txt").write_text("not exactc's\n")


# The output files of generate (--json) and embed (-o): a small GPT drawn at seed 0, and a
# BERT sentence folder of 40 words evaluated by the reference (no C program to build).
GENERATE = ("generate", "gpt", *(f"--set={k}={v}" for k, v in SMALL["gpt"].items()), "--prompt-ids", "1", "-n", "3")
EMBED = ("embed", "--backend", "reference", "--checkpoint", "bert", "w1 w2", "w3")


def word_tokenizer(path: Path, vocab: int = 40, width: int = 0) -> None:
    """A tokenizer.json of the words w0 ... w{vocab-1}, each padded with x to `width` characters."""
    from tokenizers import Tokenizer, models as tk_models, pre_tokenizers

    words = {f"w{i}".ljust(width, "x"): i for i in range(vocab)}
    tokenizer = Tokenizer(tk_models.WordLevel(words, unk_token=next(iter(words))))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(path))


def bert_folder(work: Path) -> None:
    """work/bert: a small BERT Hugging Face folder with a tokenizer.json, what EMBED reads."""
    program = models.build("bert", "embed", dict(SMALL["gpt"], layers=1))
    cfg = program.config
    folder = work / "bert"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "bert", "architectures": ["BertModel"], "vocab_size": cfg.vocab,
        "max_position_embeddings": cfg.positions, "type_vocab_size": cfg.type_vocab, "hidden_size": cfg.dim,
        "num_attention_heads": cfg.heads, "num_hidden_layers": cfg.layers, "intermediate_size": cfg.mlp,
        "layer_norm_eps": cfg.eps, "hidden_act": "gelu"}))
    tensors = export.weight_tensors(program, models.draw_parameters(program, 5, "f32"), "f32")
    (folder / "model.safetensors").write_bytes(export.safetensors_bytes(tensors))
    word_tokenizer(folder / "tokenizer.json")


def device_node(path: Path, like: str, kind: int = 0) -> None:
    """A device node at `path` with the numbers of `like` (a character device unless `kind`
    says otherwise): a /dev/full or /dev/null of the test's own, never /dev itself."""
    import stat

    try:
        os.mknod(path, (kind or stat.S_IFCHR) | 0o666, os.stat(like).st_rdev if isinstance(like, str) else like)
    except PermissionError:
        pytest.skip("making a device node needs root (CAP_MKNOD)")


def with_device(name: str, like: str | int, kind: int = 0, checkpoint: bool = False) -> Callable[[Path], None]:
    def setup(work: Path) -> None:
        user_files(work)
        if checkpoint:
            bert_folder(work)
        device_node(work / name, like, kind)

    return setup


def with_bert(work: Path) -> None:
    user_files(work)
    bert_folder(work)


@dataclasses.dataclass(frozen=True)
class Door:
    kind: str
    case: str
    args: tuple  # after `exactc`, run in the working folder (str or bytes)
    code: int  # 2: the user's input; 1: a build or a program that failed
    words: str  # in the one line on stderr
    setup: Callable[[Path], None] = user_files
    env: tuple = ()  # (name, value) pairs added to the environment


DOORS = [
    Door("--force", "-o '' (the current directory)", (*EXPORT, "--force", "-o", ""), 2,
         "-o '': give the name of the directory to write"),
    Door("--force", "-o . (the current directory)", (*EXPORT, "--force", "-o", "."), 2,
         "is the current directory or holds it"),
    Door("--force", "-o .. (a directory that holds it)", (*EXPORT, "--force", "-o", ".."), 2,
         "is the current directory or holds it"),
    Door("--force", "-o DIR, a directory of the user's", (*EXPORT, "--force", "-o", "mine"), 2,
         "was not written by exactc export (it has no .exactc-export file)"),
    Door("--force", "-o FILE, a file", (*EXPORT, "--force", "-o", "a.c"), 2, "is not a directory; --force replaces only"),
    Door("export -o", "an existing directory, no --force", (*EXPORT, "-o", "mine"), 2, "exists; choose another directory"),
    Door("export -o", "/sys/out (a folder that cannot be made)", (*EXPORT, "-o", "/sys/out"), 2,
         "cannot write /sys/out: "),
    Door("export -o", "/dev/null/x (under a file)", (*EXPORT, "-o", "/dev/null/x"), 2,
         "cannot write /dev/null/x: /dev/null is not a directory"),
    Door("export --seed", "-5", (*EXPORT, "--seed", "-5", "-o", "out"), 2,
         "seed -5 must be an integer from 0 to 18,446,744,073,709,551,615"),
    Door("export --seed", "2^64", (*EXPORT, "--seed", str(2**64), "-o", "out"), 2, "must be an integer from 0 to"),
    Door("run -o", "/sys/out (a folder that cannot be made)", ("run", *EXPORT[1:], "-o", "/sys/out"), 2,
         "-o /sys/out: cannot make the folder"),
    Door("run -o", "a build that fails leaves no folder", ("run", *EXPORT[1:], "--backend", "c", "--cc", "/bin/false",
                                                           "-o", "out"), 1, "is it a C compiler?"),
    Door("embed", "a sentence that is not UTF-8", ("embed", "fine", b"\xff\xfe"), 2,
         "sentence 2 is not UTF-8 text (byte 0 is 0xff)"),
    Door("embed", "--cc /bin/false", ("embed", "--cc", "/bin/false", "x"), 1,
         "CC=/bin/false: `/bin/false --version` exited with 1; is it a C compiler?"),
    Door("embed", "EXACTC_CACHE=/sys/cache", ("embed", "x"), 2,
         "EXACTC_CACHE=/sys/cache: cannot make /sys/cache", env=(("EXACTC_CACHE", "/sys/cache"),)),
    Door("embed", "-o /sys/x.npy", ("embed", "-o", "/sys/x.npy", "x"), 2, "-o /sys/x.npy: cannot write in /sys"),
    Door("embed", "-o under a folder that does not exist", ("embed", "-o", "no/x.npy", "x"), 2,
         "-o no/x.npy: cannot write in no"),
    # What stands at the output path is written as it is, never renamed over (docs/errors.md):
    # a full device is a one-line refusal and stays a device; a directory or a block device
    # is refused before any work (the prompt or the checkpoint after it is not read).
    Door("generate --json", "a character device that is full (/dev/full's numbers)",
         (*GENERATE, "--json", "full.json"), 2, "--json full.json: cannot write it (No space left on device)",
         with_device("full.json", "/dev/full")),
    Door("embed -o", "a character device that is full (/dev/full's numbers)", (*EMBED, "-o", "full.npy"), 2,
         "-o full.npy: cannot write it (No space left on device)", with_device("full.npy", "/dev/full", checkpoint=True)),
    Door("generate --json", "a directory, refused before the prompt is read", ("generate", "gpt", "--prompt-ids", "1,x",
                                                                            "--json", "mine"), 2,
         "--json mine: cannot write it (Is a directory)"),
    Door("embed -o", "a directory, refused before the checkpoint is read",
         ("embed", "--checkpoint", "none", "-o", "mine.npy", "x"), 2, "-o mine.npy: cannot write it (Is a directory)",
         lambda work: (user_files(work), (work / "mine.npy").mkdir())),
    Door("generate --json", "a block device, refused before the prompt is read",
         ("generate", "gpt", "--prompt-ids", "1,x", "--json", "disk.json"), 2,
         "--json disk.json: cannot write it (a block device or a socket: give a file, a character device or a FIFO)",
         with_device("disk.json", os.makedev(240, 0), kind=0o060000)),  # S_IFBLK, a local-use major: no disk
]

DOOR_IDS = [f"{d.kind}: {d.case}" for d in DOORS]


@pytest.mark.parametrize("door", DOORS, ids=DOOR_IDS)
def test_door_refused_on_one_line_nothing_written_or_removed(tmp_path, door):
    work = tmp_path / "work"
    work.mkdir()
    door.setup(work)
    before = tree_digest(work)
    done = subprocess.run([sys.executable, "-m", "exactc.cli", *door.args], cwd=work, capture_output=True,
                          env=dict(os.environ, **dict(door.env)), timeout=600)
    stderr = done.stderr.decode(errors="replace")
    lines = stderr.strip().splitlines()
    assert done.returncode == door.code and len(lines) == 1 and door.words in lines[0], stderr[-3000:]
    assert lines[0].startswith(f"exactc {door.args[0]}: error: "), lines[0]
    assert tree_digest(work) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]


def test_door_an_export_run_from_a_removed_directory(tmp_path):
    """The directory the command runs in, removed under it: a relative -o names nothing and
    is refused on one line; an absolute one is written."""
    for target, code in (("out", 2), (str(tmp_path / "out"), 0)):
        gone = tmp_path / "gone"
        gone.mkdir()
        done = subprocess.run(["bash", "-c", 'cd "$1" && rmdir "$1" && shift && exec "$@"', "-", str(gone),
                               sys.executable, "-m", "exactc.cli", *EXPORT, "-o", target],
                              capture_output=True, text=True, timeout=600)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == code, done.stderr[-3000:]
        if code == 2:
            assert lines == ["exactc export: error: -o out: the current directory no longer exists, so a relative "
                             "path names nothing; give an absolute one"], done.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert (tmp_path / "out" / export.MARKER).is_file()


def test_door_force_replaces_an_earlier_export(tmp_path):
    target = tmp_path / "out"
    for seed in ("1", "2"):
        done = subprocess.run([sys.executable, "-m", "exactc.cli", *EXPORT, "--seed", seed, "--force", "-o", str(target)],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        assert json.loads((target / "exactc.json").read_text())["seed"] == int(seed)
    assert (target / export.MARKER).read_text() == export.MARKER_TEXT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_the_doors_table_has_no_duplicate_ids():
    assert len(DOOR_IDS) == len(set(DOOR_IDS))


def exactc_in(work: Path, *args: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "exactc.cli", *args], cwd=work, stdout=stdout,
                          stderr=subprocess.PIPE, timeout=600)


# (the command, the option naming its output file, the file's suffix)
OUTPUTS = [(GENERATE, "--json", ".json"), (EMBED, "-o", ".npy")]
OUTPUT_IDS = ["generate --json", "embed -o"]


@pytest.fixture
def output_work(tmp_path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    bert_folder(work)
    return work


def written(work: Path, command: tuple, option: str, suffix: str) -> bytes:
    """The bytes the command writes to a regular file."""
    done = exactc_in(work, *command, option, f"want{suffix}")
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return (work / f"want{suffix}").read_bytes()


@pytest.mark.parametrize("command,option,suffix", OUTPUTS, ids=OUTPUT_IDS)
def test_door_an_output_is_written_through_a_device_and_a_fifo_never_renamed_over_them(output_work, command, option,
                                                                                        suffix):
    """A temporary renamed over the path replaced a device node with a regular file (and as
    root, --json /dev/full said nothing and exited 0): a character device and a FIFO are
    written through, and stay what they were."""
    import stat
    import threading

    work = output_work
    want = written(work, command, option, suffix)
    device_node(work / f"null{suffix}", "/dev/null")
    done = exactc_in(work, *command, option, f"null{suffix}")
    assert done.returncode == 0 and done.stderr == b"", done.stderr.decode()[-3000:]
    assert stat.S_ISCHR(os.lstat(work / f"null{suffix}").st_mode)
    fifo = work / f"fifo{suffix}"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    done = exactc_in(work, *command, option, str(fifo))
    reader.join(timeout=60)
    assert done.returncode == 0 and done.stderr == b"", done.stderr.decode()[-3000:]
    assert got == [want] and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in work.iterdir()) == sorted(["bert", f"want{suffix}", f"null{suffix}", fifo.name])


@pytest.mark.parametrize("command,option,suffix", OUTPUTS, ids=OUTPUT_IDS)
def test_door_an_output_through_a_symlink_replaces_its_target_and_keeps_the_link(output_work, command, option, suffix):
    """A symlink is followed, as a shell's `>` follows it: the file it names is replaced
    (its temporary written in that file's folder), the link left a link; a link to nothing
    yet makes the file it names. Renamed over, the link became a file and its target kept
    the old bytes."""
    work = output_work
    want = written(work, command, option, suffix)
    (work / "runs").mkdir()
    (work / "runs" / f"old{suffix}").write_bytes(b"old")
    for link, text, target in ((f"link{suffix}", f"runs/old{suffix}", work / "runs" / f"old{suffix}"),
                               (f"new{suffix}", f"runs/new{suffix}", work / "runs" / f"new{suffix}")):
        os.symlink(text, work / link)
        done = exactc_in(work, *command, option, link)
        assert done.returncode == 0 and done.stderr == b"", done.stderr.decode()[-3000:]
        assert os.readlink(work / link) == text and target.read_bytes() == want
    assert sorted(p.name for p in (work / "runs").iterdir()) == [f"new{suffix}", f"old{suffix}"]  # no temporary left


def test_door_json_to_dev_stdout_redirected_to_a_file_follows_the_tokens(output_work):
    """--json /dev/stdout writes where stdout is: after the tokens printed, not over them (a
    file opened again by that name is written from its start) and not renamed over the
    file the shell opened."""
    out = output_work / "out.txt"
    with out.open("wb") as stdout:
        done = exactc_in(output_work, *GENERATE, "--json", "/dev/stdout", stdout=stdout)
    assert done.returncode == 0 and done.stderr == b"", done.stderr.decode()[-3000:]
    tokens, _, document = out.read_text().partition("\n")
    assert json.loads(document)["new_tokens"] == [int(t) for t in tokens.split()] and len(tokens.split()) == 3


# (the command, the bytes read before the reader closes): more than a pipe of one page
# holds (words of 3,000 characters; 60 lines of 16 values), so that a write is still to
# come whatever was read; and one line, still buffered when the command's work is done.
STREAMS = {
    "generate, after the first byte": ((*GENERATE, "--tokenizer", "wide.json", "-n", "5"), 1),
    "generate, before any byte": ((*GENERATE, "--tokenizer", "wide.json", "-n", "5"), 0),
    "embed, after the first byte": (("embed", "--backend", "reference", "--checkpoint", "bert", "--full",
                                     *(f"w{k % 40}" for k in range(60))), 1),
    "embed, before any byte, one line buffered to the end": (EMBED[:-1], 0),
}


@pytest.mark.parametrize("case", STREAMS)
def test_door_a_reader_that_closes_stdout_early_ends_the_command_quietly(output_work, case):
    """`exactc embed ... | head -c 1` and generate's tokens into `| head -n 1` ended in a
    BrokenPipeError traceback (or, the output still buffered at exit, "Exception ignored"
    and status 120): now quietly, with the status a shell reports for SIGPIPE, 141."""
    import fcntl

    word_tokenizer(output_work / "wide.json", width=3000)
    reading, writing = os.pipe()
    fcntl.fcntl(writing, fcntl.F_SETPIPE_SZ, 4096)  # one page: the writer waits for the reader from there on
    command, read = STREAMS[case]
    # stdout block-buffered, as a shell starts the command (PYTHONUNBUFFERED would write
    # every print at once, and the flush at the end would never meet the closed pipe).
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    process = subprocess.Popen([sys.executable, "-m", "exactc.cli", *command], cwd=output_work,
                               stdout=writing, stderr=subprocess.PIPE, env=env)
    os.close(writing)
    try:
        if read:
            assert os.read(reading, read)  # the command has started to write
    finally:
        os.close(reading)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 141 and stderr == b"", stderr.decode()[-3000:]


def _interrupted_export(tmp_path: Path, stop: signal.Signals, vocab: int) -> tuple[subprocess.Popen, bool, str]:
    """`exactc export` sent `stop` as soon as its half-written directory appears (or at
    its end, if it never shows): the process, whether the signal landed while the
    directory was half-written, and stderr."""
    target = tmp_path / "out"
    args = [*EXPORT, f"--set=vocab={vocab}", "-o", str(target)]
    # A shell's background job inherits SIGINT ignored, and then Python never raises
    # KeyboardInterrupt: the program is started as a terminal would start it.
    process = subprocess.Popen([sys.executable, "-m", "exactc.cli", *args], stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    during = False
    while process.poll() is None:
        if any(".partial-" in name for name in os.listdir(tmp_path)):
            process.send_signal(stop)
            during = True
            break
    _, stderr = process.communicate(timeout=600)
    return process, during, stderr


@pytest.mark.parametrize("stop,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_door_a_signal_during_an_export_leaves_one_line_and_nothing_half_written(tmp_path, stop, code):
    landed = 0
    for attempt in range(6):
        work = tmp_path / str(attempt)
        work.mkdir()
        process, during, stderr = _interrupted_export(work, stop, 100_000 * 2**attempt)
        names = sorted(os.listdir(work))
        if not during or process.returncode == 0:  # done before the signal came: try a bigger one
            assert process.returncode == 0 and names == ["out"] and stderr == "", stderr[-3000:]
            continue
        assert process.returncode == code and stderr == f"exactc export: stopped by {stop.name}\n", stderr[-3000:]
        # Nothing half-written: no directory, or (the signal held back while it was renamed) a whole one.
        assert names in ([], ["out"]), names
        if names == ["out"]:
            assert (work / "out" / export.MARKER).is_file() and (work / "out" / "weights.safetensors").is_file()
        else:
            landed += 1
            break
    assert landed, "the signal never landed while the directory was being written"


def test_door_exports_are_made_with_the_umask_and_the_cache_folder_private(tmp_path, monkeypatch):
    from exactc.runtime.toolchain import cache_dir

    mask = os.umask(0o022)
    try:
        done = subprocess.run([sys.executable, "-m", "exactc.cli", *EXPORT, "-o", str(tmp_path / "out")],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "out").stat().st_mode & 0o777 == 0o755
        monkeypatch.setenv("EXACTC_CACHE", str(tmp_path / "cache"))
        assert cache_dir().stat().st_mode & 0o777 == 0o700
    finally:
        os.umask(mask)


# ------------------------------------------------------------------------------------
# The exported Makefile: STRICT last, value-changing flags refused
# ------------------------------------------------------------------------------------

VALUE_CHANGING = [
    ("CFLAGS", "-O2 -ffp-contract=fast -march=native", "-ffp-contract=fast"),
    ("CFLAGS", "-O2 -funsafe-math-optimizations", "-funsafe-math-optimizations"),
    ("CFLAGS", "-fassociative-math -fno-signed-zeros -fno-trapping-math", "-fassociative-math -fno-signed-zeros"),
    ("CFLAGS", "-O3 -ffast-math", "-ffast-math"),
    ("CFLAGS", "-Ofast", "-Ofast"),
    ("CFLAGS", "-O2 -freciprocal-math", "-freciprocal-math"),
    ("CFLAGS", "-O2 -ffinite-math-only", "-ffinite-math-only"),
    ("CFLAGS", "-O2 -ffp-contract=on", "-ffp-contract=on"),
    ("CFLAGS", "-O2 -ffp-model=fast", "-ffp-model=fast"),
    ("CC", "gcc -ffast-math", "-ffast-math"),
    ("WARN", "-Wall -ffast-math", "-ffast-math"),
]


# Every flag of gcc's and clang's manuals (floating-point sections) that lets the compiler
# change a value, written here apart from the Makefile's own list: each must be refused.
# -fsingle-precision-constant built and changed 460 of 512 logits of a GPT-2 forward.
MANUALS_VALUE_CHANGING = [
    "-ffast-math", "-Ofast", "-ffp-model=fast", "-ffp-model=aggressive", "-funsafe-math-optimizations",
    "-fassociative-math", "-freciprocal-math", "-fno-signed-zeros", "-ffinite-math-only", "-fno-honor-nans",
    "-fno-honor-infinities", "-fapprox-func", "-ffp-contract=fast", "-ffp-contract=on",
    "-ffp-contract=fast-honor-pragmas", "-fsingle-precision-constant", "-fexcess-precision=fast",
    "-fexcess-precision=16", "-ffp-eval-method=double", "-ffp-eval-method=extended", "-mfpmath=387",
    "-mfpmath=387+sse", "-mfpmath=sse+387", "-mfpmath=both", "-mdaz-ftz", "-fdenormal-fp-math=preserve-sign",
    "-fdenormal-fp-math=positive-zero", "-fdenormal-fp-math=dynamic", "-fdenormal-fp-math-f32=preserve-sign",
    "-fdenormal-fp-math-f32=positive-zero", "-fdenormal-fp-math-f32=dynamic", "-mrecip", "-mrecip=all",
    "-fcx-limited-range", "-fcx-fortran-rules", "-fcomplex-arithmetic=basic", "-fcomplex-arithmetic=improved",
    "-fcomplex-arithmetic=promoted",
]
# Flags of the same sections that only make the compiler more careful, or touch no value.
CAREFUL = "-frounding-math -fsignaling-nans -ffloat-store -fno-math-errno -fno-trapping-math -fexcess-precision=standard"


@pytest.fixture(scope="module")
def exported_gpt(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("makefile") / "gpt"
    done = subprocess.run([sys.executable, "-m", "exactc.cli", *EXPORT, "-o", str(root)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return root


def make_dry_run(root: Path, *assignments: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-n", "--no-print-directory", "-C", str(root), *assignments], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("variable,value,refused", VALUE_CHANGING, ids=[f"{v}={x}" for v, x, _ in VALUE_CHANGING])
def test_door_the_makefile_refuses_value_changing_flags(exported_gpt, variable, value, refused):
    done = make_dry_run(exported_gpt, f"{variable}={value}")
    assert done.returncode != 0 and done.stdout == "", done.stdout + done.stderr
    assert f"{refused} would change the program's bits" in done.stderr, done.stderr


@pytest.mark.parametrize("flag", MANUALS_VALUE_CHANGING)
def test_door_the_makefile_refuses_every_value_changing_flag_of_the_manuals(exported_gpt, flag):
    done = make_dry_run(exported_gpt, f"CFLAGS=-O2 {flag}")
    assert done.returncode != 0 and done.stdout == "", done.stdout + done.stderr
    assert f"{flag} would change the program's bits" in done.stderr, done.stderr


def test_door_the_makefile_accepts_the_careful_flags(exported_gpt):
    done = make_dry_run(exported_gpt, f"CFLAGS=-O2 {CAREFUL}")
    assert done.returncode == 0, done.stderr
    assert CAREFUL in done.stdout


def test_door_the_makefile_puts_strict_last_and_keeps_it(exported_gpt):
    from exactc.runtime import STRICT_FLAGS

    strict = " ".join(STRICT_FLAGS)
    done = make_dry_run(exported_gpt, "CFLAGS=-O3 -march=native -fno-strict-aliasing", "STRICT=-O0")
    assert done.returncode == 0, done.stderr
    compiles = [line for line in done.stdout.splitlines() if " -c -o " in line]
    links = [line for line in done.stdout.splitlines() if " -o " in line and " -c " not in line]
    sources = sorted(p.name for p in exported_gpt.rglob("*.c") if p.parent.name != "examples")  # make example's
    assert sorted(line.split()[-1].rsplit("/", 1)[-1] for line in compiles) == sorted(sources + ["exactc_npy.c"])
    assert len(links) == 3, done.stdout  # the program, the comparer and libmodel.so
    for line in compiles:
        assert "-O3 -march=native -fno-strict-aliasing" in line and f"{strict} -I. -c" in line, line
        assert line.index("-march=native") < line.index(strict), line
    for line in links:
        assert "-O3 -march=native -fno-strict-aliasing" in line, line


def test_door_embed_runs_its_sentences_a_bounded_number_per_process(monkeypatch):
    """24,000 sentences in one process overflowed the command line (E2BIG): run as
    processes (what embed does with a program that is not a built export; a built one
    runs in this process, through its library), PAIRS_PER_RUN of them at a time, with the
    same bits."""
    from exactc import embed
    from exactc.exporter import checkpoints
    from exactc.verify.compare import assert_bits_equal

    folder = embed.default_checkpoint()
    tokens = embed.max_length(folder, checkpoints.load(folder, "bert").fields["positions"])
    built = embed.cached_program(checkpoints.load(folder, "bert"), "f32", tokens, progress=lambda message: None)
    runs = []

    class Processes:  # the built program, run as processes
        def run_or_fail(self, pairs):
            runs.append(len(pairs))
            return built.run_or_fail(pairs)

    monkeypatch.setattr(embed, "PAIRS_PER_RUN", 2)
    sentences = ["one", "two", "three", "four", "five"]
    vectors = embed.run_program(Processes(), embed.tokenize(folder, sentences, tokens))
    assert runs == [2, 2, 1]
    assert_bits_equal(embed.embed(sentences, backend="reference"), vectors, "embeddings", labels=("reference", "C"))
