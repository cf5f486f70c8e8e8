"""What both prediction pages show of a run: its candidates, its switches in words, small numbers, the colour of a
change, and a message with the model's tokens marked."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

from ..schemas import FieldError, said
from ..web.knockouts import heads_text
from ..web.state import PageQuery, within
from .compute import Switched, Top

SAME = 1e-5  # max |Δ| at or below which a position counts as unchanged (the leakage proof's tolerance)


# -- one numbering of positions (#32 item 6) ----------------------------------------------------------------------
# Every page numbers the text's tokens from 0, as the lab, /model, /sinks and /generate do: the BOS that the prediction
# views put before the text is shown, unnumbered ("BOS"), so a token keeps its number whether or not a BOS is read.
# `first` is the index in the sequence of the text's position 0 (1 after a BOS, else 0); a page's parameters name
# positions by their numbers, and `bos` names the BOS.

BOS = "bos"  # the BOS, where a parameter names a position (pos=bos, cell=29.bos)


def bos_first(bos_id: int | None, seq: tuple[int, ...] | list[int]) -> int:
    """The index of the text's position 0 in `seq`: 1 when the sequence opens with the model's BOS, else 0."""
    return 1 if bos_id is not None and len(seq) > 0 and seq[0] == bos_id else 0


def number(i: int, first: int) -> int | None:
    """Sequence index i as the position number a page shows: None for the BOS."""
    return None if i < first else i - first


def named(i: int, first: int) -> str:
    """Sequence index i as a parameter spells it: its number, or `bos`."""
    return BOS if i < first else str(i - first)


def label(i: int, first: int) -> str:
    """Sequence index i as a page writes it: its number, or BOS."""
    return "BOS" if i < first else str(i - first)


def index_of(key: str, p: int | None, first: int, n: int) -> int:
    """A position number from a parameter (-1: the BOS) as an index in the sequence of n, or a FieldError naming
    `key` with the numbers this text has."""
    if p is None or p < 0:
        if first:
            return 0
        raise FieldError(key, said("no_bos"))
    return within(key, p, 0, n - 1 - first) + first


def position_spans(indices: list[int], first: int) -> str:
    """Sequence indices as the page's numbers in runs: "BOS, 0–4, 7"."""
    bos = ["BOS"] if any(i < first for i in indices) else []
    rest = spans([i - first for i in indices if i >= first])
    return ", ".join([*bos, *([rest] if rest else [])])


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


def twin(state: PageQuery) -> str:
    """The page's `.json` twin: the same view as data."""
    path, _, query = state.url().partition("?")
    return f"{path}.json" + (f"?{query}" if query else "")


@dataclass(frozen=True)
class Candidate(Top):
    target: bool = False  # the position's target (the lens: the final prediction)


def switched_words(switches: Switched, n_layer: int, t: Any) -> tuple[str, ...]:
    out = []
    if switches.ablate:
        heads = heads_text(switches.ablate)
        out.append(t("predict.sw.ablate." + switches.ablate_mode, heads=heads))
    for name in ("mask_off_layers", "drop_sink_layers"):
        layers = getattr(switches, name)
        if layers:
            which = t("predict.sw.all") if len(layers) == n_layer else ", ".join(str(i) for i in layers)
            out.append(t(f"predict.sw.{name}", layers=which))
    return tuple(out)


def candidates(top: tuple[Top, ...], target_id: int) -> tuple[Candidate, ...]:
    return tuple(Candidate(c.token, c.token_id, c.p, c.token_id == target_id) for c in top)
