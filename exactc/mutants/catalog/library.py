"""The library (runtime/exactc_api.c, model.h) and its binding (exactc/library.py): what
a handle owns, what the binding locks, what the generation loop tells its caller, what
a run refuses, what SentenceEmbedder.encode gives. Each is caught by tests/test_library.py
or tests/test_embed.py."""

from exactc.mutants.model import Mutant

API = "exactc/runtime/exactc_api.c"
BINDING = "exactc/library.py"

MUTANTS = [
    Mutant(
        "two-handles-share-one-arena",
        "every handle runs in one arena of the library's: two handles on two threads write each other's scratch",
        API,
        "    p->run(m->weights, length, ins, outs, m->arena);\n",
        "    static unsigned char *shared_arena;\n"
        "    if (shared_arena == NULL) shared_arena = exactc_aligned_block(p->arena_bytes);\n"
        "    p->run(m->weights, length, ins, outs, shared_arena);\n",
        ("library:threads",),
        family="library",
    ),
    Mutant(
        "c-runs-with-the-gil-held",
        "every program's calls run one at a time, as they do when the GIL is held while C "
        "runs (ctypes.PyDLL's way): two handles on two threads take the time of two calls",
        BINDING,
        "        self.lock = threading.Lock()  # one call at a time on this handle (its arena)\n",
        '        self.lock = globals().setdefault("_EVERY_CALL", threading.Lock())\n',
        ("library:gil",),
        family="library",
    ),
    Mutant(
        "generation-callback-called-once-too-few",
        "the generation loop does not call on_token for its last token: the caller hears one token fewer than it gets",
        "exactc/runtime/exactc_generate.c",
        "        int stopped = g->on_token != NULL && g->on_token(",
        "        int stopped = g->on_token != NULL && n < count && g->on_token(",
        ("library:generate",),
        family="library",
    ),
    Mutant(
        "api-output-room-off-by-one",
        "a run takes an output buffer one element short of the output: the network writes past the caller's buffer",
        API,
        "    if (a->nbytes < bytes) {\n",
        "    if (a->nbytes + exactc_dtype_size(exactc_kind_dtype(spec.kind)) < bytes) {\n",
        ("library:hostile",),
        family="library",
    ),
    Mutant(
        "sentence-embedder-normalizes-again",
        "encode divides the model's rows by their norm once more, as sentence-transformers' "
        "flag would: unit vectors still, but not `exactc embed`'s bits",
        "exactc/embed.py",
        "        return vectors[0] if one else vectors\n",
        "        if normalize_embeddings and rows:\n"
        "            vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True).astype(np.float32)\n"
        "        return vectors[0] if one else vectors\n",
        ("embed:encoder",),
        family="library",
    ),
]
