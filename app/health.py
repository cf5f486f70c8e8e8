"""`/healthz`: cheap, never computes, answers while large requests wait for the memory budget."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends

from .lab import Lab, get_lab

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz(lab: Annotated[Lab, Depends(get_lab)]) -> dict[str, Any]:
    return {"status": "ok", "device": lab.device, "cached_traces": len(lab.cache)}
