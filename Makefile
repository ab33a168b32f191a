# The two commands of the README are `make book` and `make test`; everything else is a step.
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
JB    := $(VENV)/bin/jupyter-book

.PHONY: help setup measure host-floor measure-acceptance measure-sampling measure-transformers measure-sealed measure-new-sku overhead serving book book-from-runs test test-fast test-data gpu-sweep references clean-book

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

setup:  ## create .venv with the engine, the package and the book/test tools (idempotent)
	scripts/setup.sh

# `make book`'s own measurement identifies the headline model on a new machine: 'edit' drafts on
# about three quarters of its steps (h is identified; 'open' at ~5 % could not), the kernel
# microbenchmark gives d in seconds. One prompt per batch-1 cell (a batch-N cell runs N), 64
# tokens, 3 repetitions, γ 0, 2 and 6 (γ 4 adds an engine start and a quarter more calls and
# identifies nothing new), with the prefix cache filled by each unit's warmup (no timed call
# pays a prefill; specbench.measure.sweep_config). `make book` end to end, set-up done: 18.9
# minutes on a 2-core Zen 1 in float32 (sweep 14.7, microbenchmark 0.4, rendering 3.4; 22.6
# with γ 4), 10.2 on a 2-core Zen 4 in bf16 (with γ 4; 15.5 there without the cache). The
# host-floor profile has its own target (about 10 minutes more).
# Its dtype is this machine's fast one (specbench.engine.hardware.default_dtype): bfloat16 on a
# GPU or a CPU with native bf16, float32 on one without (an AVX2-only Zen 3 runs bfloat16
# through a slow fallback); BOOK_DTYPE=... overrides.
BOOK_DTYPE ?=
measure: setup  ## measure here: γ-sweep of 'repeat', 'open', 'edit' and the kernel microbenchmark (~15 min on a 2-core Zen 1 in fp32)
	dtype=$(or $(BOOK_DTYPE),$$($(PY) -c "from specbench.engine.hardware import default_dtype; print(default_dtype())")); \
	$(PY) -m specbench.cli.notebooks sweep -p workloads '["repeat","open","edit"]' -p prompts 1 \
	    -p gammas '[0, 2, 6]' -p max_tokens 64 -p reps 3 -p dtype $$dtype -p prefix_caching True && \
	$(PY) -m specbench.cli.main microbench --dtype $$dtype

host-floor: setup  ## the host-floor profile of two model sizes (a 'hostfloor' run, ~10 min)
	$(PY) -m specbench.cli.notebooks host_floor

# Acceptance across its range: Spec-Bench categories and the project's edit/repeat/open workloads
# (paired baseline, the same question ids per category in both dtypes — the first PROMPTS of
# each —, batches 1 and 4, REPS repetitions, decode windows at batch 4) and the kernel
# microbenchmarks behind the model's d. Time grows with PROMPTS × REPS. Measured on a 2-core
# Zen 4: bf16 with 4 prompts and 3 repetitions took 47 minutes, fp32 with 4 and 4 took 91; the
# default (8 and 5) is therefore about 2.5 h in bf16 and 3.7 h in fp32 there. On a 2-core
# machine `make measure-acceptance PROMPTS=4 REPS=4` is the variant that fits in about 2.5 h.
# With the prefix cache (CACHE=True, the default) a 2-core Zen 5 (family 26, model 2) took
# 43.5 minutes for the bf16 sweep at PROMPTS=8 REPS=5.
SPEC_BENCH_WORKLOADS := '["repeat","open","edit","specbench:multi-turn","specbench:translation","specbench:summarization","specbench:qa","specbench:math_reasoning","specbench:rag"]'
PROMPTS ?= 8
REPS    ?= 5
# vLLM's prefix cache, filled by each unit's warmup, so timed calls skip their prompt's prefill
# (same tokens and counters, latency within a rerun's spread: tests/test_prefix_cache.py);
# CACHE=False measures as before, with TTFT.
CACHE   ?= True
measure-acceptance: setup  ## Spec-Bench sweeps in bf16 and fp32 and the kernel microbenchmarks (PROMPTS=8 REPS=5: ~6 h on 2 cores)
	$(PY) -m specbench.cli.main microbench --dtype bfloat16
	$(PY) -m specbench.cli.main microbench --dtype float32
	$(PY) -m specbench.cli.notebooks sweep -p workloads $(SPEC_BENCH_WORKLOADS) -p prompts $(PROMPTS) \
	    -p max_tokens 64 -p reps $(REPS) -p prefix_caching $(CACHE)
	$(PY) -m specbench.cli.notebooks sweep -p workloads $(SPEC_BENCH_WORKLOADS) -p prompts $(PROMPTS) \
	    -p max_tokens 64 -p reps $(REPS) -p dtype float32 -p prefix_caching $(CACHE)

# Sampling at temperature > 0 (issue: the CPU expand kernel): the distribution test with and
# without the engine patch in both dtypes, on 'edit' (its plain arm gives many distinct outputs
# and its speculative arm drafts on most steps, so the test has power) and 'repeat' (about 3
# minutes each; 'open' drafts too rarely for the test to see anything), then the temperature cells
# with the patch (batch 1 and 4, T = 0.5 and 1.0; about 60 minutes).
measure-sampling: setup  ## lossless test with/without the engine patch; temperature cells (~80 min)
	for dtype in bfloat16 float32; do for workload in edit repeat; do \
	  $(PY) -m specbench.cli.main lossless --dtype $$dtype --workload $$workload && \
	  $(PY) -m specbench.cli.main lossless --dtype $$dtype --workload $$workload \
	      --engine-patch cpu-expand-fix || exit 1; done; done
	$(PY) -m specbench.cli.notebooks sweep -p workloads $(SPEC_BENCH_WORKLOADS) -p prompts 4 \
	    -p max_tokens 64 -p reps 3 -p temperatures '[0.5, 1.0]' -p engine_patch cpu-expand-fix

# The second engine: transformers' prompt-lookup decoding on the same prompts, batch 1 only
# (about 40 minutes on a 2-core CPU: its γ=0 step is about twice vLLM's).
measure-transformers: setup  ## the same grid on transformers' prompt lookup (batch 1; ~40 min)
	$(PY) -m specbench.cli.notebooks sweep -p engine transformers -p batches '[1]' \
	    -p workloads $(SPEC_BENCH_WORKLOADS) -p prompts 4 -p max_tokens 64 -p reps 3

# Transfer that can fail: a SKU whose cost structure differs (two engine threads on this CPU),
# predicted from the other SKUs and sealed before its sweep starts (scripts/measure_sealed.sh;
# about 35 minutes on a 2-core CPU).
measure-sealed: setup  ## a 2-thread SKU: calibration, sealed prediction, then its sweep (~35 min)
	scripts/measure_sealed.sh 2 bfloat16

# A CPU kind the store has not seen, the hard way: the kernel microbenchmark and the γ=0 arm
# first, then every speculative cell predicted from the other SKUs and sealed, then the sweep
# on measure-acceptance's grid (PROMPTS, REPS; calibration 3 repetitions) judged against it.
# Measured on a 2-core Zen 3 (family 25, model 1) in float32 with PROMPTS=8 REPS=5: calibration
# 41 min, sweep about 4.7 h (a Spec-Bench unit 15–30 min at batch 1, 'rag' 40) — about 5.5 h.
DTYPE ?= float32
measure-new-sku: setup  ## a new CPU kind: calibration, sealed prediction, full sweep (DTYPE, PROMPTS, REPS)
	WORKLOADS=repeat,open,edit,specbench:multi-turn,specbench:translation,specbench:summarization,specbench:qa,specbench:math_reasoning,specbench:rag \
	    PROMPTS=$(PROMPTS) REPS=$(REPS) CAL_REPS=3 scripts/measure_sealed.sh 1 $(DTYPE)

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
	    --durations=25 tests; rc=$$?; \
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
