# tunefleet: every target creates .venv and installs what it needs on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two installs into the one .venv, each with its own stamp: `make demo` needs only
# tunefleet and PyTorch (911 MB, see the README); `make test` and `make check` add the
# [dev] extras (Ray, Optuna, W&B, Lightning, ...) on top, keeping what is there (pip's
# only-if-needed: only tunefleet's editable link is redone).
DEMO_STAMP := $(VENV)/.installed-demo
STAMP := $(VENV)/.installed
# The CPU build of PyTorch (a plain `torch` would pull gigabytes of CUDA).
TORCH := torch==2.13.0
# tunefleet's bytecode, compiled as pip compiles an installed package's: the editable
# install has none, and with PYTHONDONTWRITEBYTECODE=1 (set on some machines) every
# driver and worker process would compile the package from source again at start
# (0.1-0.3 s each). Only changed modules are compiled; a few seconds at most.
COMPILE := $(BIN)/python -m compileall -q src

.PHONY: demo test test-fast check bench bench-scale bench-efficiency bench-peers clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	@echo ">>> installing PyTorch (CPU build, ~200 MB download, ~1 GB installed): about a minute"
	$(BIN)/pip install $(TORCH)
	@echo ">>> installing tunefleet (editable) and its base dependencies: a few seconds"
	$(BIN)/pip install --quiet -e '.[torch]'
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml $(DEMO_STAMP)
	@echo ">>> installing the test and check tools, the [dev] extras (Ray, Optuna, W&B,"
	@echo ">>> Lightning, Keras, Transformers, ...: ~220 packages, ~1.8 GB more): about four minutes"
	$(BIN)/pip install -e '.[dev,torch]'
	# HEBO pins numpy<1.25 in its metadata but runs on numpy 2 (its needs are in [dev])
	$(BIN)/pip install --quiet --no-deps 'HEBO==0.3.6'
	touch $(STAMP)

# Benchmarks also plot (matplotlib) and train on scikit-learn's bundled digits.
BENCH_STAMP := $(VENV)/.installed-bench
$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,torch,bench]'
	touch $(BENCH_STAMP)

demo: $(DEMO_STAMP)
	$(COMPILE)
	$(BIN)/python examples/lstm_sunspots.py

test: $(STAMP)
	$(COMPILE)
	TUNEFLEET_HYPOTHESIS=ci $(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(COMPILE)
	$(BIN)/python -m pytest -q -m "not slow"

check: $(STAMP)
	$(BIN)/ruff check src tests examples benchmarks
	$(BIN)/ruff format --check src tests examples benchmarks
	$(BIN)/mypy --strict
	# The tests too (a package: tests.<folder>.<module>), but not the conformance suite:
	# it is Ray Tune code, ported at collection by its conftest (tests/conformance/).
	$(BIN)/mypy --strict tests --exclude tests/conformance/
	# The examples too, but the Ray Tune script kept as Ray Tune users write it.
	$(BIN)/mypy --strict $(filter-out examples/from_ray_tune.py,$(wildcard examples/*.py))
	# And the benchmarks (they import the examples' LSTM).
	MYPYPATH=examples $(BIN)/mypy --strict $(wildcard benchmarks/*.py)

bench: $(BENCH_STAMP)
	$(COMPILE)
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/python benchmarks/class_trials.py
	$(BIN)/python benchmarks/ray_backend.py
	$(BIN)/python benchmarks/store_scaling.py
	$(BIN)/python benchmarks/checkpoint_cost.py
	$(BIN)/python benchmarks/chaos_resume.py

# scale.py methods: random, TPE, ASHA, PBT and BOHB at 1,000-100,000 trials (simulated,
# then local at 1,000-10,000); TPE and BOHB stop at 10,000 (sampler-bound). Hours.
bench-scale: $(BENCH_STAMP)
	$(COMPILE)
	$(BIN)/python benchmarks/scale.py
	$(BIN)/python benchmarks/scale.py methods --backend simulated
	$(BIN)/python benchmarks/scale.py methods --backend local
	$(BIN)/python benchmarks/read_scale.py

# Search efficiency: simulated (~15 min), the PBT toy (~3 min), real problems and
# peers (~25 min; the peers need `make bench-peers`), the searchers on real problems (~63 min).
bench-efficiency: $(BENCH_STAMP)
	$(COMPILE)
	$(BIN)/python benchmarks/scheduler_latency.py
	$(BIN)/python benchmarks/search_efficiency.py --seeds 10 --plots benchmarks/plots
	$(BIN)/python benchmarks/pbt_toy.py --seeds 10 --plot benchmarks/plots/pbt_schedule.png
	$(BIN)/python benchmarks/real_efficiency.py
	$(BIN)/python benchmarks/real_efficiency.py --searchers --seeds 10 --lstm-seeds 10 --budget 30

bench-peers:
	$(PY) -m venv .venv-peers
	.venv-peers/bin/pip install --quiet --upgrade pip
	.venv-peers/bin/pip install --quiet 'ray[tune]' optuna psutil cloudpickle

clean:
	rm -rf $(VENV) .venv-peers build dist src/*.egg-info .mypy_cache .ruff_cache .pytest_cache
