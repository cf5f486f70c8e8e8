"""What /models and /api/v1/models show: every model this server loaded (the packaged ones, --checkpoint, each
--model), with its architecture, sizes, positions, parameters, bytes and the file it came from."""

from __future__ import annotations

from typing import Any

from ..lab import Lab
from ..web.view import View

# The API's fields, in order (the page shows more of the summary: positions, norm, FFN, whether loaded).
API_FIELDS = ("name", "architecture", "n_layer", "n_heads", "n_kv_heads", "d_model", "vocab", "n_ctx", "parameters",
              "bytes", "source")  # fmt: skip


def models_of(lab: Lab) -> list[dict[str, Any]]:
    """Each model's summary (engine/models: `Model.summary`), by preset name."""
    return [m.summary() for m in lab.models.values()]


def api_document(lab: Lab) -> dict[str, Any]:
    return {"models": [{k: s[k] for k in API_FIELDS} | s for s in models_of(lab)]}


class ModelsView(View):
    """The table of loaded models; each row links into every page that takes it."""

    template = "models.html"
    blocks = ()
    kind = "models"

    models: tuple[dict[str, Any], ...] = ()
    json_url: str = "/api/v1/models"
