# exactc: the make targets are the product's interface.
#   make install   a .venv with exactc and its test extra, and Debian's clang
#   make test      the ci profile of every check (derandomized; about 10 minutes on 2 cores)
#   make verify    the campaign: many random cases, a summary table, a last `verify:` line
#   make verify-exhaustive   every f32 input of every transcendental's f32 path (hours)
#   make mutants   the mutant catalog: each mistake must be caught, the catcher named

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PYTEST := $(VENV)/bin/pytest
JOBS   ?= 2

.PHONY: install system-deps test verify verify-exhaustive accuracy mutants mutants-report clean

install: system-deps $(VENV)/.installed

# Debian's clang and OpenMP runtime: the harness compiles every kernel with gcc and clang.
system-deps:
	@command -v clang >/dev/null 2>&1 && [ -e /usr/lib/llvm-14/lib/libomp.so ] || { \
	  echo "installing Debian's clang and libomp-dev"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang libomp-dev >/dev/null; }
	@command -v valgrind >/dev/null 2>&1 || { \
	  echo "installing valgrind (instruction-count probes)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null; }
	@command -v gcc >/dev/null 2>&1 || { echo "gcc is required" >&2; exit 1; }

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

test: install
	HYPOTHESIS_PROFILE=ci $(PYTEST) -q -n $(JOBS) -m "not slow" tests

verify: install
	$(PY) -m exactc.verify.campaign --jobs $(JOBS) --min-cases 10000

verify-exhaustive: install
	$(PY) -m exactc.verify.exhaustive

accuracy: install
	$(PY) -m exactc.verify.accuracy --out docs/accuracy.md

mutants: install
	$(PY) -m exactc.mutants.runner -j $(JOBS)

mutants-report: install
	$(PY) -m exactc.mutants.runner -j $(JOBS) --markdown docs/mutants.md

clean:
	rm -rf .exactc-cache .pytest_cache .hypothesis
