"""The exported directory as a library (runtime/model.h, exactc_api.c) and its binding in
this process (exactc/library.py): the bits of the program, hostile use refused with a
status and a message, two handles at once on two threads with the GIL released, and the
generation loop's tokens and callback.
"""

from __future__ import annotations

import subprocess
import threading
import time

import numpy as np
import pytest

from exactc import library, programs
from exactc.exporter import export
from exactc.verify.compare import assert_bits_equal

SMALL = {"vocab": 40, "positions": 16, "dim": 16, "heads": 2, "layers": 2, "mlp": 32, "tokens": 7}


@pytest.fixture(scope="module")
def forward(tmp_path_factory):
    """A GPT forward taking its length at run time, at bf16 (rounded in, widened out)."""
    prepared = export.ExportSpec("gpt", "forward", "bf16", 0, SMALL).prepare()
    root = export.write(prepared, tmp_path_factory.mktemp("lib") / "forward")
    return programs.make(root, programs.Build(cc="gcc")), prepared


# Wide enough that a run is C's time more than Python's (milliseconds): two threads' runs
# overlap in C, where sharing an arena or the GIL would show.
WIDE = {"vocab": 512, "positions": 128, "dim": 128, "heads": 4, "layers": 2, "mlp": 512, "tokens": 128}


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """A wide GPT forward built without OpenMP: each run on its caller's thread alone."""
    prepared = export.ExportSpec("gpt", "forward", "f32", 0, WIDE).prepare()
    root = export.write(prepared, tmp_path_factory.mktemp("lib") / "wide")
    return programs.make(root, programs.Build(cc="gcc", openmp=False)), prepared


@pytest.fixture(scope="module")
def decode(tmp_path_factory):
    prepared = export.ExportSpec("gpt", "decode", "f32", 0, SMALL).prepare()
    root = export.write(prepared, tmp_path_factory.mktemp("lib") / "decode")
    return programs.make(root, programs.Build(cc="gcc", openmp=False))


@pytest.mark.needs("gcc")
def test_the_library_gives_the_programs_bits_at_every_length(forward):
    built, prepared = forward
    program = library.Program(built.root, make_args=built.build.make_args())
    for length, (inputs, expected) in [(None, (prepared.inputs, prepared.expected)), *prepared.lengths.items()]:
        got = program.run({k: export.npy_value(v) for k, v in inputs.items()})
        for name, want in expected.items():
            assert_bits_equal(export.npy_value(want), got[name], f"{name} at T={length}", site="bf16")


@pytest.mark.needs("gcc")
def test_make_check_runs_the_example_and_compares_it_with_the_program(forward):
    built, _ = forward
    done = subprocess.run(["make", "-s", "-C", str(built.root), "CC=gcc", "check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok       example/main/logits.npy (the program's bytes)" in done.stdout
    assert "ok       example/T1/logits.npy (the program's bytes)" in done.stdout


@pytest.mark.needs("gcc")
def test_make_check_runs_the_example_of_an_entry_with_many_outputs(tmp_path):
    """loss_grad gives the loss and one gradient per parameter (17 outputs for GPT): the
    example takes as many arrays as the entry has."""
    prepared = export.ExportSpec("gpt", "loss_grad", "f32", 0, {**SMALL, "layers": 1}).prepare()
    root = export.write(prepared, tmp_path / "loss_grad")
    done = subprocess.run(["make", "-s", "-C", str(root), "CC=gcc", "OPENMP=0", "check"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(prepared.expected) > 16
    for name in prepared.expected:
        assert f"ok       example/main/{name}.npy (the program's bytes)" in done.stdout, done.stdout


@pytest.mark.needs("gcc")
def test_hostile_use_gets_a_status_and_a_message(forward):
    built, prepared = forward
    program = library.Program(built.root)
    lib, ffi = program.lib, program.ffi
    ids = prepared.inputs["input_ids"]
    # a NULL handle
    assert lib.exactc_model_run(ffi.NULL, ffi.NULL, 0, ffi.NULL, 0) == 1
    assert b"handle is NULL" in ffi.string(lib.exactc_model_message(ffi.NULL))
    assert lib.exactc_model_generate(ffi.NULL, ffi.NULL, 0, ffi.NULL, ffi.NULL, ffi.NULL, ffi.NULL, ffi.NULL) == 1
    cases = [
        (dict(input_ids=ids.astype(np.int64)), "input input_ids must be <i4; it is <i8"),
        (dict(input_ids=ids.astype(np.float32)), "input input_ids must be <i4; it is <f4"),
        (dict(input_ids=ids.reshape(1, -1)), "input input_ids must have 1 dimension(s); it has 2"),
        (dict(input_ids=np.zeros(8, np.int32)), "input input_ids: dimension 0 is 8, which is no length T in [1, 7]"),
        (dict(input_ids=np.zeros(0, np.int32)), "input input_ids: dimension 0 is 0, which is no length T in [1, 7]"),
    ]
    for given, message in cases:
        with pytest.raises(library.ProgramError) as caught:
            program.run(given)
        assert str(caught.value).startswith(message), str(caught.value)

    # the status codes themselves: dtype 3, shape 4, length 5
    def status(array, nbytes=None, room_bytes=1 << 18):
        ins, outs = ffi.new("exactc_model_array[1]"), ffi.new("exactc_model_array[1]")
        ins[0].dtype, ins[0].ndim = {np.dtype(np.int32): 2, np.dtype(np.float32): 1}[array.dtype], array.ndim
        ins[0].shape[0 : array.ndim] = list(array.shape)
        ins[0].data, ins[0].nbytes = ffi.cast("void *", array.ctypes.data), array.nbytes if nbytes is None else nbytes
        room = np.empty(room_bytes // 4, np.float32)
        outs[0].data, outs[0].nbytes = ffi.cast("void *", room.ctypes.data), room.nbytes
        return lib.exactc_model_run(program.handle, ins, 1, outs, 1)

    assert status(ids.astype(np.float32)) == 3
    assert status(ids, nbytes=ids.nbytes - 4) == 4
    assert status(np.zeros(8, np.int32)) == 5
    assert status(ids) == 0
    need = len(ids) * 40 * 4  # logits (T, 40), bf16 widened to f32
    assert status(ids, room_bytes=need - 4) == 4  # an output buffer one element short
    assert b"output logits needs %d bytes" % need in ffi.string(lib.exactc_model_message(program.handle))
    assert status(ids, room_bytes=need) == 0
    # a truncated weights buffer, and one that is not a weights file
    whole = (built.root / "weights.safetensors").read_bytes()
    for cut in (0, 7, 100, len(whole) // 2, len(whole) - 1):
        with pytest.raises(library.ProgramError) as caught:
            library.Program(built.root, weights=whole[:cut])
        assert str(caught.value).startswith(f"the weights buffer ({cut} bytes): "), str(caught.value)
    assert library.Program(built.root, weights=whole).run(input_ids=ids)["logits"].shape == (len(ids), 40)
    with pytest.raises(library.ProgramError, match="No such file"):
        library.Program(built.root, weights=built.root / "missing.safetensors")


@pytest.mark.needs("gcc")
def test_two_handles_run_at_once_on_two_threads_with_the_programs_bits(wide):
    built, prepared = wide
    first, second = library.Program(built.root), library.Program(built.root)
    cases = [prepared.inputs, *(inputs for inputs, _ in prepared.lengths.values())]
    want = [prepared.expected["logits"], *(expected["logits"] for _, expected in prepared.lengths.values())]
    errors = []

    def work(program, order):
        for _ in range(6):
            for k in order:
                if program.run(cases[k])["logits"].tobytes() != want[k].tobytes():
                    errors.append(k)

    orders = (range(len(cases)), list(reversed(range(len(cases)))))
    threads = [threading.Thread(target=work, args=(p, order)) for p, order in zip((first, second), orders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.fixture(scope="module")
def wide_decode(tmp_path_factory):
    prepared = export.ExportSpec("gpt", "decode", "f32", 0, WIDE).prepare()
    root = export.write(prepared, tmp_path_factory.mktemp("lib") / "wide-decode")
    return programs.make(root, programs.Build(cc="gcc", openmp=False))


@pytest.mark.needs("gcc")
def test_the_gil_is_released_while_c_runs(wide_decode):
    """Two handles' generations on two threads, started together, run at once: each
    token is timed as the loop hands it over, and the two calls' spans overlap, their
    tokens interleaved (cffi releases the GIL around each call, and each handle has a
    lock of its own). Were the GIL held while C runs, or every call serialized, one call
    would end before the other began."""
    handles = [library.Program(wide_decode.root) for _ in range(2)]
    start = threading.Barrier(2)
    heard: list[tuple[int, float]] = []

    def generate(k):
        start.wait()
        handles[k].generate([1, 2], 100, seed=k, on_token=lambda token: heard.append((k, time.perf_counter())))

    threads = [threading.Thread(target=generate, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans = [[at for who, at in heard if who == k] for k in range(2)]
    assert [len(times) for times in spans] == [100, 100]
    first, second = sorted(spans, key=min)
    assert min(second) < max(first), "one generation ended before the other began: the calls ran one at a time"
    switches = sum(a != b for (a, _), (b, _) in zip(heard, heard[1:]))
    assert switches >= 2, f"the two calls' tokens switched {switches} time(s): they did not run at once"


@pytest.mark.needs("gcc")
def test_generation_in_process_is_the_programs_with_each_token_heard_once(decode, tmp_path):
    program = library.Program(decode.root)
    ins = tmp_path / "in"
    ins.mkdir()
    np.save(ins / "prompt_ids.npy", np.array([5, 9], np.int32))
    np.save(ins / "seed.npy", np.array([11], np.int64))
    heard = []
    for options, kwargs in [
        (["-n", "5"], {}),
        (["-n", "5", "--temperature", "0.7", "--top-k", "6"], {"temperature": 0.7, "top_k": 6}),
    ]:
        decode.generate(ins, tmp_path / "out", options)
        want = programs.load_outputs(tmp_path / "out")
        heard.clear()
        got = program.generate([5, 9], 5, seed=11, on_token=heard.append, **kwargs)
        assert heard == got.tokens.tolist() == want["tokens"].tolist()
        assert got.probabilities.tobytes() == want["probabilities"].tobytes()
        assert got.uniforms.tobytes() == want["uniforms"].tobytes()
    # a stop: the drawn stop token is the last, heard too; on_token's true return stops as well
    stop = int(got.tokens[1])
    assert (
        program.generate([5, 9], 5, seed=11, temperature=0.7, top_k=6, stop=stop).tokens.tolist()
        == got.tokens.tolist()[: got.tokens.tolist().index(stop) + 1]
    )
    heard.clear()
    early = program.generate([5, 9], 5, seed=11, on_token=lambda t: heard.append(t) or len(heard) == 2)
    assert len(early.tokens) == 2 and heard == early.tokens.tolist()
    # refusals: an id outside the vocabulary, too many positions, not a decode entry
    with pytest.raises(library.ProgramError, match=r"prompt id 40 at index 1 is outside \[0, 40\)"):
        program.generate([5, 40], 2)
    with pytest.raises(library.ProgramError, match="make 9 positions; the program takes at most tokens=7"):
        program.generate([5, 9], 7)
    with pytest.raises(ZeroDivisionError):  # the callback's own error, once the loop has stopped
        program.generate([5, 9], 3, on_token=lambda t: 1 / 0)
