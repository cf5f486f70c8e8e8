"""/docs: Swagger UI from the swagger-ui-py package's assets, started by a static script (no inline JavaScript),
so the API's documentation works offline and under the Content-Security-Policy."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

router = APIRouter(include_in_schema=False)

# The opening of /docs and /openapi.json: what a newcomer to the API needs before the first call.
DESCRIPTION = """\
Every number the lab shows, as data. Two kinds of JSON:

* **The operations below** (`/api/v1/…`): tensors and numbers for programs. Most are GET/POST twins taking the
  same fields, as a query or as a JSON body; every field is optional (the preset fills the rest). GET answers are
  cached by URL.
* **Each page's JSON twin**: exactly what a page shows. Add `.json` to its path (`/index.json` for `/`,
  `/block.json`, `/heads.json`, `/model.json`…) or ask with `Accept: application/json`. Their schemas are the
  `…View` entries under *Schemas* at the bottom of this page (`LabView` for the lab).

**Masked entries are `null`.** JSON has no −∞, so a masked score comes back as `null`; the `.npz` answers
(`/api/v1/attention.npz`, `/api/v1/block.npz`) keep −∞ and have no JSON size limit.

**Errors name the field.** Bad input is a 4xx (usually 422) whose `message` and `detail[].loc` name the field, in a
query and in a body alike; a busy server answers 503 with `Retry-After`.

**From Python**, without writing requests: `from attention_lab import Client, trace` — `Client(url).trace(...)`
talks to a running lab, `trace(...)` computes in-process (docs/python.md). The guide to these answers is
docs/api-guide.md, the reference docs/api.md (`make docs` builds them into a site).
"""

TAGS = [
    {"name": "attention", "description": "The five stages of scaled dot-product attention, and its files."},
    {"name": "block", "description": "A whole transformer block: LayerNorm, attention, FFN and residuals."},
    {
        "name": "attribution",
        "description": "What attention is worth: each head's, MLP's and the embedding's share of "
        "a logit, attention rollout and value-weighted norms.",
    },
    {"name": "kv cache", "description": "Decoding with a KV cache against recomputing everything."},
    {"name": "demonstrations", "description": "The small experiments of /demos: scaling, RoPE, softmax, order."},
    {"name": "parameters", "description": "Parameter counts, exactly and by the 12·L·d² estimate."},
    {"name": "lessons", "description": "The guided lessons, in English and Chinese."},
    {"name": "model view", "description": "Every layer and head of a real model at a glance."},
    {"name": "models", "description": "The models this server loaded."},
    {"name": "generation", "description": "Generating text token by token."},
    {"name": "prediction", "description": "What attention does to the next-token prediction."},
    {"name": "heads", "description": "Heads with jobs: roles, pruning and activation patching."},
    {"name": "train", "description": "Train a small GPT live and follow it."},
    {"name": "rooms", "description": "A live class: the teacher's view followed on students' screens, and polls."},
    {"name": "health", "description": "Liveness and progress."},
]

PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Attention Lab API</title>
  <link rel="stylesheet" href="/vendor/swagger/swagger-ui.css">
  <link rel="icon" href="/vendor/swagger/favicon-32x32.png">
</head>
<body>
  <div id="swagger-ui" data-openapi="/openapi.json"></div>
  <script src="/vendor/swagger/swagger-ui-bundle.js"></script>
  <script src="/static/docs.js"></script>
</body>
</html>
"""


@router.get("/docs")
def docs() -> HTMLResponse:
    return HTMLResponse(PAGE)
