# The two commands of the README are `make book` and `make test`; everything else is a step.
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
JB    := $(VENV)/bin/jupyter-book

.PHONY: test-engine test-slow-rest help setup measure host-floor measure-acceptance measure-sampling measure-transformers measure-sealed measure-new-sku measure-host measure-drafts serving-drafts overhead serving plan-under-load book book-from-runs test test-fast test-book test-data gpu-sweep references clean-book

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

setup:  ## create .venv with the engine, the package and the book/test tools (idempotent)
	scripts/setup.sh

# `make book`'s own measurement identifies the headline model on a new machine: 'edit' drafts on
# about three quarters of its steps (h is identified; 'open' at ~5 % could not), the kernel
# microbenchmark gives d in seconds. One prompt per batch-1 cell (a batch-N cell runs N), 64
# tokens, 3 repetitions, γ 0, 2 and 6 (γ 4 adds an engine start and a quarter more calls and
# identifies nothing new), with the prefix cache filled by each unit's warmup (no timed call
# pays a prefill; specbench.measure.sweep_config). Every engine records its steps into the run,
# and after the cells a mixed probe (1-8 rows, prefills arriving) gives the step-time model
# the steps the calls never hold (specbench.measure.step_probe; ~2 min on the 2-core Intel host).
# The host-floor profile is its own target: it
# identifies nothing the headline model needs. How long it takes: book/reproduce.md.
# Its dtype is this machine's fast one (specbench.engine.hardware.default_dtype): bfloat16 on a
# GPU or a CPU with native bf16, float32 on one without (an AVX2-only CPU runs bfloat16
# through a slow fallback); BOOK_DTYPE=... overrides. Every command and notebook defaults to
# the same (hardware.resolve_dtype); the targets below that mean bfloat16 say so.
BOOK_DTYPE ?=
measure: setup  ## measure here: γ-sweep of 'repeat', 'open', 'edit' and the kernel microbenchmark
	dtype=$(or $(BOOK_DTYPE),$$($(PY) -c "from specbench.engine.hardware import default_dtype; print(default_dtype())")); \
	$(PY) -m specbench.cli.notebooks sweep -p workloads '["repeat","open","edit"]' -p prompts 1 \
	    -p gammas '[0, 2, 6]' -p max_tokens 64 -p reps 3 -p dtype $$dtype -p prefix_caching True \
	    -p step_probe True && \
	$(PY) -m specbench.cli.main microbench --dtype $$dtype

host-floor: setup  ## the host-floor profile of two model sizes (a 'hostfloor' run)
	$(PY) -m specbench.cli.notebooks host_floor

# Acceptance across its range: Spec-Bench categories and the project's edit/repeat/open workloads
# (paired baseline, the same question ids per category in both dtypes — the first PROMPTS of
# each —, batches 1 and 4, REPS repetitions, decode windows at batch 4) and the kernel
# microbenchmarks behind the model's d. Time grows with PROMPTS × REPS (measured times and
# estimates: book/reproduce.md); fewer of either trades the intervals' width for hours.
SPEC_BENCH_WORKLOADS := '["repeat","open","edit","specbench:multi-turn","specbench:translation","specbench:summarization","specbench:qa","specbench:math_reasoning","specbench:rag"]'
PROMPTS ?= 8
REPS    ?= 5
# vLLM's prefix cache, filled by each unit's warmup, so timed calls skip their prompt's prefill
# (same tokens and counters, latency within a rerun's spread: tests/test_prefix_cache.py);
# CACHE=False measures as before, with TTFT.
CACHE   ?= True
measure-acceptance: setup  ## Spec-Bench sweeps in bf16 and fp32 and the kernel microbenchmarks (hours; PROMPTS, REPS)
	$(PY) -m specbench.cli.main microbench --dtype bfloat16
	$(PY) -m specbench.cli.main microbench --dtype float32
	$(PY) -m specbench.cli.notebooks sweep -p workloads $(SPEC_BENCH_WORKLOADS) -p prompts $(PROMPTS) \
	    -p max_tokens 64 -p reps $(REPS) -p dtype bfloat16 -p prefix_caching $(CACHE)
	$(PY) -m specbench.cli.notebooks sweep -p workloads $(SPEC_BENCH_WORKLOADS) -p prompts $(PROMPTS) \
	    -p max_tokens 64 -p reps $(REPS) -p dtype float32 -p prefix_caching $(CACHE)

# Sampling at temperature > 0 (issue: the CPU expand kernel): the distribution test with and
# without the engine patch in both dtypes, on 'edit' (its plain arm gives many distinct outputs
# and its speculative arm drafts on most steps, so the test has power) and 'repeat' ('open'
# drafts too rarely for the test to see anything), then the temperature cells with the patch
# (batch 1 and 4, T = 0.5 and 1.0).
measure-sampling: setup  ## lossless test with/without the engine patch; temperature cells
	for dtype in bfloat16 float32; do for workload in edit repeat; do \
	  $(PY) -m specbench.cli.main lossless --dtype $$dtype --workload $$workload && \
	  $(PY) -m specbench.cli.main lossless --dtype $$dtype --workload $$workload \
	      --engine-patch cpu-expand-fix || exit 1; done; done
	$(PY) -m specbench.cli.notebooks sweep -p workloads $(SPEC_BENCH_WORKLOADS) -p prompts 4 \
	    -p max_tokens 64 -p reps 3 -p temperatures '[0.5, 1.0]' -p engine_patch cpu-expand-fix \
	    -p dtype bfloat16

# The second engine: transformers' prompt-lookup decoding on the same prompts, batch 1 only
# (transformers' assisted generation decodes one sequence at a time).
measure-transformers: setup  ## the same grid on transformers' prompt lookup (batch 1)
	$(PY) -m specbench.cli.notebooks sweep -p engine transformers -p batches '[1]' \
	    -p workloads $(SPEC_BENCH_WORKLOADS) -p prompts 4 -p max_tokens 64 -p reps 3 -p dtype bfloat16

# Transfer that can fail: a SKU whose cost structure differs (two engine threads on this CPU),
# predicted from the other SKUs and sealed before its sweep starts (scripts/measure_sealed.sh).
measure-sealed: setup  ## a 2-thread SKU: calibration, sealed prediction, then its sweep
	scripts/measure_sealed.sh 2 bfloat16

# A CPU kind the store has not seen, the hard way: the kernel microbenchmark and the γ=0 arm
# first, then every speculative cell predicted from the other SKUs and sealed, then the sweep
# on measure-acceptance's grid (PROMPTS, REPS; calibration 3 repetitions) judged against it.
# The calibration is the prediction's only input from this SKU, so it runs before any
# speculative arm; its γ=0 arm is measured again in the sweep, and the drift is reported.
DTYPE ?= float32
measure-new-sku: setup  ## a new CPU kind: calibration, sealed prediction, full sweep (DTYPE, PROMPTS, REPS)
	WORKLOADS=repeat,open,edit,specbench:multi-turn,specbench:translation,specbench:summarization,specbench:qa,specbench:math_reasoning,specbench:rag \
	    PROMPTS=$(PROMPTS) REPS=$(REPS) CAL_REPS=3 scripts/measure_sealed.sh 1 $(DTYPE)

# The host as the unit: after `make book` on this machine (same boot), seal speedup predictions
# for the Spec-Bench categories from this host's own calibration, then measure them.
measure-host: setup  ## after make book: sealed Spec-Bench speedups from this host's calibration, then the judged sweep
	scripts/measure_host.sh

# Draft models (issue 47): layer-truncated drafts of the embedded model through vLLM's
# draft_model proposer, and each draft alone as its own engine (scripts/measure_drafts.sh;
# 'draft-sweep' runs, apart from the n-gram sweeps). DEPTHS, PROMPTS, REPS.
measure-drafts: setup  ## draft-model sweeps of two depths and each draft alone (draft-sweep runs)
	scripts/measure_drafts.sh

serving-drafts: setup  ## after make measure-drafts: off, n-gram and the better draft under load (a draft-serving run)
	scripts/serving_drafts.sh

overhead: setup  ## benchmark the harness's own counter reads (a new 'overhead' run)
	$(PY) -m specbench.cli.main overhead

serving: setup  ## a real vLLM server under load from vLLM's benchmark client (a 'serving' run)
	$(PY) -m specbench.cli.notebooks serving
# The operator's question for their own prompts, answered and then checked where it is used: a
# held-out Spec-Bench category stands in for the prompts (scripts/plan_under_load.sh).
plan-under-load: setup  ## after make book: plan held-out prompts, then serve them (plan, γ 2/4/6, off) under load
	scripts/plan_under_load.sh

book: measure book-from-runs  ## measure here, then render the book with every run present

book-from-runs: setup  ## render the book from the runs already in runs/
	scripts/build_book.sh

# The tests judge the run store as committed: `make book` adds this machine's runs to runs/, and
# the chapter references were made from the committed store, so the test build renders a copy
# of git's tracked runs/ into its own folder (the user's _build/html stays as make book left it).
# A user's own runs are checked for their contract (tests/test_store_contract.py), not against
# the references. Each chapter is executed once, by that build; the reference test reads the
# build's execution cache.
TEST_OUT   := _build/test
TEST_STORE := $(CURDIR)/$(TEST_OUT)/runs
TEST_ENV   := SPECBENCH_RUNS=$(TEST_STORE) SPECBENCH_BOOK_BUILD=$(CURDIR)/$(TEST_OUT)/_build
# Markers (pyproject.toml) select: the fast suite is everything that needs no engine, browser,
# Slurm, committed runs or built book.
SLOW_MARKERS := engine or browser or slurm or data or book
PYTEST := scripts/pytest.sh

# Two at a time, on two cores: the unit tests beside the test build, then the engine tests beside
# the data, book, browser and Slurm tests. vLLM's CPU engine pins its one thread to one core, so
# the second core is otherwise idle for most of the engine tests. Each pytest has its own
# --basetemp (pytest's numbered temporary folders are not shared between sessions).
PAIR := $(MAKE) --no-print-directory -j2 --output-sync=target

test: setup  ## the whole suite: the fast tests first, then engine, book, browser, data and Slurm tests
	scripts/setup.sh --browser
	$(PAIR) test-fast test-book
	$(PAIR) test-engine test-slow-rest

# The engine lane is the longer one: the engine tests marked second_lane run in the other lane,
# with the data, book, browser and Slurm tests (between them every engine test runs once).
test-engine: setup  ## the real engine's tests (vLLM on this CPU; a transformers model), after test-book
	$(TEST_ENV) $(PYTEST) -m "engine and not second_lane" --durations=15 \
	    --basetemp=/tmp/specbench-pytest-engine tests

test-slow-rest: setup  ## the data, book, browser and Slurm tests and the second_lane engine tests
	$(TEST_ENV) $(PYTEST) -m "(($(SLOW_MARKERS)) and not engine) or second_lane" --durations=15 \
	    --basetemp=/tmp/specbench-pytest-rest tests

test-fast: setup  ## lint (ruff, the layering contract) and the unit tests: no engine, book, browser or runs/
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(PYTEST) -m "not ($(SLOW_MARKERS))" tests

# BOOK_JOBS: the chapters one at a time where `make test` runs this beside the fast suite (on two
# cores it would only slow the longer fast lane); `make references` may pass BOOK_JOBS= to use all.
BOOK_JOBS ?= 1
test-book: setup  ## render the committed run store into _build/test (what the book and data tests read)
	scripts/committed_store.sh $(TEST_STORE) >/dev/null
	SPECBENCH_RUNS=$(TEST_STORE) BOOK_OUT=$(TEST_OUT) BOOK_JOBS=$(BOOK_JOBS) scripts/build_book.sh

test-data: setup  ## checks of the committed runs (not of the code)
	scripts/committed_store.sh $(TEST_STORE) >/dev/null
	$(TEST_ENV) $(PYTEST) -m data tests

gpu-sweep:  ## on an NVIDIA machine: install vllm and measure MODEL=/path/or/hub-id [CUDA_GRAPHS=1] (untested)
	@test -n "$(MODEL)" || { echo "usage: make gpu-sweep MODEL=/path/to/checkpoint" >&2; exit 2; }
	ENGINE=vllm scripts/setup.sh
	$(PY) -m specbench.cli.notebooks sweep -p model "$(MODEL)" $(if $(CUDA_GRAPHS),-p cuda_graphs True)

references: test-book  ## the chapters' outputs from the test build into tests/nbval (after a chapter or run changes)
	$(TEST_ENV) $(PY) scripts/update_references.py

clean-book:  ## remove the rendered book
	rm -rf _build
