"""The Jinja2 environment every page shares (jinja2-fragments, so a route can render one block)."""

from __future__ import annotations

from pathlib import Path

from jinja2_fragments.fastapi import Jinja2Blocks
from markupsafe import Markup

TEMPLATES = Jinja2Blocks(directory=str(Path(__file__).resolve().parent.parent / "templates"))
TEMPLATES.env.globals["zip"] = zip


def _followable(path: str) -> bool:
    """A page a class can follow: it offers "Start a class" (app/rooms)."""
    from .web.share import FOLLOWABLE

    return FOLLOWABLE.fullmatch(path) is not None


TEMPLATES.env.globals["followable"] = _followable


def _qr_label(svg: str, label: str) -> Markup:
    """`{{ qr | qr_label(t('qr.label', url=…)) }}`: the QR code (app.web.share.qr_svg) named in the page's language."""
    from .web.share import label_svg

    return Markup(label_svg(str(svg), label))


TEMPLATES.env.filters["qr_label"] = _qr_label


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


CHOICES: dict[str, list[str]] = _choices()
TEMPLATES.env.globals["choices"] = CHOICES


def _field_kinds() -> dict[str, str]:
    """Each request field a page's URL carries and the input it needs: choice, integer, number, list or text."""
    from .schemas import LIST_FIELDS, AttentionRequest
    from .web.state import url_fields

    props = AttentionRequest.model_json_schema()["properties"]
    kinds: dict[str, str] = {}
    for name in url_fields(AttentionRequest):
        options = props[name].get("anyOf", [props[name]])
        types = {o.get("type") for o in options}
        if name in CHOICES:
            kinds[name] = "choice"
        elif name in LIST_FIELDS:
            kinds[name] = "list"
        elif "integer" in types:
            kinds[name] = "integer"
        elif "number" in types:
            kinds[name] = "number"
        else:
            kinds[name] = "text"
    return kinds


# The lab form renders every URL field of the request model: the ones placed by hand in lab.html, and any other
# (a new field) as a generic input from this list, labelled from the catalogue.
TEMPLATES.env.globals["field_kinds"] = _field_kinds()
