# Two commands on a fresh machine: `make bench` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup bench test test-fast lint format clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev,psi]'
	touch $(STAMP)

setup: $(STAMP)

bench: $(STAMP)
	$(BIN)/securevfl bench --suite default --out bench-out/default

# byte-compiled first: where PYTHONDONTWRITEBYTECODE is set (as on CI) every party process the
# tests start would otherwise compile the package again (~0.15 CPU-s a process, ~300 of them).
# three workers on two cores: many tests wait on sockets, timeouts and party processes; two
# workers kept the cores 84 % busy (757 s), three 98 % (653 s), docs/test-durations.md
test: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 securevfl protocols bench baselines
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 3 --dist worksteal

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
