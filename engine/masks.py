"""Attention masks: every kind, the parameters only it reads, and the keys it lets each query read.

`KINDS` is the one list of mask kinds. The Spec's checks (engine/spec.py), the API's `mask` choices and each
parameter's "only with mask=…" (app/schemas/), and through them the lab form, the URL state and the CLI, derive
from it. A new parameter of a mask is four edits: its `Param` and its use in the kind's rule here, the `Spec` field
that keeps it, the request field that takes it, and the independent reference that checks it (engine/reference.py).

An additive mask M[i, j] is 0 where query i may read key j and −∞ where it may not. Adding M to the scores before
the softmax turns the forbidden weights into exact zeros. A query whose every key is masked has no defined softmax;
the engine gives that row all-zero weights (and so a zero head output), never NaN.

An attention mask says which keys a query may read. It is not a loss mask, which says which positions' predictions
count in training: an SFT model may attend to its prompt and still not be scored on it.

Torch is imported on first use, so the request models (and a CLI's --help) read this registry without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import Message, SpecError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Sizes:
    """What a parameter's check measures it against."""

    n: int  # queries
    n_keys: int  # keys: the queries' own sequence, or cross-attention's other one
    max_tokens: int  # the server's longest trace


@dataclass(frozen=True)
class Param:
    """A parameter only one kind of mask reads: a `Spec` field and a request field of the same name."""

    name: str
    check: Callable[[Any, Sizes], object]  # the value given (None: none) -> the Spec's value; raises SpecError
    listed: bool = False  # a list, where an empty one is not given (every request's default)

    def given(self, value: object) -> bool:
        return bool(value) if self.listed else value is not None


@dataclass(frozen=True)
class Grid:
    """Query indices i (N, 1), key indices j (1, N_kv), and the causal pattern j ≤ i (N, N_kv), on the CPU."""

    i: torch.Tensor
    j: torch.Tensor
    causal: torch.Tensor


@dataclass(frozen=True)
class Kind:
    """One kind of mask: which keys query i may read, from the index grids and the kind's own parameters."""

    rule: Callable[..., torch.Tensor]  # (grid, **params) -> booleans broadcast to (N, N_kv)
    params: tuple[Param, ...] = ()
    cross: bool = False  # also for cross-attention, whose keys are another sequence (no key is "earlier")


def _pad_positions(value: Any, s: Sizes) -> tuple[int, ...]:
    pads = tuple(sorted(set(value or ())))
    for pos in pads:
        if not 0 <= pos < s.n_keys:
            raise SpecError("pad_positions", Message("position_outside", position=pos, last=s.n_keys - 1))
    return pads


def _segment_ids(value: Any, s: Sizes) -> tuple[int, ...]:
    segs = tuple(value or ())
    if len(segs) != s.n_keys:
        raise SpecError("segment_ids", Message("segment_count", given=len(segs), n=s.n_keys))
    if any(seg < 0 for seg in segs):
        raise SpecError("segment_ids", Message("segment_negative"))
    return segs


def _window(value: Any, s: Sizes) -> int:
    if value is None or not 1 <= int(value) <= s.max_tokens:
        raise SpecError("window", Message("window_needed"))
    return int(value)


def _prefix(value: Any, s: Sizes) -> int:
    if value is None or not 0 <= int(value) <= s.n:
        raise SpecError("prefix", Message("prefix_range", n=s.n))
    return int(value)


def _mask_matrix(value: Any, s: Sizes) -> tuple[tuple[bool, ...], ...]:
    n, m = s.n, s.n_keys
    if value is None:
        raise SpecError("mask_matrix", Message("mask_matrix_needed", n=n, m=m))
    if len(value) != n or any(not isinstance(r, list | tuple) or len(r) != m for r in value):
        raise SpecError("mask_matrix", Message("mask_matrix_shape", n=n, m=m))
    if any(v not in (0, 1, True, False) or (isinstance(v, float) and not v.is_integer()) for r in value for v in r):
        raise SpecError("mask_matrix", Message("mask_matrix_entries"))
    return tuple(tuple(bool(v) for v in r) for r in value)


def _padding(g: Grid, pad_positions: tuple[int, ...]) -> torch.Tensor:
    keep = g.j >= 0
    keep[:, list(pad_positions)] = False  # a pad key is never read, by any query
    return keep


def _document(g: Grid, segment_ids: tuple[int, ...]) -> torch.Tensor:
    seg = g.i.new_tensor(segment_ids)
    return g.causal & (seg[:, None] == seg[None, :])  # own document only, and causally within it


def _custom(g: Grid, mask_matrix: tuple[tuple[bool, ...], ...]) -> torch.Tensor:
    return g.causal.new_tensor(mask_matrix)  # True where query i may read key j, as given


KINDS: dict[str, Kind] = {
    "none": Kind(lambda g: g.j >= 0, cross=True),  # every key
    "causal": Kind(lambda g: g.causal),
    "padding": Kind(_padding, (Param("pad_positions", _pad_positions, listed=True),), cross=True),
    "document": Kind(_document, (Param("segment_ids", _segment_ids, listed=True),)),
    # The last `window` tokens, itself included.
    "sliding_window": Kind(lambda g, window: g.causal & (g.i - g.j < window), (Param("window", _window),)),
    # The prefix is read in both directions, the rest causally.
    "prefix_lm": Kind(lambda g, prefix: g.causal | (g.j < prefix), (Param("prefix", _prefix),)),
    "custom": Kind(_custom, (Param("mask_matrix", _mask_matrix),), cross=True),
}


def param_kinds() -> dict[str, str]:
    """Each mask parameter's name -> the kind that reads it (read at the call: a test may add one)."""
    return {p.name: name for name, kind in KINDS.items() for p in kind.params}


def check(kind: str, given: Mapping[str, object], sizes: Sizes) -> dict[str, object]:
    """The parameters of `kind`, checked and normalised, as Spec fields; a parameter of another kind that was given
    is the request's error (a window is not silently ignored under a causal mask)."""
    out: dict[str, object] = {}
    for name, k in KINDS.items():
        for p in k.params:
            value = given.get(p.name)
            if name == kind:
                out[p.name] = p.check(value, sizes)
            elif p.given(value):
                raise SpecError(p.name, Message("mask_only", mask=name))
    return out


def allowed(kind: str, n: int, n_kv: int | None = None, **params: Any) -> torch.Tensor:
    """Boolean (N, N_kv): True where query i may attend to key j. `params` are the kind's own, by their names."""
    import torch

    from .device import CPU

    m = n if n_kv is None else n_kv
    if kind not in KINDS:
        raise ValueError(f"unknown mask kind {kind!r}")
    i = torch.arange(n, device=CPU)[:, None]
    j = torch.arange(m, device=CPU)[None, :]
    causal = j <= i  # the diagonal is kept: a token sees itself
    return KINDS[kind].rule(Grid(i, j, causal), **params).expand(n, m).contiguous()


def for_spec(spec: Any) -> torch.Tensor:
    """Boolean (N, N_kv) of a Spec's mask: its kind's parameters read from the Spec by name."""
    params = {p.name: getattr(spec, p.name) for p in KINDS[spec.mask].params}
    return allowed(spec.mask, spec.n_tokens, len(spec.kv_tokens) or None, **params)


def additive(allow: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """0 where allowed, −∞ elsewhere: (N, N_kv), in `dtype` (float32 when not given)."""
    import torch

    m = torch.zeros(allow.shape, dtype=dtype or torch.float32, device=allow.device)
    return m.masked_fill_(~allow, float("-inf"))
