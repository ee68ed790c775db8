"""`exactc generate`: tokens from a GPT or Llama, by the reference or the exported C.

    exactc generate --checkpoint tiny-llama/ --prompt "Once upon a time" -n 32 --temperature 0.8
    exactc generate llama --set layers=2 --prompt-ids 1,2,3 -n 8 --backend c --json out.json

Generation is docs/semantics.md section 16: the prompt through `prefill`, then a `decode`
step per new token with the cache of the earlier positions, each token drawn by the
sampler (section 14) with its step's child key of the key from --seed. `--backend c`
runs the exported prefill and decode programs (built once into the cache folder, one
process a step); `--backend reference` evaluates the same entries in numpy. Their logits
are the same bits, so the tokens and the --json document are the same bytes.

Without a checkpoint the parameters are drawn (seed 0, docs/programs.md) and there is no
tokenizer: give the prompt with --prompt-ids. A Hugging Face folder's tokenizer.json
turns --prompt into ids (the `tokenizers` package) and the new tokens into text, printed
as they are drawn.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from exactc.exporter import checkpoints, export, models, types
from exactc.exporter.reference.generation import Generation, GenerationError, reference_runner, run_loop
from exactc.exporter.reference.sampling import SamplingError, SamplingOptions
from exactc.runtime import keys_twin


class GenerateError(ValueError):
    """A request `exactc generate` refuses: the message names the option and the rule."""


ENTRIES = ("prefill", "decode")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", help="gpt or llama (with --checkpoint: checked against it, or inferred)")
    p.add_argument("--checkpoint", metavar="PATH", help="a Hugging Face folder or a llama2.c .bin")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="a config field of a drawn model (with a checkpoint: tokens only)")
    p.add_argument("--prompt", help="the prompt as text (needs the checkpoint's tokenizer.json)")
    p.add_argument("--prompt-ids", metavar="IDS", help="the prompt as token ids: 1,2,3 or a FILE.npy of integers")
    p.add_argument("-n", type=int, default=16, metavar="N", help="new tokens at most (default 16)")
    p.add_argument("--temperature", type=float, default=1.0, help="0 is greedy (default 1)")
    p.add_argument("--top-k", type=int, default=0, help="0 is no top-k (default)")
    p.add_argument("--top-p", type=float, default=1.0, help="1 is no top-p (default)")
    p.add_argument("--seed", type=int, default=0, help="the key is key_from_seed(SEED) (default 0)")
    p.add_argument("--stop", type=int, metavar="ID", help="stop after this token (default: none)")
    p.add_argument("--dtype", default="f32", help="the site type: f64, f32 or bf16 (default f32)")
    p.add_argument("--backend", choices=("reference", "c"), default="reference",
                   help="the numpy reference (default) or the exported C programs: the same bits")
    p.add_argument("--cc", default="cc", help="the C compiler of --backend c")
    p.add_argument("--json", metavar="FILE", help="write the document of the run (the same bytes from both backends)")


def prompt_ids(args: argparse.Namespace, tokenizer) -> list[int]:
    if (args.prompt is None) == (args.prompt_ids is None):
        raise GenerateError("give the prompt once: --prompt TEXT or --prompt-ids IDS")
    if args.prompt is not None:
        if tokenizer is None:
            raise GenerateError("--prompt needs a checkpoint with a tokenizer.json; give --prompt-ids")
        return list(tokenizer.encode(args.prompt).ids)
    text = args.prompt_ids
    if text.endswith(".npy"):
        try:
            ids = np.load(text, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise GenerateError(f"--prompt-ids {text}: cannot read it ({exc})") from None
        if ids.dtype.kind not in "iu" or ids.ndim != 1:
            raise GenerateError(f"--prompt-ids {text}: holds {ids.dtype} {ids.shape}; give a 1-d array of integers")
        return [int(i) for i in ids]
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise GenerateError(f"--prompt-ids {text!r}: write integers separated by commas, e.g. 1,2,3") from None


def load_tokenizer(checkpoint: checkpoints.Checkpoint | None):
    if checkpoint is None:
        return None
    path = checkpoint.path / "tokenizer.json" if checkpoint.path.is_dir() else None
    if path is None or not path.is_file():
        return None
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def c_runner(specs: Mapping[str, export.ExportSpec], cc: str, progress: Callable[[str], None]):
    """run(entry, inputs) through the exported programs, built once into the cache."""
    from exactc.verify import conformance, programs

    built = {entry: programs.exported(spec, programs.Build(cc=cc), progress) for entry, spec in specs.items()}

    def run(entry: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        with tempfile.TemporaryDirectory(prefix="exactc-generate-") as tmp:
            ins, outs = Path(tmp) / "in", Path(tmp) / "out"
            ins.mkdir()
            for name, array in inputs.items():
                (ins / f"{name}.npy").write_bytes(export.npy_bytes(array))
            built[entry].run_or_fail([(ins, outs)])
            return conformance.load_outputs(outs)

    return run


def document(args: argparse.Namespace, model: str, options: SamplingOptions, out: Generation) -> dict:
    """The run as JSON: nothing in it depends on the backend."""
    key = keys_twin.key_from_seed(args.seed)
    return {
        "model": model,
        "dtype": args.dtype,
        "seed": args.seed,
        "key": bytes(np.asarray(key, "<u4").tobytes()).hex(),
        "options": {"temperature": options.temperature, "top_k": options.top_k, "top_p": options.top_p,
                    "max_new_tokens": args.n, "stop": args.stop},
        "prompt_ids": out.prompt,
        "new_tokens": out.tokens,
        "steps": [{"token": t, "probability": p, "u": u}
                  for t, p, u in zip(out.tokens, out.probabilities, out.uniforms)],
    }


def cmd_generate(args: argparse.Namespace) -> int:
    from exactc.commands import _overrides

    types.check_site(args.dtype)
    checkpoint = checkpoints.load(args.checkpoint, args.model) if args.checkpoint else None
    model = checkpoint.model if checkpoint is not None else args.model
    if model not in ("gpt", "llama"):
        raise GenerateError(f"model {model!r}: exactc generates with gpt or llama")
    tokenizer = load_tokenizer(checkpoint)
    ids = prompt_ids(args, tokenizer)
    options = SamplingOptions(args.temperature, args.top_k, args.top_p)
    user = _overrides(args.set)
    user.setdefault("tokens", str(max(2, len(ids) + args.n)))  # the programs' T_max: the prompt and N
    overrides = checkpoint.overrides(user) if checkpoint is not None else user
    progress = lambda line: print(f"exactc generate: {line}", file=sys.stderr, flush=True)  # noqa: E731
    if args.backend == "c":
        specs = {e: export.ExportSpec(model, e, args.dtype, 0, user, checkpoint=checkpoint) for e in ENTRIES}
        cfg = models.config(model, overrides)
        run = c_runner(specs, args.cc, progress)
    else:
        programs = {e: models.build(model, e, overrides) for e in ENTRIES}
        cfg = programs["prefill"].config
        params = (checkpoint.parameters(programs["prefill"], args.dtype) if checkpoint is not None
                  else models.draw_parameters(programs["prefill"], 0, args.dtype))
        run = reference_runner(programs, args.dtype, params)
    shown: list[int] = []
    printed = [""]

    def stream(token: int, probability: float) -> None:
        shown.append(token)
        if tokenizer is None:
            print(token, end=" ", flush=True)
            return
        text = tokenizer.decode(shown)
        print(text[len(printed[0]):], end="", flush=True)
        printed[0] = text

    try:
        out = run_loop(run, cfg, ids, args.n, keys_twin.key_from_seed(args.seed), options, args.stop,
                       on_token=stream)
    except (GenerationError, SamplingError) as exc:
        raise GenerateError(str(exc)) from None
    print()
    if args.json:
        text = json.dumps(document(args, model, options, out), indent=1) + "\n"
        try:
            export.replace_file(args.json, text.encode())
        except OSError as exc:
            raise GenerateError(f"--json {args.json}: cannot write it ({exc.strerror or exc})") from None
    return 0
