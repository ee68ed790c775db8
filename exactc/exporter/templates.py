"""The text files of an exported directory: conformance/check.sh, the Makefile (STRICT
apart from CFLAGS, the value-changing flags refused) and the README.
"""

from __future__ import annotations

from typing import Any, Mapping

from exactc.exporter import types
from exactc.runtime import STRICT_FLAGS


CHECK_SH = """\
#!/bin/sh
# Conformance: run the program on conformance/inputs and compare each output with the
# numpy reference's (conformance/expected) by exactc's rule (docs/semantics.md): every
# bit, except that any f64 or f32 NaN equals any other; bf16 values on every bit.
# conformance/compare (built by make) applies it and, for an output that differs, prints
# the first differing index, both values in hex and how many elements differ.
# When examples/run is built (make example: a C program of the library's API, model.h,
# linked with libmodel.a), it runs the same cases, and each of its outputs must be the
# program's, byte for byte.
# Usage: conformance/check.sh [PROGRAM]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
program=${1:-$here/../model}
compare=$here/compare
example=$here/../examples/run
site=@SITE@
if [ ! -x "$compare" ]; then
    echo "check.sh: $compare is not built: run make in $(dirname "$here")" >&2
    exit 2
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The main case (conformance/inputs), then one per run-time length in lengths/T<n>/:
# one process runs them all, the weights loaded once.
set -- "$here/inputs" "$out/main"
mkdir "$out/main"
for case in "$here"/lengths/T*; do
    [ -d "$case" ] || continue
    mkdir "$out/$(basename "$case")"
    set -- "$@" "$case/inputs" "$out/$(basename "$case")"
done
"$program" "$here/../weights.safetensors" "$@"
status=0
if [ -x "$example" ]; then
    # the same cases through the library, into $out/example/<case>
    for folder in "$out"/*; do
        [ -d "$folder" ] || continue
        mkdir -p "$out/example/$(basename "$folder")"
    done
    set --
    for case in "$out"/example/*; do
        name=$(basename "$case")
        if [ "$name" = main ]; then set -- "$@" "$here/inputs" "$case"
        else set -- "$@" "$here/lengths/$name/inputs" "$case"; fi
    done
    "$example" "$here/../weights.safetensors" "$@"
fi
compare_case() {  # expected folder, output folder, label
    for expected in "$1"/*.npy; do
        name=$(basename "$expected")
        if "$compare" --site "$site" "$expected" "$2/$name"; then
            echo "ok       $3$name"
        else
            status=1
        fi
    done
}
compare_case "$here/expected" "$out/main" ""
for case in "$here"/lengths/T*; do
    [ -d "$case" ] || continue
    compare_case "$case/expected" "$out/$(basename "$case")" "$(basename "$case")/"
done
for case in "$out"/example/*; do
    [ -d "$case" ] || continue
    for expected in "$out/$(basename "$case")"/*.npy; do
        name=$(basename "$expected")
        label="example/$(basename "$case")/$name"
        if cmp -s "$expected" "$case/$name"; then echo "ok       $label (the program's bytes)"; continue; fi
        echo "DIFFERS  $label: examples/run's output is not the program's"
        status=1
    done
done
exit $status
"""

# The flags that let gcc or clang change a floating-point value, from the floating-point
# sections of their manuals (gcc: Optimize Options and x86 Options; clang: Controlling
# Floating-Point Behavior). The exported Makefile refuses each (its UNSAFE line; `%` is
# make's wildcard). Allowed, since they only make the compiler more careful or touch no
# value: -frounding-math, -fsignaling-nans, -ffloat-store, -fno-math-errno,
# -fno-trapping-math, -ffp-exception-behavior=..., -fexcess-precision=standard.
VALUE_CHANGING_FLAGS = (
    # whole modes
    "-ffast-math", "-Ofast", "-ffp-model=%",
    # their parts: reassociation, reciprocals, no NaN, infinity or signed zero, approximate functions
    "-funsafe-math-optimizations", "-fassociative-math", "-freciprocal-math", "-fno-signed-zeros",
    "-ffinite-math-only", "-fno-honor-nans", "-fno-honor-infinities", "-fapprox-func",
    # contraction into fused multiply-adds (one rounding where the spec has two)
    "-ffp-contract=fast", "-ffp-contract=on", "-ffp-contract=fast-honor-pragmas",
    # constants and intermediates at another precision
    "-fsingle-precision-constant", "-fexcess-precision=fast", "-fexcess-precision=16",
    "-ffp-eval-method=double", "-ffp-eval-method=extended",
    "-mfpmath=387", "-mfpmath=387+sse", "-mfpmath=sse+387", "-mfpmath=both",
    # subnormals flushed to zero
    "-mdaz-ftz", "-fdenormal-fp-math=preserve-sign", "-fdenormal-fp-math=positive-zero",
    "-fdenormal-fp-math=dynamic", "-fdenormal-fp-math-f32=preserve-sign",
    "-fdenormal-fp-math-f32=positive-zero", "-fdenormal-fp-math-f32=dynamic",
    # approximate reciprocals and square roots
    "-mrecip", "-mrecip=%",
    # complex arithmetic without the C rules
    "-fcx-limited-range", "-fcx-fortran-rules", "-fcomplex-arithmetic=basic",
    "-fcomplex-arithmetic=improved", "-fcomplex-arithmetic=promoted",
)

MAKEFILE = """\
# Build the exported program.
#   make                 with OpenMP (-fopenmp), for this machine's CPU (-march=native): the
#                        program, the comparer and libmodel.so (the same objects)
#   make OPENMP=0        without
#   make CC=clang        any C11 compiler
#   make CHECKING=1      the checking build (model-checking): NaN-filled arena, bounds
#                        checked, the arena peak reached reported on stderr, and with
#                        EXACTC_TRACE_DIR set, each layer's output written there
#   make lib             libmodel.a and libmodel.so: the network as a C library (model.h)
#   make example         examples/run, a C program of the library (linked with libmodel.a)
#   make check           build (the example too), then conformance/check.sh
#   make -j              compile the sources in parallel
#
# Each source compiles to an object in build/<n>/, n a checksum of the compile line: a
# build with other flags, another compiler or OPENMP=0 gets its own folder, so an
# object is never reused under flags it was not compiled with, and switching back and
# forth compiles nothing twice.
# STRICT holds the flags bit identity rests on: never change them (`make STRICT=...` is
# ignored). CFLAGS is yours (-O3, -march=..., ...): any value gives the same bits.
# STRICT comes last on every compiler line, so that no flag before it overrides it, and
# a flag that lets the compiler change values (fast-math and its parts, contraction into
# FMAs) is refused with a message, whichever variable brings it. The default builds for
# this machine's CPU (-march=native, where the compiler accepts it): the vector
# instructions it has, the same bits; `make CFLAGS=-O2` builds a program for any CPU of
# the architecture.
override STRICT := @STRICT@
NATIVE  := $(shell $(CC) $(STRICT) -march=native -x c -c -o /dev/null /dev/null 2>/dev/null && echo -march=native)
# With AVX-512, gcc and clang still prefer 256-bit vectors under -march=native; the laned
# kernels run faster in 512-bit ones (a lane chunk of 16 floats is one register).
WIDE    := $(if $(NATIVE),$(shell $(CC) $(STRICT) -march=native -dM -E -x c /dev/null 2>/dev/null | grep -q __AVX512F__ && \
             $(CC) $(STRICT) -mprefer-vector-width=512 -x c -c -o /dev/null /dev/null 2>/dev/null && echo -mprefer-vector-width=512))
CFLAGS  ?= -O2 $(NATIVE) $(WIDE)
WARN    ?= -Wall -Wextra
OPENMP  ?= 1
CHECKING ?= 0

ifeq ($(OPENMP),1)
OMPFLAGS := -fopenmp
endif
ifeq ($(CHECKING),1)
PROGRAM := model-checking
DEFINES := -DEXACTC_CHECKING
else
PROGRAM := model
endif

# The flags that let the compiler change a value (gcc's and clang's manuals, their
# floating-point options; exactc/exporter/export.py's VALUE_CHANGING_FLAGS says why each):
# refused whichever variable brings them.
UNSAFE  := @UNSAFE@
REFUSED := $(filter $(UNSAFE),$(CC) $(CFLAGS) $(WARN) $(OMPFLAGS) $(DEFINES))
ifneq ($(REFUSED),)
$(error $(REFUSED) would change the program's bits; exactc's outputs rest on STRICT ($(STRICT)): build without it)
endif

# The library is every object but main's (exactc_main.c); the program links them all.
LIB_SOURCES := model.c exactc_host.c exactc_libm.c exactc_npy.c exactc_safetensors.c exactc_keys.c exactc_sample.c \\
               exactc_generate.c exactc_train.c exactc_api.c $(sort $(wildcard kernels/*.c))
SOURCES := exactc_main.c $(LIB_SOURCES)
HEADERS := exactc_rt.h exactc_fma.h exactc_dot.h exactc_keys.h exactc_sample.h exactc_generate.h model.h kernels.h
COMPARE := conformance/compare
COMPARE_SOURCES := exactc_compare.c exactc_npy.c

# The compile lines, and the object folders named by their checksums.
# Every object also goes into libmodel.so: position-independent, and only model.h's
# functions visible outside it (two models' libraries load into one process side by side).
LIBFLAGS := -fPIC -fvisibility=hidden
COMPILE := $(CC) $(CFLAGS) $(WARN) $(OMPFLAGS) $(DEFINES) $(LIBFLAGS) $(STRICT) -I.
COMPARE_COMPILE := $(CC) $(CFLAGS) $(WARN) $(STRICT) -I.
OBJ := build/$(firstword $(shell echo '$(COMPILE)' | cksum))
COMPARE_OBJ := build/$(firstword $(shell echo '$(COMPARE_COMPILE)' | cksum))
OBJECTS := $(SOURCES:%.c=$(OBJ)/%.o)
LIB_OBJECTS := $(LIB_SOURCES:%.c=$(OBJ)/%.o)
COMPARE_OBJECTS := $(COMPARE_SOURCES:%.c=$(COMPARE_OBJ)/%.o)

.PHONY: all lib example check clean
all: $(PROGRAM) $(COMPARE) libmodel.so

$(PROGRAM): $(OBJECTS)
\t$(CC) $(CFLAGS) $(OMPFLAGS) -o $@ $(OBJECTS) -lm

lib: libmodel.a libmodel.so

libmodel.a: $(LIB_OBJECTS)
\trm -f $@
\t$(AR) rcs $@ $(LIB_OBJECTS)

libmodel.so: $(LIB_OBJECTS)
\t$(CC) $(CFLAGS) $(OMPFLAGS) -shared -o $@ $(LIB_OBJECTS) -lm

example: examples/run

examples/run: examples/run.c model.h exactc_rt.h libmodel.a
\t$(CC) $(CFLAGS) $(WARN) $(OMPFLAGS) $(STRICT) -I. -o $@ examples/run.c libmodel.a -lm

$(OBJ)/%.o: %.c $(HEADERS)
\t@mkdir -p $(@D)
\t$(COMPILE) -c -o $@ $<

# The conformance comparer: the spec's comparison, for check.sh (no Python needed).
$(COMPARE): $(COMPARE_OBJECTS)
\t$(CC) $(CFLAGS) -o $@ $(COMPARE_OBJECTS) -lm

ifneq ($(COMPARE_OBJ),$(OBJ))
$(COMPARE_OBJ)/%.o: %.c exactc_rt.h exactc_fma.h
\t@mkdir -p $(@D)
\t$(COMPARE_COMPILE) -c -o $@ $<
endif

check: $(PROGRAM) $(COMPARE) example
\t./conformance/check.sh ./$(PROGRAM)

clean:
\trm -rf model model-checking $(COMPARE) build libmodel.a libmodel.so examples/run
""".replace("@STRICT@", " ".join(STRICT_FLAGS)).replace("@UNSAFE@", " \\\n           ".join(
    " ".join(VALUE_CHANGING_FLAGS[i:i + 5]) for i in range(0, len(VALUE_CHANGING_FLAGS), 5)))


SCOP_MAKEFILE = """\
# Build scop_check, the SCoP directory's driver: every nest of nests/ run on the
# reference's inputs and compared with its outputs (`make && ./scop_check`).
#   make CC=clang        any C11 compiler
# STRICT holds the flags bit identity rests on (`make STRICT=...` is ignored). CFLAGS is yours.
override STRICT := $(strip @STRICT@)
CFLAGS  ?= -O2
WARN    ?= -Wall -Wextra
NESTS   := $(sort $(wildcard nests/*.c))
SOURCES := scop_check.c scop_rt.c exactc_libm.c exactc_npy.c $(NESTS)
OBJECTS := $(SOURCES:%.c=build/%.o) build/exactc_compare.o

.PHONY: all clean
all: scop_check

scop_check: $(OBJECTS)
\t$(CC) $(CFLAGS) -o $@ $(OBJECTS) -lm

build/%.o: %.c exactc_rt.h exactc_fma.h exactc_scop.h scop_nests.h
\t@mkdir -p $(@D)
\t$(CC) $(CFLAGS) $(WARN) $(STRICT) -I. -c -o $@ $<

# The comparison rule of conformance/compare, linked in: its main renamed.
build/exactc_compare.o: exactc_compare.c exactc_rt.h exactc_fma.h
\t@mkdir -p $(@D)
\t$(CC) $(CFLAGS) $(WARN) $(STRICT) -I. -Dmain=exactc_compare_main -c -o $@ $<

clean:
\trm -rf scop_check build actual/*.npy
""".replace("@STRICT@", " ".join(STRICT_FLAGS))


def readme(m: Mapping[str, Any]) -> str:
    ins = "\n".join(f"| `{k}` | input | {tuple(v['shape'])} | {_dtype_doc(v['kind'], m['dtype'], True)} |"
                    for k, v in m["inputs"].items())
    outs = "\n".join(f"| `{k}` | output | {tuple(v['shape'])} | {_dtype_doc(v['kind'], m['dtype'], False)} |"
                     for k, v in m["outputs"].items())
    notes = [f"`{k}` holds the run-time length T (1 to {m['max_length']}) as its value.\n"
             for k, v in m["inputs"].items() if v.get("value") == "T"]
    notes += [f"`{k}` is written in place over `{v['written_over']}`: the program writes its new rows where\n"
              f"`{v['written_over']}` lies, and `{k}.npy` is that buffer after the run.\n"
              for k, v in m["outputs"].items() if "written_over" in v]
    config = ", ".join(f"{k}={v}" for k, v in (m["config"] or {}).items())
    ckpt = m.get("checkpoint")
    origin = (f"parameters from the checkpoint `{ckpt['name']}` ({ckpt['format']}), inputs drawn from seed "
              f"{m['seed']}" if ckpt else f"parameters drawn from seed {m['seed']}")
    if m.get("planned"):
        threads = ("This export follows a plan: the nests it splits run their pieces on an\nOpenMP "
                   "team (one after another without OpenMP); the others run on the calling thread.")
    else:
        threads = ("This export runs each nest over its whole range on the calling thread; a\nplan "
                   "(`exactc export --plan`) splits them.")
    return f"""\
# {m['model']} `{m['entry']}` at {m['dtype']}, exported by exactc

A standalone C11 program: no Python, no BLAS, no platform libm in its results. Its
outputs are the bit-for-bit twins of exactc's numpy reference for the same weights and
inputs, on any number of threads, built with gcc or clang, at any optimization level,
with or without OpenMP.

- model: `{m['model']}` ({config}), entry `{m['entry']}`, site type `{m['dtype']}`,
  {origin} ({m['parameters']} values)
- host: {m['host']}; {m['kernels']} kernels, {m['nests']} nest functions, {m['launches']} launches per run
- arena: {m['arena_peak']} bytes (the peak computed from the host's structure; the
  straight-line host would need {m['straight_line_arena_peak']})

## Build

    make                # gcc or cc, with OpenMP, for this machine's CPU (-O2 -march=native)
    make OPENMP=0       # without OpenMP
    make CC=clang
    make CFLAGS=-O2     # for any CPU of the architecture (x86-64: SSE2 only, slower)

The Makefile keeps the flags bit identity rests on (`STRICT`: `{" ".join(STRICT_FLAGS)}`)
apart from `CFLAGS` and puts them last on every compiler line, so no other flag
overrides them; the default `CFLAGS` adds `-march=native` where the compiler accepts it
(and `-mprefer-vector-width=512` on a CPU with AVX-512): the same bits, the vector
instructions of the CPU at hand. It refuses, with a message, a
flag that lets the compiler change values (`-ffast-math`, `-Ofast`,
`-funsafe-math-optimizations`, `-fassociative-math`, `-ffp-contract=fast` and the like),
and the kernels refuse a target whose `FLT_EVAL_METHOD` is not 0.

## Run

    ./model weights.safetensors INPUT_DIR OUTPUT_DIR [INPUT_DIR OUTPUT_DIR ...]

reads `INPUT_DIR/<name>.npy` for each input and writes `OUTPUT_DIR/<name>.npy` for each
output; more pairs run the network once each with the weights loaded once:

| name | | shape | .npy dtype |
|---|---|---|---|
{ins}
{outs}

{"".join(notes) + chr(10) if notes else ""}bf16 values travel through .npy as f32: a bf16 output is written widened to f32 (exact,
so the bytes still compare); a bf16 input is read as f32 and rounded to bf16 (nearest,
ties to even) as the reference rounds it. A missing or mis-shaped input or tensor is
refused with a message naming it, and the exit status is non-zero.

`EXACTC_REPEAT=N ./model ...` runs the network N times and prints the time per run.

## Library

    make lib            # libmodel.a and libmodel.so (model.h)
    make example        # examples/run: this command line through the library

`model.h` is the network as a C library: open a handle on the weights (a file, or a
.safetensors image in memory), run the entry on arrays with their shapes, generate with
a per-token callback (a decode entry), close; every call returns a status and a
message. Two handles run at once on two threads. `make check` builds the example too,
and conformance/check.sh compares its outputs with the program's, byte for byte.

## Threads

`OMP_NUM_THREADS` sets the thread count of an OpenMP build, `OMP_WAIT_POLICY=passive`
keeps idle threads from spinning. The outputs do not depend on either: a thread split
divides a loop into pieces that write disjoint elements, and every reduction runs in
index order in its accumulator type (docs/semantics.md in exactc). {threads}

## Check

    make check          # or: conformance/check.sh [PROGRAM]

runs the program on `conformance/inputs` and compares every output with
`conformance/expected`, written by the numpy reference: every bit, except that any f64
or f32 NaN equals any other (their payload and sign are not specified); bf16 values on
every bit. `conformance/compare` (built by `make`) does the comparing and, for an output
that differs, prints its first differing index, both values in hex and decimal, and how
many elements differ. `make CHECKING=1`
builds `model-checking`: its arena is filled with NaN before the run and every buffer
again when it is released, allocations are bounds-checked, and it prints the arena peak
it reaches, which equals the computed one.

## What is guaranteed

Every bit of every output equals the reference's (docs/semantics.md in exactc defines
each primitive's rounded operations), except the payload and sign of an f64/f32 NaN.
That holds for any `CFLAGS`, compiler, thread count and OpenMP setting, given the
`STRICT` flags, IEEE binary32/binary64 arithmetic and `FLT_EVAL_METHOD == 0`.
"""


def _dtype_doc(kind: str, site: str, is_input: bool) -> str:
    if kind == "i32":
        return f"int32 (`{types.STORAGE['i32'].npy}`)"
    text = f"{'f32' if site == 'bf16' else site} (`{types.storage(site).npy}`)"
    if site == "bf16":
        text += ", rounded to bf16" if is_input else ", bf16 values widened"
    return text
