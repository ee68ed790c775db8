"""`exactc serve`'s embeddings against the same program called in process: what the HTTP
layer costs, in requests per second.

Each request is one sentence of tests/minilm_sentences.py's mixed batch (24 sentences,
1 to 60 tokens), cycled; a round is ROUNDS_REQUESTS requests. Rows, at 1 and at 8
concurrent clients:
- `in process`: serve.Pool's handles (exactc.Program on the packaged all-MiniLM-L6-v2,
  exactc embed's cached program) called by 1 or 8 threads of this process, the
  sentences tokenized per call as the server tokenizes them.
- `server`: `exactc serve --embed default` in its own process, the same handles count,
  asked by 1 or 8 threads each holding one keep-alive connection (http.client), the
  answer base64 (the openai package's default), decoded and checked against the in-process
  bits.

Both sides use HANDLES handles (one per core of this 2-core machine) and one OpenMP
thread per call (OMP_NUM_THREADS=1): the clients' concurrency is what the pool serves.
Every figure is the best of REPEATS rounds, the median beside it; the rounds alternate
in process and server so that both see the same machine load.

Usage: .venv/bin/python bench/serve_speed.py
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

os.environ["OMP_NUM_THREADS"] = "1"

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from minilm_sentences import MIXED_BATCH  # noqa: E402  (tests/minilm_sentences.py)

from exactc import cli, serve  # noqa: E402
from programs_speed import cpu_field  # noqa: E402

HANDLES = 2
ROUNDS_REQUESTS = 96
REPEATS = 5


def in_process(pool: serve.Pool, embedder: serve.Embedder, clients: int) -> tuple[float, list[bytes]]:
    """Seconds for a round of requests run by `clients` threads on the pool, and the rows."""

    def one(k: int) -> bytes:
        vectors, _ = pool.run(embedder.embed([MIXED_BATCH[k % len(MIXED_BATCH)]]))
        return vectors[0].tobytes()

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as threads:
        rows = list(threads.map(one, range(ROUNDS_REQUESTS)))
    return time.perf_counter() - start, rows


def over_http(port: int, clients: int) -> tuple[float, list[bytes]]:
    """Seconds for a round of requests by `clients` threads, one connection each."""
    local = threading.local()

    def one(k: int) -> bytes:
        if not hasattr(local, "connection"):
            local.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        body = json.dumps({"model": "m", "input": MIXED_BATCH[k % len(MIXED_BATCH)], "encoding_format": "base64"})
        local.connection.request("POST", "/v1/embeddings", body, {"content-type": "application/json"})
        answer = local.connection.getresponse()
        data = answer.read()
        assert answer.status == 200, data[:200]
        return base64.b64decode(json.loads(data)["data"][0]["embedding"])

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as threads:
        rows = list(threads.map(one, range(ROUNDS_REQUESTS)))
    return time.perf_counter() - start, rows


def start_server() -> tuple[subprocess.Popen, int]:
    """`exactc serve --embed default` on a free port: the process and its port."""
    command = [sys.executable, "-m", "exactc", "serve", "--embed", "default", "--port", "0", "--handles", str(HANDLES)]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    for line in process.stderr:
        if "listening on http://" in line:
            return process, int(line.split("http://", 1)[1].split("/", 1)[0].rsplit(":", 2)[1])
    raise RuntimeError(f"exactc serve stopped: {process.wait()}")


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    args = cli.build_parser("serve").parse_args(["serve", "--embed", "default", "--handles", str(HANDLES)])
    embedder = serve.Embedder(args.embed, args)
    process, port = start_server()
    try:
        times: dict[tuple[str, int], list[float]] = {}
        for _ in range(REPEATS):
            for clients in (1, 8):
                seconds, want = in_process(embedder.pool, embedder, clients)
                times.setdefault(("in process", clients), []).append(seconds)
                seconds, got = over_http(port, clients)
                assert got == want, "the server's rows are not the in-process bits"
                times.setdefault(("server", clients), []).append(seconds)
    finally:
        process.terminate()
        process.wait()
    print(
        f"embeddings, one sentence per request, {ROUNDS_REQUESTS} requests a round, best (median) of {REPEATS}; "
        f"{HANDLES} handles, OMP_NUM_THREADS=1; {cpu_field('model name')}, cpu family {cpu_field('cpu family')}, "
        f"model {cpu_field('model')}; load average {os.getloadavg()[0]:.1f}"
    )
    print("| clients | in process (requests/s) | server (requests/s) | server / in process |")
    print("|---|---|---|---|")
    for clients in (1, 8):
        rate = {side: ROUNDS_REQUESTS / min(times[(side, clients)]) for side in ("in process", "server")}
        median = {side: ROUNDS_REQUESTS / statistics.median(times[(side, clients)]) for side in rate}
        print(
            f"| {clients} | {rate['in process']:.0f} ({median['in process']:.0f}) | {rate['server']:.0f} "
            f"({median['server']:.0f}) | {rate['server'] / rate['in process']:.2f} |"
        )
    print("every server answer was the in-process float32 bits")


if __name__ == "__main__":
    main()
