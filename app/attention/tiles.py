"""FlashAttention's schedule for one head of a trace as a typed result (`Schedule`: what the API writes and what
the /tiles page reads), and the page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool

from engine.spec import DTYPE_BYTES

from ..lab import Lab
from ..render.arrays import Traced, to_numpy
from ..schemas import FieldError, TilesRequest, said
from ..web.page import language, page_route
from ..web.state import lab_like, url_fields, within
from ..web.view import Array, View
from .view import TilesQuery

router = APIRouter(include_in_schema=False)
TILE_KEYS = url_fields(TilesRequest)


@dataclass(frozen=True)
class TileStep:
    """One key block against a query block (engine/flash.py's Step): its key positions [start, end), whether it was
    skipped (every entry masked), and the running m, l, rescale and accumulator after it."""

    k_block: int
    cols: tuple[int, int]
    skipped: bool
    m: Array
    l: Array  # noqa: E741
    rescale: Array
    acc: Array


@dataclass(frozen=True)
class TileBlock:
    """One query block: its query positions [start, end), a step per key block, and its output acc / l."""

    q_block: int
    rows: tuple[int, int]
    steps: tuple[TileStep, ...]
    output: Array


@dataclass(frozen=True)
class TileOutput:
    """What /tiles shows of a query block: its index, its query positions [start, end) and its output acc / l."""

    q_block: int
    rows: tuple[int, int]
    output: Array


@dataclass(frozen=True)
class Schedule:
    """/api/v1/attention/tiles's answer, and what /tiles walks through: FlashAttention's schedule for one head
    (engine/flash.py), its output, how far that is from the staged heads, and the memory either path holds. The
    API writes it with orjson (a dataclass is an object, its float32 arrays written as float32)."""

    spec: dict[str, object]
    tokens: tuple[str, ...]
    head: int
    block_q: int
    block_k: int
    blocks: tuple[TileBlock, ...]
    output: np.ndarray
    max_abs_diff_vs_staged: float
    memory_bytes: dict[str, int]


class TilesView(View):
    """One step of FlashAttention's schedule, as /tiles shows it: query block `qb` (`block`: its rows and, after its
    last key block, its output) against key block `kb` (`step`: its columns, whether it was skipped, and the running
    m, rescale, l and accumulator after it), the memory either path needs, and the check against the staged heads.
    The page swaps no htmx blocks: an htmx request gets the whole page."""

    template = "tiles.html"
    blocks = ()
    kind = "tiles"

    summary: dict[str, Any] | None = None
    tokens: list[str] | None = None  # the queries
    keys: list[str] | None = None
    head: int = 0
    block_q: int = 0
    block_k: int = 0
    qb: int = 0
    kb: int = 0
    n_steps: int = 0  # key blocks of this query block
    block: TileOutput | None = None  # the query block's q_block, rows and output
    step: TileStep | None = None
    title: str = ""
    memory_bytes: dict[str, int] | None = None  # staged and tiled, for one head
    memory: str = ""  # the memory notice in words
    skipped: str | None = None  # the notice of a key block that was skipped
    max_abs_diff_vs_staged: float = 0.0
    # Links.
    json_url: str | None = None
    qb_urls: list[tuple[int, str]] | None = None
    kb_urls: list[tuple[int, str, bool]] | None = None  # (key block, its URL, skipped)
    prev_url: str | None = None
    next_url: str | None = None


def tiles_document(trace: Traced, req: TilesRequest) -> Schedule:
    from engine.attention import per_head
    from engine.flash import memory_bytes, tiled_attention

    spec = trace.spec  # type: ignore[attr-defined]
    p = trace.projection  # type: ignore[attr-defined]
    h = req.head
    k, v = per_head(p.key, spec.n_heads)[h], per_head(p.v, spec.n_heads)[h]
    allow = torch.isfinite(trace.mask.mask)  # type: ignore[attr-defined]
    tiled = tiled_attention(p.query[h], k, v, allow, spec.scale_value, req.block_q, req.block_k)
    staged = trace.weighted_sum.heads[h].double()  # type: ignore[attr-defined]
    diff = float((tiled.output - staged).abs().max()) if staged.numel() else 0.0
    arr = to_numpy
    blocks = tuple(
        TileBlock(b.q_block, b.rows, tuple(TileStep(s.k_block, s.cols, s.skipped, arr(s.m), arr(s.l), arr(s.rescale),
                                                    arr(s.acc)) for s in b.steps), arr(b.output))
        for b in tiled.blocks
    )  # fmt: skip
    memory = memory_bytes(spec.n_tokens, len(spec.kv_tokens) or spec.n_tokens, spec.d_k, req.block_q, req.block_k,
                          DTYPE_BYTES[spec.dtype])  # fmt: skip
    return Schedule(trace.summary(), tuple(trace.tokens), h, req.block_q, req.block_k, blocks, arr(tiled.output), diff,
                    memory)  # fmt: skip


def first_step(steps: tuple[TileStep, ...]) -> int:
    """The key block a query block opens on: the first that changes something (a fully masked block is skipped,
    nothing happens there), so a first visit shows m, l and acc being set."""
    return next((j for j, s in enumerate(steps) if not s.skipped), 0)


def api_url(state: TilesQuery) -> str:
    """The API's schedule for the page's request."""
    return "/api/v1/attention/tiles?" + state.api_query()


async def tiles_view(state: TilesQuery, lab: Lab, progress: str, ctx: dict[str, Any]) -> TilesView:
    """What /tiles shows for `state`: FlashAttention, walked through: one query block at a time, each key block
    updating m, l and the accumulator; it opens on the first query block's first key block that does something."""
    t = ctx["t"]
    req = state.request(TilesRequest)
    spec = await lab.off_loop(req.preset, req.to_tiles_spec, lab.limits, lab.device, lab.models)
    if spec.n_tokens > 64:
        raise FieldError("tokens", said("walk_tokens"))
    trace, _ = await lab.trace(spec)
    doc = await run_in_threadpool(tiles_document, trace, req)
    qb = within("qb", state.qb, 0, len(doc.blocks) - 1)
    block = doc.blocks[qb]
    steps = block.steps
    kb = first_step(steps) if state.kb is None else within("kb", state.kb, 0, len(steps) - 1)
    step, memory = steps[kb], doc.memory_bytes
    (r0, r1), (c0, c1) = block.rows, step.cols
    return TilesView(
        summary=doc.spec,
        tokens=list(spec.tokens),
        keys=list(spec.kv_tokens) or list(spec.tokens),
        head=doc.head,
        block_q=req.block_q,
        block_k=req.block_k,
        qb=qb,
        kb=kb,
        n_steps=len(steps),
        block=TileOutput(block.q_block, block.rows, block.output),
        step=step,
        title=t("tiles.step", r0=r0, r1=r1 - 1, c0=c0, c1=c1 - 1),
        memory_bytes=memory,
        memory=t("tiles.memory", staged=f"{memory['staged']:,}", tiled=f"{memory['tiled']:,}", n=spec.n_tokens),
        skipped=t("tiles.skipped") if step.skipped else None,
        max_abs_diff_vs_staged=doc.max_abs_diff_vs_staged,
        json_url=api_url(state),
        qb_urls=[(i, state.url(qb=i, kb=None)) for i in range(len(doc.blocks))],
        kb_urls=[(j, state.url(qb=qb, kb=j), s.skipped) for j, s in enumerate(steps)],
        prev_url=state.url(qb=qb, kb=kb - 1) if kb > 0 else None,
        next_url=state.url(qb=qb, kb=kb + 1) if kb + 1 < len(steps) else None,
    )


def tiles_query(request: Request, path: str, keys: tuple[str, ...], query: type[TilesQuery]) -> TilesQuery:
    return lab_like(query.of(request.query_params, path, keys), request.app.state.lab.models, language(request))


def form(lab: Lab, state: TilesQuery, lang: str) -> dict[str, Any]:
    return {"json_url": api_url(state)}


page_route(router, "/tiles", "tiles.html", TILE_KEYS, TilesQuery, tiles_view, form, state_of=tiles_query)
