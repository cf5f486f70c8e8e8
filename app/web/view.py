"""A View is what a page shows, as data: a frozen dataclass with nothing about HTML in it.

The kernel (app/web/page.py) renders one View three ways:

- **HTML**: the View's `template` (the whole page, or for an htmx request only its `blocks`), with the View's fields
  as the template's names;
- **JSON**: the same fields as plain data (`Accept: application/json`, or the page's `.json` twin URL, e.g.
  `/block.json?preset=toy`): every number, notice and link the page shows, so a script never scrapes HTML;
- **a notebook**: `_repr_html_` renders the View's panel with the lab's own stylesheet inlined, no server needed,
  and `_repr_json_` gives the JSON face (see `attention_lab` for `trace(...)` and the HTTP `Client`).

`jsonable` is the one conversion from a View to JSON: dataclasses become objects (fields marked `json=False` in
their metadata are left out, and those marked OPTIONAL while they are None), a matrix becomes its labels and float
values (−∞ as null, as in the API), NumPy arrays become lists, and an object with `__json__` says what it is. A View
field must therefore be data the page shows: never a trace, a model or a request. `View.from_json` reads a View
back from its JSON face (`from_jsonable`).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Annotated, Any, ClassVar, Self, TypeVar

import numpy as np
import orjson
from markupsafe import Markup
from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator, TypeAdapter, WithJsonSchema
from pydantic.json_schema import models_json_schema

# The metadata of a View field the template needs but the JSON face leaves out (it repeats another field, e.g. a
# parsed `Spec` kept beside its summary, or a QR code drawn from an address): `field(default=None, metadata=HIDDEN)`.
OLD_HIDDEN = {"json": False}
# The metadata of a field the JSON face leaves out while it is None (a run compared with none has no `before`).
OLD_OPTIONAL = {"optional": True}
T = TypeVar("T")


def finite(v: float) -> float | None:
    return v if math.isfinite(v) else None  # JSON has no −∞: null, as the API writes a masked score


def jsonable(value: Any) -> Any:
    """`value` as JSON-ready data (see the module's docstring)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, Markup):
        return str(value)
    if isinstance(value, float):
        return finite(value)
    if hasattr(value, "__json__"):
        return jsonable(value.__json__())
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        shown = ((f, getattr(value, f.name)) for f in fields(value) if f.metadata.get("json", True) is not False)
        return {f.name: jsonable(v) for f, v in shown if v is not None or not f.metadata.get("optional")}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    raise TypeError(f"a View holds data only; {type(value).__name__} is not")


def from_jsonable(tp: Any, data: Any) -> Any:
    """`jsonable`'s inverse for plain data, led by the annotations: `data` (JSON) read back as type `tp`.

    It decodes a dataclass from its object (a field the object leaves out keeps its default, as a HIDDEN one does;
    a key it has no field for is a TypeError), a field whose metadata names its own decoder
    (`field(metadata={"from_json": decode})`) by it, a class that writes itself (`__json__`) by its own `from_json`,
    `X | None` as X, and a tuple, a list or a dict's values item by item; `Any` and plain values stay as JSON.

    It does not guess between the types of any other union (a TypeError: such a field names its decoder), nor check
    the plain values (an int stays an int where a float is annotated). A dataclass's annotations must all resolve at
    run time (`typing.get_type_hints`): one naming a type imported only for type checking is a NameError."""
    if data is None:
        return None
    if hasattr(tp, "__json__"):
        return tp.from_json(data)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        unknown = data.keys() - {f.name for f in fields(tp)}
        if unknown:
            raise TypeError(f"{tp.__name__} has no field {', '.join(sorted(unknown))}")
        hints = typing.get_type_hints(tp)
        given = {f.name: _field_from_jsonable(f, hints[f.name], data[f.name]) for f in fields(tp) if f.name in data}
        return tp(**given)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if len(members) > 1:
            raise TypeError(f"{tp} is a union of several types: its field names its decoder (`from_json`)")
        return from_jsonable(members[0], data)
    if origin is tuple:
        items = [args[0]] * len(data) if args[1:] == (Ellipsis,) else args
        return tuple(from_jsonable(a, x) for a, x in zip(items, data, strict=True))
    if origin is list:
        return [from_jsonable(args[0], x) for x in data]
    if origin is dict:
        return {k: from_jsonable(args[1], v) for k, v in data.items()}
    return data


def _field_from_jsonable(f: dataclasses.Field[Any], tp: Any, data: Any) -> Any:
    """A dataclass field's value from JSON: by the decoder its metadata names (`from_json`), else by its type."""
    decode = f.metadata.get("from_json")
    return decode(data) if decode is not None and data is not None else from_jsonable(tp, data)


def _none(value: Any) -> bool:
    return value is None


# A View field the template needs but the JSON face leaves out (it repeats another field, e.g. a parsed `Spec` kept
# beside its summary, or a QR code drawn from an address): `qr: Annotated[QR | None, HIDDEN] = None`.
HIDDEN = Field(exclude=True)
# A field the JSON face leaves out while it is None (a run compared with none has no `before`).
OPTIONAL = Field(exclude_if=_none)


def _as_array(value: Any) -> np.ndarray:
    return value if isinstance(value, np.ndarray) else np.asarray(value, dtype=np.float64)


# A NumPy array a View holds (a tile's running statistics): written as (nested) lists of floats, read back as one.
Array = Annotated[
    np.ndarray,
    PlainValidator(_as_array, json_schema_input_type=list[Any]),
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


class View(BaseModel):
    """Base of every page's view. A subclass names its template and the blocks an htmx request swaps."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=False, extra="forbid",
                              json_schema_extra=_schema_extra)  # fmt: skip

    template: ClassVar[str]
    blocks: ClassVar[tuple[str, ...]] = ("stage", "controls")
    kind: ClassVar[str] = "view"  # the JSON face's "view": which page this is
    # The page draws its own presenter-mode switch beside its other toggles (else the header holds the kernel's).
    own_present_toggle: ClassVar[bool] = False

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

    def _repr_json_(self) -> dict[str, Any]:
        return self.to_json()

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


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def plain(value: Any) -> Any:
    """`value` (a dataclass an API answers with) as JSON-ready data, by pydantic (its type's TypeAdapter)."""
    kind = type(value)
    if kind not in _ADAPTERS:
        _ADAPTERS[kind] = TypeAdapter(kind)
    return _ADAPTERS[kind].dump_python(value, mode="json")


def read(kind: Any, data: Any) -> Any:
    """`plain`'s inverse: `data` (JSON) read back as type `kind`."""
    if kind not in _ADAPTERS:
        _ADAPTERS[kind] = TypeAdapter(kind)
    return _ADAPTERS[kind].validate_python(data)


@dataclass(frozen=True)
class DataView:
    """Base of every page's view. A subclass names its template and the blocks an htmx request swaps."""

    template: ClassVar[str]
    blocks: ClassVar[tuple[str, ...]] = ("stage", "controls")
    kind: ClassVar[str] = "view"  # the JSON face's "view": which page this is
    # The page draws its own presenter-mode switch beside its other toggles (else the header holds the kernel's).
    own_present_toggle: ClassVar[bool] = False

    def context(self) -> dict[str, Any]:
        """The template's names: every field (shallow: matrices stay objects for the template's macros)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def to_json(self) -> dict[str, Any]:
        data = jsonable(self)
        assert isinstance(data, dict)
        return {"view": self.kind, **data}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        """The View again from its page's JSON face (`to_json`, and the `lang` the page adds), by `from_jsonable`:
        a client of the page (`attention_lab.Client`) draws what the page draws."""
        if data.get("view", cls.kind) != cls.kind:
            raise TypeError(f"the JSON of a {data['view']} view is not a {cls.kind} view")
        view: Self = from_jsonable(cls, {k: v for k, v in data.items() if k not in ("view", "lang")})
        return view

    def _repr_json_(self) -> dict[str, Any]:
        return self.to_json()

    def _repr_html_(self) -> str:
        from .notebook import render

        return render(self)


@dataclass(frozen=True)
class DataStageView(DataView):
    """A page that steps through a trace's stages (the lab, the block): the request's summary, the tokens, the
    stage on screen (its key and 1-based index), the head, and whether its numbers are shown cell by cell."""

    summary: dict[str, Any] | None = None
    tokens: tuple[str, ...] = ()
    key: str = ""
    index: int = 0
    head: int = 0
    small: bool = False


def subclasses(cls: type[T]) -> list[type[T]]:
    """Every subclass of `cls` that the imported modules define, however deep."""
    return [c for sub in cls.__subclasses__() for c in (sub, *subclasses(sub))]


def all_views() -> list[type[Any]]:
    """Every View class the imported pages define, by kind."""
    return sorted([*subclasses(View), *subclasses(DataView)], key=lambda c: (c.kind, c.__name__))


def view_schemas(ref_template: str = "#/components/schemas/{model}") -> dict[str, Any]:
    """Every page's JSON face as a JSON Schema, with the types it nests (for /openapi.json's components)."""
    models = [c for c in all_views() if issubclass(c, View)]
    _, top = models_json_schema([(c, "serialization") for c in models], ref_template=ref_template)
    schemas: dict[str, Any] = top.get("$defs", {})
    for cls in all_views():
        if not issubclass(cls, View):
            schemas.setdefault(cls.__name__, view_schema(cls))
    return schemas


def view_schema(cls: type[DataView]) -> dict[str, Any]:
    """A View's JSON face as a JSON Schema (for /openapi.json): its fields but the template-only ones, typed
    loosely where a field holds nested presentation data (a matrix is `{name, label, rows, cols, values, …}`)."""
    from pydantic import ConfigDict, TypeAdapter, create_model

    hints = typing.get_type_hints(cls, include_extras=False)
    shown = {f.name: (_loose(hints[f.name]), None) for f in fields(cls) if f.metadata.get("json", True) is not False}
    model = create_model(cls.__name__, __config__=ConfigDict(arbitrary_types_allowed=True), **shown)  # type: ignore[call-overload]
    schema: dict[str, Any] = TypeAdapter(model).json_schema(
        mode="serialization", ref_template="#/components/schemas/{model}"
    )
    schema["properties"] = {"view": {"const": cls.kind, "type": "string"}, **schema.get("properties", {}),
                            "lang": {"type": "string"}}  # fmt: skip
    schema["description"] = (cls.__doc__ or "").strip().split("\n\n")[0]
    schema.pop("$defs", None)
    return schema


def _loose(tp: Any) -> Any:
    """JSON-plain types stay; anything else (a matrix, a lesson panel, a dataclass) is `Any` in the schema."""
    plain = (str, int, float, bool, type(None))
    args = typing.get_args(tp)
    if tp in plain:
        return tp
    if args and all(a in plain or a is Any for a in args) and typing.get_origin(tp) in (typing.Union, list, tuple,
                                                                                          dict):  # fmt: skip
        return tp
    return Any
