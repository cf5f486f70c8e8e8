"""The API's request and response models, and the one path from a request to an engine Spec, by job:

- `fields`: THE field list. Each field is declared once, in its request model, with its type, range, description
  and its place in the lab (`LabField`: the form group, the field it depends on, its kind, the limit it is checked
  against); the GET parser, the OpenAPI query parameters, the lab form (app/templating.py), the URL state
  (app/web/state.py) and the CLI (app/cli.py) derive from it through `request_fields`. Which mask a parameter goes
  with (`depends`) comes from engine/masks.py's kinds.
- `request_models`: the attention API's requests (a trace, a block, tiles, a decode). Their choices (`mask`,
  `positions`, `scale`, …) are Literal types made from engine/spec.py's tuples. Pydantic checks types and static
  ranges; the engine's `make_*` check every rule that depends on other fields or on the server's configured
  limits, raising `SpecError` (alias `FieldError`, the one error type) naming the field at fault, so every bad
  input becomes a 422 that names it.
  A GET request carries the same fields as query parameters (`tokens` as one space-separated string, lists as
  repeated or comma-separated values, explicit matrices as JSON text): `query_model(Model)` reads them (FastAPI's
  query model of a GET twin, a page's request), `query_parameters` describes them for OpenAPI.
- `responses`: the answers' models for /docs (`Problem`, `ERRORS`, `AttentionResponse`).

Everything is importable from `app.schemas`.
"""

from __future__ import annotations

from .fields import FieldError, LabField, head_within, request_fields, said
from .request_models import (
    ASCII_INT,
    ASCII_NUMBER,
    LIST_FIELDS,
    RETURNED,
    AttentionRequest,
    BlockRequest,
    DecodeRequest,
    Selection,
    TilesRequest,
    int_or_empty,
    query_model,
    query_parameters,
)
from .responses import ERRORS, AttentionResponse, Problem

__all__ = [
    "ASCII_INT", "ASCII_NUMBER", "ERRORS", "LIST_FIELDS", "RETURNED", "AttentionRequest", "AttentionResponse",
    "BlockRequest", "DecodeRequest", "FieldError", "LabField", "Problem", "Selection", "TilesRequest", "head_within",
    "int_or_empty", "query_model", "query_parameters", "request_fields", "said",
]  # fmt: skip
