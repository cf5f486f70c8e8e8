"""What every page about a decoder's predictions shares: which loaded models are decoders, and how a predicted token
is labelled next to the text's own pieces."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.models import Model

__all__ = ["generators", "small", "top_labels"]


def generators(models: Mapping[str, Any]) -> list[str]:
    """The causal language models the lab can decode with: every loaded decoder."""
    return [name for name, m in models.items() if getattr(m, "generates", False)]


TAIL = 4  # context tokens a candidate is read after: a UTF-8 character has at most 4 bytes, a piece at least 1


def top_labels(
    model: Model, ids: list[int], labels: list[str], context: int, top_ids: tuple[int, ...] | list[int]
) -> list[str]:
    """The candidates of the step predicted from `ids[:context]`, labelled as the text labels its pieces: the token
    that was chosen exactly as the text shows it (猫₁ when the next piece finishes 猫); any other as if it came next,
    after the context's last pieces (猫₂ when it finishes a character the context began; bytes that begin a
    character it does not finish as ⟨e7⟩). Never U+FFFD, which `decode` gives for a piece of a character."""
    chosen = ids[context] if context < len(ids) else None
    tail = list(ids[max(0, context - TAIL) : context])
    return [labels[context] if t == chosen else model.labels([*tail, t])[-1] for t in top_ids]


def small(v: float) -> str:
    """A number that may be tiny (max |Δ|, KL): 0, 3e-7, 0.012, 17.6 (the templates' `tiny` filter)."""
    if v == 0:
        return "0"
    if abs(v) < 0.01:
        mantissa, _, exp = f"{v:.0e}".partition("e")
        return f"{mantissa}e{int(exp)}"
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
