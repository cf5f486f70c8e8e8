"""The API's request and response models, and the one path from a request to an engine Spec, by job (each
module's docstring says more): `fields`, THE field list (`LabField`, `request_fields`: what the GET parser, the
OpenAPI query parameters, the lab form, the URL state and the CLI derive from); `request_models`, the attention API's
requests, their Spec (`to_spec`) and their GET reading (`query_model`, `query_parameters`); `responses`, the answers'
models for /docs. Everything is importable from `app.schemas`.
"""

from __future__ import annotations

from .fields import MAX_ITEMS, FieldError, LabField, head_within, request_fields, said
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
    no_surrogates,
    query_model,
    query_parameters,
)
from .responses import ERRORS, AttentionResponse, Problem

__all__ = [
    "ASCII_INT", "ASCII_NUMBER", "ERRORS", "LIST_FIELDS", "MAX_ITEMS", "RETURNED", "AttentionRequest", "AttentionResponse",
    "BlockRequest", "DecodeRequest", "FieldError", "LabField", "Problem", "Selection", "TilesRequest", "head_within",
    "int_or_empty", "no_surrogates", "query_model", "query_parameters", "request_fields", "said",
]  # fmt: skip
