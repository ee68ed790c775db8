"""The C runtime the exported programs include (exactc_rt.h and its sources) and its numpy
twins. RUNTIME_DIR is the one place that says where the C files are; STRICT_FLAGS the one
place that says how every C file exactc prints or ships is compiled."""

from pathlib import Path

RUNTIME_DIR = Path(__file__).resolve().parent

# The flags bit identity rests on (docs/semantics.md; docs/design.md, principle 4): C11 without
# contraction of a*b+c into an FMA and without fast-math. The harness's builds
# (verify/build.py) and every exported Makefile's STRICT line take them from here.
STRICT_FLAGS = ("-std=c11", "-ffp-contract=off", "-fno-fast-math")
