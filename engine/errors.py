"""The engine's one error type: a request that cannot be traced, naming the input at fault.

It has a module of its own so that every checker (engine/spec.py, the mask kinds' own checks in engine/masks.py)
can raise it without importing another checker; `engine.spec.SpecError` is the same class.

A message the engine says often is a `Message`: its English text (the API's words, from `ENGLISH`) that also keeps
its code and parameters, so that a page says it in its reader's language from a catalogue
(app/web/locales/errors.json) with the same parameters, never by reading the English back.
"""

from __future__ import annotations

from typing import Any

# The engine's messages by code: str.format templates of their parameters.
ENGLISH: dict[str, str] = {
    "between": "must be between {low} and {high}, got {value}",
    "not_divisible": "d_model {d_model} is not divisible by n_heads {n_heads}",
    "unknown_choice": "unknown {kind} {value!r}; choose one of {choices}",
    "no_tokens": "needs at least one token",
    "empty_token": "token {i} is empty or not a string",
    "too_many_tokens": "{n} tokens is more than the {limit} this server traces for {model}",
    "too_many_tokens_whole": "{n} tokens is more than the {limit} this server traces whole for {model}",
    "too_many_tokens_window": "{n} tokens is more than the {limit} this server traces whole for {model}; up to "
    "{longer}, /api/v1/attention/window and heatmap.png compute the rows they show",
    "mask_only": "is only used with mask={mask}",
    "position_outside": "position {position} is outside 0..{last}",
    "segment_count": "needs one segment id per token: {given} given for {n} tokens",
    "model_layers": "{model} has layers 0..{last}, not {layer}",
    "gives_no_tokens": "gives no tokens",
    "window_needed": "mask=sliding_window needs window ≥ 1: how many tokens back a query reads",
    "prefix_range": "mask=prefix_lm needs prefix between 0 and {n}: the tokens read both ways",
    "rope_even": "RoPE rotates pairs of dimensions: d_k must be even, it is {d_k}",
    "over_budget": "this trace needs about {mib} MiB, over the server's budget of {budget_mib} MiB: use fewer tokens "
    "or heads",
    "own_tokenizer": "{model} tokenises with its own tokenizer: give text or token_ids",
    "text_or_ids": "give either text or token_ids, not both",
    "tokens_or_text": "give either tokens or text, not both",
    "fixed_size": "{model} has {name} {value}; it cannot be changed",
    "decode_max": "decoding step by step is offered up to {limit} tokens",
    "prefill_range": "must be between 1 and the {n} tokens",
    "text_too_long": "is {length} characters long, over {limit}",
    "not_a_head": "[{layer}, {head}] is not a head: layers 0..{last_layer}, heads 0..{last_head}",
    "not_a_layer": "{layer} is not a layer: layers 0..{last}",
    "token_too_long": "token {i} is {length} characters long, over {limit}",
    "kv_token_bad": "token {i} is empty, not a string or too long",
    "too_many_kv_tokens": "{n} tokens is more than the {limit} this server traces",
    "learned_positions": "learned positions stop at n_ctx = {n_ctx}: token {token} has no position vector",
    "segment_negative": "segment ids must be non-negative integers",
    "mask_matrix_needed": "mask=custom needs an {n} × {m} matrix of 0 and 1",
    "mask_matrix_shape": "must be {n} × {m} (queries × keys)",
    "mask_matrix_entries": "entries are 1 (may read) or 0 (may not)",
    "multi_token": "“{text}” is {n} tokens for {model}: {pieces}; an attribution splits one token's logit: give one of "
    "them, or its id as {field}_id",
}


class Message(str):
    """A message as its English text, keeping its `code` and `params` (the values its template was filled with)."""

    code: str
    params: dict[str, Any]

    def __new__(cls, code: str, **params: Any) -> Message:
        return cls.worded(ENGLISH[code].format(**params), code, **params)

    @classmethod
    def worded(cls, english: str, code: str, **params: Any) -> Message:
        """A message whose English is already written (a library's, e.g. pydantic's), with its code and parameters."""
        text = str.__new__(cls, english)
        text.code, text.params = code, params
        return text


class SpecError(ValueError):
    """A request that cannot be traced; `field` names the input at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
