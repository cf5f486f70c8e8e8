"""A GPT-2 checkpoint from a Hugging Face directory (config.json, model.safetensors, tokenizer.json): the
`checkpoint` preset (`serve --checkpoint DIR`), now one instance of the model registry (engine/models), kept under
its old names. The path comes from the server's configuration, never from a request.
"""

from __future__ import annotations

from pathlib import Path

from .models import Model, ModelError, ModelInfo, load
from .models.labels import SUBSCRIPT, piece_labels, readable_labels

CheckpointError = ModelError

__all__ = ["SUBSCRIPT", "CheckpointError", "GPT2Checkpoint", "ModelInfo", "piece_labels", "readable_labels"]


def GPT2Checkpoint(path: str | Path, name: str = "checkpoint", device: str = "cpu") -> Model:
    """The model in `path`, which must be a GPT-2 (any other architecture: `load`)."""
    model = load(path, name)
    if model.arch.architecture != "gpt2":
        raise ModelError(f"{Path(path) / 'config.json'}: model_type: {model.arch.architecture!r} is not a GPT-2")
    model.place(device)
    return model
