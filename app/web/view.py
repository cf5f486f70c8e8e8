"""A View is what a page shows, as data: a frozen dataclass with nothing about HTML in it.

The kernel (app/web/page.py) renders one View three ways:

- **HTML**: the View's `template` (the whole page, or for an htmx request only its `blocks`), with the View's fields
  as the template's names;
- **JSON**: the same fields as plain data (`Accept: application/json`, or the page's `.json` twin URL, e.g.
  `/block.json?preset=toy`): every number, notice and link the page shows, so a script never scrapes HTML;
- **a notebook**: `_repr_html_` renders the View's panel with the lab's own stylesheet inlined, no server needed,
  and `_repr_json_` gives the JSON face (see `attention_lab` for `trace(...)` and the HTTP `Client`).

`jsonable` is the one conversion from a View to JSON: dataclasses become objects (fields marked `json=False` in
their metadata are left out), a matrix becomes its labels and float values (−∞ as null, as in the API), NumPy
arrays become lists, and an object with `__json__` says what it is. A View field must therefore be data the page
shows: never a trace, a model or a request.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np
from markupsafe import Markup

# The metadata of a View field the template needs but the JSON face leaves out (it repeats another field, e.g. a
# parsed `Spec` kept beside its summary, or a QR code drawn from an address): `field(default=None, metadata=HIDDEN)`.
HIDDEN = {"json": False}


def _number(v: float) -> float | None:
    return v if math.isfinite(v) else None  # JSON has no −∞: null, as the API writes a masked score


def jsonable(value: Any) -> Any:
    """`value` as JSON-ready data (see the module's docstring)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, Markup):
        return str(value)
    if isinstance(value, float):
        return _number(value)
    if hasattr(value, "__json__"):
        return jsonable(value.__json__())
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: jsonable(getattr(value, f.name)) for f in fields(value) if f.metadata.get("json", True) is not False
        }
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    raise TypeError(f"a View holds data only; {type(value).__name__} is not")


@dataclass(frozen=True)
class View:
    """Base of every page's view. A subclass names its template and the blocks an htmx request swaps."""

    template: ClassVar[str]
    blocks: ClassVar[tuple[str, ...]] = ("stage", "controls")
    kind: ClassVar[str] = "view"  # the JSON face's "view": which page this is

    def context(self) -> dict[str, Any]:
        """The template's names: every field (shallow: matrices stay objects for the template's macros)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def to_json(self) -> dict[str, Any]:
        data = jsonable(self)
        assert isinstance(data, dict)
        return {"view": self.kind, **data}

    def _repr_json_(self) -> dict[str, Any]:
        return self.to_json()

    def _repr_html_(self) -> str:
        from .notebook import render

        return render(self)
