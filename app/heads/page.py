"""The pages /heads (which head does what: role grids, the induction probe and its loss, knocking the top
induction heads out, the pruning curve) and /patch (where the answer lives: activation patching grids). Each is a
View through the page kernel; its JSON twin is the same View as data."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter
from pydantic import Field

from engine import heads as E

from ..lab import Lab
from ..render import cells
from ..schemas import FieldError
from ..web.knockouts import form_request
from ..web.page import lab_url, page_route
from ..web.state import PageQuery, within
from ..web.view import HIDDEN, View
from .compute import (
    Ablated,
    Grid,
    Probe,
    ProbeLoss,
    Token,
    patch_job,
    prune_job,
    roles_document,
    roles_of,
)
from .figures import loss_bars, probe_pattern, pruning_chart
from .request import CLEAN, CORRUPTED, HeadsQuery, PatchQuery, PatchRequest, PruneRequest, RolesRequest

router = APIRouter(include_in_schema=False)
ROLE_KEYS = tuple(RolesRequest.model_fields)
PATCH_KEYS = tuple(PatchRequest.model_fields)
DEFAULT_TEXT = {"en": "The cat sat on the mat. The dog sat on the log.", "zh": "猫坐在垫子上。狗坐在木头上。"}
KINDS = (*E.KINDS, "head")


@dataclass(frozen=True)
class Cell:
    layer: int
    col: int  # the head, or the position
    value: float | None
    cls: str
    url: str


@dataclass(frozen=True)
class Curve:
    """The pruning curve: mean loss against the number of heads removed, and what the page says about it."""

    order: tuple[tuple[int, int], ...]
    mean_loss: tuple[float | None, ...]
    clean: float | None
    can_go: int
    fraction: float
    rise: float
    chart: Annotated[str, HIDDEN] = ""  # SVG: the lab's line chart of `mean_loss`, axes and all


class HeadsView(View):
    """/heads: every head's score for a role (`grid`) and the top heads, the induction probe and its loss per
    position (with the top induction heads knocked out: `ablated`), the chosen head's weights on the probe
    (`weights`; the induction diagonal is key i − `offset`), and the pruning curve once asked for (`curve`)."""

    template = "heads.html"
    blocks = ()
    kind = "heads"

    preset: str = ""
    layers: int = 0
    heads: int = 0
    tokens: tuple[str, ...] = ()
    role: str = "induction"
    role_urls: tuple[tuple[str, str], ...] = ()
    grid: tuple[tuple[Cell, ...], ...] = ()
    top: tuple[Cell, ...] = ()
    probe: Probe | None = None
    probe_loss: ProbeLoss | None = None
    ablated: Ablated | None = None
    chosen: tuple[int, int] = (0, 0)
    weights: tuple[tuple[float, ...], ...] = ()  # the chosen head's weights on the probe (stage 4)
    offset: int = 0  # the induction diagonal: key i − n + 1
    pattern_svg: str = Field("", exclude=True)  # SVG: `weights` drawn with their axes and the diagonal
    bars_svg: str = Field("", exclude=True)  # SVG: the probe's loss per position, with its axes
    knock_urls: tuple[tuple[int, str], ...] = ()  # knock the top k induction heads out
    unknock_url: str = ""
    curve: Curve | None = None
    prune_url: str = ""
    prune_error: str = ""
    lab_url: str = ""
    json_url: str | None = None
    present_url: str | None = None


def colour(value: float | None, scale: str) -> str:
    """A score on the sequential scale (0 … 1: sq-0 … sq-10) or the diverging one (−1 … 1: dv-m5 … dv-p5); none
    for a missing one."""
    return "" if value is None or math.isnan(value) else cells.colour(value, scale, 1.0)


def bos_as_page_reads_it(state: PageQuery) -> dict[str, str]:
    """The form's `bos` where the query would leave it text: on unless 0, false or off."""
    raw = state.get("bos")
    return {"bos": "0" if raw.lower() in ("0", "false", "off") else "1"} if raw else {}


def form(api: str) -> Callable[[Lab, PageQuery, str], dict[str, Any]]:
    """What a page of heads draws whatever its View says: the models its form offers, `api`'s answer for its
    request (the JSON twin) and the texts in its form (a first visit's in the page's language)."""
    return lambda lab, state, lang: {
        "models": lab.models,
        "json_url": f"{api}?{state.api_query()}",
        "text_value": state.get("text") or DEFAULT_TEXT[lang],
        "clean_text": state.get("clean") or CLEAN,
        "corrupted_text": state.get("corrupted") or CORRUPTED,
    }


async def heads_view(state: HeadsQuery, lab: Lab, progress: str, ctx: dict[str, Any]) -> HeadsView:
    typed = state.spelled.get("ablate", "ablate")
    default = {} if state.get("text") or state.get("token_ids") else {"text": DEFAULT_TEXT[ctx["lang"]]}
    req = form_request(state, RolesRequest, default | bos_as_page_reads_it(state))
    plain = req.model_copy(update={"ablate": None})
    t, iv, roles = await roles_of(plain, lab, progress)
    doc = roles_document(t, iv, roles, req.top)
    model = t.model
    n_layer, n_heads = model.arch.n_layer, model.arch.n_heads
    if state.knock is not None:
        k = within("knock", state.knock, 1, n_layer * n_heads)
        req = req.model_copy(update={"ablate": [[li, h] for li, h, _ in roles.top("induction", k)]})
    ablated = None
    if req.ablate:
        try:
            _, iv, knocked = await roles_of(req, lab, progress)
        except FieldError as e:
            raise FieldError(typed if e.field == "ablate" else e.field, e.message) from None
        ablated = Ablated.of(iv, knocked)
    role = state.role
    scores = doc.roles[role]
    present = state.present
    chosen = state.head or (roles.top("induction", 1)[0][0], roles.top("induction", 1)[0][1])
    layer = within("head", chosen[0], 0, n_layer - 1)
    head = within("head", chosen[1], 0, n_heads - 1)

    def cell(li: int, h: int, v: float | None) -> Cell:
        # the chosen head's own pattern
        return Cell(li, h, v, colour(v, "sequential"), state.url(head=f"{li}.{h}") + "#pattern")

    grid = tuple(tuple(cell(li, h, v) for h, v in enumerate(row)) for li, row in enumerate(scores))
    top = tuple(cell(x.layer, x.head, x.score) for x in doc.top[role])
    weights = await lab.compute("probe_weights", (model.name, roles.probe, layer), 4 * len(roles.probe) ** 2 * n_heads,
                                lambda _: E.layer_weights(model, roles.probe, layer), progress=None)  # fmt: skip
    w = weights[0][head]
    shown = tuple(tuple(round(float(x), 4) for x in row) for row in w.tolist())
    curve, prune_error = None, ""
    if state.get("prune") == "1":
        preq = PruneRequest(preset=req.preset, text=req.text, token_ids=req.token_ids, bos=req.bos,
                            ablate_mode=req.ablate_mode)  # fmt: skip
        try:
            pruned = await lab.job(prune_job, preq, progress)
            curve = Curve(pruned.order, pruned.mean_loss, pruned.clean_loss, pruned.can_go, pruned.fraction, pruned.rise,
                          pruning_chart(pruned.mean_loss, pruned.clean_loss, pruned.rise, pruned.can_go, ctx["t"]))  # fmt: skip
        except FieldError as e:
            prune_error = f"{e.field}: {e.message}"
    return HeadsView(
        preset=model.name, layers=n_layer, heads=n_heads, tokens=doc.tokens, role=role,
        role_urls=tuple((r, state.url(role=r)) for r in E.ROLES), grid=grid, top=top, probe=doc.probe,
        probe_loss=doc.probe_loss, ablated=ablated, chosen=(layer, head),
        weights=shown, offset=roles.n - 1, pattern_svg=probe_pattern(shown, roles.n, roles.n - 1, ctx["t"]),
        bars_svg=loss_bars(doc.probe_loss.positions, roles.n, ablated.probe_loss.positions if ablated else None,
                           ctx["t"]),
        knock_urls=tuple((k, state.url(knock=str(k), ablate=None) + "#knock") for k in (1, 3, 5, 10)
                         if k <= n_layer * n_heads),
        unknock_url=state.url(knock=None, ablate=None) + "#knock",
        curve=curve, prune_url=state.url(prune="1") + "#prune", prune_error=prune_error,
        lab_url=lab_url(model.name, roles.probe, layer, head, ctx["lang"], present),
        json_url="/api/v1/head_roles?" + state.api_query(), present_url=state.url(present=None if present else "1"),
    )  # fmt: skip


# -- /patch ------------------------------------------------------------------------------------------------------


class PatchView(View):
    template = "patch.html"
    blocks = ()
    kind = "patch"

    preset: str = ""
    layers: int = 0
    heads: int = 0
    clean_tokens: tuple[str, ...] = ()
    corrupted_tokens: tuple[str, ...] = ()
    metric: str = "logit_diff"
    answer: Token | None = None
    wrong: Token | None = None
    clean_value: float | None = None
    corrupted_value: float | None = None
    kind_shown: str = "resid_pre"
    kind_urls: tuple[tuple[str, str], ...] = ()
    columns: tuple[str, ...] = ()  # positions (their clean/corrupted tokens) or heads
    grid: tuple[tuple[Cell, ...], ...] = ()
    grids: dict[str, Grid] = Field(default_factory=dict)
    strongest: tuple[Cell, ...] = ()
    cell: tuple[int, int] | None = None
    cell_values: dict[str, float | None] = Field(default_factory=dict)
    clean_lab: str = ""
    corrupted_lab: str = ""
    json_url: str | None = None
    present_url: str | None = None


async def patch_view(state: PatchQuery, lab: Lab, progress: str, ctx: dict[str, Any]) -> PatchView:
    req = form_request(state, PatchRequest, bos_as_page_reads_it(state))
    doc = await lab.job(patch_job, req, progress)
    kind = state.grid
    rows = doc.grids[kind]
    if kind == "head":
        columns = tuple(str(h) for h in range(doc.heads))
    else:
        columns = tuple(x if x == y else f"{x} / {y}" for x, y in zip(doc.clean_tokens, doc.corrupted_tokens,
                                                                      strict=True))  # fmt: skip

    def cell(li: int, c: int, v: float | None) -> Cell:
        return Cell(li, c, v, colour(v, "diverging"), state.url(cell=f"{li}.{c}") + "#cell")

    grid = tuple(tuple(cell(li, c, v) for c, v in enumerate(row)) for li, row in enumerate(rows))
    flat = [c for row in grid for c in row if c.value is not None]
    strongest = tuple(sorted(flat, key=lambda c: -abs(c.value or 0))[:5])
    chosen, values = None, {}
    clean_lab = corrupted_lab = ""
    if state.cell is not None:
        li = within("cell", state.cell[0], 0, doc.layers - 1)
        c = within("cell", state.cell[1], 0, len(columns) - 1)
        chosen = (li, c)
        values = {k: doc.grids[k][li][c] for k in KINDS if (k == "head") == (kind == "head")}
        head = c if kind == "head" else 0
        clean_lab = lab_url(doc.preset, doc.clean_ids, li, head, ctx["lang"], state.present)
        corrupted_lab = lab_url(doc.preset, doc.corrupted_ids, li, head, ctx["lang"], state.present)
    return PatchView(
        preset=doc.preset, layers=doc.layers, heads=doc.heads, clean_tokens=doc.clean_tokens,
        corrupted_tokens=doc.corrupted_tokens, metric=doc.metric, answer=doc.answer, wrong=doc.wrong,
        clean_value=doc.clean_value, corrupted_value=doc.corrupted_value, kind_shown=kind,
        kind_urls=tuple((k, state.url(grid=k, cell=None)) for k in KINDS), columns=columns, grid=grid,
        grids=doc.grids, strongest=strongest, cell=chosen, cell_values=values, clean_lab=clean_lab,
        corrupted_lab=corrupted_lab, json_url="/api/v1/patch?" + state.api_query(),
        present_url=state.url(present=None if state.present else "1"),
    )  # fmt: skip


# Both are heavy work on a real model (a first load took 10-14 s): a browser's navigation gets the page's shell at
# once, which asks for the page by htmx and shows its progress meanwhile (`deferred`, app/web/page.py).
page_route(router, "/heads", "heads.html", ROLE_KEYS, HeadsQuery, heads_view, form("/api/v1/head_roles"),
           deferred=True)  # fmt: skip
page_route(router, "/patch", "patch.html", PATCH_KEYS, PatchQuery, patch_view, form("/api/v1/patch"),
           deferred=True)  # fmt: skip
