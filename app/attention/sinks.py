"""The attention-sink page `/sinks`: how much of each head's weight a real model parks on the first token, and what
the layer's output does when that sink is dropped (key 0 masked for every query but the first, rows renormalised)
— computed by engine/sinks.py, the same numbers as /api/v1/attention/sink."""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import APIRouter, Request

from engine.attention import Trace
from engine.sinks import SinkDrop, drop_sink

from ..lab import Lab
from ..render.arrays import to_numpy
from ..render.cells import SWATCHES, MatrixView, matrix_view
from ..schemas import AttentionRequest, FieldError, head_within, said
from ..web.page import page_route
from ..web.state import url_fields
from ..web.view import View
from .view import COLOR_TICKS, SinksQuery, axis_labels

router = APIRouter(include_in_schema=False)
API_KEYS = url_fields(AttentionRequest)
CELLS_UP_TO = 24  # tokens: past this the weights are heat maps, not numbers


class SinksView(View):
    """Attention sinks in one layer of a trained model, as /sinks shows it: each head's share of weight on key 0
    (`shares`), one head's weights as heat maps on a log and a linear scale (and cell by cell for a short text:
    `matrices`, before and after the sink is dropped), and how far each token's output moves without the sink
    (`changes`). The page swaps no htmx blocks: an htmx request gets the whole page."""

    template = "sinks.html"
    blocks = ()
    kind = "sinks"

    summary: dict[str, Any] | None = None
    tokens: list[str] | None = None
    layer: int = 0
    n_layer: int = 0
    head: int = 0
    hint: str = ""  # the layer and the text's length in words
    shares: list[tuple[int, float, str]] | None = None  # (head, share of weight on key 0, the head's URL)
    changes: list[tuple[str, float, float]] | None = None  # (token, ‖O′ − O‖, ‖O′ − O‖ / ‖O‖)
    top_change: float = 1.0  # the largest relative change: the meters' full length
    heatmaps: dict[str, str] | None = None  # colour scale ("log", "linear") → the head's heat map URL
    axis: list[str] | None = None  # the maps' row and column labels (queries down, keys across)
    ticks: dict[str, list[str] | None] | None = None  # colour scale → its colour bar's ticks
    matrices: list[MatrixView] | None = None
    json_url: str | None = None


def sinks_query(request: Request, path: str, keys: tuple[str, ...], query: type[SinksQuery]) -> SinksQuery:
    """A trained model by default (random weights have no sinks), and a middle layer (the sinks are plain there;
    layer 0 barely has them): in the query, so every link and image keeps them."""
    lab, state = request.app.state.lab, query.of(request.query_params, path, keys)
    state.params.setdefault("preset", "smollm2" if "smollm2" in lab.models else next(iter(lab.models), "toy"))
    if state.params["preset"] in lab.models:
        state.params.setdefault("layer", str(lab.models[state.params["preset"]].info.n_layer // 2))
    return state


def api_url(state: SinksQuery) -> str:
    """The API's sink numbers for the page's request."""
    return "/api/v1/attention/sink?" + state.api_query()


def form(lab: Lab, state: SinksQuery, lang: str) -> dict[str, Any]:
    return {"json_url": api_url(state), "swatches": SWATCHES["sequential"]}


async def sinks_view(state: SinksQuery, lab: Lab, progress: str, ctx: dict[str, Any]) -> SinksView:
    """What /sinks shows for `state`: the page's View (its JSON face is the page's `.json` twin)."""
    req = state.request(AttentionRequest)
    if req.preset not in lab.models:
        names = ", ".join(lab.models)
        raise FieldError("preset", said("sinks_models", names=names) if names else said("sinks_none"))
    spec = await lab.spec(req)  # the model's tokenizer off the event loop
    trace, _ = await lab.trace(spec)
    head = head_within(state.head, spec.n_heads)
    d = drop_sink(trace)
    share = to_numpy(d.share)
    tokens = list(spec.tokens)
    n_layer = lab.models[spec.preset].info.n_layer
    return SinksView(
        summary=spec.summary(),
        tokens=tokens,
        layer=spec.layer,
        n_layer=n_layer,
        head=head,
        hint=ctx["t"]("sinks.layer", layer=spec.layer, last=n_layer - 1, n=len(tokens)),
        shares=[(h, float(share[h]), state.url(head=h)) for h in range(spec.n_heads)],
        changes=list(zip(tokens, to_numpy(d.change).tolist(), to_numpy(d.relative).tolist(), strict=True)),
        top_change=float(to_numpy(d.relative).max()) or 1.0,
        heatmaps={
            which: "/api/v1/attention/heatmap.png?" + state.api_query(stage="softmax", head=head, size=384, color=which)
            for which in ("log", "linear")
        },
        # The maps' axes (queries down, keys across, as the lab's large view) and their colour bars.
        axis=axis_labels(tokens),
        ticks={which: COLOR_TICKS[("sequential", which)] for which in ("log", "linear")},
        matrices=sink_matrices(trace, d, head, tokens) if spec.n_tokens <= CELLS_UP_TO else None,
        json_url=api_url(state),
    )


def sink_matrices(trace: Trace, d: SinkDrop, head: int, tokens: list[str]) -> list[MatrixView]:
    """One head's weights cell by cell, before and after the sink is dropped."""
    hidden = ~np.isfinite(to_numpy(trace.mask.mask))  # weights the mask set to 0: hatched, not small
    dropped = hidden.copy()
    dropped[1:, 0] = True  # key 0, dropped for every query but the first
    return [
        matrix_view(name, label, to_numpy(w[head]), tokens, tokens, "(N, N)", "sequential", head, masked=m, links=False)
        for name, label, w, m in (
            ("weights", "A", trace.softmax.weights, hidden),
            ("dropped", "A′", d.weights, dropped),
        )
    ]


page_route(router, "/sinks", "sinks.html", API_KEYS, SinksQuery, sinks_view, form, state_of=sinks_query)
