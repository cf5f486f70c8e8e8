# CPU image by default:   docker build -t attention-lab . && docker run -p 8000:8000 attention-lab
# CUDA torch instead:     docker build --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 -t attention-lab:cuda .
FROM python:3.11-slim

ARG TORCH="torch==2.13.0"
ARG TORCH_INDEX="https://download.pytorch.org/whl/cpu"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1

RUN useradd --create-home --uid 10001 lab
WORKDIR /app

# torch first and on its own layer: it is by far the largest and changes least.
RUN if [ -n "$TORCH_INDEX" ]; then pip install "$TORCH" --index-url "$TORCH_INDEX"; else pip install "$TORCH"; fi

COPY pyproject.toml README.md ./
COPY app ./app
COPY engine ./engine
COPY bench ./bench
COPY templates ./templates
COPY static ./static
RUN pip install -e .

USER lab
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"
CMD ["attention-lab", "serve", "--host", "0.0.0.0", "--port", "8000"]
