"""THE provenance block: what pins a number the lab shows (the lab and its version, where it was shown, the model,
its weights files and their sha256 — or a random preset's seed — and the date), built here and nowhere else.

The kernel puts it into the answers themselves, where they are built and their model is known: every page's JSON
face (`page.serve`, from the View it wrote: its `preset` or `summary.preset`), every /api/v1 operation about a real
model (`answer.twins` and the windows, from the parsed request model's `preset`); the exports (app/export: the
citation, the figures' metadata, the notebook) build theirs with the same function. A weights file's sha256 is
computed once per file (keyed by its path, size and modification time) and kept for the process."""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
from pathlib import Path
from typing import Any

from .. import __version__

TITLE = "Attention Lab"


def sha256(path: Path) -> str:
    """The file's sha256 (hex), computed once per (path, size, mtime) in this process."""
    st = path.stat()
    return _sha256(str(path.resolve()), st.st_size, st.st_mtime_ns)


@functools.cache
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def weights_files(path: Path) -> list[Path]:
    """A model's weights files: the .gguf file itself, or a directory's safetensors (one file or its shards)."""
    if path.is_file():
        return [path]
    return sorted(path.glob("*.safetensors"))


def block(model: str | None, model_path: Path | None, permalink: str | None, seed: object = None,
          today: dt.date | None = None) -> dict[str, Any]:  # fmt: skip
    """The block (its type: `view.Provenance`): where (the permalink; an API answer has none: its GET and its POST
    give one answer), what computed it (the lab's version), with which model (its name; a real model's weights
    files and their sha256; a random preset's seed) and when. Reads the weights files the first time: call it off
    the event loop."""
    out: dict[str, Any] = {
        "lab": TITLE,
        "version": __version__,
        **({"permalink": permalink} if permalink is not None else {}),
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


def model_path(lab: Any, preset: str | None) -> Path | None:
    """A real model's path (its .gguf file or its directory) on this server; None for a random preset."""
    model = lab.models.get(preset) if preset else None
    return None if model is None else Path(model.path)


def permalink(request: Any) -> str:
    """The address of what was asked: the server's PUBLIC_URL (else the request's own host), path and query."""
    public = request.app.state.settings.public_url
    base = (public or str(request.base_url)).rstrip("/")
    query = request.url.query
    return base + request.url.path + (f"?{query}" if query else "")


def shown_model(view: Any, asked: str | None) -> tuple[str | None, object]:
    """The model a page's View shows (its `summary.preset`, else its own `preset` field, else the preset its query
    asked for) and a random preset's seed (its summary's)."""
    summary = getattr(view, "summary", None)
    summary = summary if isinstance(summary, dict) else {}
    preset = summary.get("preset") or getattr(view, "preset", None) or asked
    return (str(preset) if preset else None), summary.get("seed")


def page_block(request: Any, view: Any, asked: str | None) -> dict[str, Any]:
    """A page's JSON face's block: its permalink, and the model its View shows (off the event loop: it may hash)."""
    preset, seed = shown_model(view, asked)
    return block(preset, model_path(request.app.state.lab, preset), permalink(request), seed)


def answer_block(lab: Any, preset: str | None) -> dict[str, Any] | None:
    """An API answer's block: only about a real model (a preset this server loaded from files), with no permalink
    (a GET and its POST twin are one answer); None for a random preset or none (off the event loop: it may hash)."""
    path = model_path(lab, preset)
    return None if path is None else block(preset, path, None)
