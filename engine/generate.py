"""Greedy generation with SmolLM2 through a KV cache, and what one layer's heads look at while it generates.

The prompt is run once (prefill) and every layer's K and V are kept in preallocated buffers; each new token then
runs alone through the 30 blocks, its query attending to the cache (nothing is recomputed). At the chosen layer
the new query's attention weights over the whole context are kept, head by head: the row that *predicted* the
token (the query is the context's last token). After the last block: the final RMSNorm, the logits against the
(tied) token embedding, the most likely token (greedy), and the five most likely with their probabilities.

The same weights, RoPE and GQA as the lab's traces of SmolLM2 (engine/pretrained.py); tests compare the tokens
with transformers' greedy `generate` on the same GGUF file.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .block import feed_forward, normalise
from .positions import rotate

TOP = 5


@dataclass(frozen=True)
class Step:
    token_id: int
    top_ids: tuple[int, ...]  # the five most likely next tokens, most likely first
    top_probs: tuple[float, ...]
    attention: torch.Tensor | None  # (H, context) at the chosen layer: the query that predicted this token
    context: int  # tokens in the cache when this token was predicted (prompt + earlier generated tokens)


@dataclass(frozen=True)
class Generation:
    prompt_ids: tuple[int, ...]
    steps: tuple[Step, ...]
    layer: int | None
    kv_bytes_per_token: int  # K and V of one token in every layer (float32)
    stopped_at_eos: bool

    @property
    def nbytes(self) -> int:
        return sum(s.attention.numel() * 4 for s in self.steps if s.attention is not None) + 64 * len(self.steps)


def eos_id(model: Any) -> int | None:
    field = model._reader.fields.get("tokenizer.ggml.eos_token_id")
    return int(field.parts[field.data[0]][0]) if field is not None else None


@torch.inference_mode()
def generate(
    model: Any,
    prompt_ids: tuple[int, ...],
    max_new_tokens: int,
    layer: int | None,
    progress: Callable[[int, int], None] | None = None,
) -> Generation:
    """Greedy decoding of up to `max_new_tokens` after `prompt_ids` (stops after the end-of-text token)."""
    info = model.info
    dev = model.device
    n_layer, d, h, kv, eps, base = info.n_layer, info.d_model, info.n_heads, info.n_kv_heads, info.eps, info.rope_base
    dk = d // h
    group = h // kv
    total = len(prompt_ids) + max_new_tokens
    # One buffer per layer for K (roped) and V: written in place, never reallocated while generating.
    k_cache = torch.empty(n_layer, kv, total, dk, device=dev)
    v_cache = torch.empty(n_layer, kv, total, dk, device=dev)
    embed = model._get("token_embd.weight")  # (vocab, d), also the output projection (tied)
    final_norm = model._get("output_norm.weight")
    weights = [(model.attention_weights(i), model.block_weights(i)) for i in range(n_layer)]
    stop = eos_id(model)
    scale = 1.0 / math.sqrt(dk)

    def run(ids: list[int], start: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The new tokens at positions start.. through every block; returns the last position's hidden state
        and, at `layer`, the last query's weights over every cached key (H, start + len(ids))."""
        n = len(ids)
        end = start + n
        x = embed[torch.tensor(ids, dtype=torch.long, device=dev)]
        pos = torch.arange(start, end, device=dev)
        seen: torch.Tensor | None = None
        for i, (aw, bw) in enumerate(weights):
            a = normalise(x, bw.ln1_w, None, "rmsnorm", eps)
            q = rotate((a @ aw.w_q).view(n, h, dk).transpose(0, 1), pos, base, "adjacent")
            k_cache[i, :, start:end] = rotate((a @ aw.w_k).view(n, kv, dk).transpose(0, 1), pos, base, "adjacent")
            v_cache[i, :, start:end] = (a @ aw.w_v).view(n, kv, dk).transpose(0, 1)
            # Head j reads K/V head j // group: the query heads grouped over their shared K/V head (no copies).
            k = k_cache[i, :, :end].unsqueeze(1)  # (kv, 1, end, dk)
            v = v_cache[i, :, :end].unsqueeze(1)
            scores = (q.view(kv, group, n, dk) @ k.transpose(2, 3)) * scale  # (kv, group, n, end)
            if n > 1:  # the prompt: each query sees itself and what came before
                causal = torch.ones(n, end, dtype=torch.bool, device=dev).tril(diagonal=start)
                scores = scores.masked_fill(~causal, float("-inf"))
            w = torch.softmax(scores, dim=-1)
            if i == layer:
                seen = w[:, :, -1].reshape(h, end).clone()
            y = (w @ v).reshape(h, n, dk).transpose(0, 1).reshape(n, d)
            x = x + y @ aw.w_o
            x = x + feed_forward(normalise(x, bw.ln2_w, None, "rmsnorm", eps), bw, "swiglu", "tanh")[1]
        return x[-1], seen

    steps: list[Step] = []
    hidden, seen = run(list(prompt_ids), 0)
    context = len(prompt_ids)
    stopped = False
    for _ in range(max_new_tokens):
        logits = normalise(hidden, final_norm, None, "rmsnorm", eps) @ embed.T
        probs = torch.softmax(logits.double(), dim=-1)
        top = torch.topk(probs, TOP)
        token = int(torch.argmax(logits))
        steps.append(Step(token, tuple(int(i) for i in top.indices), tuple(float(p) for p in top.values),
                          seen, context))  # fmt: skip
        if progress is not None:
            progress(len(steps), max_new_tokens)
        if token == stop:
            stopped = True
            break
        if len(steps) == max_new_tokens:
            break
        hidden, seen = run([token], context)
        context += 1
    return Generation(tuple(prompt_ids), tuple(steps), layer, 2 * n_layer * kv * dk * 4, stopped)
