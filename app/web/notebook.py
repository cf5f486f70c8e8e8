"""The notebook face of a View: its panel as self-contained HTML for Jupyter's `_repr_html_`, with no server.

The page's own macros draw the matrices (templates/_matrix.html), so a notebook shows the numbers, colours and
colour bars the page shows; the lab's stylesheet is inlined and scoped to the output (CSS nesting: nothing leaks
into the notebook's own page), and several views become tabs made of radio buttons, so it needs no JavaScript and
survives a notebook saved as HTML. Links are dropped: in a notebook there is no page to go to.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from jinja2 import ChainableUndefined
from jinja2_fragments import render_block
from markupsafe import escape

from ..templating import TEMPLATES, translator
from .state import PageQuery

STATIC = Path(__file__).resolve().parent.parent.parent / "static"
_ids = itertools.count(1)


@lru_cache(maxsize=1)
def scoped_css() -> str:
    """static/lab.css nested under `.attention-lab`: `:root` and `body` rules apply to the output's box."""
    css = (STATIC / "lab.css").read_text(encoding="utf-8")
    css = re.sub(r"(?m)^(?::root|body)\s*\{", "& {", css)
    return ".attention-lab {\n" + css + "\n}\n"


class Absent(ChainableUndefined):
    """A name only the server fills: empty, and so are its attributes, items and calls."""

    def __call__(self, *args: Any, **kwargs: Any) -> Absent:  # type: ignore[override]
        return self


@lru_cache(maxsize=1)
def lenient_env() -> Any:
    """The pages' environment, where a name only the server fills (a form's raw values) renders empty."""
    return TEMPLATES.env.overlay(undefined=Absent, cache_size=64)  # its own cache: compiled for it


def unlinked(value: Any) -> Any:
    """A matrix without its links (cell arithmetic, mask edits): a notebook has no page to open them on."""
    if hasattr(value, "cells") and dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, links=False, cell_urls=None)
    if isinstance(value, list):
        return [unlinked(v) for v in value]
    return value


def render_views(views: Sequence[Any], lang: str = "en", title: str = "") -> str:
    """One or more views as tabs (one view: no tabs)."""
    panels = [{k: unlinked(v) for k, v in view.context().items()} for view in views]
    uid = f"al{next(_ids)}"
    template = TEMPLATES.env.get_template("notebook.html")
    return template.render(
        views=panels, uid=uid, css=scoped_css(), title=title, lang=lang, t=translator(lang),
        state=PageQuery.of({}, "/"), svg_base=None,
    )  # fmt: skip


def render(view: Any, lang: str = "en") -> str:
    """A View in a notebook: the lab's stage panel, or any other page's own panel (its `stage` block, else its
    `main` block) drawn by the page's template from the View's fields. Images the page loads from the server's API
    (heat maps) need a running lab; everything else is in the HTML."""
    if getattr(view, "kind", "") == "lab":
        return render_views([view], lang)
    template = TEMPLATES.env.get_template(view.template)
    block = "stage" if "stage" in template.blocks else "main"
    ctx = {
        "t": translator(lang), "lang": lang, "langs": (), "lang_urls": {}, "state": PageQuery.of({}, "/"),
        "error": None, "status": 200, "fragment": True, "hide": set(), "present": False, "embed": False,
        "models": {}, "presets": [], "svg_base": None, "json_url": None, "page": view.kind, "request": None,
    } | {k: unlinked(v) for k, v in view.context().items()}  # fmt: skip
    uid = f"al{next(_ids)}"
    try:
        body = render_block(lenient_env(), view.template, block, **ctx)
    except Exception:  # a template that needs the server's request: the View's data, readable
        body = "<pre>" + str(escape(json.dumps(view.to_json(), ensure_ascii=False, indent=1)[:20000])) + "</pre>"
    return f'<div class="attention-lab" id="{uid}" lang="{lang}"><style>{scoped_css()}</style>{body}</div>'
