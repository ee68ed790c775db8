"""A training step of exactc's C program beside llm.c's CPU trainer, in one run.

    python bench/train_llmc.py --llmc PATH [--threads 1 2] [--steps 6]

PATH is a checkout of llm.c (its train_gpt2.c). Both train the same GPT-2 shape, make
bench's model (vocabulary 4096, dim 384, 6 layers, 6 heads) at llm.c's fixed batch of 4
sequences of 64 tokens, in f32, on the same random token stream:

- llm.c: train_gpt2.c built as its Makefile builds it (-Ofast -march=native, OpenMP on),
  started on a checkpoint of this shape in its format (random weights: the speed does not
  depend on them) from a folder holding the files its main opens; its own per-step time
  ("took N ms") of steps 1 to 40.
- exactc: `exactc train gpt --backend c --cc gcc` (the exported loss_grad program's loop,
  `--plan auto`) on the same stream; the program's own time of each step after the first.

Each is run at each thread count (OMP_NUM_THREADS), alternating; the table gives the
median tokens per second and exactc's time over llm.c's, with `cpu family` and `model`.
llm.c computes with -Ofast (reassociated sums, FMA contraction) and OpenMP reductions:
its bits move with the compiler and the thread count; exactc's do not.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

SHAPE = {"vocab": 4096, "dim": 384, "layers": 6, "heads": 6}
BATCH, SEQ = 4, 64  # train_gpt2.c's main fixes B = 4, T = 64
LLMC_FLAGS = [
    "-Ofast",
    "-Wno-unused-result",
    "-Wno-ignored-pragmas",
    "-Wno-unknown-attributes",
    "-march=native",
    "-fopenmp",
    "-DOMP",
]  # llm.c's Makefile for train_gpt2 with OpenMP
LLMC_STEP = re.compile(r"step (\d+): train loss [-+\d.eE]+ \(took ([\d.]+) ms\)")
EXACTC_STEP = re.compile(r"step (\d+)/\d+\s+loss \S+\s+(\d+) tokens/s")
DATA_MAGIC, MODEL_MAGIC = 20240520, 20240326


def cpu() -> str:
    info = Path("/proc/cpuinfo").read_text()
    family = re.search(r"^cpu family\s*:\s*(\d+)", info, re.M)
    model = re.search(r"^model\s*:\s*(\d+)", info, re.M)
    name = re.search(r"^model name\s*:\s*(.+)$", info, re.M)
    return f"{name[1] if name else '?'}: cpu family {family[1] if family else '?'}, model {model[1] if model else '?'}"


def write_tokens(path: Path, tokens: np.ndarray) -> None:
    """llm.c's token file: 256 int32 (magic, version 1, count), then uint16 tokens."""
    header = np.zeros(256, np.int32)
    header[:3] = DATA_MAGIC, 1, tokens.size
    path.write_bytes(header.tobytes() + tokens.astype(np.uint16).tobytes())


def write_llmc_checkpoint(path: Path, rng: np.random.Generator) -> None:
    """gpt2_124M.bin's format (version 3) at SHAPE: the header, then every tensor in f32."""
    v, c, layers, heads = SHAPE["vocab"], SHAPE["dim"], SHAPE["layers"], SHAPE["heads"]
    header = np.zeros(256, np.int32)
    header[:8] = MODEL_MAGIC, 3, SEQ, v, layers, heads, c, v
    shapes = [
        (v, c),
        (SEQ, c),
        (layers, c),
        (layers, c),
        (layers, 3 * c, c),
        (layers, 3 * c),
        (layers, c, c),
        (layers, c),
        (layers, c),
        (layers, c),
        (layers, 4 * c, c),
        (layers, 4 * c),
        (layers, c, 4 * c),
        (layers, c),
        (c,),
        (c,),
    ]
    tensors = [rng.normal(0.0, 0.02, s).astype(np.float32) for s in shapes]
    path.write_bytes(header.tobytes() + b"".join(t.tobytes() for t in tensors))


def llmc_folder(root: Path, llmc: Path, stream: Path, rng: np.random.Generator) -> Path:
    """A folder train_gpt2 runs in: its binary, the checkpoint and the data files it opens."""
    folder = root / "llmc"
    data = folder / "dev" / "data" / "tinyshakespeare"
    data.mkdir(parents=True)
    for name in ("tiny_shakespeare_train.bin", "tiny_shakespeare_val.bin"):
        (data / name).write_bytes(stream.read_bytes())
    write_llmc_checkpoint(folder / "gpt2_124M.bin", rng)
    subprocess.run(
        ["gcc", *LLMC_FLAGS, "-I", str(llmc), str(llmc / "train_gpt2.c"), "-lm", "-o", str(folder / "train_gpt2")],
        check=True,
    )
    return folder


def llmc_rate(folder: Path, threads: int) -> float:
    """Median tokens/s of train_gpt2's steps 1 to 40 (its own per-step time)."""
    env = {"OMP_NUM_THREADS": str(threads), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(["./train_gpt2"], cwd=folder, env=env, capture_output=True, text=True, check=True).stdout
    ms = [float(m[2]) for m in LLMC_STEP.finditer(out) if int(m[1]) >= 1]
    if not ms:
        raise SystemExit(f"train_llmc: no step line in llm.c's output:\n{out[-2000:]}")
    return BATCH * SEQ / (statistics.median(ms) / 1000.0)


def exactc_rate(root: Path, stream: Path, threads: int, steps: int) -> float:
    """Median tokens/s of `exactc train --backend c`'s steps after the first."""
    sets = [a for field, value in {**SHAPE, "tokens": SEQ}.items() for a in ("--set", f"{field}={value}")]
    command = [
        sys.executable,
        "-m",
        "exactc",
        "train",
        "gpt",
        *sets,
        "--data",
        str(stream),
        "--steps",
        str(steps),
        "--batch",
        str(BATCH),
        "--seq",
        str(SEQ),
        "--backend",
        "c",
        "--cc",
        "gcc",
        "--threads",
        str(threads),
        "-o",
        str(root / f"exactc-{threads}"),
    ]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    rates = [float(m[2]) for m in EXACTC_STEP.finditer(out) if int(m[1]) >= 2]
    if not rates:
        raise SystemExit(f"train_llmc: no step line in exactc train's output:\n{out[-2000:]}")
    return statistics.median(rates)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llmc", type=Path, required=True, help="a checkout of llm.c (its train_gpt2.c)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default 1 2)")
    parser.add_argument("--steps", type=int, default=6, help="exactc's steps per run (default 6)")
    args = parser.parse_args(argv)
    if not (args.llmc / "train_gpt2.c").is_file():
        parser.error(f"--llmc {args.llmc}: no train_gpt2.c there (give a checkout of llm.c)")
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="exactc-llmc-") as tmp:
        root = Path(tmp)
        stream = root / "tokens.bin"
        write_tokens(stream, rng.integers(0, SHAPE["vocab"], BATCH * SEQ * 60 + 1))
        folder = llmc_folder(root, args.llmc, stream, rng)
        print(f"# {cpu()}; B = {BATCH}, T = {SEQ}, {SHAPE}, f32")
        print("| threads | exactc C (tokens/s) | llm.c (tokens/s) | ratio (exactc's time over llm.c's) |")
        print("|---|---|---|---|")
        for threads in args.threads:
            ours = exactc_rate(root, stream, threads, args.steps)
            theirs = llmc_rate(folder, threads)
            print(f"| {threads} | {ours:.0f} | {theirs:.0f} | x{theirs / ours:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
