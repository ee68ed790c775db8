"""What checking a cache entry against its manifest costs (programs.py's
check_entry): by the stat fields alone, as on every ordinary use, and hashing every file,
as when the times or inodes differ from the manifest's (a copied cache folder).

Usage (repository root): .venv/bin/python tools/cache_check_time.py [ENTRY] [--repeat 5]

ENTRY defaults to the packaged MiniLM embed program's entry (made by `exactc embed
"hello"` first). Each repeat copies the entry beside it (new inodes and change times),
times the first check (every file hashed) and the second (stat alone), and removes the
copy. The figures are in docs/programs.md, where the cache is described.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

from exactc import embed
from exactc.exporter import checkpoints
from exactc import programs


def minilm_entry() -> Path:
    folder = embed.default_checkpoint()
    ckpt = checkpoints.load(folder, "bert")
    tokens = embed.max_length(folder, ckpt.fields["positions"])
    return embed.cached_program(ckpt, "f32", tokens, plan="auto").root


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("entry", nargs="?", help="a cache entry (default: the MiniLM embed program's)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    entry = Path(args.entry) if args.entry else minilm_entry()
    files = [p for p in entry.rglob("*") if p.is_file() and p.name != programs.MANIFEST]
    by_stat, by_hash = [], []
    for i in range(args.repeat):
        copy = entry.parent / f".{entry.name}.timing-{i}"
        shutil.copytree(entry, copy)
        try:
            for times in (by_hash, by_stat):
                start = time.perf_counter()
                assert programs.check_entry(copy) is None, f"{entry} fails its check"
                times.append(time.perf_counter() - start)
        finally:
            shutil.rmtree(copy)
    print(f"{entry}: {len(files)} files, {sum(p.stat().st_size for p in files) / 1e6:.1f} MB")
    for name, times in (("stat alone", by_stat), ("every file hashed", by_hash)):
        print(f"  {name:<18} median {statistics.median(times) * 1e3:7.2f} ms, best {min(times) * 1e3:7.2f} ms "
              f"({len(times)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
