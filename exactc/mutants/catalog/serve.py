"""`exactc serve` (exactc/serve.py): what it answers a malformed request and one past its
queue, the seed it hands the generation loop, the bound of its pool of handles. Each is
caught by tests/test_serve.py, which asks the server with the openai package."""

from exactc.mutants.model import Mutant

SERVE = "exactc/serve.py"

MUTANTS = [
    Mutant(
        "serve-malformed-request-answered-500",
        "a body that is not JSON escapes as the parser's exception: the server answers 500 where OpenAI's clients "
        "expect 400 and its error body",
        SERVE,
        "    except (ValueError, UnicodeDecodeError) as exc:\n"
        '        raise bad(f"the request\'s body is not JSON ({exc})") from None\n',
        "    except (ValueError, UnicodeDecodeError):\n        raise\n",
        ("serve:errors",),
        family="serve",
    ),
    Mutant(
        "serve-over-queue-request-dropped",
        "a request past the queue has its connection cut once the status line is out: the client reads no 429 "
        "body and no Retry-After, only a broken connection",
        SERVE,
        "    assert isinstance(exc, Refusal)  # the handler of Refusal alone\n",
        "    assert isinstance(exc, Refusal)  # the handler of Refusal alone\n"
        "    if exc.status == 429:\n"
        "        from starlette.responses import StreamingResponse\n"
        "\n"
        "        async def cut():\n"
        '            raise ConnectionResetError("the connection dropped")\n'
        '            yield b""\n'
        "\n"
        "        return StreamingResponse(cut(), status_code=429)\n",
        ("serve:queue",),
        family="serve",
    ),
    Mutant(
        "serve-seed-ignored",
        "every completion is drawn with the key of seed 0: a request's seed no longer gives `exactc generate --seed`'s "
        "tokens",
        SERVE,
        "            seed=asked.seed,\n",
        "            seed=0,\n",
        ("serve:seed",),
        family="serve",
    ),
    Mutant(
        "serve-pool-unbounded",
        "a request that finds no free handle opens one more (the weights loaded again, an arena more) instead of "
        "waiting: the pool grows with the load",
        SERVE,
        "        program = self.free.get()\n",
        "        program = self.free.get_nowait() if not self.free.empty() else self.open()\n",
        ("serve:pool",),
        family="serve",
    ),
    Mutant(
        "serve-nagle-left-on",
        "the listening socket keeps Nagle's algorithm: an answer's body waits for the client's delayed ACK, tens of "
        "milliseconds a request",
        SERVE,
        "    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\n",
        "",
        ("serve:nagle",),
        family="serve",
    ),
    Mutant(
        "serve-stream-place-kept",
        "a streamed completion never gives its place in the pool back: once the queue's places are spent by streams, "
        "every request is refused with 429",
        SERVE,
        "        self.generator.pool.release()\n",
        "",
        ("serve:queue",),
        family="serve",
    ),
]
