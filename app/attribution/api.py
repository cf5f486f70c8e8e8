"""GET/POST /api/v1/attribution: what each head, MLP and the embedding add to one logit (direct logit attribution,
engine/attribution.py), with attention rollout and one layer's value-weighted norms when asked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import torch
from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from engine import attribution as A

from ..lab import Lab, get_key
from ..schemas import ERRORS, FieldError
from ..web.answer import twins
from ..web.sequence import Text, text_of

router = APIRouter(prefix="/api/v1", tags=["attribution"], responses=ERRORS)


class AttributionRequest(BaseModel):
    """A text for a causal language model, the position to explain, and the token whose logit is split (or the
    difference of two tokens' logits)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    preset: str = Field("smollm2", max_length=64, description="A Pre-LN causal language model this server loaded.")
    text: str | None = Field(None, max_length=8000, description="The text, for the model's own tokenizer.")
    token_ids: list[int] | None = Field(None, max_length=4096, description="The text as token ids instead.")
    bos: bool = Field(True, description="Put the model's BOS before the text (as /api/v1/predict does).")
    position: int | None = Field(None, ge=0, le=1_000_000, description="The position whose logit is split, counted "
                                 "in `tokens` (text_start says where the text begins); default: the last.")  # fmt: skip
    target: str | None = Field(None, max_length=200, description="The token whose logit is split, as text (its first "
                               "token); default: the next token of the text, or at the last position the model's "
                               "most likely one.")  # fmt: skip
    target_id: int | None = Field(None, ge=0, description="The target as a token id instead.")
    contrast: str | None = Field(None, max_length=200, description="A second token: split target − contrast.")
    contrast_id: int | None = Field(None, ge=0, description="The contrast as a token id instead.")
    rollout: bool = Field(False, description="Add attention rollout through every layer (Abnar & Zuidema 2020).")
    norms_layer: int | None = Field(None, ge=0, le=4096, description="Add this layer's value-weighted norms "
                                    "‖α_ij v_j W_O‖ beside its weights α_ij (Kobayashi et al. 2020).")  # fmt: skip
    decimals: int | None = Field(None, ge=0, le=8, description="Round the returned numbers.")


@dataclass(frozen=True)
class Answer:
    """The JSON answer, as the lab's response cache keeps it (by its size)."""

    body: bytes

    @property
    def nbytes(self) -> int:
        return len(self.body)


def token_of(text: Text, raw: str | None, given: int | None, field: str) -> int | None:
    if raw is not None and given is not None:
        raise FieldError(field, f"give {field} or {field}_id, not both")
    if given is not None:
        if given >= text.model.info.vocab:
            raise FieldError(f"{field}_id", f"is outside the vocabulary 0..{text.model.info.vocab - 1}")
        return given
    if raw is None:
        return None
    ids = text.model.tokenize(raw)
    ids = ids[text.model.specials_first(ids) :]
    if not ids:
        raise FieldError(field, "the tokenizer gives no token for it")
    return ids[0]


def rounded(t: torch.Tensor | float, decimals: int | None) -> Any:
    if isinstance(t, float):
        return t if decimals is None else round(t, decimals)
    t = t.detach().float().cpu()
    return (t if decimals is None else t.round(decimals=decimals)).tolist()


def compute(text: Text, req: AttributionRequest, max_tokens: int) -> dict[str, Any]:
    """The attribution (and the parts asked for) of the request's text: runs in the lab's worker thread."""
    model, ids = text.model, list(text.seq)
    position = len(ids) - 1 if req.position is None else req.position
    if position >= len(ids):
        raise FieldError("position", f"the text has positions 0..{len(ids) - 1}, not {position}")
    target = token_of(text, req.target, req.target_id, "target")
    contrast = token_of(text, req.contrast, req.contrast_id, "contrast")
    if target is None:
        target = ids[position + 1] if position + 1 < len(ids) else int(model.logits(ids[: position + 1])[-1].argmax())
    if req.norms_layer is not None and req.norms_layer >= model.arch.n_layer:
        raise FieldError("norms_layer", f"{text.preset} has layers 0..{model.arch.n_layer - 1}")
    try:
        a = A.direct_logit_attribution(model, ids, position, target, contrast, max_tokens=max_tokens)
        extra: dict[str, Any] = {}
        if req.rollout:
            r = A.rollout(model, ids[: position + 1], max_tokens=max_tokens)
            extra["rollout"] = {"layers": rounded(r.layers[:, position], req.decimals),
                                "final": rounded(r.cumulative[-1, position], req.decimals)}  # fmt: skip
        if req.norms_layer is not None:
            v = A.value_weighted_norms(model, ids[: position + 1], req.norms_layer, max_tokens=max_tokens)
            extra["norms"] = {"layer": v.layer, "weights": rounded(v.weights[:, position], req.decimals),
                              "value_weighted": rounded(v.norms[:, position], req.decimals)}  # fmt: skip
    except ValueError as e:  # the engine's own bounds name their parameter: the request's field of that name
        field, _, message = str(e).partition(": ")
        raise FieldError(field if field in AttributionRequest.model_fields else "text", message or str(e)) from None
    labels = text.labels
    return {
        "preset": text.preset,
        "tokens": list(labels),
        "token_ids": ids,
        "text_start": text.text_start,
        "position": position,
        "target": {"token_id": target, "token": model.labels([target])[0]},
        "contrast": None if contrast is None else {"token_id": contrast, "token": model.labels([contrast])[0]},
        "norm": model.arch.norm,
        "scale": a.scale,
        "heads": rounded(a.heads, req.decimals),
        "mlps": rounded(a.mlps, req.decimals),
        "attn_bias": rounded(a.attn_bias, req.decimals),
        "embed": rounded(a.embed, req.decimals),
        "total": a.total,
        "norm_bias": a.norm_bias,
        "logit": a.logit,
        "remainder": a.remainder,
        **extra,
    }


async def answer(request: Request, req: AttributionRequest, lab: Lab) -> Response:
    """Direct logit attribution at `position`: each head's output after W_O (`heads`, layers × heads), each MLP's
    (`mlps`), each layer's attention output bias (`attn_bias`) and the embedding (`embed`), projected through the
    final norm with its scale frozen at the real residual stream (`scale`; LayerNorm also centres each part) onto
    the target token's unembedding, or onto the difference target − contrast. `total` is their sum; `logit` the real
    logit (or difference) the model computes; `remainder` = logit − total, which is the final norm's shift
    `norm_bias` (LayerNorm) plus rounding. With `rollout`: the position's row of each layer's rollout matrix and of
    the product through every layer; with `norms_layer`: that layer's weights α and value-weighted norms ‖α v W_O‖
    for the position's row, head by head."""
    limit = lab.settings.max_predict_tokens
    text = await lab.off_loop(req.preset, text_of, req, lab, limit, False, "tokens", 1, "attributions", True)

    def work(progress: Any) -> Answer:
        return Answer(orjson.dumps(compute(text, req, limit), option=orjson.OPT_SERIALIZE_NUMPY))

    info = text.model.info
    cost = 4 * len(text.seq) * (info.d_model * 8 + len(text.seq) * info.n_heads) * info.n_layer
    key = (text.preset, text.seq, req.model_dump_json())
    done, _ = await lab.compute("attribution", key, cost, work, progress=get_key(request))
    return Response(done.body, media_type="application/json")


twins(router, "/attribution", AttributionRequest, answer, "attribution",
      summary="Split one logit into what each head, MLP and the embedding add")  # fmt: skip
