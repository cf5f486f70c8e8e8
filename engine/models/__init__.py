"""Models from local files as sources of (x, weights): a registry of presets, one loader per file format, one
block per architecture family.

`load(path, name)` reads a Hugging Face directory (config.json; model.safetensors or a sharded
model.safetensors.index.json; tokenizer.json) or a llama `.gguf` file, checks it against its config at once and
keeps its tensors memory-mapped until first use. `registry(paths, max_model_mb)` loads the server's models (and the
packaged MiniLM and SmolLM2): every failure is a `ModelError`, one line naming the file, the field and what is
supported, raised at start-up.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from .config import ARCHITECTURES, SUPPORTED, Arch, Fields, ModelError, ModelInfo, read_config
from .families import FAMILIES, GPT2, Bert, Llama, Model
from .store import GGUF, Safetensors

__all__ = ["ARCHITECTURES", "GPT2", "SUPPORTED", "Bert", "Llama", "Model", "ModelError", "ModelInfo", "gguf_arch",
           "load", "parse_entries", "preset_name", "registry"]  # fmt: skip

GGUF_ARCHITECTURES = ("llama",)
NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"  # a preset name: it travels in URLs


def preset_name(path: Path) -> str:
    """A directory's name, or a file's name without its extension."""
    return path.name if path.is_dir() else path.stem


def load(path: str | Path, name: str | None = None) -> Model:
    """A model from a Hugging Face directory or a `.gguf` file, checked against its config (weights not read)."""
    path = Path(path).expanduser()
    name = name or preset_name(path)
    if not re.fullmatch(NAME, name):
        raise ModelError(f"{path}: name: {name!r} is not a preset name (letters, digits, . _ -; up to 64); use --name")
    if path.is_dir():
        arch = read_config(path)
        return FAMILIES[arch.family](arch, Safetensors(path), name, path, path / "tokenizer.json")
    if path.is_file() and path.suffix.lower() == ".gguf":
        store = GGUF(path)
        return Llama(gguf_arch(store), store, name, path)
    if path.is_file():
        raise ModelError(f"{path}: not a model: give a Hugging Face directory (config.json) or a .gguf file")
    raise ModelError(f"{path}: file not found")


def gguf_arch(store: GGUF) -> Arch:
    kind = store.field("general.architecture")
    if kind not in GGUF_ARCHITECTURES:
        raise ModelError(f"{store.path}: general.architecture: {kind!r} is not supported; supported: "
                         f"{', '.join(GGUF_ARCHITECTURES)}")  # fmt: skip
    f = Fields(store.fields, store.path, f"{kind}.")
    d, heads = f.int("embedding_length"), f.int("attention.head_count")
    kv = f.int("attention.head_count_kv", heads)
    if d % heads or heads % kv:
        raise f.fail("attention.head_count", f"{heads} heads ({kv} K/V heads) do not divide the width {d}")
    if f.int("rope.dimension_count", d // heads) != d // heads:
        raise f.fail("rope.dimension_count", "RoPE over part of a head is not supported; supported: the whole head")
    embd = store.entries.get("token_embd.weight")
    vocab = f.int("vocab_size", embd.shape[0] if embd is not None else None)
    eos = store.field("tokenizer.ggml.eos_token_id")
    return Arch(
        "llama", f.int("block_count"), d, heads, kv, f.int("feed_forward_length"), vocab, f.int("context_length"),
        f.float("attention.layer_norm_rms_epsilon", 1e-5), "rmsnorm", "swiglu", "tanh", "pre", "rope",
        rope_base=f.float("rope.freq_base", 10000.0), rope_pairing="adjacent",
        tied="output.weight" not in store.entries, eos=() if eos is None else (int(eos),),
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
    paths: Iterable[tuple[str | Path, str | None]], max_model_mb: float | None = None, packaged: bool = False
) -> dict[str, Model]:
    """The server's models by preset name: the packaged ones (when asked and installed), then each (path, name);
    a model whose float32 weights exceed `max_model_mb` is refused with its size, a name given twice too."""
    out: dict[str, Model] = {}
    if packaged:
        from ..pretrained import MiniLM, SmolLM2

        for name, finder in (("minilm", MiniLM.find), ("smollm2", SmolLM2.find)):
            try:
                model = finder()
            except ImportError:  # e.g. gguf missing
                model = None
            if model is not None:
                out[name] = model
    for path, given in paths:
        model = load(path, given)
        if model.name in out and out[model.name].path != model.path:
            raise ModelError(f"{path}: name: {model.name!r} is already taken by {out[model.name].path} (--name)")
        out[model.name] = model
    for model in out.values():
        if max_model_mb is not None and model.nbytes > max_model_mb * 2**20:
            raise ModelError(f"{model.path}: {model.parameters:,} parameters take {model.nbytes / 2**20:,.0f} MB in "
                             f"float32, over MAX_MODEL_MB = {max_model_mb:,.0f}")  # fmt: skip
    return out
