"""Models from local files as sources of (x, weights): a registry of presets, one loader per file format, one
block per architecture family.

`load(path, name)` reads a Hugging Face directory (config.json; model.safetensors or a sharded
model.safetensors.index.json; tokenizer.json) or a llama `.gguf` file, checks it against its config at once, then
checks it whole (`Model.validate`: bounded dimensions, finite weights copied into memory the process owns, special
tokens and the tokenizer inside the vocabulary, a finite forward pass through every layer). `registry(paths,
max_model_mb, packaged)` loads the server's models (beside the packaged MiniLM and SmolLM2 that
`engine.pretrained.installed()` finds, read on first use): every failure is a `ModelError`, one line naming the
file, the field and what is supported, raised at start-up.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from .config import (
    ARCHITECTURES,
    MAX_CONTEXT,
    MAX_FF,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_VOCAB,
    MAX_WIDTH,
    SUPPORTED,
    Arch,
    Fields,
    ModelError,
    ModelInfo,
    read_config,
)  # fmt: skip
from .families import FAMILIES, GPT2, Bert, Llama, Model
from .store import GGUF, Safetensors

__all__ = ["ARCHITECTURES", "GPT2", "SUPPORTED", "Bert", "Llama", "Model", "ModelError", "ModelInfo", "gguf_arch",
           "load", "parse_entries", "preset_name", "registry"]  # fmt: skip

GGUF_ARCHITECTURES = ("llama",)
NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"  # a preset name: it travels in URLs


def preset_name(path: Path) -> str:
    """A directory's name, or a file's name without its extension."""
    return path.name if path.is_dir() else path.stem


def load(path: str | Path, name: str | None = None, max_model_mb: float | None = None, check: bool = True) -> Model:
    """A model from a Hugging Face directory or a `.gguf` file, checked against its config; with `check` (the
    default: every model an operator names) checked whole before it is served: its size against `max_model_mb`,
    then its weights read into memory the process owns, each finite, its tokenizer's ids inside the embedding, and
    a forward pass of a few tokens through every layer finite (`Model.validate`). Without `check` (the packaged
    models) the weights are read on first use."""
    path = Path(path).expanduser()
    name = name or preset_name(path)
    if not re.fullmatch(NAME, name):
        raise ModelError(f"{path}: name: {name!r} is not a preset name (letters, digits, . _ -; up to 64); use --name")
    if path.is_dir():
        arch = read_config(path)
        model: Model = FAMILIES[arch.family](arch, Safetensors(path), name, path, path / "tokenizer.json")
    elif path.suffix.lower() == ".gguf" and (path.exists() or path.is_symlink()):
        store = GGUF(path)
        model = Llama(gguf_arch(store), store, name, path)
    elif path.exists():
        raise ModelError(f"{path}: not a model: give a Hugging Face directory (config.json) or a .gguf file")
    else:
        raise ModelError(f"{path}: file not found")
    if max_model_mb is not None and model.nbytes > max_model_mb * 2**20:
        raise too_large(model, max_model_mb)
    if check:
        model.validate()
    return model


def too_large(model: Model, max_model_mb: float) -> ModelError:
    return ModelError(f"{model.path}: {model.parameters:,} parameters take {model.nbytes / 2**20:,.0f} MB in "
                      f"float32, over MAX_MODEL_MB = {max_model_mb:,.0f}")  # fmt: skip


def gguf_arch(store: GGUF) -> Arch:
    kind = store.field("general.architecture")
    if kind not in GGUF_ARCHITECTURES:
        raise ModelError(f"{store.path}: general.architecture: {kind!r} is not supported; supported: "
                         f"{', '.join(GGUF_ARCHITECTURES)}")  # fmt: skip
    f = Fields(store.fields, store.path, f"{kind}.")
    d, heads = f.int("embedding_length", high=MAX_WIDTH), f.int("attention.head_count", high=MAX_HEADS)
    kv = f.int("attention.head_count_kv", heads, high=MAX_HEADS)
    if d % heads or heads % kv:
        raise f.fail("attention.head_count", f"{heads} heads ({kv} K/V heads) do not divide the width {d}")
    if f.int("rope.dimension_count", d // heads, high=MAX_WIDTH) != d // heads:
        raise f.fail("rope.dimension_count", "RoPE over part of a head is not supported; supported: the whole head")
    embd = store.entries.get("token_embd.weight")
    vocab = f.int("vocab_size", embd.shape[0] if embd is not None and embd.shape else None, high=MAX_VOCAB)
    return Arch(
        "llama", f.int("block_count", high=MAX_LAYERS), d, heads, kv, f.int("feed_forward_length", high=MAX_FF),
        vocab, f.int("context_length", high=MAX_CONTEXT), f.float("attention.layer_norm_rms_epsilon", 1e-5),
        "rmsnorm", "swiglu", "tanh", "pre", "rope", rope_base=f.float("rope.freq_base", 10000.0),
        rope_pairing="adjacent", tied="output.weight" not in store.entries,
    )  # fmt: skip


def parse_entries(value: str | None) -> list[tuple[str, str | None]]:
    """ATTENTION_LAB_MODELS: entries separated by the OS path separator (: or ;), each PATH, or NAME=PATH to name
    its preset (an existing path that contains = is a path)."""
    out: list[tuple[str, str | None]] = []
    for entry in (value or "").split(os.pathsep):
        if not entry.strip():
            continue
        name, eq, path = entry.partition("=")
        if eq and re.fullmatch(NAME, name) and not os.path.exists(entry):
            out.append((path, name))
        else:
            out.append((entry, None))
    return out


def registry(
    paths: Iterable[tuple[str | Path, str | None]],
    max_model_mb: float | None = None,
    packaged: Mapping[str, Model] | None = None,
) -> dict[str, Model]:
    """The server's models by preset name: the `packaged` ones (engine.pretrained.installed()), then each (path,
    name); a model whose float32 weights exceed `max_model_mb` is refused with its size, a name given twice too."""
    out: dict[str, Model] = {}
    for name, model in (packaged or {}).items():
        if max_model_mb is not None and model.nbytes > max_model_mb * 2**20:
            raise too_large(model, max_model_mb)
        out[name] = model
    for path, given in paths:
        model = load(path, given, max_model_mb)
        if model.name in out and out[model.name].path != model.path:
            raise ModelError(f"{path}: name: {model.name!r} is already taken by {out[model.name].path} (--name)")
        out[model.name] = model
    return out
