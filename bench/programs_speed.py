"""Whole programs against PyTorch, side by side (`make bench`, bench/test_scoreboard.py):
the GPT-2-like forward (exported C against transformers' GPT2LMHeadModel with the same
weights) and all-MiniLM-L6-v2 on a mixed-length batch (`exactc embed`'s path against
transformers' BertModel with mean pooling and normalization).

Every figure is the best of several rounds, each round timing exactc, then PyTorch, so
both sides see the same machine load; the spread (the median beside the best) says how
much the load moved them. Threads: OMP_NUM_THREADS for the C program,
torch.set_num_threads for PyTorch.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from exactc import embed  # noqa: E402
from exactc.exporter.kernels import tuned  # noqa: E402
from exactc.exporter import checkpoints, export  # noqa: E402
from exactc.exporter.kernels.autoplan import AutoPlan  # noqa: E402
from exactc.exporter.primitives import CONTRACT_OFF  # noqa: E402
from exactc.runtime import STRICT_FLAGS  # noqa: E402
from exactc import programs  # noqa: E402
from exactc.runtime.toolchain import compiler_version  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from minilm_sentences import MIXED_BATCH  # noqa: E402  (tests/minilm_sentences.py)

# The GPT-2-like model of docs/design.md's figures, and a Llama-like model of the same width
# and depth (grouped-query attention, 2 key/value heads; SwiGLU's 1024 is 2/3 of 1536).
GPT = dict(vocab=4096, dim=384, layers=6, heads=6, mlp=1536, tokens=256)
LLAMA = dict(vocab=4096, dim=384, layers=6, heads=6, kv_heads=2, mlp=1024, tokens=256)


# ---- the machine ------------------------------------------------------------------------------


def cpu_field(name: str) -> str:
    """A field of the first processor in /proc/cpuinfo ('?' where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == name:
                return value.strip()
    except OSError:
        pass
    return "?"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine_lines() -> list[str]:
    """What every timing needs beside it: the CPU, the load, the toolchain."""
    import torch

    compilers = "; ".join(compiler_version(cc) for cc in ("gcc", "clang") if shutil.which(cc))
    return [
        f"cpu: {cpu_field('model name')}, cpu family {cpu_field('cpu family')}, model {cpu_field('model')}, "
        f"{os.cpu_count()} cores",
        f"load average at start: {load_average()}",
        f"compilers: {compilers}",
        f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()})",
        tune_line(),
    ]


def tune_line() -> str:
    """Whether `--plan auto` follows a tune table here (exactc plan --tune, docs/plans.md),
    for each compiler's build: the programs below are exported with those layouts."""
    path = tuned.table_path()
    counts = {cc: len(tuned.tuned_layouts(cc)) for cc in ("gcc", "clang") if shutil.which(cc)}
    if not any(counts.values()):
        return f"tune table: none for these builds ({path or 'off'}): --plan auto is autoplan's own choice"
    per_build = ", ".join(f"{cc} {n}" for cc, n in counts.items())
    return f"tune table: {path}, tuned layouts per build: {per_build}"


# ---- timing side by side ------------------------------------------------------------------------


class SideBySide:
    """Rounds that each time exactc, then PyTorch (`round`, which pytest-benchmark runs);
    the best and the median of each side."""

    def __init__(self, ours: Callable[[], float], theirs: Callable[[], float]):
        self.timers = (ours, theirs)
        self.ours: list[float] = []
        self.theirs: list[float] = []

    def round(self) -> None:
        self.ours.append(self.timers[0]())
        self.theirs.append(self.timers[1]())

    @property
    def ratio(self) -> float:
        """exactc's best time over PyTorch's: above 1, exactc is slower."""
        return min(self.ours) / min(self.theirs)

    def spread(self, times: list[float]) -> str:
        return f"best {min(times) * 1e3:.1f} ms, median {statistics.median(times) * 1e3:.1f} ms"


def best_of(fn: Callable[[], object], repeats: int) -> float:
    """The best wall time of `repeats` calls of fn."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def torch_threads(count: int) -> None:
    import torch

    torch.set_num_threads(count)


# ---- exported programs ----------------------------------------------------------------------


def makefile_cflags(root: Path) -> str:
    """The CFLAGS default of an exported Makefile, as a user running `make` gets it."""
    text = (root / "Makefile").read_text()
    cflags = re.search(r"^CFLAGS\s*\??=\s*(.*)$", text, re.M).group(1)
    return f"{' '.join(STRICT_FLAGS)} {cflags}"  # the Makefile's STRICT line is filled from it


def build_exported(root: Path, cc: str) -> Path:
    """`make CC=cc` with the Makefile's defaults (programs.py, the one build);
    then the conformance check (the bits)."""
    program = programs.make(root, programs.Build(cc=cc), refuse_warnings=True, cached=False)
    check = program.check()
    assert check.returncode == 0, f"{root}: conformance failed\n{check.stdout}{check.stderr}"
    return program.path


def program_seconds(program: Path, inputs: Path, out: Path, threads: int, repeat: int) -> float:
    """One process running the network `repeat` times: its time per run (EXACTC_REPEAT,
    timed around the runs only, the weights loaded before)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), EXACTC_REPEAT=str(repeat))
    done = subprocess.run([str(program), str(program.parent / "weights.safetensors"), str(inputs), str(out)],
                          env=env, capture_output=True, text=True, check=True)
    return float(re.search(r"([0-9.]+) s per run", done.stderr).group(1))


# ---- the decoders: the GPT-2-like and the Llama-like forward ------------------------------------


def randomized(model, wte: str):
    """`model` with every parameter drawn (seeded): gains near 1, biases near 0, matrices
    scaled by their fan-in (the embedding `wte` by 2)."""
    import torch

    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            if p.ndim == 1:
                p.copy_((1.0 if ("ln" in name or "norm" in name) else 0.0) + 0.1 * noise)
            else:
                p.copy_(noise / np.sqrt(p.shape[-1] if wte not in name else 4.0))
    return model.eval()


def gpt2_model():
    """transformers' GPT2LMHeadModel at GPT's shapes, every parameter drawn (seeded)."""
    import torch
    import transformers

    cfg = transformers.GPT2Config(vocab_size=GPT["vocab"], n_positions=GPT["tokens"], n_embd=GPT["dim"],
                                  n_layer=GPT["layers"], n_head=GPT["heads"], n_inner=GPT["mlp"],
                                  activation_function="gelu_new", tie_word_embeddings=True,
                                  attn_implementation="eager")
    torch.manual_seed(0)
    return randomized(transformers.GPT2LMHeadModel(cfg), "wte")


def llama_model(shape: dict = LLAMA):
    """transformers' LlamaForCausalLM at `shape` (LLAMA's, or a STORIES one), every
    parameter drawn (seeded)."""
    import torch
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=shape["vocab"], hidden_size=shape["dim"],
                                   intermediate_size=shape["mlp"], num_hidden_layers=shape["layers"],
                                   num_attention_heads=shape["heads"], num_key_value_heads=shape["kv_heads"],
                                   max_position_embeddings=shape["tokens"], tie_word_embeddings=False,
                                   attn_implementation="eager")
    torch.manual_seed(0)
    return randomized(transformers.LlamaForCausalLM(cfg), "embed_tokens")


class DecoderBench:
    """A decoder's forward over `tokens` tokens: one checkpoint, exported with `--plan
    auto` (and `--contract`, the products' realization) and built with the Makefile's
    defaults by each compiler, and the same weights in PyTorch (eager)."""

    def __init__(self, kind: str, work: Path, compilers: list[str], contract: str = CONTRACT_OFF):
        import torch

        shapes, make_model = {"gpt": (GPT, gpt2_model), "llama": (LLAMA, llama_model)}[kind]
        self.model = make_model()
        folder = work / f"{kind}-checkpoint"
        self.model.save_pretrained(folder, safe_serialization=True)
        ckpt = checkpoints.load(folder, kind)
        self.ids = np.random.default_rng(2).integers(0, shapes["vocab"], shapes["tokens"]).astype(np.int32)
        self.programs = {}
        for cc in compilers:
            # --plan auto as `exactc export` gives it for a build by cc: with that build's
            # tuned layouts where the tune table has them (tune_line says which)
            plan = AutoPlan(tuned=tuned.tuned_layouts(cc))
            prepared = export.prepare(kind, "forward", "f32", overrides={"tokens": shapes["tokens"]},
                                      checkpoint=ckpt, plan=plan, inputs={"input_ids": self.ids},
                                      contract=contract)
            root = export.write(prepared, work / f"{kind}-{cc}")
            self.flags = makefile_cflags(root)
            self.programs[cc] = build_exported(root, cc)
        self.out = work / f"{kind}-out"
        self.out.mkdir()
        self.torch_ids = torch.from_numpy(self.ids.astype(np.int64))[None]
        ours = prepared.expected["logits"]
        assert np.abs(ours - self.torch_logits()).max() < 1e-3, f"exactc's {kind} is not transformers'"

    def torch_logits(self) -> np.ndarray:
        import torch

        with torch.inference_mode():
            return self.model(input_ids=self.torch_ids).logits[0].numpy()

    def side_by_side(self, cc: str, threads: int, repeat: int = 3) -> SideBySide:
        torch_threads(threads)
        inputs = self.programs[cc].parent / "conformance" / "inputs"
        return SideBySide(lambda: program_seconds(self.programs[cc], inputs, self.out, threads, repeat),
                          lambda: best_of(self.torch_logits, repeat))


# ---- a training step's gradient: loss_grad -------------------------------------------------------

GRAD_BATCH = 4  # sequences of GPT["tokens"] tokens per loss_grad


class GradBench:
    """One loss_grad (the forward, the mean cross-entropy over every position, the backward)
    of the GPT-2-like model on a batch of GRAD_BATCH x 256 tokens: the exported `loss_grad`
    (`--plan auto`, the Makefile's defaults, the conformance check) against PyTorch eager on
    the same weights (GPT2LMHeadModel in eval mode, no dropout: cross_entropy, then
    loss.backward(), the gradients set to None before each step)."""

    def __init__(self, work: Path, compilers: list[str]):
        import torch

        self.model = gpt2_model()
        folder = work / "gpt-checkpoint"
        self.model.save_pretrained(folder, safe_serialization=True)
        ckpt = checkpoints.load(folder, "gpt")
        rng = np.random.default_rng(3)
        shape = (GRAD_BATCH, GPT["tokens"])
        self.inputs = {name: rng.integers(0, GPT["vocab"], shape).astype(np.int32) for name in ("tokens", "targets")}
        self.programs = {}
        for cc in compilers:
            plan = AutoPlan(tuned=tuned.tuned_layouts(cc))
            prepared = export.prepare("gpt", "loss_grad", "f32", overrides={"tokens": GPT["tokens"],
                                      "batch": GRAD_BATCH}, checkpoint=ckpt, plan=plan, inputs=self.inputs)
            root = export.write(prepared, work / f"grad-{cc}")
            self.flags = makefile_cflags(root)
            self.programs[cc] = build_exported(root, cc)
        self.out = work / "grad-out"
        self.out.mkdir()
        self.torch_inputs = {k: torch.from_numpy(v.astype(np.int64)) for k, v in self.inputs.items()}
        loss = float(prepared.expected["loss"])
        assert abs(loss - self.torch_step()) < 1e-4 * abs(loss), "exactc's loss is not transformers'"

    @property
    def tokens(self) -> int:
        return GRAD_BATCH * GPT["tokens"]

    def torch_step(self) -> float:
        import torch

        self.model.zero_grad(set_to_none=True)
        logits = self.model(input_ids=self.torch_inputs["tokens"]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, GPT["vocab"]),
                                                 self.torch_inputs["targets"].reshape(-1))
        loss.backward()
        return loss.item()

    def side_by_side(self, cc: str, threads: int) -> SideBySide:
        torch_threads(threads)
        inputs = self.programs[cc].parent / "conformance" / "inputs"
        return SideBySide(lambda: program_seconds(self.programs[cc], inputs, self.out, threads, 1),
                          lambda: best_of(self.torch_step, 1))


# ---- all-MiniLM-L6-v2 ------------------------------------------------------------------------------


class MiniLMBench:
    """`exactc embed`'s path (tokenize, the cached exported program run on each sentence
    at its own length, read back) against transformers' BertModel on the same batch,
    padded to its longest sentence as a batched framework runs it, pooled and normalized."""

    sentences = MIXED_BATCH

    def __init__(self, contract: str = CONTRACT_OFF):
        import torch
        import transformers

        self.contract = contract  # the products' realization of exactc's program
        self.folder = embed.default_checkpoint()
        self.ckpt = checkpoints.load(self.folder, "bert")
        self.length = embed.max_length(self.folder, self.ckpt.fields["positions"])
        program = embed.cached_program(self.ckpt, "f32", self.length, plan="auto", progress=lambda m: None,
                                       contract=contract)
        self.flags = makefile_cflags(program.root)
        self.model = transformers.BertModel.from_pretrained(str(self.folder), attn_implementation="eager",
                                                            dtype=torch.float32).eval()
        ours, theirs = self.exactc(), self.transformers()
        assert np.abs(ours - theirs).max() < 1e-5, "exactc's MiniLM is not transformers' MiniLM"

    def exactc(self) -> np.ndarray:
        return embed.embed(self.sentences, self.folder, plan="auto", progress=lambda m: None,
                           contract=self.contract)

    def transformers(self) -> np.ndarray:
        import torch

        batch = embed.tokenize_padded(self.folder, self.sentences, self.length)
        with torch.inference_mode():
            ids = torch.from_numpy(batch["input_ids"].astype(np.int64))
            mask = torch.from_numpy(batch["attention_mask"].astype(np.int64))
            types_ = torch.from_numpy(batch["token_type_ids"].astype(np.int64))
            hidden = self.model(input_ids=ids, attention_mask=mask, token_type_ids=types_).last_hidden_state
            m = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()

    def side_by_side(self, threads: int) -> SideBySide:
        torch_threads(threads)

        def ours() -> float:
            saved = os.environ.get("OMP_NUM_THREADS")
            os.environ["OMP_NUM_THREADS"] = str(threads)
            try:
                return best_of(self.exactc, 1)
            finally:
                if saved is None:
                    del os.environ["OMP_NUM_THREADS"]
                else:
                    os.environ["OMP_NUM_THREADS"] = saved

        return SideBySide(ours, lambda: best_of(self.transformers, 1))


# ---- generation at llama2.c's stories shapes ----------------------------------------------------

# The stories15M and stories110M shapes (llama2.c's TinyStories models), the context 256.
STORIES = {
    "stories15M": dict(vocab=32000, dim=288, layers=6, heads=6, kv_heads=6, mlp=768, tokens=256),
    "stories110M": dict(vocab=32000, dim=768, layers=12, heads=12, kv_heads=12, mlp=2048, tokens=256),
}

GENERATED = 200  # new tokens per run: the figures the peers are quoted at are 200+ token runs
# exactc's --weights (ggml's blocks of 32); q4k's program reads llama.cpp's own Q4_K file
# (llama_cpp_quantize) with --weights file: each linear weight in the file's format (q4_k,
# q6_k; a parameter whose layers mix formats, as Q4_K_M's ffn_down, is f32)
WEIGHTS = {"f32": None, "q8": ("q8", 32), "q4": ("q4", 32), "q4k": export.FILE_WEIGHTS}
FROM_GGUF = ("q4k",)  # the weight types exactc's program reads from the peer's GGUF file


def generate_seconds(program: Path, inputs: Path, out: Path, threads: int, count: int) -> float:
    """One `model generate` run (greedy, `count` new tokens after a one-token prompt): the
    seconds of its loop as the program times it (the weights loaded before)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    done = subprocess.run([str(program), "generate", str(program.parent / "weights.safetensors"), str(inputs),
                           str(out), "-n", str(count), "--temperature", "0"],
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"{program} generate exited with {done.returncode}: {done.stderr}"
    timed = re.search(r"prompt tokens in ([0-9.]+) s, (\d+) new in ([0-9.]+) s", done.stderr)
    assert int(timed.group(2)) == count, done.stderr
    return float(timed.group(1)) + float(timed.group(3))


class GenerateBench:
    """Greedy generation of GENERATED tokens after a one-token prompt: exactc's exported
    decode program running its whole loop (`model generate`, `--plan auto`, the Makefile's
    defaults, f32 or --weights q8|q4, or read from `gguf`, a GGUF file of the same weights:
    q4k's) against transformers' LlamaForCausalLM.generate with
    the same weights, do_sample=False, in f32, or in int8 by torch's dynamic quantization
    of every Linear for q8 (PyTorch has no 4-bit CPU path: q4's and q4k's rows are against f32). Both
    run GENERATED forward passes of one position (the prompt's, then a step per new token
    but the last). Random weights: the tokens are not compared with PyTorch's (near ties);
    the program's tokens at 2 threads are checked to be its tokens at 1. `contract` is the
    products' realization of exactc's program (docs/semantics.md section 18)."""

    def __init__(self, name: str, weights: str, work: Path, cc: str, model=None, gguf: Path | None = None,
                 contract: str = CONTRACT_OFF):
        import copy

        import torch

        shape = STORIES[name]
        self.model = model if model is not None else llama_model(shape)
        folder = work / f"{name}-checkpoint"
        if gguf is None and not folder.exists():
            self.model.save_pretrained(folder, safe_serialization=True)
        ckpt = checkpoints.load(gguf if gguf is not None else folder, "llama")
        hd = shape["dim"] // shape["heads"]
        cache = np.zeros((shape["layers"], shape["kv_heads"], shape["tokens"], hd), np.float32)
        prepared = export.prepare("llama", "decode", "f32", overrides={"tokens": shape["tokens"]}, checkpoint=ckpt,
                                  plan=AutoPlan(tuned=tuned.tuned_layouts(cc)), weights=WEIGHTS[weights],
                                  inputs={"token": np.array([1], np.int32), "position": np.array([1], np.int32),
                                          "past_k": cache, "past_v": cache},  # a cheap reference run: T = 1
                                  contract=contract)
        label = f"{name}-{weights}-{contract}"
        root = export.write(prepared, work / f"{label}-decode")
        self.flags = makefile_cflags(root)
        self.program = build_exported(root, cc)
        self.inputs = work / f"{label}-prompt"
        self.inputs.mkdir()
        np.save(self.inputs / "prompt_ids.npy", np.array([1], np.int32))
        np.save(self.inputs / "seed.npy", np.array([0], np.int64))
        self.out = work / f"{label}-out"
        self.out.mkdir()
        self.peer = self.model
        if weights == "q8":
            self.peer = torch.ao.quantization.quantize_dynamic(copy.deepcopy(self.model), {torch.nn.Linear},
                                                               dtype=torch.qint8)
        self.peer.generation_config.eos_token_id = None
        self.peer_kind = {"q8": "torch dynamic int8"}.get(weights, "torch f32")

    def tokens(self, threads: int) -> bytes:
        generate_seconds(self.program, self.inputs, self.out, threads, GENERATED)
        return (self.out / "tokens.npy").read_bytes() + (self.out / "probabilities.npy").read_bytes()

    def torch_generate(self) -> None:
        import torch

        prompt = torch.tensor([[1]])
        with torch.inference_mode():
            self.peer.generate(prompt, do_sample=False, max_new_tokens=GENERATED, min_new_tokens=GENERATED,
                               pad_token_id=0)

    def side_by_side(self, threads: int) -> SideBySide:
        torch_threads(threads)
        return SideBySide(lambda: generate_seconds(self.program, self.inputs, self.out, threads, GENERATED),
                          lambda: best_of(self.torch_generate, 1))



# ---- llama.cpp, the peer of the same weight type, where it is installed --------------------------

# llama.cpp's formats of exactc's f32, q8, q4 and q4k; Q4_K's file is Q4_K_M, as llama.cpp's
# quantizer writes it (Q4_K for most tensors, Q6_K for the output and some attn_v and ffn_down)
GGUF_TYPES = {"f32": None, "q8": "Q8_0", "q4": "Q4_0", "q4k": "Q4_K_M"}
# the gguf package quantizes Q8_0 and Q4_0; the k-quant files come from llama.cpp's own quantizer
LLAMA_CPP_QUANTIZED = ("Q4_K_M", "Q5_K_M", "Q6_K")


def llama_cpp_missing() -> str | None:
    """Why llama.cpp's row cannot run (the `llama-cpp-python` package, which builds
    llama.cpp from source, is not installed), or None."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError as error:
        return f"llama.cpp is not installed (pip install llama-cpp-python builds it): {error}"
    return None


def llama_cpp_quantize(source: Path, path: Path, ftype: str) -> Path:
    """`source` (an F32 GGUF file) quantized by llama.cpp's own quantizer
    (llama_model_quantize) to `ftype` (one of LLAMA_CPP_QUANTIZED) as `path`."""
    import ctypes

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    code = llama_cpp.llama_model_quantize(str(source).encode(), str(path).encode(), ctypes.byref(params))
    if code != 0:
        raise RuntimeError(f"llama_model_quantize {source} to {ftype} returned {code}")
    return path


def write_gguf(model, shape: dict, path: Path, weights: str) -> Path:
    """`model`'s weights as a GGUF Llama file (checkpoints/gguf_file.write: llama.cpp's
    names and q/k row order), its linear weights in GGUF_TYPES[weights], with the
    placeholder vocabulary llama.cpp needs to load it: Q8_0 and Q4_0 by the gguf package's
    quantizer, the k-quants by llama.cpp's from the F32 file."""
    from exactc.exporter.checkpoints import gguf_file

    tensors = {name: t.numpy() for name, t in model.state_dict().items()}
    qtype = GGUF_TYPES[weights]
    if qtype in LLAMA_CPP_QUANTIZED:
        f32 = gguf_file.write(path.with_suffix(".f32.gguf"), shape, tensors, vocabulary=True)
        return llama_cpp_quantize(f32, path, qtype)
    linear = {name for name, a in tensors.items() if a.ndim == 2 and "embed_tokens" not in name}
    return gguf_file.write(path, shape, tensors, qtype, linear, vocabulary=True)


def llama_cpp_model(path: Path, shape: dict, threads: int, batch: int):
    """llama.cpp's model and context (llama-cpp-python's Llama) for `path`, the context
    `shape`'s tokens, `threads` threads for one token and for a batch alike."""
    from llama_cpp import Llama

    return Llama(model_path=str(path), n_ctx=shape["tokens"], n_threads=threads, n_threads_batch=threads,
                 n_batch=batch, verbose=False)


class LlamaCppGenerate:
    """llama.cpp (through llama-cpp-python) generating greedily from the same weights in
    the same type: GENERATED tokens after the one-token prompt <s>."""

    def __init__(self, path: Path, shape: dict, threads: int):
        self.llm = llama_cpp_model(path, shape, threads, shape["tokens"])

    def generate(self) -> None:
        for count, _ in enumerate(self.llm.generate([1], top_k=1, temp=0.0, reset=True), start=1):
            if count == GENERATED:
                break


# ---- prompt processing: a 128-token prompt's prefill, from one GGUF file ----------------------------

PROMPT = 128  # the prompt's tokens


def prompt_ids(vocab: int) -> np.ndarray:
    """The prompt: PROMPT tokens drawn (seeded) from the vocabulary past <unk>, <s>, </s>."""
    return np.random.default_rng(4).integers(3, vocab, PROMPT).astype(np.int32)


class PrefillBench:
    """A PROMPT-token prompt's prefill, exactc's and llama.cpp's from the same GGUF file:
    exactc's exported llama `prefill` (`--plan auto`, the Makefile's defaults, its
    conformance checked first; the last position's logits and every layer's keys and
    values; `weights`: the row's type, q4k's k-quants kept by --weights file) against
    llama.cpp's Llama.eval of the same tokens (one batch; the last
    position's logits, the keys and values into its cache), no generation on either side."""

    def __init__(self, path: Path, shape: dict, work: Path, cc: str, weights: str = "f32"):
        ckpt = checkpoints.load(path, "llama")
        self.ids = prompt_ids(shape["vocab"])
        # the file's Q8_0 and Q4_0 blocks are kept as they are read; its k-quants with --weights file
        kept = WEIGHTS[weights] if weights in FROM_GGUF else None
        prepared = export.prepare("llama", "prefill", "f32", overrides={"tokens": PROMPT}, checkpoint=ckpt,
                                  plan=AutoPlan(tuned=tuned.tuned_layouts(cc)), inputs={"input_ids": self.ids},
                                  weights=kept)
        root = export.write(prepared, work / "prefill")
        self.flags = makefile_cflags(root)
        self.program = build_exported(root, cc)
        self.out = work / "prefill-out"
        self.out.mkdir()
        self.path, self.shape = path, shape

    def seconds(self, threads: int, repeat: int = 3) -> float:
        inputs = self.program.parent / "conformance" / "inputs"
        return program_seconds(self.program, inputs, self.out, threads, repeat)

    def side_by_side(self, threads: int) -> SideBySide:
        llm = llama_cpp_model(self.path, self.shape, threads, PROMPT)
        tokens = [int(t) for t in self.ids]

        def peer() -> None:
            llm.reset()
            llm.eval(tokens)

        return SideBySide(lambda: self.seconds(threads), lambda: best_of(peer, 3))
