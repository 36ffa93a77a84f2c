# gpu-admission: every entry point creates .venv itself, so a fresh clone needs only `make run` or `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench soak manifests wheels image clean

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

# The image (Containerfile): wheels built here, at the versions installed in .venv, installed offline in the
# build. podman if present, else docker. `make image BASE=...` builds on another Python 3.11 base image;
# IMAGE names the result (push it to your registry and set it in the Deployment, see manifests/overlays/custom/);
# BUILD_FLAGS adds build options (the tests: --isolation=chroot --layers=false).
CONTAINER ?= $(shell command -v podman || command -v docker)
VERSION   := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE     ?= gpu-admission:$(VERSION)

wheels: $(STAMP)
	rm -rf build/wheels
	mkdir -p build
	$(BIN)/python -m pip freeze --exclude-editable > build/constraints.txt
	$(BIN)/python -m pip wheel --quiet --wheel-dir build/wheels --constraint build/constraints.txt .

image: wheels
	@test -n "$(CONTAINER)" || { echo "make image: neither podman nor docker is installed" >&2; exit 1; }
	$(CONTAINER) build $(BUILD_FLAGS) --file Containerfile --tag $(IMAGE) --build-arg VERSION=$(VERSION) \
		$(if $(BASE),--build-arg BASE=$(BASE)) .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis certs/dev
