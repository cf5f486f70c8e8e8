"""The Jinja2 environment every page shares (jinja2-fragments, so a route can render one block)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2_fragments.fastapi import Jinja2Blocks
from markupsafe import Markup, escape

from .render.predicted import small
from .schemas import BlockRequest, request_fields
from .web.knockouts import heads_typed
from .web.lessons import LESSONS
from .web import registry
from .web.share import label_svg
from .web.state import Common, url_fields

if TYPE_CHECKING:
    from pydantic import BaseModel

TEMPLATES = Jinja2Blocks(directory=str(Path(__file__).resolve().parent.parent / "templates"))
TEMPLATES.env.globals["zip"] = zip
# A page a class can follow: it offers "Start a class" (app/rooms).
TEMPLATES.env.globals["followable"] = registry.followable
# The header's menu (templates/_base.html): the registry's pages, each row in order, and the entry a page marks.
TEMPLATES.env.globals["nav"] = registry.nav
TEMPLATES.env.globals["nav_here"] = registry.here
# Where a newcomer begins (the lab's "Start here" line, #42): the course's first lesson.
TEMPLATES.env.globals["first_lesson"] = LESSONS[0]
# `{{ kl | tiny }}`: a number that may be tiny, 3e-7 rather than 0.000.
TEMPLATES.env.filters["tiny"] = small
# `{{ state.get('ablate') | heads_typed }}`: heads to knock out as the pages write them (L1 H0, not 1.0).
TEMPLATES.env.filters["heads_typed"] = heads_typed
# `{{ qr | qr_label(t('qr.label', url=…)) }}`: the QR code (app.web.share.qr_svg) named in the page's language.
TEMPLATES.env.filters["qr_label"] = lambda svg, label: Markup(label_svg(str(svg), label))


def _carried(state: Any, lang: str) -> Markup:
    """`{{ carried(state, lang) }}` in a page's GET form: the hidden fields that belong to the screen, not to the
    form (the language, presenter mode, hints, the lesson and its step), so that submitting it keeps them."""
    pairs = [("lang", lang), *((k, state.params[k]) for k in Common.names() if k in getattr(state, "params", {}))]
    return Markup("".join(f'<input type="hidden" name="{k}" value="{escape(v)}">' for k, v in pairs))


TEMPLATES.env.globals["carried"] = _carried


# Each choice field of the requests (a Literal) and its values, in the model's order: the forms' <select>s.
CHOICES = {name: list(f.choices) for name, f in request_fields(BlockRequest).items() if f.kind == "choice"}
TEMPLATES.env.globals["choices"] = CHOICES


def field_kinds(model: type[BaseModel] | None = None) -> dict[str, str]:
    """Each request field a page's URL carries and the input it needs: choice, integer, number, list, json or
    text (app.schemas.request_fields, from the request model)."""
    from .schemas import AttentionRequest  # read at the call: a test puts a new request model in its place

    fields = request_fields(model or AttentionRequest)
    return {name: fields[name].kind for name in url_fields(model or AttentionRequest)}


def form_fields(model: type[BaseModel] | None = None) -> dict[str, dict[str, Any]]:
    """The lab form's groups (sequence, main, more, hidden), each field -> its metadata, in the model's order: what
    a template needs to place a field with no edit (its input kind, the field it depends on, built-in or
    pretrained presets only)."""
    from .schemas import AttentionRequest

    fields = request_fields(model or AttentionRequest)
    groups: dict[str, dict[str, Any]] = {}
    for name in url_fields(model or AttentionRequest):
        groups.setdefault(fields[name].form or "more", {})[name] = fields[name]
    return groups


# The lab form renders every URL field of the request model: the ones placed by hand in lab.html, and any other
# (a new field) as a generic input from these, labelled from the catalogue.
TEMPLATES.env.globals["field_kinds"] = field_kinds()
TEMPLATES.env.globals["form_fields"] = form_fields()
