# gpu-admission: every entry point creates .venv itself, so a fresh clone needs only `make run` or `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench soak manifests clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/gpu-webhook serve --dev --policies policies

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/gpu-webhook policy lint policies

bench: $(STAMP)
	$(BIN)/python -m bench

# Long runs: 10,000 fuzz examples each, a 5-minute soak, faults under load; then the engine's properties at length.
soak: $(STAMP)
	GPU_ADMISSION_EXAMPLES=10000 $(BIN)/python -m pytest -q -m soak tests
	GPU_ADMISSION_EXAMPLES=2000 $(BIN)/python -m pytest -q -n 2 tests/test_engine_properties.py

# kustomize reads only files under manifests/: copy the shipped policies into the ConfigMap generator.
manifests:
	sh manifests/sync-policies.sh

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis certs/dev
