"""An exported directory's library in this process: `exactc.Program(DIR)`.

    program = exactc.Program("out/gpt")                 # libmodel.so (make lib) of the directory
    outputs = program.run(input_ids=ids)                # numpy arrays in, numpy arrays out
    result = program.generate(prompt_ids, 16, temperature=0.8, seed=7, on_token=print)

    model = exactc.SentenceEmbedder()                   # exactc.embed's: the packaged all-MiniLM-L6-v2
    vectors = model.encode(["a sentence", "another"], batch_size=32, normalize_embeddings=True)

The library is loaded with cffi in ABI mode (ffi.dlopen): model.h is the same in every
exported directory, so its declarations are written here once and nothing is compiled
when a program is loaded (API mode would build an extension module per directory); cffi
releases the GIL around every call in either mode, so two programs (two handles, each
with its own arena) run at once on two threads. A handle runs one call at a time: each
Program holds a lock of its own around its calls. Inputs are read where numpy holds them
when they are C-contiguous and aligned (else one contiguous copy); outputs are written
into arrays allocated here and returned as they are. The outputs carry the program's
bits: `exactc embed` and `exactc generate --backend c` run through this module.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:  # numpy and cffi are imported when a program is loaded
    import numpy as np

LIBRARY = "libmodel.so"

# model.h's declarations, as cffi reads them (no preprocessor: the macros left out).
CDEF = """
typedef struct exactc_model exactc_model;
typedef int exactc_model_status;
typedef struct { int dtype; int ndim; int64_t shape[8]; void *data; size_t nbytes; } exactc_model_array;
typedef struct { const char *name; int dtype; int ndim; int64_t shape[8]; int64_t per_length[8];
                 const char *written_over; } exactc_model_spec;
typedef int (*exactc_model_on_token)(void *user, int64_t index, int32_t token, double probability);
typedef struct { int64_t count; int64_t stop; double temperature; int64_t top_k; double top_p; uint64_t seed;
                 const uint32_t *key; exactc_model_on_token on_token; void *user; } exactc_model_generation;
exactc_model_status exactc_model_open(const char *path, exactc_model **model, char *err, size_t errlen);
exactc_model_status exactc_model_open_memory(const void *bytes, size_t len, exactc_model **model, char *err,
                                             size_t errlen);
void exactc_model_close(exactc_model *model);
const char *exactc_model_message(const exactc_model *model);
const char *exactc_model_name(const exactc_model *model);
const char *exactc_model_entry(const exactc_model *model);
int64_t exactc_model_max_length(const exactc_model *model);
size_t exactc_model_input_count(const exactc_model *model);
size_t exactc_model_output_count(const exactc_model *model);
exactc_model_status exactc_model_input(const exactc_model *model, size_t index, exactc_model_spec *spec);
exactc_model_status exactc_model_output(const exactc_model *model, size_t index, exactc_model_spec *spec);
exactc_model_status exactc_model_run(exactc_model *model, const exactc_model_array *inputs, size_t input_count,
                                     exactc_model_array *outputs, size_t output_count);
exactc_model_status exactc_model_generate(exactc_model *model, const int32_t *prompt, int64_t prompt_length,
                                          const exactc_model_generation *options, int32_t *tokens,
                                          double *probabilities, double *uniforms, int64_t *generated);
exactc_model_status exactc_model_timing(const exactc_model *model, double *prompt_seconds, double *seconds);
"""

DTYPES = ("<f8", "<f4", "<i4", "<i8")  # model.h's EXACTC_MODEL_F64, _F32, _I32, and int64 (refused by name)


class ProgramError(ValueError):
    """A refusal of the library (a wrong dtype, shape or length; a weights file it does
    not take): its one-line message."""


@dataclasses.dataclass(frozen=True)
class Spec:
    """An input or output of the entry: dimension d is shape[d] + per_length[d] * T."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    per_length: tuple[int, ...]
    written_over: str | None = None

    def at(self, length: int) -> tuple[int, ...]:
        return tuple(b + a * length for b, a in zip(self.shape, self.per_length))


@dataclasses.dataclass
class Generated:
    """What a generation drew: the new tokens (a drawn stop token included), each token's
    probability and each step's uniform; the loop's seconds (its prompt's, in all)."""

    tokens: np.ndarray
    probabilities: np.ndarray
    uniforms: np.ndarray
    prompt_seconds: float
    seconds: float


_FFI: list[Any] = []  # one cffi.FFI for every library: the declarations are model.h's


def _ffi() -> Any:
    if not _FFI:
        import cffi

        ffi = cffi.FFI()
        ffi.cdef(CDEF)
        _FFI.append(ffi)
    return _FFI[0]


def library_path(root: Path, make_args: Sequence[str] = ()) -> Path:
    """DIR/libmodel.so, built (`make lib`, with the program's make arguments: its objects
    are the library's) if it is not there; one builder at a time (a lock on the folder)."""
    import fcntl

    path = root / LIBRARY
    if path.is_file():
        return path
    if not (root / "model.h").is_file():
        raise ProgramError(f"{root}: not an exported directory with a library (no model.h)")
    with open(root / ".exactc-lib.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.is_file():
            done = subprocess.run(["make", "-s", "-C", str(root), *make_args, "lib"], capture_output=True, text=True)
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
                raise ProgramError(f"make -C {root} lib failed: {last}")
    return path


class Program:
    """A handle on an exported directory's library: the weights loaded once, the entry run
    on numpy arrays in this process."""

    def __init__(self, root: str | Path, weights: str | Path | bytes | None = None, make_args: Sequence[str] = ()):
        """`weights`: a .safetensors path, or its bytes (read where they lie); default the
        directory's weights.safetensors. `make_args`: the build's (programs.Build), if the
        library is still to be made."""
        self.root = Path(root)
        ffi = self.ffi = _ffi()
        # In an application's process, an OpenMP team that spins between runs takes the
        # cores from everything else (and from itself on a busy machine: a 4-token
        # sentence took 0.02 to 2.4 s of wall time, spinning, against 0.02 s passive).
        # libgomp reads this once, when the first library loads it; the bits do not
        # depend on it, and a value the user set is kept.
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")
        self.lib = ffi.dlopen(str(library_path(self.root, make_args).resolve()))
        handle, err = ffi.new("exactc_model **"), ffi.new("char[4096]")
        if isinstance(weights, (bytes, bytearray, memoryview)):
            buffer = ffi.from_buffer(weights)
            status = self.lib.exactc_model_open_memory(buffer, len(buffer), handle, err, len(err))
        else:
            path = Path(weights) if weights is not None else self.root / "weights.safetensors"
            status = self.lib.exactc_model_open(str(path).encode(), handle, err, len(err))
        if status != 0:
            raise ProgramError(ffi.string(err).decode(errors="replace"))
        self.handle = ffi.gc(handle[0], self.lib.exactc_model_close)
        self.lock = threading.Lock()  # one call at a time on this handle (its arena)
        self.name = ffi.string(self.lib.exactc_model_name(self.handle)).decode()
        self.entry = ffi.string(self.lib.exactc_model_entry(self.handle)).decode()
        self.max_length = int(self.lib.exactc_model_max_length(self.handle))
        self.inputs = [
            self._spec(self.lib.exactc_model_input, i) for i in range(self.lib.exactc_model_input_count(self.handle))
        ]
        self.outputs = [
            self._spec(self.lib.exactc_model_output, i) for i in range(self.lib.exactc_model_output_count(self.handle))
        ]

    def _spec(self, describe: Callable, index: int) -> Spec:
        ffi, spec = self.ffi, self.ffi.new("exactc_model_spec *")
        describe(self.handle, index, spec)
        over = ffi.string(spec.written_over).decode() if spec.written_over != ffi.NULL else None
        return Spec(
            ffi.string(spec.name).decode(),
            DTYPES[spec.dtype],
            tuple(spec.shape[0 : spec.ndim]),
            tuple(spec.per_length[0 : spec.ndim]),
            over,
        )

    def _message(self) -> str:
        return self.ffi.string(self.lib.exactc_model_message(self.handle)).decode(errors="replace")

    def run(self, inputs: dict[str, Any] | None = None, **named: Any) -> dict[str, np.ndarray]:
        """One run of the entry on its inputs, by name: the outputs by name, each at the
        run-time length the inputs give. A refusal is a ProgramError."""
        import numpy as np

        given = {**(inputs or {}), **named}
        missing = [s.name for s in self.inputs if s.name not in given]
        extra = sorted(set(given) - {s.name for s in self.inputs})
        if missing or extra:
            raise ProgramError(
                f"{self.name}.{self.entry} takes {', '.join(s.name for s in self.inputs)}"
                + (f"; {', '.join(missing)} missing" if missing else "")
                + (f"; no input named {', '.join(extra)}" if extra else "")
            )
        arrays = [np.require(np.asarray(given[s.name]), requirements=("C", "A")) for s in self.inputs]
        ffi = self.ffi
        ins = ffi.new("exactc_model_array[]", max(len(arrays), 1))
        for k, a in enumerate(arrays):
            ins[k].dtype = DTYPES.index(a.dtype.str) if a.dtype.str in DTYPES else -1
            ins[k].ndim = a.ndim if a.ndim <= 8 else -1
            ins[k].shape[0 : min(a.ndim, 8)] = list(a.shape[:8])
            ins[k].data = ffi.cast("void *", a.ctypes.data)
            ins[k].nbytes = a.nbytes
        room = [np.empty(max(int(np.prod(s.at(self.max_length))), 1), s.dtype) for s in self.outputs]
        outs = ffi.new("exactc_model_array[]", max(len(room), 1))
        for k, r in enumerate(room):
            outs[k].data = ffi.cast("void *", r.ctypes.data)
            outs[k].nbytes = r.nbytes
        with self.lock:
            status = self.lib.exactc_model_run(self.handle, ins, len(arrays), outs, len(room))
            if status != 0:
                raise ProgramError(self._message())
        return {
            s.name: r[: int(np.prod(shape))].reshape(shape)
            for s, r, shape in (
                (s, r, tuple(outs[k].shape[0 : outs[k].ndim])) for k, (s, r) in enumerate(zip(self.outputs, room))
            )
        }

    def generate(
        self,
        prompt_ids: Sequence[int],
        n: int,
        temperature: float = 1.0,
        seed: int = 0,
        top_k: int = 0,
        top_p: float = 1.0,
        stop: int | None = None,
        key: Sequence[int] | None = None,
        on_token: Callable[[int], Any] | None = None,
    ) -> Generated:
        """A decode entry's whole generation (docs/semantics.md section 16, the program's
        `generate` loop): up to `n` new tokens after `prompt_ids`, the key key_from_seed(seed)
        (or `key`, its 8 words); `on_token(token)` hears each as it is drawn (a true return
        stops the loop after it). A refusal is a ProgramError."""
        import numpy as np

        ffi = self.ffi
        prompt = np.ascontiguousarray(np.asarray(prompt_ids, dtype=np.int64))
        if prompt.ndim != 1 or ((prompt < -(2**31)) | (prompt >= 2**31)).any():
            raise ProgramError("give the prompt as a 1-d sequence of token ids")
        prompt = prompt.astype(np.int32)
        count = max(int(n), 0)
        tokens, probabilities, uniforms = (
            np.empty(max(count, 1), np.int32),
            np.empty(max(count, 1)),
            np.empty(max(count, 1)),
        )
        failure: list[BaseException] = []

        def heard(user: Any, index: int, token: int, probability: float) -> int:
            return 1 if on_token is not None and on_token(int(token)) else 0

        def refused(exc_type: type, exc: BaseException, tb: Any) -> None:
            failure.append(exc)  # raised again once the loop has stopped

        callback = ffi.callback("int(void *, int64_t, int32_t, double)", heard, onerror=refused, error=1)
        words = ffi.new("uint32_t[8]", [int(w) & 0xFFFFFFFF for w in key]) if key is not None else ffi.NULL
        options = ffi.new(
            "exactc_model_generation *",
            {
                "count": int(n),
                "stop": -1 if stop is None else int(stop),
                "temperature": float(temperature),
                "top_k": int(top_k),
                "top_p": float(top_p),
                "seed": int(seed) % 2**64,
                "key": words,
                "on_token": callback if on_token is not None else ffi.NULL,
            },
        )
        generated = ffi.new("int64_t *")
        timing = ffi.new("double[2]")
        with self.lock:
            status = self.lib.exactc_model_generate(
                self.handle,
                ffi.cast("int32_t *", prompt.ctypes.data),
                len(prompt),
                options,
                ffi.cast("int32_t *", tokens.ctypes.data),
                ffi.cast("double *", probabilities.ctypes.data),
                ffi.cast("double *", uniforms.ctypes.data),
                generated,
            )
            message = self._message() if status != 0 else ""
            self.lib.exactc_model_timing(self.handle, timing, timing + 1)
        if failure:
            raise failure[0]
        if status != 0:
            raise ProgramError(message)
        drawn = int(generated[0])
        return Generated(tokens[:drawn], probabilities[:drawn], uniforms[:drawn], float(timing[0]), float(timing[1]))
