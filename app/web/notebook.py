"""The notebook face of a View: its panel as self-contained HTML for Jupyter's `_repr_html_`, with no server.

The page's own macros draw the matrices (templates/_matrix.html), so a notebook shows the numbers, colours and
colour bars the page shows; the lab's stylesheet is inlined and scoped to the output (CSS nesting: nothing leaks
into the notebook's own page), and several views become tabs made of radio buttons, so it needs no JavaScript and
survives a notebook saved as HTML. Links are dropped: in a notebook there is no page to go to.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..templating import TEMPLATES
from .i18n import translator
from .state import ViewState

STATIC = Path(__file__).resolve().parent.parent.parent / "static"
_ids = itertools.count(1)


@lru_cache(maxsize=1)
def scoped_css() -> str:
    """static/lab.css nested under `.attention-lab`: `:root` and `body` rules apply to the output's box."""
    css = (STATIC / "lab.css").read_text(encoding="utf-8")
    css = re.sub(r"(?m)^:root\s*\{", "& {", css)
    css = re.sub(r"(?m)^body\s*\{", "& {", css)
    return ".attention-lab {\n" + css + "\n}\n"


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
        state=ViewState("/", {}, (), ()), svg_base=None,
    )  # fmt: skip


def render(view: Any, lang: str = "en") -> str:
    return render_views([view], lang)
