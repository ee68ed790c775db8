"""Training in the reference (exporter/training.py, exporter/reference/training.py;
docs/semantics.md section 17), against oracles nobody here wrote: torch.autograd at f64
on tiny Hugging Face GPT-2 and Llama checkpoints read by exactc's loader (every
parameter's gradient within 1e-12 relative, norm-wise, and the loss), and AdamW steps
against torch.optim.AdamW at f64 (within 1e-13) with decay on the 2-D weights only, as two
parameter groups. Then the learning rate against llm.c's formula, and the refusals."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from exactc.exporter import checkpoints, graph, models, training
from exactc.exporter.reference import backward, walk
from exactc.exporter.reference import training as reference_training

from exactc.verify.compare import assert_bits_equal

from installed import need_module  # tests/installed.py

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

B, T = 2, 7
_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def llama_in_f64(monkeypatch, torch, transformers) -> None:
    """transformers' Llama computes its norms and attention's softmax in f32 whatever the
    model's dtype: both in the model's own dtype instead (their formulas unchanged)."""
    llama = transformers.models.llama.modeling_llama

    def rmsnorm(self, hidden):
        variance = hidden.pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden * torch.rsqrt(variance + self.variance_epsilon))

    def attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        key, value = (
            llama.repeat_kv(key, module.num_key_value_groups),
            llama.repeat_kv(value, module.num_key_value_groups),
        )
        weights = torch.matmul(query, key.transpose(2, 3)) * scaling
        if attention_mask is not None:
            weights = weights + attention_mask
        weights = torch.nn.functional.softmax(weights, dim=-1)
        return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights

    monkeypatch.setattr(llama.LlamaRMSNorm, "forward", rmsnorm)
    monkeypatch.setattr(llama, "eager_attention_forward", attention)


def tiny_hf(torch, transformers, model: str, folder, tied: bool = True):
    """A tiny Hugging Face causal LM with drawn weights, saved to `folder` (safetensors)."""
    if model == "gpt":
        cfg = transformers.GPT2Config(
            vocab_size=31,
            n_positions=12,
            n_embd=12,
            n_layer=2,
            n_head=3,
            layer_norm_epsilon=1e-5,
            activation_function="gelu_new",
            bos_token_id=0,
            eos_token_id=0,
            tie_word_embeddings=tied,
            attn_implementation="eager",
        )
        hf = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.LlamaConfig(
            vocab_size=29,
            hidden_size=12,
            intermediate_size=17,
            num_hidden_layers=2,
            num_attention_heads=3,
            num_key_value_heads=1,
            rms_norm_eps=1e-6,
            rope_theta=500.0,
            max_position_embeddings=16,
            tie_word_embeddings=False,
            attn_implementation="eager",
        )
        hf = transformers.LlamaForCausalLM(cfg)
    from test_oracle import randomize  # the oracle's draw: every gain and bias away from its default

    randomize(hf, 3)
    hf.save_pretrained(folder, safe_serialization=True)
    hf = hf.double().eval()
    if model == "llama":  # the rotary angles in f64 (transformers computes them in f32)
        hd = 12 // 3
        inv_freq = 1.0 / (500.0 ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))

        def rotary_f64(x, position_ids):
            angles = position_ids[..., None].double() * inv_freq
            both = torch.cat((angles, angles), dim=-1)
            return both.cos(), both.sin()

        hf.model.rotary_emb.forward = rotary_f64
    return hf


def hf_name(model: str, name: str, layer: int | None) -> str:
    return name.replace("{l}", str(layer)) if layer is not None else name


def our_gradients_by_hf_name(model: str, lg, grads) -> dict[str, np.ndarray]:
    """exactc's gradients under Hugging Face's names and orientations (GPT-2's Conv1D
    weights are (in, out)), one per layer."""
    out = {}
    for spec in lg.params:
        for layer in range(spec.layers) if spec.layers else [None]:
            g = grads[spec.name][layer] if layer is not None else grads[spec.name]
            if model == "gpt" and spec.name.endswith(_CONV1D):
                g = g.T
            out[hf_name(model, spec.name, layer)] = g
    return out


def batch(vocab: int, seed: int = 4):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, (B, T)).astype(np.int32)
    targets = rng.integers(0, vocab, (B, T)).astype(np.int32)
    targets[0, 2] = targets[1, 5] = training.IGNORE_INDEX  # positions that do not count
    tokens[1, 3] = tokens[1, 1] = tokens[0, 0]  # a repeated token
    return tokens, targets


@pytest.mark.parametrize("model,tied", [("gpt", True), ("gpt", False), ("llama", False)])
def test_gradients_match_torch_autograd_at_f64(tmp_path, monkeypatch, model, tied):
    torch, transformers = need_module("torch"), need_module("transformers")
    if model == "llama":
        llama_in_f64(monkeypatch, torch, transformers)
    hf = tiny_hf(torch, transformers, model, tmp_path, tied)
    ckpt = checkpoints.load(tmp_path, model)
    lg = models.build_loss_grad(model, ckpt.overrides({"tokens": T}))
    tokens, targets = batch(lg.vocab)
    ours = reference_training.loss_grad(lg, "f64", ckpt.parameters(lg.forward, "f64"), tokens, targets)

    logits = hf(input_ids=torch.from_numpy(tokens.astype(np.int64))).logits
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, lg.vocab),
        torch.from_numpy(targets.astype(np.int64)).reshape(-1),
        ignore_index=training.IGNORE_INDEX,
    )
    loss.backward()
    assert abs(float(ours["loss"]) - loss.item()) <= 1e-13 * loss.item()
    mine = our_gradients_by_hf_name(model, lg, ours)
    theirs = {name: p.grad.numpy() for name, p in hf.named_parameters()}
    assert sorted(theirs) == sorted(mine), (sorted(theirs), sorted(mine))
    for name, want in theirs.items():
        error = np.linalg.norm(mine[name] - want)
        assert error <= 1e-12 * np.linalg.norm(want), f"{name}: {error:.3g} from torch, norm {np.linalg.norm(want):.3g}"


def forward_loss(lg, params, tokens, targets) -> float:
    """The mean loss at f64 from the forward alone (fsum of the counted positions' losses)."""
    terms = []
    for b in range(tokens.shape[0]):
        logits = walk.evaluate(lg.forward, "f64", params, {"input_ids": tokens[b]})["logits"]
        counts = targets[b] != lg.ignore
        losses, _ = reference_training.cross_entropy_rows(logits, targets[b], counts, np.float64(1.0), "f64")
        terms += list(losses[counts])
    return math.fsum(terms) / len(terms)


@pytest.mark.parametrize("model", ["gpt", "llama"])
def test_gradients_match_central_differences_of_the_loss(model):
    """The whole reverse walk (calls, folds from the last layer, a tied or untied head, a
    repeated token, ignored positions) against the loss's central differences at f64, a
    check without torch: two drawn elements of every parameter."""
    lg, params, grads = drawn_state(model)
    tokens, targets = batch(23)
    rng = np.random.default_rng(11)
    for spec in lg.params:
        for _ in range(2):
            index = tuple(int(rng.integers(0, n)) for n in params[spec.name].shape)
            h = 1e-6 * max(1.0, abs(params[spec.name][index]))
            losses = []
            for step in (h, -h):
                moved = dict(params, **{spec.name: params[spec.name].copy()})
                moved[spec.name][index] += step
                losses.append(forward_loss(lg, moved, tokens, targets))
            want = (losses[0] - losses[1]) / (2 * h)
            scale = np.abs(grads[spec.name]).max()
            assert abs(grads[spec.name][index] - want) <= 1e-6 * scale + 1e-9, (spec.name, index, want)


@pytest.mark.parametrize("model", ["gpt", "llama"])
def test_f32_gradients_stay_f32_and_near_the_f64_ones(model):
    """At f32 every operation rounds to f32 (nothing promoted to f64 on the way): the
    gradients are float32 and within f32's reach of the f64 ones."""
    lg, params64, grads64 = drawn_state(model)
    params32 = {k: v.astype(np.float32) for k, v in params64.items()}
    tokens, targets = batch(23)
    grads32 = reference_training.loss_grad(lg, "f32", params32, tokens, targets)
    assert grads32["loss"].dtype == np.float32 and abs(grads32["loss"] - grads64["loss"]) < 1e-5
    for spec in lg.params:
        got, want = grads32[spec.name], grads64[spec.name]
        assert got.dtype == np.float32, spec.name
        assert np.linalg.norm(got - want) <= 1e-5 * np.linalg.norm(want), spec.name


def test_a_weight_gradient_sums_every_sequence_and_position_in_one_accumulator_at_f32():
    """Llama's head: lm_head's gradient is Σ over (b, t), t fastest, of the logits'
    adjoint times the normed state, one f32 accumulator carried from sequence to sequence
    (not a sum per sequence added afterwards), pinned against a loop written from
    section 17."""
    lg, params64, _ = drawn_state("llama")
    params = {k: v.astype(np.float32) for k, v in params64.items()}
    tokens, targets = batch(23)
    got = reference_training.loss_grad(lg, "f32", params, tokens, targets)["lm_head.weight"]
    program = lg.forward
    (head,) = [op for op in program.function.nodes if getattr(op, "out", None) is program.function.outputs[0]]
    r = np.float32(1.0) / np.float32(np.count_nonzero(targets != lg.ignore))
    rows, terms = [], []
    for b in range(B):
        tape: walk.Tape = {}
        logits = walk.evaluate(program, "f32", params, {"input_ids": tokens[b]}, tape=tape)["logits"]
        _, term = reference_training.cross_entropy_rows(logits, targets[b], targets[b] != lg.ignore, r, "f32")
        rows.append(tape[walk.VALUES][id(head.operands()["x"])])
        terms.append(term)
    want = np.zeros_like(got)
    for n in range(want.shape[0]):
        for k in range(want.shape[1]):
            acc = np.float32(0.0)
            for b in range(B):
                for t in range(T):
                    acc = np.float32(acc + np.float32(terms[b][t, n] * rows[b][t, k]))
            want[n, k] = acc
    assert_bits_equal(want, got, "lm_head.weight's gradient", every_bit=True)


def test_an_operation_that_does_not_reach_the_loss_adds_no_term():
    """Dead code goes after differentiation: a linear whose output nobody reads, on an
    infinite weight, would add 0 ⊗ ∞ = NaN into the embedding's gradient if its backward
    ran; its own weight's gradient stays +0."""

    def forward(params, input_ids):
        x = graph.embedding(params["emb"], input_ids)
        graph.linear(x, params["dead"], name="unread")
        return {"logits": graph.linear(x, params["head"])}

    specs = [graph.ParamSpec("emb", (5, 3)), graph.ParamSpec("dead", (2, 3)), graph.ParamSpec("head", (5, 3))]
    lg = training.loss_grad(graph.trace("m", "forward", forward, specs, [graph.InputSpec("input_ids", (4,), "i32")]))
    rng = np.random.default_rng(2)
    params = {"emb": rng.standard_normal((5, 3)), "dead": np.full((2, 3), np.inf), "head": rng.standard_normal((5, 3))}
    tokens, targets = np.array([[1, 4, 1, 0]], np.int32), np.array([[4, 1, 0, 2]], np.int32)
    out = reference_training.loss_grad(lg, "f64", params, tokens, targets)
    assert np.isfinite(out["emb"]).all() and np.abs(out["emb"]).max() > 0
    assert not np.any(out["dead"]) and not np.signbit(out["dead"]).any()


# ---- AdamW -------------------------------------------------------------------------------------


def drawn_state(model="gpt", site="f64"):
    cfg = {"vocab": 23, "positions": 8, "dim": 8, "heads": 2, "layers": 2, "mlp": 12, "tokens": T}
    if model == "llama":
        cfg = {"vocab": 23, "dim": 8, "heads": 2, "kv_heads": 1, "layers": 2, "mlp": 12, "tokens": T}
    lg = models.build_loss_grad(model, cfg)
    params = models.draw_parameters(lg.forward, 5, site)
    tokens, targets = batch(23)
    return lg, params, reference_training.loss_grad(lg, site, params, tokens, targets)


def test_adamw_steps_match_torch_optim_adamw_at_f64():
    """Three steps from the same gradients (so the bias corrections of t = 1, 2, 3 show),
    decay on the 2-D weights only: torch's two parameter groups."""
    torch = need_module("torch")
    lg, params, grads = drawn_state()
    opt = reference_training.AdamW(lr=3e-2, beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=0.1)
    tensors = {spec.name: torch.tensor(params[spec.name], requires_grad=True) for spec in lg.params}
    groups = [
        {"params": [tensors[s.name] for s in lg.params if training.decays(s)], "weight_decay": 0.1},
        {"params": [tensors[s.name] for s in lg.params if not training.decays(s)], "weight_decay": 0.0},
    ]
    assert groups[0]["params"] and groups[1]["params"]
    torch_opt = torch.optim.AdamW(groups, lr=3e-2, betas=(0.8, 0.95), eps=1e-6, foreach=False)
    m, v = reference_training.zero_moments(lg, "f64"), reference_training.zero_moments(lg, "f64")
    for step in (1, 2, 3):
        out = reference_training.adamw_step(lg, "f64", opt, step, params, grads, m, v)
        params, m, v = out["params"], out["m"], out["v"]
        for spec in lg.params:
            tensors[spec.name].grad = torch.tensor(grads[spec.name])
        torch_opt.step()
        for spec in lg.params:
            want = tensors[spec.name].detach().numpy()
            error = np.linalg.norm(params[spec.name] - want)
            assert error <= 1e-13 * np.linalg.norm(want), f"step {step} {spec.name}: {error:.3g} from torch"


def test_only_two_dimensional_weights_decay():
    lg, _, _ = drawn_state("llama")
    decayed = sorted(spec.name for spec in lg.params if training.decays(spec))
    assert decayed == sorted(
        ["model.embed_tokens.weight", "lm_head.weight"]
        + [
            f"model.layers.{{l}}.{k}.weight"
            for k in (
                "self_attn.q_proj",
                "self_attn.k_proj",
                "self_attn.v_proj",
                "self_attn.o_proj",
                "mlp.gate_proj",
                "mlp.up_proj",
                "mlp.down_proj",
            )
        ]
    )


def test_clipping_scales_every_gradient_by_the_global_norm_first():
    lg, params, grads = drawn_state()
    norm = math.sqrt(math.fsum(float(x) ** 2 for s in lg.params for x in grads[s.name].ravel()))
    assert reference_training.global_norm(lg, grads) == pytest.approx(norm, rel=1e-15)
    zero = reference_training.zero_moments(lg, "f64")
    clipped = reference_training.adamw_step(
        lg, "f64", reference_training.AdamW(clip=norm / 4), 1, params, grads, zero, zero
    )
    scaled = {k: g * ((norm / 4) / clipped["norm"]) for k, g in grads.items() if k != "loss"}
    plain = reference_training.adamw_step(lg, "f64", reference_training.AdamW(), 1, params, scaled, zero, zero)
    assert clipped["norm"] == reference_training.global_norm(lg, grads)
    for spec in lg.params:
        assert np.array_equal(clipped["m"][spec.name], plain["m"][spec.name]), spec.name


# ---- the learning rate ---------------------------------------------------------------------


def test_the_learning_rate_is_llm_c_warmup_then_cosine():
    steps, warmup, peak, final = 50, 5, 6e-4, 0.1
    rates = [reference_training.learning_rate(k, steps, peak, warmup, final) for k in range(steps)]
    for k, rate in enumerate(rates):
        if k < warmup:
            want = peak * (k + 1) / warmup
        else:
            coeff = 0.5 * (1.0 + math.cos(math.pi * (k - warmup) / (steps - warmup)))
            want = peak * final + coeff * (peak - peak * final)
        assert rate == pytest.approx(want, rel=1e-15, abs=1e-20), k
    assert rates[warmup - 1] == peak and rates[warmup] == pytest.approx(peak, rel=1e-15)
    with pytest.raises(training.TrainingError, match=r"step 50 must be in \[0, 50\)"):
        reference_training.learning_rate(50, steps, peak)


# ---- refusals, one line each -----------------------------------------------------------------


def test_a_batch_training_cannot_take_is_refused_naming_the_position():
    lg, params, _ = drawn_state()
    tokens, targets = batch(23)
    bad_target = targets.copy()
    bad_target[1, 4] = 23
    bad_token = tokens.copy()
    bad_token[0, 6] = -1
    cases = [
        (tokens, bad_target, r"targets\[1, 4\] = 23 is neither in \[0, 23\) nor the ignore index -100"),
        (bad_token, targets, r"tokens\[0, 6\] = -1 is outside \[0, 23\)"),
        (tokens, np.full_like(targets, -100), "no position counts"),
        (tokens[:, :3], targets, r"must both be \(B, T\)"),
        (tokens.astype(np.int64), targets, "must be an int32 array"),
    ]
    for tok, tgt, message in cases:
        with pytest.raises(training.TrainingError, match=message):
            reference_training.loss_grad(lg, "f64", params, tok, tgt)
    with pytest.raises(backward.BackwardError, match="f64 or f32"):
        reference_training.loss_grad(lg, "bf16", params, tokens, targets)


def test_loss_grad_is_made_for_causal_lms_of_float_weights():
    with pytest.raises(models.ModelError, match="bert has no loss_grad"):
        models.build_loss_grad("bert")
    with pytest.raises(training.TrainingError, match="made from a forward of input_ids to logits"):
        training.loss_grad(models.build("gpt", "next_token", {"layers": 1}))
    quantized = models.build("llama", "forward", {"layers": 1}, quantized={"lm_head.weight": ("q8", 32)})
    with pytest.raises(training.TrainingError, match="have no gradient"):
        training.loss_grad(quantized)
