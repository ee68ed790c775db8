"""`make bench`: exactc against PyTorch, side by side in one run, at 1 and 2 threads.

Rows (each: exactc's best time over PyTorch's; above 1, exactc is slower):
- the GPT-2-like forward (vocabulary 4096, dim 384, 6 layers, 6 heads, MLP 1536, 256
  tokens, f32, `--plan auto`), exported and built with the Makefile's defaults by gcc and
  by clang, against transformers' GPT2LMHeadModel (eager) with the same weights;
- the GPT-2-like forward in the fused realization (`--contract fma`: the products
  accumulated with fma, docs/semantics.md section 18), the row beside the default's;
- the Llama-like forward (the same width and depth, 2 key/value heads, SwiGLU MLP 1024),
  likewise, against transformers' LlamaForCausalLM, and in the fused realization beside it;
- all-MiniLM-L6-v2 on a mixed-length batch of 24 sentences (tests/minilm_sentences.py),
  `exactc embed`'s path against BertModel with mean pooling and normalization, in
  sentences per second, in each realization;
- one loss_grad of the GPT-2-like model (the forward, the mean cross-entropy and the
  backward of 4 x 256 tokens, `--plan auto`), in tokens per second, against
  GPT2LMHeadModel's forward, cross_entropy and loss.backward() on the same weights;
- the f32 linear 256x384 @ 384x1536 (the benchmark's layout, m:8 by n:16, and its narrow m:4 by
  n:16 as --plan auto gives them; the fused linear's narrow one m:6 by n:16;
  bench/linear_speed.py) against torch.matmul, in each realization;
- generation: the exported llama decode program's whole loop (`model generate`, greedy,
  200 tokens after a one-token prompt) at the stories15M and stories110M shapes, with f32,
  q8 and q4 weights, q4k (llama.cpp's Q4_K_M file, read by exactc as f32) and f32 in the
  fused realization, in tokens per second, against LlamaForCausalLM.generate with the
  same weights (f32; torch's dynamic int8 for q8) (bench/programs_speed.py, GenerateBench),
  and against llama.cpp at the same weight type (F32, Q8_0, Q4_0, Q4_K_M);
- prompt processing: a 128-token prompt's prefill at both shapes and the four weight
  types, exactc's exported `prefill` against llama.cpp's Llama.eval, both from one GGUF
  file (PrefillBench).

The llama.cpp rows skip with the reason where llama-cpp-python is not installed, and
stories15M's q4k rows where exactc refuses llama.cpp's file (its rows of 288 values are no
whole super-blocks of 256: llama.cpp's quantizer stores those tensors as Q5_0).

A benchmark, not a test of speed: it asserts bits (and agreement with PyTorch), never
times. bench/conftest.py prints the machine first and `bench: <rows> rows, worst ratio
<r>` last; pytest-benchmark keeps the JSON (--benchmark-autosave).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from exactc.exporter.checkpoints import CheckpointError
from exactc.exporter.primitives import CONTRACT_FMA, CONTRACT_OFF
from exactc.runtime.toolchain import have_compiler
from exactc.verify.compare import bit_equal_mask

from linear_speed import Built, gflops, lanes_layout
from programs_speed import (FROM_GGUF, GENERATED, GGUF_TYPES, PROMPT, STORIES, WEIGHTS, DecoderBench, GenerateBench,
                            GradBench, LlamaCppGenerate, MiniLMBench, PrefillBench, SideBySide, best_of,
                            generate_seconds, llama_cpp_missing, llama_model, load_average, torch_threads,
                            write_gguf)

COMPILERS = [cc for cc in ("gcc", "clang") if have_compiler(cc)]
THREADS = [1, 2]


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    return DecoderBench("gpt", tmp_path_factory.mktemp("gpt"), COMPILERS)


@pytest.fixture(scope="module")
def gpt_fma(tmp_path_factory):
    return DecoderBench("gpt", tmp_path_factory.mktemp("gpt-fma"), COMPILERS, contract=CONTRACT_FMA)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return DecoderBench("llama", tmp_path_factory.mktemp("llama"), COMPILERS)


@pytest.fixture(scope="module")
def llama_fma(tmp_path_factory):
    return DecoderBench("llama", tmp_path_factory.mktemp("llama-fma"), COMPILERS, contract=CONTRACT_FMA)


@pytest.fixture(scope="module")
def grad(tmp_path_factory):
    return GradBench(tmp_path_factory.mktemp("grad"), COMPILERS)


@pytest.fixture(scope="module")
def minilm():
    return MiniLMBench()


@pytest.fixture(scope="module")
def minilm_fma():
    return MiniLMBench(contract=CONTRACT_FMA)


ROUNDS = 5  # side-by-side rounds per row; pytest-benchmark times each round (both sides)
GRAD_ROUNDS = 3  # a loss_grad row's round is one step on each side (seconds at one thread)
GENERATE_ROUNDS = 2  # a generation row's round is a 200-token run on each side (seconds at 110M)


def run_rounds(benchmark, result: SideBySide) -> SideBySide:
    benchmark.pedantic(result.round, rounds=ROUNDS, iterations=1)
    return result


def record(benchmark, board, name: str, result: SideBySide, flags: str, unit: str = "", rate=None,
           peer: str = "torch") -> None:
    """One row: into the JSON (extra_info) and the scoreboard (bench/conftest.py); `peer`
    names the other side in the line (the JSON keeps its time as torch_s for every peer)."""
    ours, theirs = min(result.ours), min(result.theirs)
    benchmark.extra_info.update({"exactc_s": ours, "torch_s": theirs, "ratio": result.ratio,
                                 "exactc_rounds_s": result.ours, "torch_rounds_s": result.theirs,
                                 "flags": flags, "load_average": load_average()})
    shown = (f"{rate(ours):7.1f} against {rate(theirs):7.1f} {unit}" if rate else
             f"{ours * 1e3:7.1f} against {theirs * 1e3:7.1f} ms")
    board.add(name, result.ratio, f"{name:<24} {shown:<40} ratio x{result.ratio:5.2f}  "
                                  f"(exactc {result.spread(result.ours)}; {peer} {result.spread(result.theirs)})",
              seconds=ours)


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("cc", COMPILERS)
def test_gpt_forward(benchmark, scoreboard, gpt, cc, threads):
    result = run_rounds(benchmark, gpt.side_by_side(cc, threads))
    record(benchmark, scoreboard, f"gpt forward {cc} {threads}t", result, f"{cc} {gpt.flags}")


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("cc", COMPILERS)
def test_gpt_forward_fma(benchmark, scoreboard, gpt_fma, cc, threads):
    result = run_rounds(benchmark, gpt_fma.side_by_side(cc, threads))
    record(benchmark, scoreboard, f"gpt forward fma {cc} {threads}t", result, f"{cc} {gpt_fma.flags}")


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("cc", COMPILERS)
def test_llama_forward(benchmark, scoreboard, llama, cc, threads):
    result = run_rounds(benchmark, llama.side_by_side(cc, threads))
    record(benchmark, scoreboard, f"llama forward {cc} {threads}t", result, f"{cc} {llama.flags}")


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("cc", COMPILERS)
def test_llama_forward_fma(benchmark, scoreboard, llama_fma, cc, threads):
    result = run_rounds(benchmark, llama_fma.side_by_side(cc, threads))
    record(benchmark, scoreboard, f"llama forward fma {cc} {threads}t", result, f"{cc} {llama_fma.flags}")


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("cc", COMPILERS)
def test_gpt_loss_grad(benchmark, scoreboard, grad, cc, threads):
    """Tokens per second of one loss_grad (forward and backward, 4 x 256 tokens) against
    PyTorch's forward, cross_entropy and loss.backward(); a round is one step on each side."""
    result = grad.side_by_side(cc, threads)
    benchmark.pedantic(result.round, rounds=GRAD_ROUNDS, iterations=1)
    record(benchmark, scoreboard, f"gpt loss_grad {cc} {threads}t", result, f"{cc} {grad.flags}", "tokens/s",
           rate=lambda s: grad.tokens / s)


@pytest.mark.parametrize("threads", THREADS)
def test_minilm_embed(benchmark, scoreboard, minilm, threads):
    result = run_rounds(benchmark, minilm.side_by_side(threads))
    count = len(minilm.sentences)
    record(benchmark, scoreboard, f"minilm embed {threads}t", result, f"cc {minilm.flags}", "sentences/s",
           rate=lambda s: count / s)


@pytest.mark.parametrize("threads", THREADS)
def test_minilm_embed_fma(benchmark, scoreboard, minilm_fma, threads):
    result = run_rounds(benchmark, minilm_fma.side_by_side(threads))
    count = len(minilm_fma.sentences)
    record(benchmark, scoreboard, f"minilm embed fma {threads}t", result, f"cc {minilm_fma.flags}", "sentences/s",
           rate=lambda s: count / s)


@pytest.fixture(scope="module")
def torch_operands():
    import torch

    built = Built(lanes_layout(8), "gcc")
    return torch.from_numpy(built.x), torch.from_numpy(built.w).T  # (256, 384) @ (384, 1536)


# the narrow layout --plan auto gives each realization's linear (autoplan.NARROW_ROWS, NARROW_FMA_ROWS)
NARROW_LANES = {CONTRACT_OFF: 4, CONTRACT_FMA: 6}


@pytest.mark.parametrize("contract", [CONTRACT_OFF, CONTRACT_FMA])
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("cc", COMPILERS)
def test_linear(benchmark, scoreboard, torch_operands, cc, threads, contract):
    import torch

    built = Built(lanes_layout(8), cc, narrow=lanes_layout(NARROW_LANES[contract]), contract=contract)
    built.threads(threads)
    torch_threads(threads)
    x, wt = torch_operands
    built.run()
    first = built.y.copy()
    assert np.abs(first - torch.matmul(x, wt).numpy()).max() < 1e-3
    result = run_rounds(benchmark, SideBySide(lambda: built.seconds(repeats=10, inner=1),
                                            lambda: best_of(lambda: torch.matmul(x, wt), 10)))
    assert bit_equal_mask(first, built.y).all(), "two runs gave different bits"
    fused = " fma" if contract == CONTRACT_FMA else ""
    record(benchmark, scoreboard, f"linear{fused} {cc} {threads}t", result, built.options.describe(), "GFLOP/s",
           rate=gflops)


# ---- generation: the exported decode program's whole loop ----------------------------------------


@functools.lru_cache(maxsize=None)
def stories_model(name: str):
    return llama_model(STORIES[name])


@pytest.fixture(scope="session")
def stories_gguf(tmp_path_factory):
    """The GGUF file of a stories shape's weights in a weight type, written once per run
    (programs_speed.write_gguf); the reason instead where llama.cpp is needed and missing."""
    folder = tmp_path_factory.mktemp("gguf")

    @functools.lru_cache(maxsize=None)
    def written(name: str, weights: str):
        missing = llama_cpp_missing()
        if missing and weights in FROM_GGUF:
            return None, missing
        return write_gguf(stories_model(name), STORIES[name], folder / f"{name}-{weights}.gguf", weights), None

    def get(name: str, weights: str):
        path, missing = written(name, weights)
        if missing:
            pytest.skip(missing)
        return path

    return get


# the generation rows: every weight type in the default realization, f32 in the fused one
GENERATIONS = [(n, w, CONTRACT_OFF) for n in sorted(STORIES) for w in WEIGHTS] + \
              [(n, "f32", CONTRACT_FMA) for n in sorted(STORIES)]


@pytest.fixture(scope="module", params=GENERATIONS, ids="-".join)
def stories(request, tmp_path_factory, stories_gguf):
    name, weights, contract = request.param
    work = tmp_path_factory.mktemp(f"{name}-{weights}-{contract}")
    gguf = stories_gguf(name, weights) if weights in FROM_GGUF else None
    try:
        bench = GenerateBench(name, weights, work, "gcc", stories_model(name), gguf=gguf, contract=contract)
    except CheckpointError as error:  # stories15M's rows of 288: no whole super-blocks of 256
        pytest.skip(f"exactc does not read llama.cpp's {GGUF_TYPES[weights]} file of {name}: {error}")
    label = weights + (" fma" if contract == CONTRACT_FMA else "")
    return name, weights, label, bench


@pytest.mark.parametrize("threads", THREADS)
def test_llama_generate(benchmark, scoreboard, stories, threads):
    """Tokens per second of greedy generation, 200 tokens (programs_speed.GenerateBench);
    the program's tokens and probabilities the same bytes on 1 and 2 threads."""
    name, weights, label, bench = stories
    if threads == 2:
        assert bench.tokens(2) == bench.tokens(1), f"{name} {label}: 2 threads drew other tokens than 1"
    result = bench.side_by_side(threads)
    benchmark.pedantic(result.round, rounds=GENERATE_ROUNDS, iterations=1)
    record(benchmark, scoreboard, f"{name} {label} generate {threads}t", result,
           f"gcc {bench.flags}; against {bench.peer_kind}", "tokens/s", rate=lambda s: GENERATED / s)


@pytest.mark.parametrize("threads", THREADS)
def test_llama_generate_against_llama_cpp(benchmark, scoreboard, stories, stories_gguf, threads):
    """The same generation against llama.cpp at the same weight type (F32, Q8_0, Q4_0,
    Q4_K_M), its GGUF file written from the same weights (q4k's: the file exactc's program
    read); skipped, with the reason, where llama.cpp is not installed."""
    missing = llama_cpp_missing()
    if missing:
        pytest.skip(missing)
    name, weights, label, bench = stories
    peer = LlamaCppGenerate(stories_gguf(name, weights), STORIES[name], threads)
    result = SideBySide(lambda: generate_seconds(bench.program, bench.inputs, bench.out, threads, GENERATED),
                        lambda: best_of(peer.generate, 1))
    benchmark.pedantic(result.round, rounds=GENERATE_ROUNDS, iterations=1)
    record(benchmark, scoreboard, f"{name} {label} generate {threads}t llama.cpp", result,
           f"gcc {bench.flags}; against llama.cpp {GGUF_TYPES[weights] or 'F32'}", "tokens/s",
           rate=lambda s: GENERATED / s, peer="llama.cpp")


# ---- prompt processing: a 128-token prompt's prefill against llama.cpp's ---------------------------


@pytest.fixture(scope="module", params=[(n, w) for n in sorted(STORIES) for w in WEIGHTS], ids="-".join)
def prefill(request, tmp_path_factory, stories_gguf):
    missing = llama_cpp_missing()
    if missing:
        pytest.skip(missing)
    name, weights = request.param
    path = stories_gguf(name, weights)
    try:
        bench = PrefillBench(path, STORIES[name], tmp_path_factory.mktemp(f"prefill-{name}-{weights}"), "gcc", weights)
    except CheckpointError as error:
        pytest.skip(f"exactc does not read llama.cpp's {GGUF_TYPES[weights]} file of {name}: {error}")
    return name, weights, bench


@pytest.mark.parametrize("threads", THREADS)
def test_llama_prefill_against_llama_cpp(benchmark, scoreboard, prefill, threads):
    """Tokens per second of a 128-token prompt's prefill (programs_speed.PrefillBench),
    exactc's prefill program against llama.cpp's Llama.eval, from one GGUF file."""
    name, weights, bench = prefill
    result = bench.side_by_side(threads)
    benchmark.pedantic(result.round, rounds=ROUNDS, iterations=1)
    record(benchmark, scoreboard, f"{name} {weights} prefill {threads}t llama.cpp", result,
           f"gcc {bench.flags}; against llama.cpp {GGUF_TYPES[weights] or 'F32'}", "tokens/s",
           rate=lambda s: PROMPT / s, peer="llama.cpp")
