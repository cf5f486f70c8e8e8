"""Cite this: a page's permalink plus provenance (the lab's version, the model and the sha256 of its weights files,
the date), as a block of data and as BibTeX or CSL-JSON. The hashes are computed once per file (keyed by its path,
size and modification time) and kept for the process."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import threading
from html import escape
from pathlib import Path
from typing import Any

from .. import __version__
from .twin import Page

TITLE = "Attention Lab"
AUTHOR = "The Attention Lab contributors"  # as CITATION.cff names them

_hashes: dict[tuple[str, int, int], str] = {}
_lock = threading.Lock()


def sha256(path: Path) -> str:
    """The file's sha256 (hex), computed once per (path, size, mtime) in this process."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _lock:
        known = _hashes.get(key)
    if known:
        return known
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    digest = h.hexdigest()
    with _lock:
        _hashes[key] = digest
    return digest


def weights_files(path: Path) -> list[Path]:
    """A model's weights files: the .gguf file itself, or a directory's safetensors (one file or its shards)."""
    if path.is_file():
        return [path]
    return sorted(path.glob("*.safetensors"))


def block(model: str | None, model_path: Path | None, permalink: str | None, seed: object = None,
          today: dt.date | None = None) -> dict[str, Any]:  # fmt: skip
    """THE provenance block (every export, every page's JSON twin and every API answer about a real model carry
    it, built here and nowhere else): where (the permalink), what computed it (the lab's version), with which model
    (its name; a real model's weights files and their sha256; a random preset's seed) and when."""
    out: dict[str, Any] = {
        "lab": TITLE,
        "version": __version__,
        **({"permalink": permalink} if permalink is not None else {}),  # a page's; an API answer is what was sent
        "model": model,
        "date": (today or dt.datetime.now(dt.UTC).date()).isoformat(),
    }
    if model_path is not None:
        out["files"] = [
            {"name": f.name, "bytes": f.stat().st_size, "sha256": sha256(f)} for f in weights_files(model_path)
        ]
    elif model is not None:
        out["weights"] = "seeded random weights" + (f" (seed {seed})" if seed is not None else "")
    return out


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
