"""The API's answer models, for /openapi.json and /docs (the routes serialise with orjson directly): every 4xx
answer's `Problem`, and an attention trace's JSON."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from typing_extensions import TypeAliasType

from .request_models import StageKey


class ProblemItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class Problem(BaseModel):
    """Every 4xx answer: a one-line message and the field-level details."""

    message: str
    detail: list[ProblemItem]
    omitted: int | None = Field(
        None,
        description="How many more errors the request had, left out of `detail` and `message`: an answer lists "
        "at most the first `max_errors` (a setting, 50 by default). Absent when none were left out.",
    )


ERRORS: dict[int | str, dict[str, Any]] = {
    413: {"model": Problem, "description": "Too large: the body, or the answer (select heads/stages, or use .npz)"},
    414: {"model": Problem, "description": "The query is over the URL limit: send large inputs as a POST body"},
    422: {"model": Problem, "description": "A field is invalid; `message` and `detail[].loc` name it"},
}


# Response models: they describe the JSON for /docs; the routes serialise with orjson directly.


# A tensor as nested lists of numbers (any depth: (H, T, T) scores, (T, d) projections); −∞ written as null.
Numbers = TypeAliasType("Numbers", "list[float | None] | list[Numbers]")


class StageOut(BaseModel):
    index: int = Field(description="1..5, the stage's place in the computation")
    key: StageKey
    tensors: dict[str, Numbers] = Field(
        description="Tensors by name. (H, …) tensors hold the selected heads in order. A masked entry (−∞) is null."
    )


class ChecksOut(BaseModel):
    max_abs_diff_vs_sdpa: float = Field(
        description="Largest |stage 5 heads − torch scaled_dot_product_attention| on the same Q, K, V, with SDPA's "
        "own is_causal or a boolean mask rebuilt from the request by separate code, and SDPA's default scale for "
        "sqrt_dk; rows with no readable key must be zero"
    )
    rows_sum_to_one: bool


class AttentionResponse(BaseModel):
    spec: dict[str, Any] = Field(description="The normalised request, with d_k, n_tokens, device and dtype")
    tokens: list[str]
    stages: list[StageOut]
    checks: ChecksOut
