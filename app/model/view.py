"""The model view's request and its computation: every layer and head of a pretrained model, summarised."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine.model_view import model_view
from engine.spec import Limits, Spec, make_spec

from ..schemas import FieldError


class ModelViewRequest(BaseModel):
    """A pretrained model and the text (or token ids) to run through every layer."""

    model_config = ConfigDict(extra="forbid", strict=True)

    preset: str = Field("smollm2", max_length=64, description="A pretrained model this server loaded (minilm, smollm2, "
                        "checkpoint).")  # fmt: skip
    text: str | None = Field(None, max_length=4000, description="Text for the model's own tokenizer.")
    token_ids: list[int] | None = Field(None, max_length=4096, description="Token ids instead of text.")


def view_spec(req: ModelViewRequest, limits: Limits, device: str, models: Mapping[str, Any], max_tokens: int) -> Spec:
    if req.preset not in models:
        names = ", ".join(models) or "none on this server"
        raise FieldError("preset", f"the model view is for pretrained models: {names}")
    spec = make_spec(text=req.text, token_ids=req.token_ids, preset=req.preset, layer=0, models=models, device=device,
                     limits=limits)  # fmt: skip
    if spec.n_tokens > max_tokens:
        field = "token_ids" if req.token_ids is not None else "text"
        raise FieldError(field, f"the model view runs every layer: at most {max_tokens} tokens, got {spec.n_tokens}")
    return spec


def compute_view(lab: Any, spec: Spec) -> dict[str, Any]:
    model = lab.models[spec.preset]
    return {"preset": spec.preset} | model_view(spec, model.info.n_layer, lambda s: lab.trace(s)[0])
