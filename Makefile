# `make test` and `make serve` work on a fresh machine: they create and fill .venv themselves.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# where `make serve` listens: `make serve PORT=8080` (or HOST=0.0.0.0) changes it
HOST ?= 127.0.0.1
PORT ?= 8000
# where the CPU torch comes from: empty takes pip's own configuration (on these machines a local
# wheel); from plain PyPI, whose Linux torch bundles ~2 GB of CUDA libraries, name PyTorch's CPU
# index: make test TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=

.PHONY: venv test serve lint clean

venv: $(STAMP)

# CPU PyTorch where no NVIDIA GPU is visible (the 2.13.0 CPU wheel lies on these machines' disk);
# where a GPU is present, pip resolves torch from the project's open range instead.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
		echo "$(PYTHON) is not Python >= 3.11 (pyproject's requires-python):" \
			"name one, e.g. make $(MAKECMDGOALS) PYTHON=python3.12" >&2; \
		exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		echo "GPU found: installing torch from the project's range"; \
	else \
		echo "no GPU: installing the CPU build torch==2.13.0"; \
		$(PY) -m pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)); \
	fi
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

test: $(STAMP)
	$(VENV)/bin/ruff check decision apps tests benchmarks
	$(PY) -m pytest -m "not slow" tests

serve: $(STAMP)
	$(VENV)/bin/decision serve --host $(HOST) --port $(PORT)

lint: $(STAMP)
	$(VENV)/bin/ruff check decision apps tests benchmarks

clean:
	rm -rf $(VENV)
