"""`exactc serve`: exported programs behind the OpenAI-compatible HTTP endpoints.

    exactc serve --embed FOLDER --port 8000                # POST /v1/embeddings
    exactc serve --generate llama --set layers=2 --set tokens=64 --handles 2 --queue 16
    exactc serve --generate stories15M.bin --embed FOLDER  # both; GET /v1/models lists them

`--embed` serves a sentence-transformers folder as `exactc embed` runs it (the packaged
all-MiniLM-L6-v2 when the folder is `default`), `--generate` a GPT or Llama as
`exactc generate --backend c` runs it: the same cached export, the same library, so an
embedding is `exactc embed`'s float32 bits and a completion with a `seed` is `exactc
generate --seed`'s tokens (the same key, the same sampler in C). The context of a
completion is the decode program's T_max: `--set tokens=N` (default the model's).

Each model has a pool of `--handles` library handles (exactc.Program: the weights loaded
once per handle, each with its own arena), opened at start; a request waits for a free
one, and at most `--queue` requests wait: the next one is refused at once with 429, as
OpenAI's rate limit answers. A request that is not JSON or not the endpoint's shape gets
400, a body over MAX_BODY bytes 413, a prompt and max_tokens over the context 400
(`context_length_exceeded`); every refusal is OpenAI's error body, `{"error": {"message",
"type", "code"}}`, and the server goes on serving.

The HTTP layer is Starlette on uvicorn: the ASGI pair most Python model servers stand on
(FastAPI is Starlette), kept up to date, installable from the registries, with
server-sent events (StreamingResponse) for `stream: true` and a thread pool for the C
calls, which release the GIL. An embedding's values are exact either way: `float`
writes each float32 widened to a double in its shortest repr (read back to the same
float32), `base64` (the openai package's default) the little-endian float32 bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import json
import queue
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

from exactc import commands

if TYPE_CHECKING:  # imported when the server starts: `exactc serve --help` needs none of them
    import numpy as np

    from exactc import library
    from exactc.generate import TextTokenizer

MAX_BODY = 1 << 20  # bytes of a request's body: 2,048 sentences of 500 characters fit
DRAINED = 64 * MAX_BODY  # bytes of a body too large read (and dropped) before the 413 is sent
MAX_INPUTS = 2048  # sentences per embeddings request, OpenAI's own bound


class ServeError(ValueError):
    """A refusal of `exactc serve`'s options: one line, exit code 2."""


@dataclasses.dataclass
class Refusal(Exception):
    """A request refused: its HTTP status and OpenAI's error body."""

    status: int
    message: str
    code: str | None = None

    @property
    def kind(self) -> str:
        """OpenAI's error type: a rate limit for 429, the request's fault for the others."""
        return "rate_limit_error" if self.status == 429 else "invalid_request_error"

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": None, "code": self.code}}


def bad(message: str, code: str | None = None) -> Refusal:
    return Refusal(400, message, code)


# ---- the pool of handles ---------------------------------------------------------------------


class Pool:
    """`handles` library handles opened up front, and room for `queue` requests waiting for
    one: a request admitted past that is refused (429) rather than kept waiting."""

    def __init__(self, open_handle: Callable[[], library.Program], handles: int, waiting: int):
        self.open_handle = open_handle
        self.opened: list[library.Program] = []
        self.free: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(handles):
            self.free.put(self.open())
        self.room = threading.BoundedSemaphore(handles + waiting)

    def open(self) -> library.Program:
        program = self.open_handle()
        self.opened.append(program)
        return program

    def admit(self) -> None:
        """Take a place, running or waiting, or refuse the request: release() gives it back."""
        if not self.room.acquire(blocking=False):
            raise Refusal(429, "the server's queue is full; retry later", "queue_full")

    def release(self) -> None:
        self.room.release()

    def run(self, work: Callable[[library.Program], Any]) -> Any:
        """`work` on a free handle (waiting for one), from a worker thread."""
        program = self.free.get()
        try:
            return work(program)
        finally:
            self.free.put(program)


async def pooled(pool: Pool, work: Callable[[library.Program], Any]) -> Any:
    """`work` on one of the pool's handles in a worker thread, admitted first."""
    from starlette.concurrency import run_in_threadpool

    pool.admit()
    try:
        return await run_in_threadpool(pool.run, work)
    finally:
        pool.release()


# ---- the models --------------------------------------------------------------------------------


class Embedder:
    """`exactc embed`'s program for a folder, in a pool of handles."""

    def __init__(self, folder: str, args: argparse.Namespace):
        from exactc import embed, library
        from exactc.exporter import checkpoints

        self.folder = embed.default_checkpoint() if folder == "default" else Path(folder)
        ckpt = checkpoints.load(self.folder, "bert")
        ckpt.check_entry("embed")
        self.name = ckpt.name
        self.max_length = embed.max_length(self.folder, ckpt.fields["positions"])
        built = embed.cached_program(
            ckpt,
            args.dtype,
            self.max_length,
            args.cc,
            plan=args.plan,
            weights=commands.weights_choice(args),
            contract=args.contract,
            form=args.form,
        )
        self.pool = Pool(
            lambda: library.Program(built.root, make_args=built.build.make_args()), args.handles, args.queue
        )

    def embed(self, texts: list[str]) -> Callable[[library.Program], tuple[np.ndarray, int]]:
        """The work of one request: its (n, D) float32 rows, as `exactc embed` gives them,
        and its tokens."""
        import numpy as np

        from exactc import embed

        batch = embed.tokenize(self.folder, texts, self.max_length)
        tokens = sum(len(sentence["input_ids"]) for sentence in batch)
        return lambda program: (np.stack(embed.run_sentences(program, batch)).astype(np.float32), tokens)


class Generator:
    """`exactc generate --backend c`'s decode program for a model, in a pool of handles."""

    def __init__(self, model: str, args: argparse.Namespace):
        from exactc import generate, library, programs
        from exactc.exporter import checkpoints, export, models

        checkpoint = None if model in ("gpt", "llama") else checkpoints.load(model, None)
        self.name = checkpoint.model if checkpoint is not None else model
        if self.name not in ("gpt", "llama"):
            raise ServeError(f"--generate {model}: exactc generates with gpt or llama")
        user = commands._overrides(args.set)
        vocab = (
            checkpoint.fields["vocab"]
            if checkpoint is not None
            else models.config(self.name, {"tokens": "1", **user}).vocab
        )
        self.tokenizer = generate.load_tokenizer(args.tokenizer, checkpoint, vocab)
        self.cfg = models.config(self.name, checkpoint.overrides(user) if checkpoint is not None else user)
        weights = commands.weights_choice(args)
        export.check_weights(weights)
        spec = export.ExportSpec(
            self.name,
            "decode",
            args.dtype,
            0,
            user,
            plan=args.plan,
            checkpoint=checkpoint,
            weights=weights,
            cc=args.cc,
            contract=args.contract,
            form=args.form,
        )
        progress = lambda line: print(f"exactc serve: {line}", file=sys.stderr, flush=True)  # noqa: E731
        built = programs.exported(spec, programs.Build(cc=args.cc), progress, note=progress)
        self.pool = Pool(
            lambda: library.Program(built.root, make_args=built.build.make_args()), args.handles, args.queue
        )


@dataclasses.dataclass(frozen=True)
class Completion:
    """A completions request, checked: what the decode program's loop takes."""

    ids: list[int]
    max_tokens: int
    temperature: float
    top_k: int
    top_p: float
    seed: int
    stream: bool


class Text:
    """The new tokens as text, piece by piece, as `exactc generate` prints them: the whole
    sequence decoded less what is given already (a character whose bytes come in several
    tokens is given once it is whole); without a tokenizer, each id and a space."""

    def __init__(self, tokenizer: TextTokenizer | None, ids: list[int]):
        self.tokenizer, self.ids = tokenizer, ids
        self.new: list[int] = []
        self.given = tokenizer.decode(ids).rstrip("\ufffd") if tokenizer is not None else ""

    def piece(self, token: int, last: bool = False) -> str:
        self.new.append(token)
        if self.tokenizer is None:
            return f"{token} "
        text = self.tokenizer.decode(self.ids + self.new)
        text = text if last else text.rstrip("\ufffd")
        piece, self.given = text[len(self.given) :], text
        return piece


# ---- the requests ----------------------------------------------------------------------------


async def read_json(request) -> dict:
    """The request's body as a JSON object, or a refusal (413 past MAX_BODY, else 400). A
    body too large is read to its end all the same, up to DRAINED bytes, so that the
    client, still sending it, reads the 413 rather than a broken connection."""
    declared = request.headers.get("content-length", "")
    size = int(declared) if declared.isdigit() else 0
    if size <= DRAINED:
        kept, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size <= MAX_BODY:
                kept.append(chunk)
    if size > MAX_BODY:
        message = f"the request's body is {size:,} bytes; the server takes at most {MAX_BODY:,}"
        raise Refusal(413, message, "request_too_large")
    body = b"".join(kept)
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad(f"the request's body is not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise bad("the request's body must be a JSON object")
    return document


def integer(body: dict, name: str, default: int, low: int, high: int) -> int:
    value = body.get(name, default)
    value = default if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise bad(f"{name} {value!r}: give an integer from {low} to {high}", "invalid_value")
    return value


def number(body: dict, name: str, default: float) -> float:
    value = body.get(name, default)
    value = default if value is None else value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad(f"{name} {value!r}: give a number", "invalid_value")
    return float(value)


def embedding_inputs(body: dict) -> list[str]:
    texts = body.get("input")
    texts = [texts] if isinstance(texts, str) else texts
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise bad("input: give a string or a list of strings", "invalid_input")
    if len(texts) > MAX_INPUTS:
        raise bad(f"input: {len(texts):,} strings; give at most {MAX_INPUTS:,} per request", "invalid_input")
    if body.get("encoding_format", "float") not in ("float", "base64", None):
        raise bad(f"encoding_format {body['encoding_format']!r}: give float or base64", "invalid_value")
    return texts


def prompt_ids(body: dict, generator: Generator) -> list[int]:
    """The prompt as token ids: given as ids, or text for the model's tokenizer; one prompt."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if generator.tokenizer is None:
            raise bad("prompt: this model has no tokenizer; give the prompt as a list of token ids", "invalid_prompt")
        return generator.tokenizer.encode(prompt)
    if (
        not isinstance(prompt, list)
        or not prompt
        or not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        raise bad("prompt: give a string or one list of token ids", "invalid_prompt")
    return prompt


def completion(body: dict, generator: Generator) -> Completion:
    from exactc.exporter.reference.generation import GenerationError, check_request
    from exactc.exporter.reference.sampling import SamplingError, SamplingOptions, check_options

    if body.get("n", 1) not in (1, None) or body.get("best_of", 1) not in (1, None):
        raise bad("n and best_of: the server draws one completion per request", "invalid_value")
    if body.get("stop") is not None:
        raise bad("stop: the server stops at max_tokens only", "invalid_value")
    ids = prompt_ids(body, generator)
    context = generator.cfg.tokens
    count = integer(body, "max_tokens", 16, 1, context)
    if len(ids) + count > context:
        raise bad(
            f"the prompt's {len(ids)} tokens and max_tokens {count} make {len(ids) + count} positions; the "
            f"model's context is {context}",
            "context_length_exceeded",
        )
    options = SamplingOptions(
        number(body, "temperature", 1.0), integer(body, "top_k", 0, 0, 2**63 - 1), number(body, "top_p", 1.0)
    )
    try:
        check_options(options, 0.0)
        check_request(context, generator.cfg.vocab, ids, count, None)
    except (SamplingError, GenerationError) as exc:
        raise bad(str(exc), "invalid_value") from None
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad(f"stream {stream!r}: give true or false", "invalid_value")
    return Completion(
        ids, count, options.temperature, options.top_k, options.top_p, integer(body, "seed", 0, 0, 2**64 - 1), stream
    )


def draw(asked: Completion, on_token: Callable[[int], bool]) -> Callable[[library.Program], list[int]]:
    """The work of one completion: the decode program's loop, as `exactc generate` runs it."""

    def work(program: library.Program) -> list[int]:
        got = program.generate(
            asked.ids,
            asked.max_tokens,
            temperature=asked.temperature,
            seed=asked.seed,
            top_k=asked.top_k,
            top_p=asked.top_p,
            on_token=on_token,
        )
        return got.tokens.tolist()

    return work


# ---- the endpoints ---------------------------------------------------------------------------


def served(request, kind: str):
    model = getattr(request.app.state, kind)
    if model is None:
        raise Refusal(
            404,
            f"this server has no {kind} model; start it with --{'embed' if kind == 'embedder' else 'generate'}",
            "model_not_found",
        )
    return model


async def embeddings(request):
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse

    embedder: Embedder = served(request, "embedder")
    body = await read_json(request)
    texts = embedding_inputs(body)
    work = await run_in_threadpool(embedder.embed, texts)  # tokenized off the event loop, before a handle is taken
    vectors, tokens = await pooled(embedder.pool, work)
    as_bytes = body.get("encoding_format") == "base64"
    data = [
        {
            "object": "embedding",
            "index": k,
            "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode() if as_bytes else v.tolist(),
        }
        for k, v in enumerate(vectors)
    ]
    return JSONResponse(
        {
            "object": "list",
            "data": data,
            "model": embedder.name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


def completion_document(
    generator: Generator, choice: dict, usage: dict | None = None, named: tuple[str, int] | None = None
) -> dict:
    """A completion's answer, or with `named` (its id and time) one chunk of a stream: every
    chunk of one completion carries the same id, as OpenAI's do."""
    ident, created = named or completion_name()
    return {
        "id": ident,
        "object": "text_completion",
        "created": created,
        "model": generator.name,
        "choices": [{"index": 0, "logprobs": None, **choice}],
    } | ({"usage": usage} if usage is not None else {})


async def completions(request):
    from starlette.responses import JSONResponse, StreamingResponse

    generator: Generator = served(request, "generator")
    asked = completion(await read_json(request), generator)
    if asked.stream:
        return StreamingResponse(Stream(generator, asked).events(), media_type="text/event-stream")
    tokens = await pooled(generator.pool, draw(asked, lambda token: False))
    text = Text(generator.tokenizer, asked.ids)
    words = "".join(text.piece(t, last=k == len(tokens) - 1) for k, t in enumerate(tokens))
    usage = {
        "prompt_tokens": len(asked.ids),
        "completion_tokens": len(tokens),
        "total_tokens": len(asked.ids) + len(tokens),
    }
    return JSONResponse(
        completion_document(generator, {"text": words, "token_ids": tokens, "finish_reason": "length"}, usage)
    )


def completion_name() -> tuple[str, int]:
    return f"cmpl-{time.monotonic_ns():x}", int(time.time())


class Stream:
    """A streamed completion: admitted to the pool and its loop started when the request
    is read (a refusal's status still to be sent; the place given back when the loop
    ends, whether or not the response is ever sent), its tokens heard as the C loop
    draws them."""

    def __init__(self, generator: Generator, asked: Completion):
        from starlette.concurrency import run_in_threadpool

        self.generator, self.asked = generator, asked
        self.loop = asyncio.get_running_loop()
        self.heard: asyncio.Queue = asyncio.Queue()
        self.gone = threading.Event()  # the client went away: the loop stops at its next token
        self.named = completion_name()
        generator.pool.admit()
        self.drawing = asyncio.ensure_future(run_in_threadpool(generator.pool.run, draw(asked, self.on_token)))
        self.drawing.add_done_callback(self.done)

    def on_token(self, token: int) -> bool:
        self.loop.call_soon_threadsafe(self.heard.put_nowait, token)
        return self.gone.is_set()

    def done(self, _: asyncio.Future) -> None:
        self.generator.pool.release()
        self.heard.put_nowait(None)

    async def events(self) -> AsyncIterator[str]:
        """Server-sent events, as OpenAI's API streams: a chunk per token, the last with
        its finish_reason, then `data: [DONE]`."""
        generator, text = self.generator, Text(self.generator.tokenizer, self.asked.ids)
        try:
            count = 0
            while (token := await self.heard.get()) is not None:
                count += 1
                piece = text.piece(token, last=count == self.asked.max_tokens)
                chunk = {"text": piece, "token_ids": [token], "finish_reason": None}
                yield event(completion_document(generator, chunk, named=self.named))
            self.drawing.result()
            last = {"text": "", "token_ids": [], "finish_reason": "length"}
            yield event(completion_document(generator, last, named=self.named))
            yield "data: [DONE]\n\n"
        finally:
            self.gone.set()


def event(document: dict) -> str:
    return f"data: {json.dumps(document)}\n\n"


async def list_models(request):
    from starlette.responses import JSONResponse

    names = [m.name for m in (request.app.state.embedder, request.app.state.generator) if m is not None]
    return JSONResponse(
        {
            "object": "list",
            "data": [{"id": name, "object": "model", "created": 0, "owned_by": "exactc"} for name in names],
        }
    )


async def refused(request, exc: Exception):
    from starlette.responses import JSONResponse

    assert isinstance(exc, Refusal)  # the handler of Refusal alone
    return JSONResponse(exc.body(), status_code=exc.status, headers={"retry-after": "1"} if exc.status == 429 else None)


async def http_error(request, exc):
    """Starlette's own refusals (no such path, a method the path does not take) in OpenAI's body."""
    return await refused(request, Refusal(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}"))


def application(embedder: Embedder | None, generator: Generator | None):
    """The ASGI application of the served models."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.routing import Route

    routes = [
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
    ]
    app = Starlette(routes=routes, exception_handlers={Refusal: refused, HTTPException: http_error})
    app.state.embedder, app.state.generator = embedder, generator
    return app


def listening(host: str, port: int) -> socket.socket:
    """The server's socket, bound (port 0: a free one) before the server starts, so that
    the line that names it is true. TCP_NODELAY is set on it, and Linux gives it to every
    connection accepted: an answer is written as its head and then its body, and with
    Nagle's algorithm the body waited for the client's delayed ACK (GET /v1/models took
    44 ms against 0.4 ms)."""
    try:
        sock = socket.create_server(
            (host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET, reuse_port=False
        )
    except OSError as exc:
        raise ServeError(f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc})") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def server(app):
    """A uvicorn server of `app`: server.run(sockets=[sock]) serves until stopped."""
    import uvicorn

    return uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5))


# ---- the command ---------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--embed",
        metavar="FOLDER",
        help="serve /v1/embeddings: a sentence-transformers folder (`default`: the packaged all-MiniLM-L6-v2)",
    )
    p.add_argument(
        "--generate",
        metavar="MODEL",
        help="serve /v1/completions: gpt or llama (drawn, with --set), a Hugging Face folder or a llama2.c .bin",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a config field of --generate's model; tokens=N is the context (prompt and max_tokens)",
    )
    p.add_argument("--tokenizer", metavar="PATH", help="--generate's tokenizer, as `exactc generate` takes it")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="the port (default 8000; 0: a free one, printed)")
    p.add_argument(
        "--handles",
        type=int,
        default=2,
        metavar="N",
        help="library handles per model, each its weights and arena: requests run at once (default 2)",
    )
    p.add_argument(
        "--queue",
        type=int,
        default=32,
        metavar="N",
        help="requests waiting for a handle at most; the next is refused with 429 (default 32)",
    )
    p.add_argument("--dtype", default="f32", help="the site type: f64, f32 or bf16 (default f32)")
    p.add_argument("--cc", default="cc", help="the C compiler of the programs (default cc)")
    p.add_argument("--plan", metavar="P", default="auto", help="the programs' plan, as `exactc embed` takes it")
    commands.weights_options(p)
    commands.contract_option(p)


def check_options(args: argparse.Namespace) -> None:
    if args.embed is None and args.generate is None:
        raise ServeError("give --embed FOLDER, --generate MODEL or both")
    if not 1 <= args.handles <= 64:
        raise ServeError(f"--handles {args.handles}: give an integer from 1 to 64")
    if not 0 <= args.queue <= 4096:
        raise ServeError(f"--queue {args.queue}: give an integer from 0 to 4096")
    if not 0 <= args.port <= 65535:
        raise ServeError(f"--port {args.port}: give an integer from 0 to 65535")


def build(args: argparse.Namespace):
    """The application of the options: the models' programs built (or from the cache) and
    their handles opened."""
    from exactc.exporter import types

    check_options(args)
    types.check_site(args.dtype)
    embedder = Embedder(args.embed, args) if args.embed is not None else None
    generator = Generator(args.generate, args) if args.generate is not None else None
    return application(embedder, generator)


def cmd_serve(args: argparse.Namespace) -> int:
    app = build(args)
    sock = listening(args.host, args.port)
    host, port = sock.getsockname()[:2]
    served_by = ", ".join(
        f"{route} ({model.name})"
        for route, model in (("/v1/embeddings", app.state.embedder), ("/v1/completions", app.state.generator))
        if model is not None
    )
    print(f"exactc serve: listening on http://{host}:{port}: {served_by}, /v1/models", file=sys.stderr, flush=True)
    server(app).run(sockets=[sock])
    return 0
