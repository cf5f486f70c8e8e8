"""GET /api/v1/models: the models this server loaded, each a preset every page and API takes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends

from ..lab import Lab, get_lab
from ..schemas import ERRORS
from .view import api_document

router = APIRouter(prefix="/api/v1", tags=["models"], responses=ERRORS)


@router.get("/models", summary="The loaded models: architecture, sizes, parameters, bytes, source file")
def models(lab: Annotated[Lab, Depends(get_lab)]) -> dict[str, Any]:
    return api_document(lab)
