"""What /models and /api/v1/models show: every model this server loaded (the packaged ones, --checkpoint, each
--model), with its architecture, sizes, positions, parameters, bytes and the file it came from; and, apart, the
encoder–decoder runs served as presets (app/train/presets.py): a model of another kind, served to /cross alone."""

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


def encdec_of(lab: Lab) -> list[dict[str, Any]]:
    """The finished encoder–decoder runs served as presets, by name: not one of `models` (no lab page but /cross reads
    them), so listed apart, each saying where it is served."""
    return [{"name": name} | p | {"serves": ["/cross"]} for name, p in lab.encdec_presets.items()]


def api_document(lab: Lab) -> dict[str, Any]:
    return {"models": [{k: s[k] for k in API_FIELDS} | s for s in models_of(lab)], "encoder_decoder": encdec_of(lab)}


class ModelsView(View):
    """The table of loaded models; each row links into every page that takes it."""

    template = "models.html"
    blocks = ()
    kind = "models"

    models: tuple[dict[str, Any], ...] = ()
    encoder_decoder: tuple[dict[str, Any], ...] = ()  # served to /cross alone
    json_url: str = "/api/v1/models"
