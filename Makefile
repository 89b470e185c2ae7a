# Two commands on a fresh machine: `make bench` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup bench test test-fast lint format clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	# torch first and pinned, by pip: an unpinned torch pulls a multi-GB CUDA build, and pip takes
	# the CPU build where the machine keeps one on disk. uv installs the rest: 9 s here where pip
	# took 61 (the same versions). Nothing is byte-compiled at install (pip spent half its time
	# compiling every file of every package): the next step compiles what a run imports.
	$(BIN)/pip install --quiet --no-compile torch==2.13.0 uv==0.13.9
	$(BIN)/uv pip install --python $(BIN)/python --quiet -e '.[dev,psi]'
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -c "$$WARM_IMPORTS"
	touch $(STAMP)

# the libraries a run, a party process and the tests import, compiled once in one process
export WARM_IMPORTS := import bench.cli, securevfl.run, securevfl.methods, baselines, torch, opacus, \
	dask.distributed, dask.dataframe, dask.array, pyarrow.parquet, tenseal, mpyc.runtime, dp_accounting, \
	sklearn.ensemble, sklearn.linear_model, matplotlib.pyplot, torchmetrics, pytest, hypothesis, xdist

setup: $(STAMP)

bench: $(STAMP)
	$(BIN)/securevfl bench --suite default --out bench-out/default

# byte-compiled first: where PYTHONDONTWRITEBYTECODE is set (as on CI) every party process the
# tests start would otherwise compile the package again (~0.15 CPU-s a process, ~300 of them).
# three workers on two cores: many tests wait on sockets, timeouts and party processes; two
# workers kept the cores 84 % busy (757 s), three 98 % (653 s), docs/test-durations.md
test: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 securevfl protocols bench baselines
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -p no:cacheprovider -n 3 --dist worksteal

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not networked"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) bench-out build *.egg-info
