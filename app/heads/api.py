"""GET/POST /api/v1/head_roles, /api/v1/prune and /api/v1/patch: which head does what, which heads can go, and
where the answer lives."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from ..lab import Lab, get_key
from ..render.payload import json_response
from ..schemas import ERRORS
from ..web.answer import twins
from ..web.view import plain
from .compute import patch_job, prune_job, roles_document, roles_of
from .request import PatchRequest, PruneRequest, RolesRequest

router = APIRouter(prefix="/api/v1", tags=["heads"], responses=ERRORS)


async def head_roles(request: Request, req: RolesRequest, lab: Lab) -> Response:
    """Every head's role scores, layer × head lists (A: its softmax weights): previous_token, the mean over queries
    i ≥ 1 of A[i, i−1], and sink, of A[i, 0], on the text; on the induction probe (the model's BOS, probe_n random
    ordinary tokens r drawn with seed, then r again; probe.token_ids), over the second copy's queries,
    duplicate_token, the mean of A[i, i−n], and induction, of A[i, i−n+1]. top: the highest-scoring heads of each
    role. probe_loss: the loss at each probe position and the means over the targets in the first copy (random)
    and the second (predictable by copying). With ablate, `ablated` has the probe's loss with those heads knocked
    out (the scores are the plain model's). Progress under /api/v1/progress for a GET."""
    t, iv, roles = await roles_of(req, lab, get_key(request))
    return json_response(plain(roles_document(t, iv, roles, req.top)))


async def prune(request: Request, req: PruneRequest, lab: Lab) -> Response:
    """The pruning curve: every head knocked out alone (single: the mean loss over the text with it gone), ordered
    by the rise, least important first (order); mean_loss[k] is the mean loss with the first k heads of order
    knocked out together (k = 0 … layers × heads). can_go: the most heads that can go before the loss rises by
    more than `rise` (a fraction of the plain loss); fraction = can_go / all heads. Progress under
    /api/v1/progress for a GET."""
    return json_response(plain(await lab.job(prune_job, req, get_key(request))))


async def patch(request: Request, req: PatchRequest, lab: Lab) -> Response:
    """Activation patching: the corrupted prompt run with one activation replaced by the clean run's, the metric
    read at the last position (logit_diff: logit[answer] − logit[wrong]; prob: p(answer)), as the normalised effect
    (patched − corrupted) / (clean − corrupted): grids.resid_pre, attn_out and mlp_out are layer × position (the
    stream entering the layer, the layer's attention output after W_O, its MLP output), grids.head is layer × head
    (the head's output at every position). The prompts must have the same number of tokens (a 422 shows both
    tokenisations). Progress under /api/v1/progress for a GET."""
    return json_response(plain(await lab.job(patch_job, req, get_key(request))))


twins(
    router,
    "/head_roles",
    RolesRequest,
    head_roles,
    "head_roles",
    summary="Every head's role scores and the induction probe",
)
twins(router, "/prune", PruneRequest, prune, "prune", summary="The pruning curve: heads knocked out one after another")
twins(
    router,
    "/patch",
    PatchRequest,
    patch,
    "patch",
    summary="Activation patching: a clean activation into a corrupted run",
)
