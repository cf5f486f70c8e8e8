"""What both prediction pages show of a run: its candidates, its switches in words, small numbers, the colour of a
change, and a message with the model's tokens marked."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

from ..web.knockouts import heads_text
from ..web.state import ViewState

SAME = 1e-5  # max |Δ| at or below which a position counts as unchanged (the leakage proof's tolerance)


def spans(positions: list[int]) -> str:
    """0, 1, 2, 5, 7, 8 as "0–2, 5, 7–8"."""
    runs: list[list[int]] = []
    for p in positions:
        if runs and p == runs[-1][-1] + 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}–{r[-1]}" for r in runs)


def delta_class(v: float) -> str:
    """max |Δ log p| as a colour: white for unchanged (≤ 1e-5) to dark red for a prediction turned over."""
    bins = (SAME, 1e-3, 0.1, 1.0, 5.0)
    return f"dv-p{sum(v > b for b in bins)}"


def kl_class(v: float) -> str:
    bins = (1e-7, 1e-4, 1e-2, 0.1, 1.0)
    return f"dv-p{sum(v > b for b in bins)}"


def with_tokens(t: Any, key: str, tokens: Mapping[str, str], **values: Any) -> tuple[str, Markup]:
    """The message `key` as text, and as HTML with each of `tokens` (a model's text, not the page's words) marked
    as a token, <span class="tok">…</span>."""
    marks = {k: f"\x00{i}\x00" for i, k in enumerate(tokens)}
    html = str(escape(t(key, **values, **marks)))
    for i, v in enumerate(tokens.values()):
        html = html.replace(f"\x00{i}\x00", str(Markup('<span class="tok">{}</span>').format(v.replace(" ", "␣"))))
    return t(key, **values, **tokens), Markup(html)


def twin(state: ViewState) -> str:
    """The page's `.json` twin: the same view as data."""
    path, _, query = state.url().partition("?")
    return f"{path}.json" + (f"?{query}" if query else "")


@dataclass(frozen=True)
class Candidate:
    token: str
    token_id: int
    p: float
    target: bool = False  # the position's target


def switched_words(switches: Mapping[str, Any], n_layer: int, t: Any) -> tuple[str, ...]:
    out = []
    if switches["ablate"]:
        heads = heads_text(switches["ablate"])
        out.append(t("predict.sw.ablate." + switches["ablate_mode"], heads=heads))
    for name in ("mask_off_layers", "drop_sink_layers"):
        layers = switches[name]
        if layers:
            which = t("predict.sw.all") if len(layers) == n_layer else ", ".join(str(i) for i in layers)
            out.append(t(f"predict.sw.{name}", layers=which))
    return tuple(out)


def candidates(top: list[dict[str, Any]], target_id: int) -> tuple[Candidate, ...]:
    return tuple(Candidate(c["token"], c["token_id"], c["p"], c["token_id"] == target_id) for c in top)
