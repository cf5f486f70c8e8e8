"""GET /api/v1/params: exact parameter counts of GPT-2 and LLaMA-style models next to the 12·L·d² estimate."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from engine.params import MODELS, count

from ..schemas import ERRORS
from .view import ParamsQuery, params_of

router = APIRouter(prefix="/api/v1", tags=["parameters"], responses=ERRORS)


@router.get("/params", summary="Exact parameter count, broken down, and the 12·L·d² estimate")
def params(q: Annotated[ParamsQuery, Query()]) -> dict[str, Any]:
    return params_of(q)


@router.get("/params/presets", summary="The model shapes /params knows by name")
def params_presets() -> dict[str, Any]:
    return {name: count(shape)["shape"] for name, shape in MODELS.items()}
