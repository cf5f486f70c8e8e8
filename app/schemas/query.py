"""A request's fields as a GET query: `query_model(Model)` is `Model` reading query text (lists repeated or
comma-separated, matrices as JSON text, numbers as ASCII numerals, an empty value "not given"), the model a GET
twin takes from FastAPI (`Annotated[query_model(Model), Query()]`) and a page makes its request with; and
`query_parameters` describes the same fields as a GET route's OpenAPI query parameters, with the bounds the body
model enforces."""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from .fields import request_fields
from .request_models import AttentionRequest, BlockRequest, DecodeRequest, TilesRequest

M = TypeVar("M", bound=BaseModel)


def _union(kind: str) -> tuple[str, ...]:
    """The names of one kind across every request model here (for rules that see only a query's names)."""
    names: dict[str, None] = {}
    for model in (AttentionRequest, BlockRequest, TilesRequest, DecodeRequest):
        names |= {n: None for n, f in request_fields(model).items() if f.kind == kind}
    return tuple(names)


LIST_FIELDS = _union("list")  # repeatable query parameters: pad_positions, segment_ids, token_ids, stages, heads


# Numbers as query text may write them: ASCII digits only (int() and float() would also take "²", "٣" or "1_1").
ASCII_INT = re.compile(r"-?[0-9]{1,30}")
ASCII_NUMBER = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]{1,4})?")


BOOLEANS = {"true": True, "1": True, "on": True, "false": False, "0": False, "off": False}


def _value(text: str, kind: str | None) -> Any:
    """Query text as the JSON value a POST would carry: plain ASCII numerals become numbers; anything else stays
    text, for the strict model to refuse with a message naming the field."""
    if kind == "integer" and ASCII_INT.fullmatch(text):
        return int(text)
    if kind == "number" and ASCII_NUMBER.fullmatch(text):
        return float(text)
    if kind == "boolean" and text.lower() in BOOLEANS:
        return BOOLEANS[text.lower()]
    return text


def _texts(value: Any) -> list[str] | None:
    """A field's query values (FastAPI gives a list-typed field every repetition), or None when it is no text."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    return None


@cache
def query_model(model: type[M]) -> type[M]:
    """`model` reading a GET query: the same fields, checks and errors, its query text read once into the values a
    JSON body carries. Keys that are no field of it (a page's own `stage`, `lang`) are left out, so a lab URL works
    unchanged as its JSON twin; an empty value means "not given" (an untouched form field), but for `tokens`. Values
    already typed (a page's own reading of a field) pass as they are. Its instances are `model`'s."""
    fields = request_fields(model)

    class Query(model):  # type: ignore[valid-type, misc]
        @model_validator(mode="before")
        @classmethod
        def _given(cls, data: Any) -> Any:
            if not isinstance(data, dict):
                return data
            out = {}
            for name, field in fields.items():
                if name not in data:
                    continue
                value, texts = data[name], _texts(data[name])
                if texts is not None and field.kind != "list":
                    value = texts[-1]  # the last of a repeated key, as a query's own reading keeps
                    if value == "" and name != "tokens":
                        continue
                out[name] = value
            return out

        @field_validator("*", mode="before")
        @classmethod
        def _typed(cls, value: Any, info: ValidationInfo) -> Any:
            field = fields[str(info.field_name)]
            if field.kind == "list" and (texts := _texts(value)) is not None:
                items = [part.strip() for v in texts for part in v.replace(" ", ",").split(",")]
                return [_value(i, field.item) for i in items if i]
            if not isinstance(value, str):
                return value
            if field.kind == "json":
                try:
                    return json.loads(value)
                except (ValueError, RecursionError):  # malformed, or nested deeper than any matrix
                    raise PydanticCustomError("value_error", "must be JSON text, e.g. {example}",
                                             {"code": "json_text", "example": "[[1, 0], [0, 1]]"}) from None  # fmt: skip
            return _value(value, field.item)

    Query.__name__ = Query.__qualname__ = f"{model.__name__}Query"
    Query.__doc__ = model.__doc__
    return Query


def int_or_empty(minimum: int | None = None, maximum: int | None = None, **bounds: Any) -> dict[str, Any]:
    """A query integer's schema with the bounds its parser enforces (or empty: the default); `bounds` are any
    others of JSON Schema (exclusiveMinimum, …)."""
    given = {k: v for k, v in (("minimum", minimum), ("maximum", maximum)) if v is not None}
    return {"anyOf": [{"type": "integer", **given, **bounds}, {"type": "string", "maxLength": 0}]}


NUMBER_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _bounds(prop: dict[str, Any]) -> dict[str, Any]:
    """The constraints (minimum, maxLength, …) of a property's non-null option, from pydantic's JSON schema."""
    out: dict[str, Any] = {}
    for option in prop.get("anyOf", [prop]):
        if option.get("type") != "null":
            out |= {k: v for k, v in option.items() if k in (*NUMBER_BOUNDS, "maxLength", "minLength")}
    return out


def query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    """OpenAPI descriptions of a GET route's query parameters, derived from the POST body model, so /docs and
    API fuzzers know the GET twin's fields: lists are comma-separated, matrices JSON text."""
    params = []
    props = model.model_json_schema()["properties"]
    for name, field in request_fields(model).items():
        schema: dict[str, Any] = {"type": "string"}
        note = field.description
        bounds = _bounds(props[name])
        if field.kind == "list":
            note = (note + " Comma-separated.").strip()
        elif field.kind == "json":
            note = (note + " JSON text, e.g. [[1, 0], [0, 1]].").strip()
        elif field.choices:  # an empty value (a form's untouched field) means the default
            schema = {"type": "string", "enum": [*field.choices, ""]}
        elif field.kind == "integer":  # the body field's bounds: d_model=0 is as invalid here as in a POST
            schema = int_or_empty(**{k: bounds[k] for k in NUMBER_BOUNDS if k in bounds})
        elif field.item == "boolean":
            schema = {"type": "string", "enum": [*BOOLEANS, ""]}
        elif field.kind == "text" and "maxLength" in bounds:
            schema = {"type": "string", "maxLength": bounds["maxLength"]}
        params.append({"name": name, "in": "query", "required": False, "schema": schema, "description": note})
    return params
