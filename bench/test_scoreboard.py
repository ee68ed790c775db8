"""`make bench`: exactc against PyTorch, side by side in one run, at 1 and 2 threads.

Rows (each: exactc's best time over PyTorch's; above 1, exactc is slower):
- the GPT-2-like forward (vocabulary 4096, dim 384, 6 layers, 6 heads, MLP 1536, 256
  tokens, f32, `--plan auto`), exported and built with the Makefile's defaults by gcc and
  by clang, against transformers' GPT2LMHeadModel (eager) with the same weights;
- the Llama-like forward (the same width and depth, 2 key/value heads, SwiGLU MLP 1024),
  likewise, against transformers' LlamaForCausalLM;
- all-MiniLM-L6-v2 on a mixed-length batch of 24 sentences (tests/minilm_sentences.py),
  `exactc embed`'s path against BertModel with mean pooling and normalization, in
  sentences per second;
- the f32 linear 256x384 @ 384x1536 (the benchmark's layout, bench/linear_speed.py)
  against torch.matmul;
- a generation step: llama `decode` at the stories15M and stories110M shapes, f32, at
  128 cached positions, in tokens per second, against LlamaForCausalLM's step with its
  DynamicCache at the same position (bench/programs_speed.py, DecodeBench).

A benchmark, not a test of speed: it asserts bits (and agreement with PyTorch), never
times. bench/conftest.py prints the machine first and `bench: <rows> rows, worst ratio
<r>` last; pytest-benchmark keeps the JSON (--benchmark-autosave).
"""

from __future__ import annotations

import numpy as np
import pytest

from exactc.verify.build import have_compiler
from exactc.verify.compare import bit_equal_mask

from linear_speed import Built, gflops, lanes_layout
from programs_speed import (STORIES, DecodeBench, DecoderBench, MiniLMBench, SideBySide, best_of, load_average,
                            torch_threads)

COMPILERS = [cc for cc in ("gcc", "clang") if have_compiler(cc)]
THREADS = [1, 2]


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    return DecoderBench("gpt", tmp_path_factory.mktemp("gpt"), COMPILERS)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return DecoderBench("llama", tmp_path_factory.mktemp("llama"), COMPILERS)


@pytest.fixture(scope="module")
def minilm():
    return MiniLMBench()


ROUNDS = 5  # side-by-side rounds per row; pytest-benchmark times each round (both sides)


def run_rounds(benchmark, result: SideBySide) -> SideBySide:
    benchmark.pedantic(result.round, rounds=ROUNDS, iterations=1)
    return result


def record(benchmark, board, name: str, result: SideBySide, flags: str, unit: str = "", rate=None) -> None:
    """One row: into the JSON (extra_info) and the scoreboard (bench/conftest.py)."""
    ours, theirs = min(result.ours), min(result.theirs)
    benchmark.extra_info.update({"exactc_s": ours, "torch_s": theirs, "ratio": result.ratio,
                                 "exactc_rounds_s": result.ours, "torch_rounds_s": result.theirs,
                                 "flags": flags, "load_average": load_average()})
    shown = (f"{rate(ours):7.1f} against {rate(theirs):7.1f} {unit}" if rate else
             f"{ours * 1e3:7.1f} against {theirs * 1e3:7.1f} ms")
    board.add(name, result.ratio, f"{name:<24} {shown:<40} ratio x{result.ratio:5.2f}  "
                                  f"(exactc {result.spread(result.ours)}; torch {result.spread(result.theirs)})")


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("cc", COMPILERS)
def test_gpt_forward(benchmark, scoreboard, gpt, cc, threads):
    result = run_rounds(benchmark, gpt.side_by_side(cc, threads))
    record(benchmark, scoreboard, f"gpt forward {cc} {threads}t", result, f"{cc} {gpt.flags}")


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("cc", COMPILERS)
def test_llama_forward(benchmark, scoreboard, llama, cc, threads):
    result = run_rounds(benchmark, llama.side_by_side(cc, threads))
    record(benchmark, scoreboard, f"llama forward {cc} {threads}t", result, f"{cc} {llama.flags}")


@pytest.mark.parametrize("threads", THREADS)
def test_minilm_embed(benchmark, scoreboard, minilm, threads):
    result = run_rounds(benchmark, minilm.side_by_side(threads))
    count = len(minilm.sentences)
    record(benchmark, scoreboard, f"minilm embed {threads}t", result, f"cc {minilm.flags}", "sentences/s",
           rate=lambda s: count / s)


@pytest.fixture(scope="module")
def torch_operands():
    import torch

    built = Built(lanes_layout(8), "gcc")
    return torch.from_numpy(built.x), torch.from_numpy(built.w).T  # (256, 384) @ (384, 1536)


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("cc", COMPILERS)
def test_linear(benchmark, scoreboard, torch_operands, cc, threads):
    import torch

    built = Built(lanes_layout(8), cc)
    built.threads(threads)
    torch_threads(threads)
    x, wt = torch_operands
    built.run()
    first = built.y.copy()
    assert np.abs(first - torch.matmul(x, wt).numpy()).max() < 1e-3
    result = run_rounds(benchmark, SideBySide(lambda: built.seconds(repeats=10, inner=1),
                                            lambda: best_of(lambda: torch.matmul(x, wt), 10)))
    assert bit_equal_mask(first, built.y).all(), "two runs gave different bits"
    record(benchmark, scoreboard, f"linear {cc} {threads}t", result, built.options.describe(), "GFLOP/s",
           rate=gflops)


# ---- generation: one decode step with a key/value cache ------------------------------------------


@pytest.fixture(scope="module", params=sorted(STORIES))
def stories(request, tmp_path_factory):
    return request.param, DecodeBench(request.param, tmp_path_factory.mktemp(request.param), "gcc")


@pytest.mark.parametrize("threads", THREADS)
def test_llama_decode_step(benchmark, scoreboard, stories, threads):
    """Tokens per second of a decode step at 128 cached positions (programs_speed.DecodeBench)."""
    name, bench = stories
    result = run_rounds(benchmark, bench.side_by_side(threads))
    record(benchmark, scoreboard, f"{name} decode gcc {threads}t", result, f"gcc {bench.flags}", "tokens/s",
           rate=lambda s: 1.0 / s)
