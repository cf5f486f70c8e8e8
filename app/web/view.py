"""A View is what a page shows, as data: a frozen pydantic model with nothing about HTML in it.

The kernel (app/web/page.py) renders one View three ways:

- **HTML**: the View's `template` (the whole page, or for an htmx request only its `blocks`), with the View's fields
  as the template's names;
- **JSON**: `model_dump(mode="json")` (`Accept: application/json`, or the page's `.json` twin URL, e.g.
  `/block.json?preset=toy`), after `"view"` (which page) and before the page's `"lang"`: every number, notice and link
  the page shows, so a script never scrapes HTML. Its JSON Schema, nested types and all, is in /openapi.json
  (`view_schemas`);
- **a notebook**: `_repr_html_` renders the View's panel with the lab's own stylesheet inlined, no server needed,
  and `_repr_json_` gives the JSON face (see `attention_lab` for `trace(...)` and the HTTP `Client`).

A View field must be data the page shows, typed (`arbitrary_types_allowed=False`): never a trace, a model or a
request. What a View nests is a dataclass or a model pydantic writes by its fields; a field the template needs but the
JSON leaves out is `Field(exclude=True)` (`HIDDEN` in a dataclass: `Annotated[T, HIDDEN]`), one left out while it is
None `OPTIONAL`; a matrix is written as its `Matrix` face (app/render/cells.py); a NumPy array is `Array`; an
object only the template reads (a parsed `Spec`, a QR code) is `InstanceOf[...]` and hidden. −∞ (a masked score) is
written as null, as in the API (pydantic's `ser_json_inf_nan`; `to_json` gives the same). `View.from_json` reads a View back from its
JSON face (`model_validate`: a field it does not know is refused). `plain` and `read` do the same for the APIs'
dataclass answers (and the job queue's results).

The schemas are exact (defaults, required fields, nested types); what stays an open object is what the engine or
an API answer already writes as one: a request's `summary` (`Spec.summary()`), /params' `counts`, /demos' answers,
/train's runs and defaults, /models' summaries.
"""

from __future__ import annotations

import functools
import math
from typing import Annotated, Any, ClassVar, Self, TypeVar

import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator, TypeAdapter, WithJsonSchema

T = TypeVar("T")


def finite(v: float) -> float | None:
    return v if math.isfinite(v) else None  # JSON has no −∞: null, as the API writes a masked score


# A View field the template needs but the JSON face leaves out (it repeats another field, e.g. a parsed `Spec` kept
# beside its summary, or a QR code drawn from an address): `qr: Annotated[QR | None, HIDDEN] = None`.
HIDDEN = Field(exclude=True)
# A field the JSON face leaves out while it is None (a run compared with none has no `before`).
OPTIONAL = Field(exclude_if=lambda value: value is None)


# A NumPy array a View holds (a tile's running statistics): written as (nested) lists of floats, read back as one.
Array = Annotated[
    np.ndarray,
    PlainValidator(lambda v: v if isinstance(v, np.ndarray) else np.asarray(v, dtype=np.float64),
                   json_schema_input_type=list[Any]),
    PlainSerializer(lambda a: a.tolist(), return_type=list[Any]),
    WithJsonSchema({"type": "array", "items": {"anyOf": [{"type": "number"}, {"type": "null"},
                                                         {"type": "array", "items": {"type": ["number", "null"]}}]}}),
]  # fmt: skip


def _schema_extra(schema: dict[str, Any], cls: type) -> None:
    """A View's JSON Schema: its `view` (which page) first and the `lang` the page adds, described by its
    docstring's first paragraph."""
    if issubclass(cls, View):
        schema["properties"] = {"view": {"const": cls.kind, "type": "string"}, **schema.get("properties", {}),
                                "lang": {"type": "string"}}  # fmt: skip
        schema["description"] = (cls.__doc__ or "").strip().split("\n\n")[0]


class WeightsFile(BaseModel):
    """One weights file of a real model, as the citation block names it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    bytes: int
    sha256: str


class Provenance(BaseModel):
    """The citation block every page's JSON face and every API answer about a real model carry, built by
    `app/web/provenance.py` where the answer is written: the lab and its version, the page's permalink, the model,
    its weights files and their sha256 (or a random preset's seed), the date."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    lab: str
    version: str
    permalink: Annotated[str | None, OPTIONAL] = None
    model: str | None
    date: str
    files: Annotated[tuple[WeightsFile, ...] | None, OPTIONAL] = None
    weights: Annotated[str | None, OPTIONAL] = None


class View(BaseModel):
    """Base of every page's view. A subclass names its template and the blocks an htmx request swaps."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=False, extra="forbid",
                              json_schema_extra=_schema_extra)  # fmt: skip

    template: ClassVar[str]
    blocks: ClassVar[tuple[str, ...]] = ("stage", "controls")
    kind: ClassVar[str] = "view"  # the JSON face's "view": which page this is
    # The page draws its own presenter-mode switch beside its other toggles (else the header holds the kernel's).
    own_present_toggle: ClassVar[bool] = False

    # Added to the JSON face by the page kernel as it writes the View (`serve`), read back and written with it.
    provenance: Annotated[Provenance | None, OPTIONAL] = None

    def context(self) -> dict[str, Any]:
        """The template's names: every field (shallow: matrices stay objects for the template's macros)."""
        return {name: getattr(self, name) for name in type(self).model_fields}

    def to_json(self) -> dict[str, Any]:
        """The page's JSON face: `model_dump(mode="json")` after the page's kind (−∞ written as null)."""
        return {"view": self.kind, **orjson.loads(self.model_dump_json())}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        """The View again from its page's JSON face (`to_json`, and the `lang` the page adds): `model_validate`,
        so a client of the page (`attention_lab.Client`) draws what the page draws."""
        if data.get("view", cls.kind) != cls.kind:
            raise TypeError(f"the JSON of a {data['view']} view is not a {cls.kind} view")
        return cls.model_validate({k: v for k, v in data.items() if k not in ("view", "lang")})

    _repr_json_ = to_json

    def _repr_html_(self) -> str:
        from .notebook import render

        return render(self)


class StageView(View):
    """A page that steps through a trace's stages (the lab, the block): the request's summary, the tokens, the
    stage on screen (its key and 1-based index), the head, and whether its numbers are shown cell by cell."""

    summary: dict[str, Any] | None = None
    tokens: tuple[str, ...] = ()
    key: str = ""
    index: int = 0
    head: int = 0
    small: bool = False


@functools.cache
def _adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


def plain(value: Any) -> Any:
    """`value` (a dataclass an API answers with) as JSON-ready data, by pydantic (its type's TypeAdapter)."""
    kind: Any = type(value)
    return _adapter(kind).dump_python(value, mode="json")


def read(kind: Any, data: Any) -> Any:
    """`plain`'s inverse: `data` (JSON) read back as type `kind`."""
    return _adapter(kind).validate_python(data)


def subclasses(cls: type[T]) -> list[type[T]]:
    """Every subclass of `cls` that the imported modules define, however deep."""
    return [c for sub in cls.__subclasses__() for c in (sub, *subclasses(sub))]


def all_views() -> list[type[View]]:
    """Every View class the imported pages define, by kind."""
    return sorted(subclasses(View), key=lambda c: (c.kind, c.__name__))


def view_schemas(ref_template: str = "#/components/schemas/{model}") -> dict[str, Any]:
    """Every page's JSON face as a JSON Schema, with the types it nests (for /openapi.json's components): pydantic's
    schema of each View, which defines only what its JSON face writes (not a hidden field's type, e.g. the Spec)."""
    out: dict[str, Any] = {}
    for view in all_views():
        schema = view.model_json_schema(ref_template=ref_template, mode="serialization")
        out |= schema.pop("$defs", {}) | {view.__name__: schema}
    return dict(sorted(out.items()))
