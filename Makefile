# The two commands of the README are `make book` and `make test`; everything else is a step.
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
JB    := $(VENV)/bin/jupyter-book

.PHONY: help setup measure measure-acceptance overhead serving book book-from-runs test test-fast test-data gpu-sweep references clean-book

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

setup:  ## create .venv with the engine, the package and the book/test tools (idempotent)
	scripts/setup.sh

# One prompt per batch-1 cell (a batch-4 cell still runs four) keeps `make book` near 20 minutes
# with the paired baseline; `make measure-acceptance` measures more prompts per cell.
measure: setup  ## measure on this machine: the γ-sweep and the host-floor profile (new runs)
	$(PY) -m specbench.cli.notebooks sweep -p prompts 1
	$(PY) -m specbench.cli.notebooks host_floor

# Acceptance across its range: Spec-Bench categories and the project's edit/repeat/open workloads
# (paired baseline), the kernel microbenchmark behind the model's d, the lossless test at
# temperature > 0 and the temperature cells. About 45 minutes on the 2-core reference CPU.
SPEC_BENCH_WORKLOADS := '["repeat","open","edit","specbench:multi-turn","specbench:translation","specbench:summarization","specbench:qa","specbench:math_reasoning","specbench:rag"]'
measure-acceptance: setup  ## Spec-Bench sweep, kernel microbenchmark, lossless test (~45 min)
	$(PY) -m specbench.cli.notebooks sweep -p workloads $(SPEC_BENCH_WORKLOADS) -p prompts 8 \
	    -p max_tokens 64 -p reps 2
	$(PY) -m specbench.cli.main microbench
	$(PY) -m specbench.cli.main lossless
	$(PY) -m specbench.cli.notebooks sweep -p workloads '["repeat","edit"]' -p gammas '[0,4]' \
	    -p batches '[1]' -p temperatures '[0.5]' -p max_tokens 64 -p reps 2

overhead: setup  ## benchmark the harness's own counter reads (a new 'overhead' run)
	$(PY) -m specbench.cli.main overhead

serving: setup  ## a real vLLM server under load from vLLM's benchmark client (a 'serving' run, ~15 min)
	$(PY) -m specbench.cli.notebooks serving

book: measure book-from-runs  ## measure here, then render the book with every run present

book-from-runs: setup  ## render the book from the runs already in runs/
	scripts/build_book.sh

test: setup  ## the whole test suite (engine smoke, nbval, browser) on a fresh checkout
	scripts/setup.sh --browser
	scripts/build_book.sh
	$(PY) -m pytest -p no:cacheprovider --nbval --nbval-sanitize-with tests/nbval/sanitize.cfg \
	    tests; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; exit $$rc

test-fast: setup  ## the layering contract and the unit tests: no engine, notebooks, browser or runs/
	$(VENV)/bin/lint-imports
	SPECBENCH_SKIP_ENGINE=1 $(PY) -m pytest -p no:cacheprovider -m "not browser and not slurm and not data" tests

test-data: setup  ## checks of the committed runs in runs/ (not of the code)
	$(PY) -m pytest -p no:cacheprovider -m data tests

gpu-sweep:  ## on an NVIDIA machine: install vllm and measure MODEL=/path/or/hub-id [CUDA_GRAPHS=1] (untested)
	@test -n "$(MODEL)" || { echo "usage: make gpu-sweep MODEL=/path/to/checkpoint" >&2; exit 2; }
	ENGINE=vllm scripts/setup.sh
	$(PY) -m specbench.cli.notebooks sweep -p model "$(MODEL)" $(if $(CUDA_GRAPHS),-p cuda_graphs True)

references: setup  ## re-execute the chapters into tests/nbval (after a chapter or run changes)
	$(PY) scripts/update_references.py

clean-book:  ## remove the rendered book
	rm -rf _build
