# Two entry points for a fresh machine: `make demo` (the main job) and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXAMPLE ?= examples/gemm_bias_relu.json
COST ?= model

.PHONY: demo test bench-compile bench-fusion install clean

$(BIN)/polysat: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $@

install: $(BIN)/polysat

demo: install
	$(BIN)/python -m polysat demo $(EXAMPLE) --cost $(COST)

test: install
	$(BIN)/python -m pytest tests

bench-compile: install
	$(BIN)/python -m polysat.bench.compile_time

# polysat's --cost model partition beside tinygrad's scheduler on the same graphs; QUICK= for all of it
QUICK ?= --quick
bench-fusion: install
	$(BIN)/python -m polysat.bench.fusion $(QUICK)

clean:
	rm -rf $(VENV) build *.egg-info
