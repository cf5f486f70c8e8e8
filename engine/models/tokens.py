"""A model's tokenizer: its `tokenizer.json`, or one rebuilt from a GGUF file's byte-level BPE vocabulary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .config import ModelError
from .files import MAX_TOKENIZER_BYTES, read_bytes
from .store import GGUF, Strings

# llama.cpp's names for the ways a GGUF's text is split before BPE (`tokenizer.ggml.pre`).
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
    r"\s+(?!\S)|\s+"
)


def from_json(path: Path) -> Any:
    """A `tokenizer.json` (a regular file of bounded size, read once; a malformed one is a ModelError)."""
    from tokenizers import Tokenizer

    data = read_bytes(path, MAX_TOKENIZER_BYTES)
    try:
        tok = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as e:  # the tokenizers package raises its own (Rust) exception types
        raise ModelError(
            f"{path}: not a tokenizer ({str(e).splitlines()[0][:200] if str(e) else type(e).__name__})"
        ) from None
    tok.no_padding()  # a packaged tokenizer may pad every input (MiniLM's to 128)
    tok.no_truncation()
    return tok


def gguf_has_tokenizer(store: GGUF) -> bool:
    return store.field("tokenizer.ggml.model") == "gpt2" and isinstance(store.field("tokenizer.ggml.tokens"), Strings)


def from_gguf(store: GGUF) -> Any:
    """Byte-level BPE (`tokenizer.ggml.model` gpt2) with the pre-tokenizer llama.cpp names in `tokenizer.ggml.pre`;
    control tokens (type 3) are added as special tokens, so text never splits them."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    tokens = store.field("tokenizer.ggml.tokens").items()
    merges_field = store.field("tokenizer.ggml.merges")
    if merges_field is not None and not isinstance(merges_field, Strings):
        raise ModelError(f"{store.path}: tokenizer.ggml.merges: must be an array of strings")
    merges = []
    for i, m in enumerate(merges_field.items() if merges_field is not None else []):
        left, space, right = m.partition(" ")
        if not (left and space and right):
            raise ModelError(f"{store.path}: tokenizer.ggml.merges: entry {i} {m[:40]!r} is not two pieces "
                             "separated by a space")  # fmt: skip
        merges.append((left, right))
    pre = store.field("tokenizer.ggml.pre", "default")
    if not isinstance(pre, str):
        raise ModelError(f"{store.path}: tokenizer.ggml.pre: must be a string, got {type(pre).__name__}")
    types = store.field("tokenizer.ggml.token_type") or []
    if not isinstance(types, list):
        raise ModelError(f"{store.path}: tokenizer.ggml.token_type: must be an array of integers")
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if pre == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    elif pre in ("llama-bpe", "llama3"):
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
        )  # fmt: skip
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    special = [tokens[i] for i, kind in enumerate(types) if kind == 3 and i < len(tokens)]
    if special:
        tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in special])
    return tok
