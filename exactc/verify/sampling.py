"""The runtime's sampler (runtime/exactc_sample.c) against the numpy reference
(exporter/reference/sampling.py): the same token, the same probability bits, or the same
refusal.

`load_sampler()` compiles exactc_sample.c with the runtime sources it calls (exactc_exp,
exactc_fail); `compare_cases` runs a batch of SamplingCases through both and returns one
outcome per case, with a report that reproduces a failure: the case as Python, the
logits in hex, both results with the probability in hex, the build.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from exactc.exporter.reference.sampling import RULES, SamplingError, SamplingOptions, sample
from exactc.strategies.sampling import SamplingCase
from exactc.verify.build import BuildOptions, load_library, runtime_source
from exactc.verify.compare import hex_dump

SAMPLER_CDEF = """
typedef struct { double temperature; int64_t top_k; double top_p; } exactc_sampling;
typedef struct { int64_t token; double probability; } exactc_sample_result;
size_t exactc_sample_scratch_bytes(int64_t n);
int exactc_sample(const double *logits, int64_t n, const exactc_sampling *options, double u,
                  void *scratch, exactc_sample_result *out, char *err, size_t errlen);
"""
# The runtime sources exactc_sample.c needs: exp from the libm, exactc_fail from the .npy reader.
SAMPLER_SOURCES = ("exactc_sample.c", "exactc_libm.c", "exactc_npy.c")
ERR_LEN = 256


@dataclasses.dataclass
class SamplerC:
    """exactc_sample.c, loaded: `sample` mirrors the reference's `sample`."""

    library: object

    def sample(self, logits: np.ndarray, options: SamplingOptions, u: float) -> tuple[int, float]:
        """The C sampler on logits (V,) of any site type (widened here, exactly, as the
        runtime expects); a refusal raises SamplingError with the rule C named."""
        ffi, lib = self.library.ffi, self.library.lib
        x = np.ascontiguousarray(np.asarray(logits).astype(np.float64)).reshape(-1)
        n = x.size
        scratch = np.empty(max(int(lib.exactc_sample_scratch_bytes(n)) // 8, 1), dtype=np.float64)
        opts = ffi.new("exactc_sampling *", {"temperature": options.temperature,
                                             "top_k": int(options.top_k), "top_p": options.top_p})
        out = ffi.new("exactc_sample_result *")
        err = ffi.new(f"char[{ERR_LEN}]")
        status = lib.exactc_sample(ffi.cast("const double *", x.ctypes.data), n, opts, u,
                                   ffi.cast("void *", scratch.ctypes.data), out, err, ERR_LEN)
        if status != 0:
            if not 1 <= status <= len(RULES):
                raise AssertionError(f"exactc_sample returned the unknown status {status}")
            raise SamplingError(RULES[status - 1], ffi.string(err).decode())
        return int(out.token), float(out.probability)


def load_sampler(options: BuildOptions = BuildOptions()) -> SamplerC:
    sources = {name: runtime_source(name) for name in SAMPLER_SOURCES}
    return SamplerC(load_library(sources, SAMPLER_CDEF, options))


@dataclasses.dataclass
class SamplingOutcome:
    """status: "equal", "mismatch" (tokens or probabilities differ) or "refusal" (one
    side refused, or they named different rules)."""

    case: SamplingCase
    status: str
    report: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "equal"


def _result(fn, logits, case: SamplingCase):
    try:
        token, p = fn(logits, case.options, case.u)
        return ("token", token, float(p).hex())
    except SamplingError as error:
        return ("refused", error.rule, str(error))


def _show(result) -> str:
    if result[0] == "token":
        return f"token {result[1]}, probability {result[2]}"
    return f"refused ({result[1]}): {result[2]}"


def compare_case(sampler: SamplerC, case: SamplingCase) -> SamplingOutcome:
    logits = case.logits.make()
    expected, actual = _result(sample, logits, case), _result(sampler.sample, logits, case)
    if expected[:2] == actual[:2] and (expected[0] == "refused" or expected[2] == actual[2]):
        return SamplingOutcome(case, "equal")
    status = "mismatch" if expected[0] == actual[0] == "token" else "refusal"
    report = "\n".join([
        "C sampler != reference sampler",
        f"  reference: {_show(expected)}",
        f"  C:         {_show(actual)}",
        f"  reproduce: {case.describe()}",
        f"  logits: {hex_dump(logits, limit=512)}",
        f"  build: {sampler.library.options.describe()}",
    ])
    return SamplingOutcome(case, status, report)


def compare_cases(sampler: SamplerC, cases: Sequence[SamplingCase]) -> list[SamplingOutcome]:
    return [compare_case(sampler, case) for case in cases]
