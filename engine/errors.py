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
    "unknown_either": "unknown {kind} {value!r}; choose {a} or {b}",
    "d_ff_range": "must be between 0 (meaning 4·d_model) and 10,000,000, got {value}",
    "kv_heads_divide": "must divide n_heads {n_heads} (0 means n_heads), got {value}",
    "kv_heads_mqa": "must divide n_heads {n_heads} (1 is MQA, {n_heads} is plain MHA), got {value}",
    "required_without_preset": "is required without a preset",
    "unknown_setting": "unknown setting; known: {known}",
    "integer_range": "must be an integer from {low} to {high}, got {value!r}",
    "heads_divide": "{d_model} must divide into {n_heads} heads",
    "heads_divide_rope": "{d_model} must divide into {n_heads} heads (of an even width with RoPE)",
    "unit_number": "must be a number from 0 to 1, got {value!r}",
    "above_zero": "must be above 0",
    "no_cuda": "PyTorch sees no CUDA device",
    "text_too_short": "the text ({n:,} characters) is too short for windows of {context}",
    "rows_list": "must be a non-empty list of rows",
    "row_numbers": "row {i} must be a list of numbers",
    "row_count": "has {n} rows, expected {rows}",
    "numbers_list": "must be a non-empty list of numbers",
    "row_numbers_list": "row {i} must be a non-empty list of numbers",
    "entry_count": "has {n} entries, expected {length}",
    "row_entry_count": "row {i} has {n} entries, expected {length}",
    "only_numbers": "must contain only numbers",
    "row_only_numbers": "row {i} must contain only numbers",
    "non_finite": "contains a non-finite number ({v}); only finite numbers are allowed",
    "row_non_finite": "row {i} contains a non-finite number ({v}); only finite numbers are allowed",
    "beyond": "contains {v}, beyond ±{limit:g}",
    "row_beyond": "row {i} contains {v}, beyond ±{limit:g}",
    "cuda_only": "{dtype} is only offered on CUDA; this server computes on {device}",
    "seed_range": "must be between 0 and 2^63 - 1",
    "rope_base": "must be a number above 1 and at most 1e9, got {value}",
    "rope_cross": "RoPE is for self-attention here: cross-attention has no shared positions",
    "own_weights": "{model} brings its own x and weights; explicit ones are not used",
    "id_outside": "id {id} is outside the vocabulary 0..{last}",
    "no_tokenizer_json": "{model} has no tokenizer.json: give token_ids",
    "not_a_trace_field": "is not a field of an attention trace",
    "pretrained_own": "{model} is a pretrained model: its positions and heads are its own",
    "needs_package": "{model} needs a package this server does not have: {package}",
    "pretrained_only": "is only used with a pretrained model preset, not {preset}",
    "explicit_d_model": "explicit inputs are for toy sizes: d_model must be at most {limit}",
    "explicit_tokens": "explicit inputs are for toy sizes: at most {limit} tokens",
    "cross_mask": "cross-attention reads another sequence: use {choices} or {last}",
    "decode_mask": "decoding with a KV cache is causal (or none, to see why it must be): causal or none",
    "decode_self": "the KV cache here is a decoder's self-attention cache",
    "not_decoder_panel": "{model} is no decoder: the panel reads a causal head",
    "tokens_range": "give 2 to {limit} tokens, got {n}",
    "block_uses": "{model}'s blocks use {name}={value}",
    "ffn_fixed": "{model}'s FFN width is fixed",
    "d_ff_block": "must be between 1 and {limit} (or 0 for 4·d_model), got {value}",
    "eps_range": "must be in (0, 1], got {value}",
    "block_self": "a decoder block attends to itself; cross-attention is an attention trace",
    "ffn_budget": "this block's FFN needs more memory than the server's budget",
    "overflow": "{dtype} overflows here: {name} has values beyond its range (largest {biggest:.3g}); use float32, or bfloat16 (float32's range at lower precision), or smaller inputs",
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
