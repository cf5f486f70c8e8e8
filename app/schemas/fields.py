"""The one field list: each request field is declared once, in its request model (app/schemas/request_models.py,
app/predict/request.py), with its place in the lab as metadata (`LabField`: the form group, the field it depends
on, its kind, the limit it is checked against); `request_fields` reads it back for every consumer (the GET parser,
the OpenAPI query parameters, the lab form, the URL state, the CLI). Which mask a parameter goes with is the
engine's (engine/masks.py), read by `mask_depends`."""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field
from pydantic_core import PydanticUndefined

from engine import masks
from engine.errors import Message
from engine.spec import Limits, SpecError

CATALOGUE = Path(__file__).parents[1] / "web" / "locales" / "errors.json"
# The most entries of any list a request carries (as token_ids and explicit matrices have had): the configured limits
# (max_tokens, max_heads, ...) are checked below it, by the engine. pydantic checks a list's length before its
# entries, so an over-long list is one error at once, not one error an entry: 100,000 wrong entries of `stages` were
# an 8 s, 23 MB answer, and an 8 MB body holds millions.
MAX_ITEMS = 4096

# The one error type of a request: the engine's, named here as the web layer has always called it.
FieldError = SpecError

# The app's own messages by code, in English (locales/errors.json "en"; its "zh" says them in Chinese).
APP_ENGLISH: dict[str, str] = json.loads(CATALOGUE.read_text(encoding="utf-8"))["en"]


def said(code: str, **params: Any) -> Message:
    """The app's message `code` in English, keeping its code and parameters: a page says it in its reader's language
    from the catalogue (app/templating.py), never by reading the English back."""
    return Message.worded(APP_ENGLISH[code].format(**params), code, **params)


def head_within(value: int, n_heads: int, name: str = "head") -> int:
    """`value`, a head of a trace with `n_heads` heads, or a FieldError naming `name`."""
    if not 0 <= value < n_heads:
        raise FieldError(name, said("no_head", head=value, last=n_heads - 1))
    return value


FORM_GROUPS = ("sequence", "main", "more", "hidden")
FIELD_KINDS = ("choice", "integer", "number", "list", "json", "text")
# pydantic's own options of `Field`: a keyword it does not know only warns there, and is lost.
FIELD_OPTIONS = frozenset(name for name, p in inspect.signature(Field).parameters.items() if p.kind is p.KEYWORD_ONLY)


def LabField(
    default: Any = PydanticUndefined,
    description: str | None = None,
    *,
    form: str | None = "more",
    depends: tuple[str, str] | None = None,
    only: Literal["builtin", "pretrained"] | None = None,
    kind: str | None = None,
    limit: str | None = None,
    output: bool = False,
    **constraints: Any,
) -> Any:
    """pydantic's `Field(default, description=…, **constraints)` for a request field, with its place in the lab as
    the field's `json_schema_extra` (/openapi.json shows it as `x-lab`). Every lab option has a default, so a new
    field needs none of them; a keyword that is neither a lab option nor pydantic's is a TypeError:

    form: the lab form's group (sequence, main, more, hidden); None keeps the field out of a page's URL (explicit
        matrices, the output selection, dtype). A field in no group the template places by hand gets a generic
        input in "more".
    depends: (field, value): the field is only used when `field` has that value; a page drops it otherwise. A mask
        kind's parameter needs none: which mask it goes with is the engine's (engine/masks.py, `mask_depends`).
    only: the field is for built-in presets (toy, gpt2-small) or for pretrained models only.
    kind: the input's kind when the type does not say it (a list of numbers sent as JSON text: "json").
    limit: the `Limits` attribute the engine checks it against (the form's max, the CLI's help).
    output: what to return, not what to compute (not passed to the engine).
    """
    unknown = sorted(constraints.keys() - FIELD_OPTIONS)
    if unknown:
        raise TypeError(f"LabField() got unexpected keyword arguments: {', '.join(unknown)}")
    assert form is None or form in FORM_GROUPS, form
    assert kind is None or kind in FIELD_KINDS, kind
    assert limit is None or limit in Limits.__dataclass_fields__, limit
    given = {"depends": depends and list(depends), "only": only, "kind": kind, "limit": limit, "output": output}
    lab: dict[str, Any] = {"x-lab": {"form": form, **{key: value for key, value in given.items() if value}}}
    return Field(default, description=description, json_schema_extra=lab, **constraints)


def mask_depends(model: type[BaseModel], name: str) -> tuple[str, str] | None:
    """("mask", kind) when `name` is a parameter of one mask kind and `model` chooses a mask: from the engine's
    registry (engine/masks.py), read at the call, so a parameter new there needs nothing here."""
    kind = masks.param_kinds().get(name)
    return ("mask", kind) if kind is not None and "mask" in model.model_fields else None


def mask_parameters(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """/openapi.json's `x-lab` of each mask parameter names its mask, as `LabField(depends=…)` would write it."""
    for name, prop in schema.get("properties", {}).items():
        depends = mask_depends(model, name)
        if depends is not None:
            lab = prop.get("x-lab", {"form": "more"})
            prop["x-lab"] = {"form": lab.get("form", "more"), "depends": list(depends), **lab}


@dataclass(frozen=True)
class RequestField:
    """One request field as every consumer sees it: the GET parser, the form, the URL state, the CLI, /docs."""

    name: str
    kind: str  # choice | integer | number | list | json | text
    item: str | None  # a list's items, a number's type ("integer", "number"), or "boolean"; None otherwise
    choices: tuple[str, ...]  # a choice field's values, in the model's order
    form: str | None  # the lab form's group; None: not in a page's URL
    depends: tuple[str, str] | None  # (field, value) that this field is only used with
    only: str | None  # "builtin" or "pretrained" presets only
    limit: str | None  # the `Limits` attribute the engine checks it against
    output: bool  # the output selection, not passed to the engine
    description: str
    default: Any


def _kind(options: list[dict[str, Any]]) -> tuple[str, str | None, tuple[str, ...]]:
    """A field's kind from its JSON schema: (kind, numeric item type, choices)."""
    choices = tuple(v for o in options for v in [*o.get("enum", []), *([o["const"]] if "const" in o else [])])
    if choices and all(isinstance(v, str) for v in choices):
        return "choice", None, choices
    types = {o.get("type") for o in options}
    if types == {"boolean"}:  # a query writes it as text: true/false (or 1/0, on/off)
        return "text", "boolean", ()
    if "string" in types:
        return "text", None, ()
    arrays = [o for o in options if o.get("type") == "array"]
    if arrays:
        items = arrays[0].get("items", {})
        if items.get("type") == "array":
            return "json", None, ()
        item = items.get("type")
        return "list", item if item in ("integer", "number") else None, ()
    for number in ("integer", "number"):
        if number in types:
            return number, number, ()
    return "text", None, ()


@lru_cache(maxsize=64)
def request_fields(model: type[BaseModel]) -> dict[str, RequestField]:
    """Every field of a request model with its metadata (`LabField`'s), in the model's order: the one field list."""
    props = model.model_json_schema()["properties"]
    out: dict[str, RequestField] = {}
    for name, info in model.model_fields.items():
        prop = props[name]
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        lab = extra.get("x-lab")
        meta: dict[str, Any] = lab if isinstance(lab, dict) else {}
        kind, item, choices = _kind([o for o in prop.get("anyOf", [prop]) if o.get("type") != "null"])
        if meta.get("kind") and meta["kind"] != kind:
            kind, item = meta["kind"], None
        depends = meta.get("depends") or mask_depends(model, name)
        out[name] = RequestField(
            name=name,
            kind=kind,
            item=item,
            choices=choices,
            form=meta.get("form", "more"),
            depends=(depends[0], depends[1]) if depends else None,
            only=meta.get("only"),
            limit=meta.get("limit"),
            output=bool(meta.get("output")),
            description=info.description or "",
            default=None if info.default_factory is not None else info.default,
        )
    return out
