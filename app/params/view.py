"""Parameter counts: the request (a preset, fields replaced, or every field given), what the page says the
12·L·d² estimate misses, and `ParamsView`, what the /params page shows (its JSON face is the page's `.json` twin)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.params import count, shape_from

from ..web.state import AsciiIntOrNone
from ..web.view import View


class ParamsView(View):
    """A model's parameters, broken down (`counts`: exactly what GET /api/v1/params answers), the sums the table
    adds up, and what the 12·L·d² estimate misses, in words."""

    template = "params.html"
    blocks = ()
    kind = "params"

    counts: dict[str, Any] = Field(default_factory=dict)  # as the API gives them
    attention: int = 0  # one block's attention parameters
    ffn: int = 0  # one block's feed-forward parameters
    twelve_d2: int = 0  # 12·d², the estimate of one block
    total_millions: float = 0.0  # the total in millions (the page shows one decimal)
    ratio: str = ""  # the total and the non-embedding count against the estimate, in words
    misses: tuple[str, ...] = ()
    json_url: str | None = None


class ParamsQuery(BaseModel):
    """A preset, optionally with fields replaced, or every field given explicitly."""

    model_config = ConfigDict(extra="ignore")

    preset: Literal["gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl", "llama-2-7b"] | None = None
    n_layer: AsciiIntOrNone = Field(None, ge=1, le=10_000)
    d_model: AsciiIntOrNone = Field(None, ge=1, le=1_000_000)
    n_heads: AsciiIntOrNone = Field(None, ge=1, le=100_000)
    vocab: AsciiIntOrNone = Field(None, ge=1, le=100_000_000)
    n_ctx: AsciiIntOrNone = Field(None, ge=0, le=100_000_000, description="learned position rows; 0 for RoPE")
    ffn: Literal["gelu", "swiglu"] | None = None
    d_ff: AsciiIntOrNone = Field(None, ge=0, le=10_000_000, description="0 means 4·d_model")
    tied_embeddings: bool | None = None
    bias: bool | None = None
    n_kv_heads: AsciiIntOrNone = Field(None, ge=0, le=100_000, description="GQA/MQA; 0 means n_heads")
    norm: Literal["layernorm", "rmsnorm"] | None = None


def params_of(q: ParamsQuery) -> dict[str, Any]:
    fields = q.model_dump(exclude={"preset"}, exclude_none=True)
    if "n_ctx" in fields and q.preset is None:
        fields.setdefault("learned_positions", fields["n_ctx"] > 0)
    return {"preset": q.preset} | count(shape_from(q.preset, **fields))


def params_view(q: ParamsQuery, t: Any, json_url: str) -> ParamsView:
    c = params_of(q)
    d = c["shape"]["d_model"]
    return ParamsView(
        counts=c,
        attention=sum(c["block"]["attention"].values()),
        ffn=sum(c["block"]["ffn"].values()),
        twelve_d2=12 * d * d,
        total_millions=c["total"] / 1e6,
        ratio=t("params.ratio", ratio=c["ratio_total_to_estimate"], ratio_ne=c["ratio_non_embedding_to_estimate"]),
        misses=tuple(misses(c, t)),
        json_url=json_url,
    )


def misses(c: dict[str, Any], t: Any) -> list[str]:
    s = c["shape"]
    d, h, kv = s["d_model"], s["n_heads"], s["n_kv_heads"]
    out = []
    emb = c["embeddings"]["token"] + c["embeddings"]["position"] + c["lm_head"]
    out.append(t("params.miss.embeddings", emb=f"{emb:,}", pct=100 * emb / c["total"]))
    ffn, att = sum(c["block"]["ffn"].values()), sum(c["block"]["attention"].values())
    if s["ffn"] != "gelu" or s["d_ff"] != 4 * d:
        out.append(t("params.miss.ffn", ff=f"{s['d_ff']:,}", ffn=f"{ffn:,}", eight=f"{8 * d * d:,}"))
    if kv != h:
        out.append(t("params.miss.gqa", kv=kv, h=h, att=f"{att:,}", four=f"{4 * d * d:,}"))
    extra = c["block"]["norms"] + (att - (2 * d * d + 2 * d * kv * (d // h)))
    extra += ffn - (3 if s["ffn"] == "swiglu" else 2) * d * s["d_ff"]
    out.append(t("params.miss.small", extra=f"{extra:,}", pct=100 * extra / c["block"]["total"]))
    out.append(t("params.miss.kv", bytes=f"{c['kv_cache_bytes_per_token_fp16']:,}"))
    return out
