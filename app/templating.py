"""The Jinja2 environment every page shares (jinja2-fragments, so a route can render one block)."""

from __future__ import annotations

from pathlib import Path

from jinja2_fragments.fastapi import Jinja2Blocks

TEMPLATES = Jinja2Blocks(directory=str(Path(__file__).resolve().parent.parent / "templates"))
TEMPLATES.env.globals["zip"] = zip


def _choices() -> dict[str, list[str]]:
    """Each choice field of the requests (a Literal) and its values, in the model's order: the forms' <select>s."""
    from .schemas import BlockRequest

    out: dict[str, list[str]] = {}
    for name, prop in BlockRequest.model_json_schema()["properties"].items():
        for option in prop.get("anyOf", [prop]):
            values = option.get("enum") or ([option["const"]] if "const" in option else None)
            if values and all(isinstance(v, str) for v in values):
                out[name] = list(values)
    return out


TEMPLATES.env.globals["choices"] = _choices()
