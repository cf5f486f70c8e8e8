"""Where a trace's input x and its weights come from: given explicitly, or generated from the seed.

Everything random is drawn on the CPU from a seeded `torch.Generator` and only then moved, so a seed gives the same
numbers on every machine and device. A token's embedding is seeded by (seed, token text) alone, so the same word has
the same vector wherever it stands in the sentence; the weights are seeded by the seed alone.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import torch

from .device import CPU, DTYPES
from .memo import bytes_bounded
from .spec import Spec

T = TypeVar("T")
OVERLAP_TOKENS = 64  # below this, embedding the tokens is quicker than handing the weights to another thread


@dataclass(frozen=True)
class Weights:
    """Row-vector convention (GPT-2, nanoGPT): Q = X W_Q + b_Q, each W is (d_model, d_model)."""

    w_q: torch.Tensor  # (d, d)
    w_k: torch.Tensor  # (d, d)
    w_v: torch.Tensor  # (d, d)
    w_o: torch.Tensor  # (d, d)
    b_q: torch.Tensor | None = None  # (d,)
    b_k: torch.Tensor | None = None
    b_v: torch.Tensor | None = None
    b_o: torch.Tensor | None = None


def seed_of(*parts: object) -> int:
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


_local = threading.local()


def _generator(seed: int) -> torch.Generator:
    """This thread's CPU generator, reseeded: `manual_seed` resets its whole state, so the numbers are those of a
    new `torch.Generator().manual_seed(seed)`, without making one per token."""
    g = getattr(_local, "generator", None)
    if g is None:
        g = _local.generator = torch.Generator()
    return g.manual_seed(seed)


def token_embedding(token: str, seed: int, d_model: int) -> torch.Tensor:
    """N(0, 1) vector for one token's text: (d_model,). It stands for the normalised input attention sees."""
    return torch.randn(d_model, generator=_generator(seed_of("token", seed, token)), device=CPU)


@bytes_bounded(32 * 2**20)
def embed(tokens: tuple[str, ...], seed: int, d_model: int) -> torch.Tensor:
    """(N, d): row i is `token_embedding(tokens[i], seed, d_model)`, drawn straight into its row, once per distinct
    token (a repeated word's row is copied). Remembered per sequence, so another mask or scale on the same
    sentence does not draw it again."""
    out = torch.empty(len(tokens), d_model, device=CPU)
    first: dict[str, int] = {}
    for i, token in enumerate(tokens):
        j = first.setdefault(token, i)
        if j == i:
            torch.randn(d_model, generator=_generator(seed_of("token", seed, token)), out=out[i], device=CPU)
        else:
            out[i] = out[j]
    return out


@bytes_bounded(64 * 2**20)  # gpt2-small's four 768² matrices are 9 MiB
def random_weights(seed: int, d_model: int, init_std: float, bias: bool, d_kv: int | None = None) -> Weights:
    """W_Q, W_K, W_V, W_O drawn from N(0, init_std²) in that order; biases start at zero as in GPT-2.
    Under GQA, W_K and W_V have d_kv = n_kv_heads · d_k columns.

    W_Q, W_K and W_V are kept side by side, as the column blocks of one (d_model, d_model + 2 d_kv) matrix (and
    their biases as blocks of one vector), so that one matrix product projects all three (`attention.project`)."""
    d_kv = d_model if d_kv is None else d_kv
    g = torch.Generator().manual_seed(seed_of("weights", seed))
    cols = (d_model, d_kv, d_kv)
    drawn = [torch.randn(d_model, c, generator=g, device=CPU).mul_(init_std) for c in (*cols, d_model)]
    w_q, w_k, w_v = torch.cat(drawn[:3], dim=1).split(cols, dim=1)
    if not bias:
        return Weights(w_q, w_k, w_v, drawn[3])
    b_q, b_k, b_v = torch.zeros(sum(cols), device=CPU).split(cols)
    return Weights(w_q, w_k, w_v, drawn[3], b_q, b_k, b_v, torch.zeros(d_model, device=CPU))


def source(spec: Spec, device: torch.device, dtype: torch.dtype) -> torch.Tensor | None:
    """Cross-attention: the seeded vectors of the sequence K and V are read from, (N_kv, d); else None."""
    if not spec.kv_tokens:
        return None
    return embed(spec.kv_tokens, spec.seed, spec.d_model).to(device=device, dtype=dtype)


def cast(w: Weights, device: torch.device, dtype: torch.dtype) -> Weights:
    return Weights(**{k: None if v is None else v.to(device, dtype) for k, v in vars(w).items()})  # type: ignore[arg-type]


@bytes_bounded(256 * 2**20)
def placed_weights(seed: int, d_model: int, init_std: float, bias: bool, d_kv: int, device: str, dtype: str) -> Weights:
    """The seeded weights already on the serving device in the serving dtype: uploaded once, not per request."""
    return cast(random_weights(seed, d_model, init_std, bias, d_kv), torch.device(device), DTYPES[dtype])


_helper: list[ThreadPoolExecutor] = []  # made on first use; a forked child (whose copy has no thread) makes its own
_helper_lock = threading.Lock()
os.register_at_fork(after_in_child=_helper.clear)


def _in_background(fn: Callable[[], T]) -> Future[T]:
    """`fn()` on one helper thread: it draws the seeded weights while the caller embeds the tokens. The weights'
    generator runs in C++ without the GIL and the embeddings are mostly a Python loop, so on two cores they overlap."""
    with _helper_lock:
        if not _helper:
            _helper.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="seeded-weights"))
    return _helper[0].submit(fn)


def load(spec: Spec, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, Weights]:
    """The layer input x (N, d) and the weights for `spec`, on `device` in `dtype`. Seeded weights for a long
    sequence are drawn on a helper thread while the tokens are embedded (the same numbers, in less time)."""
    explicit = any(getattr(spec, n) is not None for n in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"))
    placed = not explicit and (device.type != "cpu" or dtype != torch.float32)
    args = (spec.seed, spec.d_model, spec.init_std, spec.bias, spec.d_kv)

    def weights() -> Weights:
        return placed_weights(*args, str(device), spec.dtype) if placed else random_weights(*args)

    pending = _in_background(weights) if spec.x is None and spec.n_tokens >= OVERLAP_TOKENS else None
    x = torch.tensor(spec.x, device=CPU) if spec.x is not None else embed(spec.tokens, spec.seed, spec.d_model)
    drawn = weights() if pending is None else pending.result()
    if placed:
        return x.to(device=device, dtype=dtype), drawn
    generated = drawn
    parts: dict[str, torch.Tensor | None] = {}
    for name in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"):
        given = getattr(spec, name)
        value = torch.tensor(given, device=CPU) if given is not None else getattr(generated, name)
        if value is None and spec.bias:  # an explicit bias given for one projection: the others are zero
            value = torch.zeros(spec.d_kv if name in ("b_k", "b_v") else spec.d_model, device=CPU)
        parts[name] = None if value is None else value.to(device=device, dtype=dtype)
    return x.to(device=device, dtype=dtype), Weights(**parts)  # type: ignore[arg-type]
