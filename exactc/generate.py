"""`exactc generate`: tokens from a GPT or Llama, by the reference or the exported C.

    exactc generate --checkpoint tiny-llama/ --prompt "Once upon a time" -n 32 --temperature 0.8
    exactc generate llama --set layers=2 --prompt-ids 1,2,3 -n 8 --backend c --json out.json
    exactc generate --checkpoint stories15M.bin --prompt Once --backend c --weights q8 --verbose

Generation is docs/semantics.md section 16: the prompt through `prefill`, then a `decode`
step per new token with the cache of the earlier positions, each token drawn by the
sampler (section 14) with its step's child key of the key from --seed.
`--backend reference` evaluates the entries in numpy. `--backend c` runs the whole loop
in one process of the exported decode program (`model generate`, built once into the
cache folder as `exactc export` builds it: `--plan auto` unless told otherwise,
`--weights` and `--block`): the prompt and the seed in, the tokens out, sampled in C; it
feeds the prompt through decode steps, which section 16's cache property makes
prefill's bits. With `--weights` the reference evaluates the same quantized graph. Their
logits are the same bits, so the tokens and the --json document are the same bytes,
but for the C program's timing (prompt and new tokens per second) at the document's
end, which `--verbose` also prints on stderr.

Without a checkpoint the parameters are drawn (seed 0, docs/programs.md) and there is no
tokenizer: give the prompt with --prompt-ids, or a tokenizer with --tokenizer. A
tokenizer turns --prompt into ids and the new tokens into text, printed as they are
drawn: a Hugging Face folder's tokenizer.json (the `tokenizers` package), or for a
llama2.c .bin the tokenizer.bin beside it (exactc/tokenizer_bin.py: BOS, the dummy
prefix and run.c's merges by score). `--tokenizer PATH` names either kind (a .json is
a tokenizer.json, any other file a tokenizer.bin read for the model's vocab). The text
printed is the whole sequence's decoded, less the prompt's and what is printed already,
so a token's text may depend on the one before it (llama2.c drops a leading space after
BOS), and a character whose bytes come in several tokens is printed once it is whole.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

from exactc import commands, tokenizer_bin
from exactc.exporter import files

if TYPE_CHECKING:  # imported where used: `exactc generate --help` needs neither numpy nor the exporter
    import numpy as np

    from exactc.exporter import checkpoints, export
    from exactc.exporter.reference.generation import Generation
    from exactc.exporter.reference.sampling import SamplingOptions


class GenerateError(ValueError):
    """A request `exactc generate` refuses: the message names the option and the rule."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", help="gpt or llama (with --checkpoint: checked against it, or inferred)")
    p.add_argument("--checkpoint", metavar="PATH", help="a Hugging Face folder or a llama2.c .bin")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="a config field of a drawn model (with a checkpoint: tokens only)")
    p.add_argument("--prompt", help="the prompt as text (needs a tokenizer: the checkpoint's or --tokenizer)")
    p.add_argument("--tokenizer", metavar="PATH",
                   help="a tokenizer.json, or llama2.c's tokenizer.bin (default: a Hugging Face folder's "
                        "tokenizer.json, the tokenizer.bin beside a llama2.c .bin)")
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
    p.add_argument("--plan", metavar="P", default="auto",
                   help="the C program's plan: `auto` (default: laned linear layers and thread splits, with the "
                        "tune table's layouts for this compiler and CPU where `exactc plan --tune` wrote them), "
                        "`none` (the plain nests) or a plan file (docs/plans.md); speed only, the same bits")
    commands.weights_options(p)
    commands.contract_option(p)
    p.add_argument("--json", metavar="FILE", help="write the document of the run (the same bytes from both backends, "
                   "but for the C program's timing at its end)")
    p.add_argument("--verbose", action="store_true",
                   help="print the C program's timing line on stderr: the prompt's and the new tokens per second")


class TextTokenizer(Protocol):
    """What generate needs of a tokenizer: text to ids, ids to text."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class HuggingFaceText:
    """A tokenizer.json, through the `tokenizers` package."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text).ids)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)


class Llama2cText:
    """llama2.c's tokenizer.bin: BOS first; the pieces' bytes joined, then read as UTF-8."""

    def __init__(self, tokenizer: tokenizer_bin.BinTokenizer) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, bos=True)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode_ids(ids).decode("utf-8", "replace")


def prompt_ids(args: argparse.Namespace, tokenizer: TextTokenizer | None) -> list[int]:
    if (args.prompt is None) == (args.prompt_ids is None):
        raise GenerateError("give the prompt once: --prompt TEXT or --prompt-ids IDS")
    if args.prompt is not None:
        if tokenizer is None:
            raise GenerateError("--prompt needs a checkpoint with a tokenizer.json (or a llama2.c .bin with a "
                                "tokenizer.bin beside it) or --tokenizer PATH; give --prompt-ids")
        try:
            args.prompt.encode("utf-8")
        except UnicodeEncodeError as exc:  # bytes the shell passed that are not UTF-8: lone surrogates
            at = len(args.prompt[:exc.start].encode("utf-8"))
            raw = args.prompt.encode("utf-8", "surrogateescape")
            raise GenerateError(f"--prompt is not UTF-8 text (byte {at} is 0x{raw[at]:02x}); give it as UTF-8") from None
        try:
            return tokenizer.encode(args.prompt)
        except tokenizer_bin.TokenizerError as exc:
            raise GenerateError(str(exc)) from None
    text = args.prompt_ids
    if text.endswith(".npy"):
        import numpy as np

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


def load_tokenizer(path: str | None, checkpoint: checkpoints.Checkpoint | None, vocab: int) -> TextTokenizer | None:
    """--tokenizer's file, else the checkpoint's own (a Hugging Face folder's
    tokenizer.json, the tokenizer.bin beside a llama2.c .bin), else None. A .json is read
    by the `tokenizers` package, any other file as a tokenizer.bin of `vocab` tokens."""
    if path is not None:
        found = Path(path)
        if not found.is_file():
            raise GenerateError(f"--tokenizer {path}: no such file; give a tokenizer.json or a tokenizer.bin")
    elif checkpoint is None:
        return None
    elif checkpoint.path.is_dir():
        found = checkpoint.path / "tokenizer.json"
    elif checkpoint.format == "llama2c":
        found = checkpoint.path.parent / "tokenizer.bin"
    else:
        return None
    if not found.is_file():
        return None
    if found.suffix != ".json":
        try:
            return Llama2cText(tokenizer_bin.read(found, vocab))
        except tokenizer_bin.TokenizerError as exc:
            raise GenerateError(str(exc)) from None
    from tokenizers import Tokenizer

    try:
        return HuggingFaceText(Tokenizer.from_file(str(found)))
    except Exception as exc:  # the tokenizers package raises its own Exception type
        raise GenerateError(f"{found}: the tokenizers package cannot read it ({exc})") from None


def c_generation(spec: export.ExportSpec, cc: str, cfg, ids: list[int], args: argparse.Namespace,
                 options: SamplingOptions, progress: Callable[[str], None],
                 on_token: Callable[[int], None]) -> tuple[Generation, dict]:
    """The whole loop of the exported decode program (runtime/exactc_generate.c), built
    once into the cache and run in this process through its library: the prompt and the
    seed in, the tokens, their probabilities and the step uniforms out; and its timing
    (timing)."""
    from exactc import library, programs
    from exactc.exporter.reference.generation import Generation, check_request

    check_request(cfg.tokens, cfg.vocab, ids, args.n, args.stop)  # the reference's refusals, word for word
    built = programs.exported(spec, programs.Build(cc=cc), progress, note=progress)
    # In this process, through the directory's library (library.Program: the program's
    # own loop, exactc_generate.c, with no process and no .npy files between).
    program = library.Program(built.root, make_args=built.build.make_args())
    try:
        got = program.generate(ids, args.n, temperature=options.temperature, seed=args.seed, top_k=options.top_k,
                               top_p=options.top_p, stop=args.stop, on_token=lambda token: on_token(token))
    except library.ProgramError as exc:
        raise programs.ProgramRunError(str(exc)) from None
    out = Generation(list(ids), got.tokens.tolist(), got.probabilities.tolist(), [], got.uniforms.tolist())
    new = len(got.tokens)  # the program's timing line, as `model generate` prints it
    rate = (new - 1) / (got.seconds - got.prompt_seconds) if new > 1 else 0.0
    line = (f"exactc: generate: {len(ids)} prompt tokens in {got.prompt_seconds:.6f} s, {new} new in "
            f"{got.seconds - got.prompt_seconds:.6f} s ({rate:.2f} tokens/s)")
    return out, timing(line)


# The line the program prints on stderr at the end of its loop (runtime/exactc_generate.c).
TIMING_LINE = re.compile(r"exactc: generate: (\d+) prompt tokens in ([0-9.]+) s, (\d+) new in ([0-9.]+) s "
                         r"\(([0-9.]+) tokens/s\)")


def timing(stderr: str) -> dict:
    """The program's timing line as numbers: the prompt's tokens, seconds and tokens per
    second, the new tokens' the same (the program's own rate: the tokens after the first
    over their seconds). A rate is None where there is nothing to divide: seconds that
    read 0, a single new token."""
    from exactc.programs import ProgramRunError

    found = TIMING_LINE.search(stderr)
    if found is None:
        raise ProgramRunError("the generate program printed no timing line", stderr)
    prompt, prompt_s, new, new_s, new_rate = found.groups()
    prompt_rate = round(int(prompt) / float(prompt_s), 2) if float(prompt_s) > 0 else None
    return {"prompt_tokens": int(prompt), "prompt_seconds": float(prompt_s), "prompt_tokens_per_second": prompt_rate,
            "new_tokens": int(new), "new_seconds": float(new_s),
            "new_tokens_per_second": float(new_rate) if int(new) > 1 else None}


def timing_line(t: dict) -> str:
    """The --verbose line of a timing (timing): both rates in tokens per second."""
    def rate(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    return (f"{t['prompt_tokens']} prompt tokens in {t['prompt_seconds']:.6f} s "
            f"({rate(t['prompt_tokens_per_second'])} tokens/s), {t['new_tokens']} new in {t['new_seconds']:.6f} s "
            f"({rate(t['new_tokens_per_second'])} tokens/s)")


# The command line's name of each sampling rule (reference/sampling.py's RULES).
OPTION_OF_RULE = {"temperature": "--temperature", "top_k": "--top-k", "top_p": "--top-p"}


def sampling_options(args: argparse.Namespace, prompt_length: int) -> SamplingOptions:
    """The options, judged once for both backends by the spec's rules (section 14): the
    reference and the C program then take every request this accepts, and a refusal is
    the same line whichever backend was asked for."""
    from exactc.exporter import models
    from exactc.exporter.reference.sampling import SamplingError, SamplingOptions, check_options

    if args.n < 1 or prompt_length + args.n > models.MAX_COUNT:
        raise GenerateError(f"-n {args.n}: give an integer from 1 to {models.MAX_COUNT - prompt_length:,} (the "
                            f"prompt's {prompt_length} tokens and N new ones make at most {models.MAX_COUNT:,} "
                            "positions)")
    options = SamplingOptions(args.temperature, args.top_k, args.top_p)
    try:
        check_options(options, 0.0)
    except SamplingError as exc:
        option = OPTION_OF_RULE[exc.rule]
        rule = str(exc).partition(" must ")[2]  # "sampling: top_k 5 must be ...": the rule, named once
        raise GenerateError(f"{option} {getattr(args, option[2:].replace('-', '_'))}: must {rule}") from None
    return options


def document(args: argparse.Namespace, model: str, options: SamplingOptions, out: Generation,
             timed: dict | None = None) -> dict:
    """The run as JSON: nothing in it depends on the backend but the C program's timing
    (`timed`, timing), its last member."""
    import numpy as np

    from exactc.runtime import keys_twin

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
    } | ({"timing": timed} if timed is not None else {})


def check_json(path: str) -> None:
    """--json refused before the run when it names what replace_file refuses (a
    directory, a block device), not after the whole generation."""
    try:
        files.output_target(path)
    except OSError as exc:
        raise GenerateError(f"--json {path}: cannot write it ({exc.strerror or exc})") from None


def reference_programs(model: str, site: str, user: dict, checkpoint: checkpoints.Checkpoint | None,
                       weights: tuple[str, int] | None, contract: str = "off",
                       form: str | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """The prefill and decode programs by entry and their parameters, as the exports of
    `--backend c` trace and draw (or read) them (export.build_program): with `weights`
    (or a quantized checkpoint's own) their linear weights quantized, their linears in
    `form` (None: the integer form), and the products in
    the realization `contract` (docs/semantics.md section 18), so that the reference runs
    the graph the C program runs."""
    import dataclasses

    from exactc.exporter import export
    from exactc.exporter.primitives import check_contract

    check_contract(contract)
    prefill, params = export.build_program(model, "prefill", site, 0, user, checkpoint, weights, form)
    overrides, weights = export.checkpoint_request(checkpoint, "decode", user, weights)
    decode = export.trace(model, "decode", overrides, weights, checkpoint, form)
    programs = {"prefill": prefill, "decode": decode}
    return {entry: dataclasses.replace(p, contract=contract) for entry, p in programs.items()}, params


def cmd_generate(args: argparse.Namespace) -> int:
    from exactc.exporter import checkpoints, export, models, types
    from exactc.exporter.kernels.autoplan import load_plan_option
    from exactc.exporter.reference.generation import GenerationError, reference_runner, run_loop
    from exactc.exporter.reference.sampling import SamplingError
    from exactc.runtime import keys_twin

    types.check_site(args.dtype)
    weights = commands.weights_choice(args)
    export.check_weights(weights)  # --weights and --plan refused before anything is built, whichever backend
    load_plan_option(args.plan, args.cc)
    if args.json:
        check_json(args.json)
    checkpoint = checkpoints.load(args.checkpoint, args.model) if args.checkpoint else None
    model = checkpoint.model if checkpoint is not None else args.model
    if model not in ("gpt", "llama"):
        raise GenerateError(f"model {model!r}: exactc generates with gpt or llama")
    user = commands._overrides(args.set)
    # the vocabulary before the prompt is read: T_max is not known yet, and the default's 16
    # may exceed a small GPT's positions, so read it at one position unless --set gives one
    vocab = (checkpoint.fields["vocab"] if checkpoint is not None
             else models.config(model, {"tokens": "1", **user}).vocab)
    tokenizer = load_tokenizer(args.tokenizer, checkpoint, vocab)
    ids = prompt_ids(args, tokenizer)
    options = sampling_options(args, len(ids))
    user.setdefault("tokens", str(max(2, len(ids) + args.n)))  # the programs' T_max: the prompt and N
    overrides = checkpoint.overrides(user) if checkpoint is not None else user
    progress = lambda line: print(f"exactc generate: {line}", file=sys.stderr, flush=True)  # noqa: E731
    if not 0 <= args.seed < 2**64:
        raise GenerateError(f"--seed {args.seed}: give an integer in [0, 2^64)")
    if args.backend == "c":
        spec = export.ExportSpec(model, "decode", args.dtype, 0, user, plan=args.plan, checkpoint=checkpoint,
                                 weights=weights, cc=args.cc, contract=args.contract, form=args.form)
        cfg = models.config(model, overrides)
    else:
        programs, params = reference_programs(model, args.dtype, user, checkpoint, weights, args.contract,
                                              args.form)
        cfg = programs["prefill"].config
        run = reference_runner(programs, args.dtype, params)
    shown: list[int] = []
    printed: list[str] = []  # the text printed so far, the prompt's included (set at the first token)

    def stream(token: int, probability: float) -> None:
        shown.append(token)
        if tokenizer is None:
            print(token, end=" ", flush=True)
            return
        if not printed:  # the prompt is checked by now: its ids are in the vocab
            printed.append(tokenizer.decode(ids).rstrip("\ufffd"))
        # A trailing U+FFFD may be a character whose last bytes are still to be drawn.
        text = tokenizer.decode(ids + shown).rstrip("\ufffd")
        print(text[len(printed[0]):], end="", flush=True)
        printed[0] = text

    timed = None
    try:
        if args.backend == "c":
            out, timed = c_generation(spec, args.cc, cfg, ids, args, options, progress,
                                      lambda token: stream(token, None))
        else:
            out = run_loop(run, cfg, ids, args.n, keys_twin.key_from_seed(args.seed), options, args.stop,
                           on_token=stream)
    except (GenerationError, SamplingError) as exc:
        raise GenerateError(str(exc)) from None
    if printed:  # the bytes that never made a whole character
        print(tokenizer.decode(ids + shown)[len(printed[0]):], end="")
    print()
    if args.verbose and timed is not None:
        progress(timing_line(timed))
    if args.json:
        text = json.dumps(document(args, model, options, out, timed), indent=1) + "\n"
        try:
            files.replace_file(args.json, text.encode())
        except OSError as exc:
            raise GenerateError(f"--json {args.json}: cannot write it ({exc.strerror or exc})") from None
    return 0
