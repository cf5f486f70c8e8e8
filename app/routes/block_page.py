"""The block page `/block`: the same lab, one level up — x flows through norm, attention, residual, norm and FFN.

The attention stages inside are rendered exactly as on `/` (the same view model on the block's own attention trace).
"""

from __future__ import annotations

from typing import Annotated, Any, cast

import numpy as np
from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, Response

from engine import STAGES
from engine.block import BlockTrace

from ..i18n import negotiate, translator
from ..lab import Lab, cached_page, get_lab, page_key
from ..render import page as view
from ..render.arrays import to_numpy
from ..render.cells import MatrixView, dims, matrix_view
from ..render.page import mathml
from ..schemas import BlockRequest, from_query
from ..web.state import parse_head, parse_stage
from .common import base_context, inline_errors, render
from .pages import API_KEYS, PageState

router = APIRouter(include_in_schema=False)

BLOCK_KEYS = (*API_KEYS, "norm", "ffn", "d_ff", "placement")


class BlockState(PageState):
    path = "/block"
    api_keys = BLOCK_KEYS
    page_keys = (*BLOCK_KEYS, "stage", "head", "lang")


def block_formula(trace: BlockTrace, key: str) -> str:
    spec = trace.spec
    if key in STAGES:
        return view.formula(trace.attention, key)
    norm = (
        r"\mathrm{LN}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta"
        if spec.norm == "layernorm"
        else r"\mathrm{RMSNorm}(x) = g \odot \frac{x}{\sqrt{\frac{1}{d}\sum_i x_i^2 + \epsilon}}"
    )
    pre = spec.placement == "pre"
    b = "+ b_1" if trace.weights.b_up is not None else ""
    hidden = rf"h = \mathrm{{GELU}}(x W_1 {b})" if spec.ffn == "gelu" else r"h = \mathrm{SiLU}(x W_g) \odot (x W_u)"
    down = r"f = h W_2" + (" + b_2" if trace.weights.b_down is not None else "")
    latex = {
        "ln1": norm,
        "ln2": norm,
        "residual1": r"r = x + \mathrm{Attn}(\mathrm{LN}_1(x))" if pre else r"r = x + \mathrm{Attn}(x)",
        "ffn_hidden": hidden,
        "ffn_out": down,
        "output": r"y = r + \mathrm{FFN}(\mathrm{LN}_2(r))" if pre else r"y = \mathrm{LN}_2(r + \mathrm{FFN}(r))",
    }[key]
    return mathml(latex)


def block_notice(trace: BlockTrace, key: str, t: Any) -> str:
    if key in STAGES:
        return view.notice(trace.attention, key, t)
    spec = trace.spec
    st = {k: to_numpy(v) for k, v in trace.stages[key].items()}
    residual1 = to_numpy(trace.stages["residual1"]["residual1"])
    block_input = to_numpy(trace.stages["ln1" if spec.placement == "pre" else "residual1"]["input"])
    if key in ("ln1", "ln2"):
        y = st[key]
        if spec.placement == "pre":
            src = block_input if key == "ln1" else residual1
        else:
            src = residual1 if key == "ln1" else st["residual2"]
        if spec.norm == "layernorm":
            sd = src.std(-1)
            mean = float(np.abs(y.mean(-1)).max())
            return str(
                t("bnotice.layernorm", mean=mean, std=float(y.std(-1).mean()), lo=float(sd.min()), hi=float(sd.max()))
            )
        means = src.mean(-1)
        rms = float(np.sqrt((y**2).mean(-1)).mean())
        return str(t("bnotice.rmsnorm", rms=rms, lo=float(means.min()), hi=float(means.max())))
    if key == "residual1":
        a = to_numpy(trace.attention.weighted_sum.output)
        return str(t("bnotice.residual1", a=float(np.abs(a).max()), x=float(np.abs(block_input).max())))
    if key == "ffn_hidden":
        if spec.ffn == "gelu":
            h = st["ffn_hidden"]
            return str(t("bnotice.gelu", ff=spec.ff, pct=100 * float((h < 0).mean()), low=float(h.min())))
        gate = st["gate"]
        silu = gate / (1 + np.exp(-gate))
        return str(t("bnotice.swiglu", ff=spec.ff, pct=100 * float((np.abs(silu) < 0.1).mean())))
    if key == "ffn_out":
        return str(t("bnotice.ffn_out"))
    y = st["output"]
    return str(t("bnotice.output", shape=f"({y.shape[0]}, {y.shape[1]})", m=float(np.abs(y).max())))


def block_matrices(trace: BlockTrace, key: str, head: int) -> list[MatrixView]:
    if key in STAGES:
        return view.stage_matrices(trace.attention, key, head)
    tok = list(trace.tokens)
    out = []
    for name, tensor in trace.stages[key].items():
        a = to_numpy(tensor)
        symbol = (
            "(N, d_ff)" if a.shape[1] == trace.spec.ff and a.shape[1] != trace.spec.attn.d_model else "(N, d_model)"
        )
        m = matrix_view(name, name, a, tok, dims(a.shape[1]), symbol, "diverging")
        m.links = False
        out.append(m)
    return out


def strip_box(shape: tuple[int, ...]) -> tuple[int, int]:
    """Display width and height of a heat map: wide strips for (N, d), at most 600 px tall."""
    rows, cols = shape
    height = round(min(600, max(48, 1200 * rows / cols, 6 * rows)))
    width = round(min(1200, height * cols / rows)) if 1200 * rows / cols > 600 else 1200
    return width, height


def stage_label(key: str, t: Any) -> str:
    return str(t(f"stage.{key}") if key in STAGES else t(f"bstage.{key}"))


@router.get("/block", response_class=HTMLResponse)
async def block_page(request: Request, lab: Annotated[Lab, Depends(get_lab)]) -> Response:
    lang = negotiate(request.query_params.get("lang"), request.headers.get("accept-language"))
    t = translator(lang)
    cache_key = page_key(request, lang)
    if (hit := cached_page(lab, cache_key)) is not None:
        return hit
    state = BlockState.from_request(request, lab.models)
    ctx = base_context(
        request,
        "block",
        lang,
        t,
        state,
        presets=["toy", "gpt2-small", *lab.models],
        models=lab.models,
        json_url="/api/v1/block?" + state.api_query(),
        npz_url="/api/v1/block.npz?" + state.api_query(),
        stage_label=lambda k: stage_label(k, t),
    )
    with inline_errors(ctx, t):
        raw = {k: state.params[k] for k in BLOCK_KEYS if k in state.params}
        req = cast(BlockRequest, BlockRequest.model_validate(from_query(raw, None, BlockRequest)))
        spec = req.to_block_spec(lab.limits, lab.device, lab.models)
        order = spec.order
        stage = parse_stage(state.get("stage"), order)
        head = parse_head(state.get("head"), spec.attn.n_heads)
        trace, _ = await run_in_threadpool(lab.block, spec)
        i = order.index(stage)
        small = spec.attn.n_tokens <= view.SMALL and spec.attn.d_model <= view.SMALL
        ctx.update(
            trace=trace,
            spec=spec,
            attn_spec=spec.attn,
            key=stage,
            index=i + 1,
            head=head,
            small=small,
            in_attention=stage in STAGES,
            formula=block_formula(trace, stage),
            explain=t(f"explain.{stage}")
            if stage in STAGES
            else t(
                f"bexplain.{stage}.{spec.placement}"
                if stage in ("ln1", "ln2", "residual1", "output")
                else f"bexplain.{stage}"
            ),
            notice=block_notice(trace, stage, t),
            flow=[(k, state.url(stage=k), k in STAGES) for k in order],
            prev_url=state.url(stage=order[i - 1]) if i > 0 else None,
            next_url=state.url(stage=order[i + 1]) if i + 1 < len(order) else None,
            head_urls=[(h, state.url(head=h)) for h in range(spec.attn.n_heads)],
        )
        if small:
            ctx["matrices"] = block_matrices(trace, stage, head)
        else:
            names = list(trace.stage(stage))
            size = 768
            ctx["heatmaps"] = [
                (n, "/api/v1/block/heatmap.png?" + state.api_query(stage=stage, tensor=n, head=head, size=size))
                for n in names
            ]
            ctx["shapes"] = {n: tuple(t.shape[-2:]) for n, t in trace.stage(stage).items()}
            ctx["per_head"] = {n for n, t in trace.stage(stage).items() if t.dim() == 3}
            ctx["boxes"] = {n: strip_box(trace.stage(stage)[n].shape[-2:]) for n in names}
    return render(request, lab, "block.html", ctx, cache_key)
