"""Sentence embeddings with the packaged all-MiniLM-L6-v2, in process and as processes,
against transformers in process: what exactc's process model costs.

Rows, at 1 and 2 threads (OMP_NUM_THREADS for exactc, torch.set_num_threads for torch):
- latency of one short sentence (SHORT):
  - `in process`: exactc.SentenceEmbedder(...).encode, the program cached and loaded;
  - `subprocess`: the exported program run as a process on .npy files (embed.run_program
    given the built program's run_or_fail, the path `exactc embed` took before the library);
  - `transformers`: BertModel (eager, f32) already loaded, mean pooling and the l2 norm, as
    sentence-transformers' `encode` computes it (sentence-transformers needs scipy and
    scikit-learn, which this environment does not have: transformers is the peer).
- throughput of tests/minilm_sentences.py's 24 mixed sentences (1 to about 190 tokens):
  - `in process`: SentenceEmbedder.encode of the batch;
  - `exactc embed`: the whole command, `python -m exactc embed -o FILE.npy ...`, from the
    process's start to its end (the program cached);
  - `transformers`: the batch padded to its longest sentence, one forward, pooled.

Every exactc row is checked for the in-process bits, transformers' for 1e-5 of them. The
rounds alternate the sides, so that all see the same machine load; each figure is the
median of REPEATS rounds, the best beside it.

Usage: .venv/bin/python bench/embed_speed.py
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from minilm_sentences import MIXED_BATCH  # noqa: E402  (tests/minilm_sentences.py)

import exactc  # noqa: E402
from exactc import embed  # noqa: E402
from programs_speed import cpu_field  # noqa: E402

SHORT = "Where is the nearest train station?"
LATENCY_CALLS = 10  # one-sentence calls per round and side: the round's figure is their median
REPEATS = 5
THREADS = (1, 2)


def omp_threads(count: int) -> None:
    """The OpenMP threads of the library's calls from this thread (libgomp read
    OMP_NUM_THREADS once, when it loaded) and of `exactc embed`'s processes."""
    os.environ["OMP_NUM_THREADS"] = str(count)
    ctypes.CDLL("libgomp.so.1").omp_set_num_threads(count)


class Transformers:
    """BertModel on the folder's weights, mean-pooled and normalized."""

    def __init__(self, folder: Path, length: int):
        import torch
        import transformers

        self.folder, self.length = folder, length
        self.model = transformers.BertModel.from_pretrained(
            str(folder), attn_implementation="eager", dtype=torch.float32
        ).eval()

    def encode(self, sentences: list[str]) -> np.ndarray:
        import torch

        batch = embed.tokenize_padded(self.folder, sentences, self.length)
        with torch.inference_mode():
            named = {k: torch.from_numpy(v.astype(np.int64)) for k, v in batch.items()}
            hidden = self.model(**named).last_hidden_state
            mask = named["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()


def by_process(embedder: exactc.SentenceEmbedder) -> Callable[[list[str]], np.ndarray]:
    """The rows from the embedder's built program run as a process on .npy files."""
    from exactc.exporter import checkpoints

    ckpt = checkpoints.load(embedder.folder, "bert")
    built = embed.cached_program(ckpt, "f32", embedder.max_length, plan="auto", progress=lambda m: None)
    runner = types.SimpleNamespace(run_or_fail=built.run_or_fail)  # not a programs.Program: no library
    return lambda sentences: embed.run_program(runner, embed.tokenize(embedder.folder, sentences, embedder.max_length))


def command(sentences: list[str]) -> np.ndarray:
    """The rows of the whole `exactc embed` command, run as its own process."""
    with tempfile.TemporaryDirectory(prefix="embed-speed-") as tmp:
        out = Path(tmp) / "rows.npy"
        done = subprocess.run(
            [sys.executable, "-m", "exactc", "embed", "-o", str(out), *sentences], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return np.load(out)


def seconds(run: Callable[[], np.ndarray], want: np.ndarray, exact: bool = True) -> float:
    """One call's wall time, its rows checked against `want`."""
    start = time.perf_counter()
    rows = run()
    took = time.perf_counter() - start
    if exact:
        assert rows.tobytes() == want.tobytes(), "not the in-process bits"
    else:
        assert np.abs(rows - want).max() < 1e-5, "transformers' rows are not exactc's"
    return took


def latency(run: Callable[[], np.ndarray], want: np.ndarray, exact: bool = True) -> float:
    return statistics.median(seconds(run, want, exact) for _ in range(LATENCY_CALLS))


def main() -> None:
    import torch

    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    embedder = exactc.SentenceEmbedder(plan="auto")
    subprocess_rows = by_process(embedder)
    peer = Transformers(embedder.folder, embedder.max_length)
    short = embedder.encode([SHORT])
    batch = embedder.encode(MIXED_BATCH)
    sides: dict[tuple[str, str, int], Callable[[], float]] = {}
    for n in THREADS:
        sides[("latency", "in process", n)] = lambda: latency(lambda: embedder.encode([SHORT]), short)
        sides[("latency", "subprocess", n)] = lambda: latency(lambda: subprocess_rows([SHORT]), short)
        sides[("latency", "transformers", n)] = lambda: latency(lambda: peer.encode([SHORT]), short, False)
        sides[("batch", "in process", n)] = lambda: seconds(lambda: embedder.encode(MIXED_BATCH), batch)
        sides[("batch", "exactc embed", n)] = lambda: seconds(lambda: command(MIXED_BATCH), batch)
        sides[("batch", "transformers", n)] = lambda: seconds(lambda: peer.encode(MIXED_BATCH), batch, False)
    times: dict[tuple[str, str, int], list[float]] = {key: [] for key in sides}
    loads = []
    for _ in range(REPEATS):
        for key, measure in sides.items():
            omp_threads(key[2])
            torch.set_num_threads(key[2])
            times[key].append(measure())
        loads.append(os.getloadavg()[0])
    report(times, loads)


def report(times: dict[tuple[str, str, int], list[float]], loads: list[float]) -> None:
    print(
        f"all-MiniLM-L6-v2 f32 --plan auto, median (best) of {REPEATS} rounds; {cpu_field('model name')}, "
        f"cpu family {cpu_field('cpu family')}, model {cpu_field('model')}; load average "
        f"{min(loads):.1f} to {max(loads):.1f}"
    )
    print(f"\none short sentence ({SHORT!r}), ms, the median of {LATENCY_CALLS} calls a round")
    print("| threads | in process | subprocess | transformers | in process / transformers |")
    print("|---|---|---|---|---|")
    for n in THREADS:
        ms = {
            side: [1e3 * t for t in times[("latency", side, n)]]
            for side in ("in process", "subprocess", "transformers")
        }
        cells = " | ".join(f"{statistics.median(v):.1f} ({min(v):.1f})" for v in ms.values())
        ratio = statistics.median(ms["in process"]) / statistics.median(ms["transformers"])
        print(f"| {n} | {cells} | x{ratio:.2f} |")
    print(f"\n{len(MIXED_BATCH)} mixed sentences, sentences/s")
    print("| threads | in process | exactc embed (the command) | transformers | command / transformers |")
    print("|---|---|---|---|---|")
    for n in THREADS:
        rates = {
            side: [len(MIXED_BATCH) / t for t in times[("batch", side, n)]]
            for side in ("in process", "exactc embed", "transformers")
        }
        cells = " | ".join(f"{statistics.median(v):.1f} ({max(v):.1f})" for v in rates.values())
        ratio = statistics.median(rates["exactc embed"]) / statistics.median(rates["transformers"])
        print(f"| {n} | {cells} | x{ratio:.2f} |")


if __name__ == "__main__":
    main()
