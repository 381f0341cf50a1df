# Two entry points for a fresh machine: `make demo` (the main job) and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXAMPLE ?= examples/gemm_bias_relu.json
COST ?= model

.PHONY: demo test bench-compile bench-fusion bench-zoo bench-scale bench-backend-scale gpu-check gpu-wheels install clean

$(BIN)/polysat: pyproject.toml setup.py
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $@

install: $(BIN)/polysat

demo: install
	$(BIN)/python -m polysat demo $(EXAMPLE) --cost $(COST)

# one pytest worker per core (CI has 2); a test file's module fixtures stay on one worker (--dist loadscope)
JOBS ?= auto
test: install
	$(BIN)/python -m pytest -n $(JOBS) --dist loadscope tests

bench-compile: install
	$(BIN)/python -m polysat.bench.compile_time

# polysat's --cost model partition beside tinygrad's scheduler on the same graphs; QUICK= for all of it
QUICK ?= --quick
bench-fusion: install
	$(BIN)/python -m polysat.bench.fusion $(QUICK)

# the model zoo: transformers / torchvision / onnx light models through the ONNX file, torch.export and
# torch.compile, beside tinygrad and Inductor (bench/zoo.py); QUICK= for every model
bench-zoo: install
	$(BIN)/python -m polysat.bench.zoo $(QUICK)

# large weight-free ONNX graphs (LLaMA-2-7B / LLaMA-3-8B layers, GPT-2 small..XL, ResNet-50/101/152, a soft MoE of
# 2..64 experts, a U-Net) through polysat --cost model beside tinygrad's scheduler, CPU seconds and peak RSS of
# each (bench/scale.py); QUICK= for every graph (an hour or more)
bench-scale: install
	$(BIN)/python -m polysat.bench.scale $(QUICK)

# the stages after the search (binding, plans, .cu texts, the runtime's kernels) on a stack of identical layers:
# they grow with the distinct kernels, not the layers (bench/backend_scale.py); QUICK= for 8 and 32 layers
bench-backend-scale: install
	$(BIN)/python -m polysat.bench.backend_scale $(QUICK)

# On a GPU machine: every gpu test, compute-sanitizer on one launch of every kernel kind, every bench, one report
# (bench/gpu_check.py; docs/gpu_check.md). Runs the package from this checkout under the name polysat, with
# the python that has PyTorch (python3 on the lent GPU machines); GPU_ARGS="--part tests,sanitize --quick" etc.
GPU_PY ?= python3
GPU_OUT ?= out/gpu-check
GPU_ARGS ?=
IMPORT_ROOT := $(CURDIR)/build/importroot
gpu-check:
	@mkdir -p $(IMPORT_ROOT) && ln -sfn "$(CURDIR)" $(IMPORT_ROOT)/polysat
	PYTHONPATH="$(IMPORT_ROOT)$${PYTHONPATH:+:$$PYTHONPATH}" PYTHONUNBUFFERED=1 \
		$(GPU_PY) -m polysat.bench.gpu_check --out $(GPU_OUT) $(GPU_ARGS)

# The cp312 x86-64 wheels the GPU machines lack (egglog, islpy and what egglog imports), into .whl (ignored by
# git) for the device call to carry; about 52 MiB of the 64 MiB a call may carry.
GPU_WHEELS ?= egglog==13.2.0 islpy==2026.2.2 graphviz==0.21 opentelemetry-api==1.45.2 black==26.10.1 \
	pytokens==0.4.1 platformdirs==4.14.8 pathspec==1.1.1
gpu-wheels:
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
		--platform manylinux2014_x86_64 -d .whl $(GPU_WHEELS)

clean:
	rm -rf $(VENV) build *.egg-info
