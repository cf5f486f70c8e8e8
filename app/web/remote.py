"""A page's controls for the teacher's remote (/r/<code>/teach, static/teach.js).

The remote asks the page the class sees with `X-Lab-Remote: 1`. The kernel renders the page as usual, and each
control its templates draw through the `remote` macro (templates/_controls.html) is recorded as it is drawn: its
group, the view it links to, its label and whether it is the one shown. The answer is templates/_remote.html, those
controls as buttons that announce their views to the class. Nothing reads the rendered page back.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit

from fastapi import Request

HEADER = "x-lab-remote"
PERSONAL = ("lang", "present", "room")  # what belongs to one screen, never to the class's view (room-kit.js too)
GROUPS = ("stages", "switches", "positions", "heads", "knock")  # the remote's rows of buttons, in its order
GRID_COLS, GRID_ROWS = 8, 16  # a matrix this small is a grid of its cells on a 390 px phone; a larger one, a form


def wanted(request: Request) -> bool:
    return request.headers.get(HEADER) == "1"


def as_view(href: str, path: str) -> dict[str, str]:
    """A link's view: its path and its query without what belongs to one screen (its language, presenter mode)."""
    u = urlsplit(urljoin(path, href))
    query = [(k, v) for k, v in parse_qsl(u.query, keep_blank_values=True) if k not in PERSONAL]
    return {"page": u.path or "/", "query": urlencode(query)}


def _matrix(data: dict[str, Any], path: str) -> dict[str, Any]:
    """One matrix of the page: its cells as the remote's grid (each cell's view), or its bounds for the form;
    `links`: its cells open their arithmetic (a page whose URL has a `cell`)."""
    m, state, selected = data["m"], data["state"], data["selected"]
    head = m.head or 0
    row0, col0 = int(m.extra.get("row0") or 0), int(m.extra.get("col0") or 0)
    pick = tuple(selected[2:]) if selected and selected[0] == m.name and selected[1] == head else None
    rows = [
        [{"text": cell.text, "cls": cell.cls, "row": row0 + r, "col": col0 + c, "picked": pick == (r, c),
          "view": as_view(state.url(cell=f"{m.name}.{head}.{r}.{c}"), path) if m.links else None}
         for c, cell in enumerate(row)]
        for r, row in enumerate(m.cells)
    ]  # fmt: skip
    return {"name": m.name, "head": head, "label": m.label, "row_labels": list(m.rows), "col_labels": list(m.cols),
            "rows": rows, "row0": row0, "col0": col0, "links": bool(m.links and not m.cell_urls and "cell=" in state.url(cell=f"{m.name}.{head}.0.0")),
            "small": len(m.cols) <= GRID_COLS and len(m.cells) <= GRID_ROWS, "open": pick is not None,
            "picked": (row0 + pick[0], col0 + pick[1]) if pick else None,
            "base": as_view(state.url(cell=None), path)}  # fmt: skip


def controls(recorded: list[dict[str, Any]], path: str) -> dict[str, Any]:
    """The recorded controls as the remote shows them: a row of buttons per group (a view once per group), the
    page's steps (the first link of each kind, as on the page), the lesson step, and the matrices."""
    groups: dict[str, list[dict[str, Any]]] = {g: [] for g in GROUPS}
    go: dict[str, dict[str, Any]] = {}
    seen: set[tuple[str, str, str]] = set()
    lesson, matrices, staged = None, [], False
    for c in recorded:
        group = c["group"]
        if group == "matrix":
            matrices.append(_matrix(c["data"], path))
        elif group == "lesson":
            lesson = lesson or c
        elif group in groups:
            view = as_view(c["href"], path)
            if (group, view["page"], view["query"]) not in seen:
                seen.add((group, view["page"], view["query"]))
                groups[group].append({"label": c["label"].strip() or "·", "current": bool(c["current"]), "view": view})
            staged = staged or c["data"] == "stage"
        elif c["href"]:
            go.setdefault(group, c | {"view": as_view(c["href"], path)})
    cells = [m for m in matrices if m["links"]]
    opened = next((i for i, m in enumerate(cells) if m["open"]), None)
    given = next((i for i, m in enumerate(cells) if m["name"] == "x"), None)  # projection: its input X, as the page
    chosen = opened if opened is not None else given if given is not None else len(cells) - 1
    first = matrices[0] if matrices else None
    shape: dict[str, Any] = {}
    if first:  # the matrix a cell question is about, named by its tokens when it starts at (0, 0)
        shape = {"rows": len(first["rows"]), "cols": len(first["rows"][0]) if first["rows"] else 0}
        if first["row0"] == 0 and first["col0"] == 0 and len(first["col_labels"]) == shape["cols"]:
            shape |= {k: [str(v).strip()[:64] for v in first[k]] for k in ("row_labels", "col_labels")}
    return {"groups": groups, "go": go, "staged": staged, "lesson": lesson, "cells": cells, "chosen": chosen,
            "key_matrix": first, "shape": shape}  # fmt: skip


def title(env: Any, name: str, ctx: dict[str, Any]) -> str:
    """The page's <title> as its template writes it (else the layout's)."""
    template = env.get_template(name)
    if "title" not in template.blocks:
        template = env.get_template("_base.html")
    return "".join(template.blocks["title"](template.new_context(ctx))).strip()
