"""Cite this: a page's permalink plus provenance (the lab's version, the model and the sha256 of its weights files,
the date), as a block of data and as BibTeX or CSL-JSON. The block itself is the kernel's (app/web/provenance.py:
every page's JSON face and every API answer about a real model carry the same one)."""

from __future__ import annotations

import datetime as dt
import json
from html import escape
from pathlib import Path
from typing import Any

from ..web.provenance import TITLE, block, sha256, weights_files
from .twin import Page

__all__ = ["TITLE", "bibtex", "block", "csl", "html", "provenance", "sha256", "weights_files"]

AUTHOR = "The Attention Lab contributors"  # as CITATION.cff names them


def provenance(p: Page, permalink: str, model_path: Path | None, today: dt.date | None = None) -> dict[str, Any]:
    """A page's block (its preset and seed read from its twin: the page's summary, else its query)."""
    summary = p.summary
    preset = str(summary.get("preset") or p.twin.get("preset") or p.params.get("preset") or "toy")
    return block(preset, model_path, permalink, summary.get("seed", p.params.get("seed", 0)), today)


def _note(block: dict[str, Any]) -> str:
    files = "; ".join(f"{f['name']} sha256 {f['sha256']}" for f in block.get("files", []))
    return f"model {block['model']}" + (f" ({files})" if files else f", {block.get('weights', '')}")


def bibtex(block: dict[str, Any]) -> str:
    year, month, _ = block["date"].split("-")
    fields = {
        "author": f"{{{AUTHOR}}}",
        "title": f"{{{TITLE}}}: {block['permalink']}",
        "version": block["version"],
        "year": year,
        "month": str(int(month)),
        "url": block["permalink"],
        "urldate": block["date"],
        "note": _note(block),
    }
    body = ",\n".join(f"  {k} = {{{v}}}" for k, v in fields.items())
    return f"@software{{attention_lab_{block['date'].replace('-', '')},\n{body}\n}}\n"


def csl(block: dict[str, Any]) -> str:
    y, m, d = (int(x) for x in block["date"].split("-"))
    item = {
        "id": "attention-lab",
        "type": "software",
        "title": f"{TITLE}: {block['permalink']}",
        "author": [{"literal": AUTHOR}],
        "version": block["version"],
        "URL": block["permalink"],
        "accessed": {"date-parts": [[y, m, d]]},
        "issued": {"date-parts": [[y, m, d]]},
        "note": _note(block),
    }
    return json.dumps([item], ensure_ascii=False, indent=2) + "\n"


def html(block: dict[str, Any]) -> str:
    """The page's "Cite" panel: the permalink, the provenance, the BibTeX to copy."""
    rows = [
        f'<li>permalink: <a href="{escape(block["permalink"])}"><code>{escape(block["permalink"])}</code></a></li>',
        f"<li><code>{TITLE} {escape(block['version'])}</code> · <code>{escape(block['date'])}</code></li>",
        f"<li>model: <code>{escape(block['model'])}</code></li>",
    ]
    for f in block.get("files", []):
        rows.append(f"<li><code>{escape(f['name'])}</code> sha256 <code data-sha256>{escape(f['sha256'])}</code></li>")
    return f'<ul class="provenance" data-provenance>{"".join(rows)}</ul><pre><code>{escape(bibtex(block))}</code></pre>'
