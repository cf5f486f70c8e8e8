"""Loading SmolLM2's GGUF file into transformers, read once.

One `from_pretrained(..., gguf_file=...)` parses the file's metadata twice (gguf's `GGUFReader`: once for the
config, once for the weights; the tokenizer's 49,152 strings, a slice each) and rebuilds gguf's tensor-name table
once per module of the model (`get_tensor_name_map`, 397 times for SmolLM2's 30 layers): most of a load's time.
Both are pure functions of their arguments (a file the tests do not write, an architecture and a layer count), so
while `read_once()` is open each is computed once and handed back: transformers builds the same model from the same
tensors, only sooner. Used by the `llama` fixture and by the interpreter that runs /api/v1/code's snippets."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator


@contextlib.contextmanager
def read_once() -> Iterator[None]:
    import gguf

    reader, names = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = functools.lru_cache(maxsize=4)(reader)  # type: ignore[assignment,misc]
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=64)(names)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, names  # type: ignore[misc]
