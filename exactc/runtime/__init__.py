"""The C runtime the exported programs include (exactc_rt.h and its sources) and its numpy
twins. RUNTIME_DIR is the one place that says where the C files are."""

from pathlib import Path

RUNTIME_DIR = Path(__file__).resolve().parent
