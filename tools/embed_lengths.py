"""Sentences per second of `exactc embed` on a batch of ordinary sentences of mixed length,
padded (how it ran before the sequence axis was bound at run time) and unpadded (now),
side by side in one run.

Usage (repository root): .venv/bin/python tools/embed_lengths.py [--threads 1] [--dtype f32] [--plan auto]

- padded: the batch padded to its longest sentence, the program exported and built for
  exactly that length (tokens = the longest), every sentence run at that length;
- unpadded: one program exported for the checkpoint's 256 tokens (T_max), every
  sentence run at its own length.

Both programs come from the export cache (built once; the build is not timed), run every
sentence in one process, OMP_NUM_THREADS=--threads. "network" sums the times the
program reports for each run (EXACTC_REPEAT=1); "process" is the wall-clock time of the
one process (reading the weights included). The vectors of both are compared: the same
bytes (padding changes no bit of a sentence's embedding).
"""

from __future__ import annotations

import argparse
import platform
import re
import tempfile
import time
from pathlib import Path

import numpy as np

from exactc import embed
from exactc.exporter import checkpoints

# Ordinary sentences, 1 to about 190 tokens: a search query, chat lines, a news lede, a
# paragraph of documentation.
SENTENCES = [
    "Hello.",
    "Thanks!",
    "Where is the station?",
    "The meeting moved to Thursday afternoon.",
    "Can you send me the report before lunch tomorrow?",
    "A quick brown fox jumps over the lazy dog near the river bank.",
    "Rain is expected across the north of the country tonight, with snow on high ground.",
    "The library will be closed on public holidays, but the online catalogue stays available "
    "around the clock.",
    "She opened the window, listened to the traffic for a while, and then went back to the "
    "letter she had been trying to finish since morning.",
    "Cheap flights to Lisbon in May",
    "How do I reset my password if I no longer have access to the email address on my account?",
    "The committee approved the budget after a long debate about road repairs, school meals and "
    "the cost of keeping the swimming pool open through the winter months.",
    "Install the package with pip, then run the command with --help to see every option it "
    "accepts; the defaults suit most users, and the configuration file can override any of them "
    "for a whole project.",
    "Tomatoes grow best in full sun, in rich soil that drains well, watered deeply but not too "
    "often, and tied to a stake once the first trusses of fruit begin to form on the lower branches "
    "of the plant.",
    "Ok",
    "What time does the museum open on Sundays?",
    "Our new release fixes the crash on start-up that some users saw after the last update, "
    "speeds up searches in large folders, and adds a dark theme that follows the system setting.",
    "In the early years of the railway, timetables differed from town to town because each kept "
    "its own local time, and it was the need for reliable connections that finally pushed the "
    "country towards a single standard time, first along the lines and later by law; clocks on "
    "station platforms were among the first to show it, and travellers grew used to checking "
    "them before setting their watches, a habit that lasted long after the change was complete.",
    "Please keep your luggage with you at all times.",
    "The soup needs more salt.",
    "Researchers measured the growth of the plants every week for two years and found that the "
    "ones grown near the hedges did better in dry summers, probably because the hedges kept the "
    "wind off and held moisture in the ground around their roots.",
    "Good night, see you tomorrow.",
    "The train to the airport leaves every fifteen minutes from platform two.",
    "When the power went out, the whole street came outside, and for an hour the neighbours "
    "talked by candlelight as if they had known each other for years, until the lights came back "
    "on and everyone drifted home again.",
]


def run(program, sentences, threads: int, tmp: Path, label: str) -> tuple[np.ndarray, float, float]:
    pairs = []
    for i, sentence in enumerate(sentences):
        ins, outs = tmp / f"{label}-in{i}", tmp / f"{label}-out{i}"
        ins.mkdir()
        for name, array in sentence.items():
            np.save(ins / f"{name}.npy", np.ascontiguousarray(array))
        pairs.append((ins, outs))
    start = time.perf_counter()
    done = program.run_or_fail(pairs, threads=threads, env={"EXACTC_REPEAT": "1"})
    process = time.perf_counter() - start
    network = sum(float(m) for m in re.findall(r"([0-9.]+) s per run", done.stderr))
    vectors = np.stack([np.load(outs / "sentence_embedding.npy") for _, outs in pairs])
    return vectors, network, process


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="f32")
    parser.add_argument("--plan", default="auto")
    args = parser.parse_args()
    folder = embed.default_checkpoint()
    ckpt = checkpoints.load(folder, "bert")
    top = embed.max_length(folder, ckpt.fields["positions"])
    unpadded = embed.tokenize(folder, SENTENCES, top)
    padded_batch = embed.tokenize_padded(folder, SENTENCES, top)
    n, longest = padded_batch["input_ids"].shape
    padded = [{k: v[i] for k, v in padded_batch.items()} for i in range(n)]
    lengths = [len(s["input_ids"]) for s in unpadded]
    quiet = lambda message: None  # noqa: E731
    before = embed.cached_program(ckpt, args.dtype, longest, progress=quiet, plan=args.plan)
    after = embed.cached_program(ckpt, args.dtype, top, progress=quiet, plan=args.plan)
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for label, program, batch in (("padded", before, padded), ("unpadded", after, unpadded)):
            vectors, network, process = run(program, batch, args.threads, Path(tmp), label)
            rows.append((label, program, vectors, network, process))
    same = rows[0][2].tobytes() == rows[1][2].tobytes()
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    print(f"all-MiniLM-L6-v2 embed at {args.dtype}, plan {args.plan}, {n} sentences of {min(lengths)} to "
          f"{max(lengths)} tokens (mean {np.mean(lengths):.1f}; padded: {longest} each); {args.threads} thread(s); "
          f"{cpu}")
    print("| program | tokens run | network (s) | sentences/s (network) | process (s) | sentences/s (process) |")
    print("|---|---|---|---|---|---|")
    for (label, _, _, network, process), tokens in zip(rows, (n * longest, sum(lengths))):
        print(f"| {label} (T_max {longest if label == 'padded' else top}) | "
              f"{tokens} | {network:.2f} | {n / network:.2f} | {process:.2f} | {n / process:.2f} |")
    print(f"speed-up (network): {rows[0][3] / rows[1][3]:.2f}x; (process): {rows[0][4] / rows[1][4]:.2f}x; "
          f"vectors the same bytes: {same}")


if __name__ == "__main__":
    main()
