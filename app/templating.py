"""The Jinja2 environment every page shares (jinja2-fragments, so a route can render one block)."""

from __future__ import annotations

from pathlib import Path

from jinja2_fragments.fastapi import Jinja2Blocks

TEMPLATES = Jinja2Blocks(directory=str(Path(__file__).resolve().parent.parent / "templates"))
TEMPLATES.env.globals["zip"] = zip
