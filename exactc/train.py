"""`exactc train`: train a GPT or Llama on a token stream, in the reference or in C.

    exactc train --checkpoint tiny-gpt2/ --data train.bin --steps 20 --batch 4 --seq 64 -o run/
    exactc train gpt --set layers=2 --data train.bin --steps 100 --batch 4 --seq 32 --every 25 -o r/
    exactc train --resume run/checkpoint-000050.safetensors --data train.bin -o run/
    exactc train gpt --data train.bin --steps 20 --batch 4 --seq 32 --backend c --threads 2 -o c/

The training loop of docs/semantics.md section 17: each step reads its batch from the
stream (llm.c's data format and its sequential loader), runs `loss_grad` and one AdamW
update at the step's rate (warmup, then cosine), prints a progress line (step, loss,
tokens/s) and writes a checkpoint every --every K steps and after the last: a
.safetensors file of the weights, both moments, the losses so far and the run's record
(model, config, settings, step, data position), through a temporary name, and the loss
log beside it. `--resume CKPT` goes on from a checkpoint as the uninterrupted run would,
bit for bit: the settings come from the checkpoint. `exactc export --checkpoint CKPT`
reads its weights. The parameters start from a checkpoint (a Hugging Face folder or a
llama2.c .bin) or are drawn from --seed as `exactc export` draws them.

`--backend c` runs the loop in the run's exported loss_grad program (`model train`,
runtime/exactc_train.c; exported and built once into the cache): the same progress
lines, and the same checkpoint and loss log bytes as the reference, at any --threads.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from exactc import commands
from exactc.exporter import files

if TYPE_CHECKING:  # imported where used: `exactc train --help` needs neither numpy nor the exporter
    import numpy as np

    from exactc.exporter import training

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256  # llm.c's token files (dev/data, llmc/dataloader.h)
HEADER_BYTES = 4 * HEADER_INTS
# The options a run's record holds: with --resume, each is taken from the checkpoint.
SETTINGS = ("steps", "batch", "seq", "lr", "warmup", "weight_decay", "clip", "seed", "every", "dtype")
DEFAULTS = {"lr": 1e-3, "warmup": 0, "weight_decay": 0.0, "clip": 0.0, "seed": 0, "every": 0, "dtype": "f32"}


class TrainError(ValueError):
    """A request `exactc train` refuses: the message names the option, the file and the rule."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", help="gpt or llama (with --checkpoint: checked against it, or inferred)")
    p.add_argument("--model", dest="model_option", metavar="MODEL", help="the MODEL, given as an option")
    p.add_argument(
        "--checkpoint", metavar="PATH", help="the starting weights: a Hugging Face folder or a llama2.c .bin"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a config field of a drawn model, e.g. --set layers=2 (repeatable)",
    )
    p.add_argument(
        "--data",
        required=True,
        metavar="FILE",
        help="the token stream, in llm.c's format: a header of 256 int32 (magic 20240520, version 1, "
        "the token count), then the tokens as uint16",
    )
    p.add_argument("--steps", type=int, metavar="N", help="the number of steps of the run")
    p.add_argument("--batch", type=int, metavar="B", help="sequences per step")
    p.add_argument("--seq", type=int, metavar="T", help="tokens per sequence")
    p.add_argument("--lr", type=float, help="the peak learning rate (default 1e-3)")
    p.add_argument("--warmup", type=int, metavar="W", help="linear warmup steps, then a cosine to 0 (default 0)")
    p.add_argument("--weight-decay", type=float, metavar="L", help="AdamW's decay of the 2-D weights (default 0)")
    p.add_argument(
        "--clip", type=float, metavar="C", help="the global gradient norm to clip to (default 0: no clipping)"
    )
    p.add_argument("--seed", type=int, metavar="S", help="the seed of the drawn parameters (default 0)")
    p.add_argument("--every", type=int, metavar="K", help="a checkpoint every K steps (default 0: after the last only)")
    p.add_argument("--dtype", choices=("f64", "f32"), help="the site type of the training (default f32)")
    p.add_argument(
        "--backend",
        choices=("reference", "c"),
        default="reference",
        help="the numpy reference, or the exported loss_grad program's loop (`model train`): the same bytes",
    )
    p.add_argument("--cc", default="cc", help="the C compiler of --backend c (default cc)")
    p.add_argument(
        "--plan",
        metavar="P",
        default="auto",
        help="the C program's plan (--backend c): `auto` (default: laned kernels and thread splits), `none` "
        "(the plain nests) or a plan file; the same bits",
    )
    p.add_argument("--threads", type=int, metavar="N", help="the C program's OpenMP threads (default: OpenMP's)")
    p.add_argument("--resume", metavar="CKPT", help="go on from a checkpoint of exactc train (its settings)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="where the checkpoints and loss.log go")


@dataclasses.dataclass(frozen=True)
class Run:
    """What a training run is: the model and its config, the settings, the data's digest."""

    model: str
    config: dict[str, Any]
    steps: int
    batch: int
    seq: int
    lr: float
    warmup: int
    weight_decay: float
    clip: float
    seed: int
    every: int
    dtype: str
    data: str  # sha256 of the token file: a resumed run reads the same stream


@dataclasses.dataclass
class State:
    """Where a run stands after `step` steps: what a checkpoint holds besides the Run."""

    step: int
    position: int  # the stream's index of the next batch's first token
    params: dict[str, np.ndarray]
    m: dict[str, np.ndarray]
    v: dict[str, np.ndarray]
    losses: list[float]


# ---- the token stream ------------------------------------------------------------------------


def read_tokens(path: str | Path) -> tuple[np.ndarray, str]:
    """The tokens of an llm.c data file (uint16) and the file's sha256; a TrainError in
    one line for a file that is not one: short, a bad magic or version, a size that is
    not the header's token count."""
    import numpy as np

    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TrainError(f"--data {path}: cannot read it ({exc.strerror or exc})") from None
    if len(data) < HEADER_BYTES:
        raise TrainError(f"--data {path}: {len(data)} bytes, shorter than llm.c's header of {HEADER_INTS} int32")
    magic, version, count = (int(x) for x in np.frombuffer(data, "<i4", 3))
    if magic != MAGIC:
        raise TrainError(f"--data {path}: magic {magic}, not llm.c's {MAGIC}")
    if version != VERSION:
        raise TrainError(f"--data {path}: version {version}; exactc reads version {VERSION} (uint16 tokens)")
    if count < 0 or len(data) != HEADER_BYTES + 2 * count:
        raise TrainError(
            f"--data {path}: {len(data)} bytes, but the header's {count} tokens make {HEADER_BYTES + 2 * count}"
        )
    return np.frombuffer(data, "<u2", count, HEADER_BYTES), hashlib.sha256(data).hexdigest()


def token_file(tokens) -> bytes:
    """An llm.c data file of `tokens` (integers below 65536)."""
    import numpy as np

    header = np.zeros(HEADER_INTS, "<i4")
    header[:3] = MAGIC, VERSION, len(tokens)
    return header.tobytes() + np.asarray(tokens, "<u2").tobytes()


def next_batch(stream: np.ndarray, position: int, batch: int, seq: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The batch at `position` (llm.c's sequential loader): B·T + 1 tokens from there,
    the tokens the first B·T and the targets the last B·T, as (B, T) int32; and the next
    position, B·T further on, or 0 when B·T + 1 tokens from there would run past the end."""
    import numpy as np

    size = batch * seq
    chunk = stream[position : position + size + 1].astype(np.int32)
    following = position + size
    if following + size + 1 > len(stream):
        following = 0
    return chunk[:-1].reshape(batch, seq), chunk[1:].reshape(batch, seq), following


# ---- the run ---------------------------------------------------------------------------------


def loss_grad_of(run: Run) -> training.LossGrad:
    from exactc.exporter import models

    return models.build_loss_grad(run.model, dict(run.config, tokens=run.seq))


def start(args: argparse.Namespace, digest: str) -> tuple[Run, State]:
    """A new run from the options: the parameters from --checkpoint or drawn from --seed."""
    from exactc.exporter import checkpoints, models
    from exactc.exporter.reference import training as reference_training

    settings: dict[str, Any] = {key: getattr(args, key) for key in SETTINGS}
    settings.update({key: value for key, value in DEFAULTS.items() if settings[key] is None})
    for key in ("steps", "batch", "seq"):
        if settings[key] is None:
            raise TrainError(f"give --{key} (or --resume a checkpoint)")
    ckpt = None
    if args.checkpoint is not None:
        ckpt = checkpoints.load(args.checkpoint, args.model)
        model, config = ckpt.model, ckpt.overrides({**commands._overrides(args.set), "tokens": settings["seq"]})
    elif args.model is None:
        raise TrainError("give the MODEL (gpt or llama), or a --checkpoint to read it from")
    else:
        model = args.model
        config = dataclasses.asdict(models.config(model, dict(commands._overrides(args.set), tokens=settings["seq"])))
    config = {key: value for key, value in config.items() if key != "tokens"}
    run = Run(model, config, data=digest, **settings)
    check_settings(run)
    lg = loss_grad_of(run)
    if ckpt is not None:
        params = ckpt.parameters(lg.forward, run.dtype)
    else:
        params = models.draw_parameters(lg.forward, run.seed, run.dtype)
    zero = reference_training.zero_moments
    return run, State(0, 0, params, zero(lg, run.dtype), zero(lg, run.dtype), [])


def check_settings(run: Run) -> None:
    for key in ("steps", "batch", "seq"):
        if getattr(run, key) < 1:
            raise TrainError(f"--{key} {getattr(run, key)} must be at least 1")
    for key in ("warmup", "every"):
        if getattr(run, key) < 0:
            raise TrainError(f"--{key} {getattr(run, key)} must be 0 or more")
    if not run.lr > 0 or not run.weight_decay >= 0 or not run.clip >= 0:
        raise TrainError(
            f"--lr {run.lr} must be positive, --weight-decay {run.weight_decay} and --clip {run.clip} 0 or more"
        )


def step(run: Run, lg: training.LossGrad, state: State, stream: np.ndarray) -> State:
    """Step state.step + 1: its batch, loss_grad and the AdamW update at the step's rate."""
    from exactc.exporter.reference import training as reference_training

    tokens, targets, position = next_batch(stream, state.position, run.batch, run.seq)
    out = reference_training.loss_grad(lg, run.dtype, state.params, tokens, targets)
    rate = reference_training.learning_rate(state.step, run.steps, run.lr, run.warmup)
    opt = reference_training.AdamW(lr=run.lr, weight_decay=run.weight_decay, clip=run.clip)
    new = reference_training.adamw_step(
        lg, run.dtype, opt, state.step + 1, state.params, out, state.m, state.v, lr=rate
    )
    params, m, v = (cast("dict[str, np.ndarray]", new[key]) for key in ("params", "m", "v"))
    return State(state.step + 1, position, params, m, v, state.losses + [float(out["loss"])])


# ---- checkpoints -----------------------------------------------------------------------------


def checkpoint_name(step: int) -> str:
    return f"checkpoint-{step:06d}.safetensors"


def checkpoint_bytes(run: Run, lg: training.LossGrad, state: State) -> bytes:
    """The checkpoint after state.step steps (exporter/checkpoints/trained.py): the same
    bytes from the same run."""
    import numpy as np

    from exactc.exporter import export
    from exactc.exporter.checkpoints import trained

    program = lg.forward
    tensors = export.weight_tensors(program, state.params, run.dtype)
    for prefix, moment in zip(trained.MOMENTS, (state.m, state.v)):
        tensors.update({prefix + name: t for name, t in export.weight_tensors(program, moment, run.dtype).items()})
    tensors[trained.LOSSES] = ("F64", np.array(state.losses, np.float64))
    record = dict(dataclasses.asdict(run), step=state.step, position=state.position)
    return export.safetensors_bytes(tensors, {trained.KEY: json.dumps(record, sort_keys=True)})


def resume(path: str | Path) -> tuple[Run, State]:
    """The run and the state a checkpoint of exactc train holds."""
    import numpy as np

    from exactc.exporter import types
    from exactc.exporter.checkpoints import CheckpointError, trained

    path = Path(path)
    if not trained.looks_like(path):
        raise TrainError(f"--resume {path}: not a checkpoint of exactc train (a .safetensors file it wrote)")
    record, tensors = trained.read(path)
    try:
        run = Run(**{field.name: record[field.name] for field in dataclasses.fields(Run)})
        step, position = int(record["step"]), int(record["position"])
    except (KeyError, TypeError, ValueError) as exc:
        raise TrainError(f"--resume {path}: its record lacks or mistypes {exc}") from None
    lg = loss_grad_of(run)

    def stacked(prefix: str) -> dict[str, np.ndarray]:
        out = {}
        for spec in lg.params:
            names = [spec.layer_name(layer) for layer in range(spec.layers)] if spec.layers else [spec.name]
            missing = [prefix + name for name in names if prefix + name not in tensors]
            if missing:
                raise CheckpointError(f"{path}: no tensor {missing[0]}")
            values = [tensors[prefix + name].read() for name in names]
            out[spec.name] = types.round_to_site(np.stack(values) if spec.layers else values[0], run.dtype)
        return out

    params = stacked("")
    m, v = stacked(trained.MOMENTS[0]), stacked(trained.MOMENTS[1])
    losses = [float(x) for x in tensors[trained.LOSSES].read()] if trained.LOSSES in tensors else []
    return run, State(step, position, params, m, v, losses)


def same_settings(args: argparse.Namespace, run: Run) -> None:
    """With --resume the run is the checkpoint's: an option that says otherwise is refused."""
    if args.model is not None or args.checkpoint is not None or args.set:
        raise TrainError("--resume takes the model and its weights from CKPT: drop MODEL, --checkpoint and --set")
    for key in SETTINGS:
        given = getattr(args, key)
        if given is not None and given != getattr(run, key):
            option = "--" + key.replace("_", "-")
            raise TrainError(f"{option} {given}: the run resumed has {option} {getattr(run, key)}")


def write_outputs(out: Path, run: Run, lg: training.LossGrad, state: State) -> None:
    """The checkpoint of this step and the loss log so far, each through a temporary name."""
    try:
        files.replace_file(out / checkpoint_name(state.step), checkpoint_bytes(run, lg, state))
        files.replace_file(out / "loss.log", loss_log(state.losses).encode())
    except OSError as exc:
        raise TrainError(f"-o {out}: cannot write ({exc.strerror or exc})") from None


def loss_log(losses: list[float]) -> str:
    """One line per step: its number (from 1) and its loss, every digit (repr reads back)."""
    return "".join(f"step {k + 1} loss {loss!r}\n" for k, loss in enumerate(losses))


def train(run: Run, state: State, stream: np.ndarray, out: Path, progress=None) -> State:
    """Steps state.step + 1 to run.steps; a checkpoint every run.every steps and after the last."""
    lg = loss_grad_of(run)
    check_stream(run, lg, stream)
    while state.step < run.steps:
        began = time.perf_counter()
        state = step(run, lg, state, stream)
        if progress is not None:
            progress(run, state, time.perf_counter() - began)
        if state.step == run.steps or (run.every and state.step % run.every == 0):
            write_outputs(out, run, lg, state)
    return state


def check_stream(run: Run, lg: training.LossGrad, stream: np.ndarray) -> None:
    """A stream a step can read (B·T + 1 tokens) of the model's tokens."""
    if len(stream) < run.batch * run.seq + 1:
        raise TrainError(f"--data holds {len(stream)} tokens; a step reads B·T + 1 = {run.batch * run.seq + 1}")
    vocab = lg.vocab
    if len(stream) and int(stream.max()) >= vocab:
        raise TrainError(f"--data holds the token {int(stream.max())}, outside the model's vocabulary [0, {vocab})")


def print_progress(run: Run, state: State, seconds: float) -> None:
    print_step(run, state.step, state.losses[-1], seconds)


def print_step(run: Run, step: int, loss: float, seconds: float) -> None:
    rate = run.batch * run.seq / seconds if seconds > 0 else float("inf")
    print(f"step {step}/{run.steps}  loss {loss:.6f}  {rate:.0f} tokens/s", flush=True)


# ---- the C backend: the exported loss_grad program's loop (runtime/exactc_train.c) ------------

# What `model train` prints: a line per step, and one per checkpoint it wrote.
STEP_LINE = re.compile(r"step (\d+) loss (\S+) seconds (\S+)")
CHECKPOINT_LINE = re.compile(r"checkpoint (.+)")


def record_template(run: Run) -> str:
    """The checkpoint's record (checkpoint_bytes) with "@step" and "@position" where the
    program writes the numbers: it is given the rest, which holds the config and the
    settings as Python prints them (floats by repr) and the data's sha256."""
    return json.dumps(dict(dataclasses.asdict(run), step="@step", position="@position"), sort_keys=True)


def c_program(run: Run, args: argparse.Namespace):
    """The loss_grad program of the run (B sequences of T tokens), exported and built
    into the cache."""
    from exactc import programs
    from exactc.exporter import export

    overrides = dict(run.config, tokens=run.seq, batch=run.batch)
    spec = export.ExportSpec(run.model, "loss_grad", run.dtype, 0, overrides, plan=args.plan, cc=args.cc)
    return programs.exported(spec, programs.Build(cc=args.cc), lambda line: print(line, file=sys.stderr))


def c_arguments(run: Run, weights: Path, data: str, out: Path, resume: str | None) -> list[str]:
    settings = [
        ("--steps", run.steps),
        ("--batch", run.batch),
        ("--seq", run.seq),
        ("--lr", repr(run.lr)),
        ("--warmup", run.warmup),
        ("--every", run.every),
        ("--weight-decay", repr(run.weight_decay)),
        ("--clip", repr(run.clip)),
        ("--record", record_template(run)),
    ]
    flags = [str(x) for pair in settings for x in pair] + (["--resume", resume] if resume is not None else [])
    return ["train", str(weights), data, str(out), *flags]


def train_c(run: Run, state: State, args: argparse.Namespace, out: Path) -> int:
    """The run in the C program: its step lines become the progress lines and the loss
    log (written after each checkpoint, as the reference does); the last step done."""
    import subprocess
    import tempfile

    from exactc import programs
    from exactc.exporter import export

    lg = loss_grad_of(run)
    program = c_program(run, args)
    losses = list(state.losses)
    with tempfile.TemporaryDirectory(prefix="exactc-train-") as tmp:
        weights = Path(tmp) / "weights.safetensors"
        if args.resume is None:
            weights.write_bytes(export.safetensors_bytes(export.weight_tensors(lg.forward, state.params, run.dtype)))
        command = [str(program.path), *c_arguments(run, weights, args.data, out, args.resume)]
        env = programs._env(args.threads, None)
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as p:
            assert p.stdout is not None and p.stderr is not None
            for line in p.stdout:
                if found := STEP_LINE.fullmatch(line.strip()):
                    losses.append(float(found[2]))
                    print_step(run, int(found[1]), losses[-1], float(found[3]))
                elif CHECKPOINT_LINE.fullmatch(line.strip()):
                    replace_log(out, losses)
            stderr = p.stderr.read()
        if p.returncode != 0:
            last = (stderr.strip().splitlines() or ["(no message)"])[-1]
            raise TrainError(f"--backend c: {program.path} exited with {p.returncode}: {last}")
    return len(losses)


def replace_log(out: Path, losses: list[float]) -> None:
    try:
        files.replace_file(out / "loss.log", loss_log(losses).encode())
    except OSError as exc:
        raise TrainError(f"-o {out}: cannot write ({exc.strerror or exc})") from None


def cmd_train(args: argparse.Namespace) -> int:
    if args.model_option is not None:
        if args.model is not None and args.model != args.model_option:
            raise TrainError(f"MODEL {args.model} and --model {args.model_option}: give the model once")
        args.model = args.model_option
    if args.threads is not None and args.threads < 1:
        raise TrainError(f"--threads {args.threads} must be at least 1")
    stream, digest = read_tokens(args.data)
    if args.resume is not None:
        run, state = resume(args.resume)
        same_settings(args, run)
        if run.data != digest:
            raise TrainError(
                f"--data {args.data} is not the stream the run resumed was trained on (its sha256 differs)"
            )
    else:
        run, state = start(args, digest)
    out = Path(args.output)
    with commands._output_folder(out):
        if args.backend == "c":
            check_stream(run, loss_grad_of(run), stream)
            last = train_c(run, state, args, out)
        else:
            last = train(run, state, stream, out, print_progress).step
    print(f"wrote {out / checkpoint_name(last)} and {out / 'loss.log'}", file=sys.stderr)
    return 0
