"""GET/POST /api/v1/predict, /api/v1/logit_lens and /api/v1/head_ranking: what a decoder predicts at every position
of a text (teacher forcing), under interventions, layer by layer, and which heads a prediction depends on."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from ..lab import Lab, get_key
from ..render.payload import json_response
from ..schemas import ERRORS
from ..web.answer import twins
from ..web.view import plain
from .compute import lens_document, lens_of, predict_document, predict_of, ranking_of
from .request import LensRequest, PredictRequest, RankRequest

router = APIRouter(prefix="/api/v1", tags=["prediction"], responses=ERRORS)


async def predict(request: Request, req: PredictRequest, lab: Lab) -> Response:
    """Teacher forcing: the text as a training sequence ([BOS] text [EOS], as the model defines them), inputs over
    targets shifted by one; one forward pass predicts every position. The answer: preset, tokens and token_ids (the
    inputs), targets and target_ids, bos (the model's BOS id, or null), text_start (where the text begins among
    the inputs), loss_from. positions[i]: position, input and input_id, target and target_id, p_target, loss
    (−log p_target), rank (1: the target was the most likely), top (the most likely tokens: token, token_id, p),
    scored (i ≥ loss_from). mean_loss over the scored positions, perplexity = exp(mean_loss). With switches (ablate, mask_off_layers,
    drop_sink_layers) or replace, each position also has before (the compared run: the text without the switches,
    or the unreplaced text under the same switches), kl (KL(before ‖ this run) of the next-token distributions) and
    max_abs_diff (max |Δ log p| over the vocabulary): with the causal mask, replacing token i changes no position
    before i (≤ 1e-5)."""
    t, iv, pred = await predict_of(req, lab, get_key(request))
    return json_response(plain(predict_document(t, iv, pred)))


async def logit_lens(request: Request, req: LensRequest, lab: Lab) -> Response:
    """The logit lens: after each layer, the residual stream through the model's final norm and unembedding.
    The answer: preset, tokens and token_ids (text_start: where the text begins), final and final_ids (the model's
    most likely next token at each position). layers[l][i]: top (the most likely tokens read from layer l at
    position i: token, token_id, p) and p_final (the probability there of the model's final prediction, final[i]);
    the last entry of layers is the model's output. first_top1[i]: the first layer from which final[i] stays the
    most likely token. switches: the heads knocked out and layers changed (ablate, ablate_mode, mask_off_layers,
    drop_sink_layers); with any, before is the same lens of the text without them (null otherwise) and changed
    the positions whose final prediction they changed."""
    t, iv, lens = await lens_of(req, lab, get_key(request))
    # orjson writes the answer as it is (tuples as lists, a non-finite number as null), where a serializer would
    # walk a long text's 100,000 tops in Python once more.
    return json_response(lens_document(t, iv, lens).as_json())


async def head_ranking(request: Request, req: RankRequest, lab: Lab) -> Response:
    """Every head knocked out in turn (one forward pass each, from its layer up), ranked by how much the loss of
    one prediction (target_id at position) rises: heads[k] = layer, head, loss, delta (loss − the plain loss).
    Its cost is known before it starts: cost.total token-layer passes (one token through one layer) = cost.tokens
    (up to the position) × cost.per_token (L + H·L(L+1)/2: the clean run, and each head's copy from its layer up);
    over cost.limit (the server's MAX_RANK_COST) it is refused before computing, a 422 naming position (or the
    text) with the cost and the limit. Progress under /api/v1/progress for a GET."""
    return json_response(plain(await ranking_of(req, lab, get_key(request))))


twins(
    router, "/predict", PredictRequest, predict, "predict", summary="Next-token predictions and loss at every position"
)
twins(
    router,
    "/logit_lens",
    LensRequest,
    logit_lens,
    "logit_lens",
    summary="The logit lens: the prediction after each layer",
)
twins(
    router,
    "/head_ranking",
    RankRequest,
    head_ranking,
    "head_ranking",
    summary="Heads ranked by what knocking each out costs",
)
