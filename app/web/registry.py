"""The pages, each declared once: where it is served, what draws it, where the menu shows it, whether a class can
follow it and whether its work is heavy.

A new page is its own folder (`app/<name>/page.py` with a `router`, its template, its catalogue keys) plus one line
in `PAGES`: app/main.py includes its router, the header's menu (templates/_base.html, `nav`) lists it, a room
follows it (`FOLLOWABLE`) and the page kernel's layer queues it (`HEAVY_PATHS`) from this table alone.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from fastapi import APIRouter

SLUG = "[a-z0-9-]{1,64}"  # what a `{slug}` in a page's path matches (a lesson's slug)


@dataclass(frozen=True)
class Page:
    """One page. `name` is its label's key in both catalogues (`nav.<name>`) and the prefix of its own keys
    (`<name>.…`, its catalogue section); `module` holds its `router`. `nav`: its row in the header's menu ("first":
    shown on a laptop's row; "more": under "More"; None: not in the menu), in `PAGES` order. `here`: the menu entry
    marked current while it is shown (patching is shown under the heads' entry)."""

    name: str
    path: str
    module: str
    template: str
    nav: Literal["first", "more"] | None = None
    followable: bool = True
    heavy: bool = False
    here: str | None = None

    @property
    def label(self) -> str:
        return f"nav.{self.name}"


PAGES: tuple[Page, ...] = (
    Page("lab", "/", "app.attention.page", "lab.html", nav="first"),
    Page("embed", "/embed", "app.attention.page", "lab.html", followable=False),
    Page("lessons", "/lessons", "app.lessons.page", "lessons.html", nav="first"),
    Page("lesson", "/lessons/{slug}", "app.lessons.page", "lesson.html"),
    Page("block", "/block", "app.block.page", "block.html", nav="first"),
    Page("decode", "/decode", "app.decode.page", "decode.html", nav="first"),
    Page("model", "/model", "app.model.page", "model.html", nav="first", heavy=True),
    Page("sinks", "/sinks", "app.attention.sinks", "sinks.html", nav="more"),
    Page("generate", "/generate", "app.generate.page", "generate.html", nav="more", heavy=True),
    # Not heavy: asked for beside /generate's step, it must not hold the client's one heavy place while a setting
    # changes (its work still takes a large-work slot by its cost).
    Page(
        "generate_samples",
        "/generate/samples",
        "app.generate.page",
        "generate_samples.html",
        here="generate",
        followable=False,
    ),
    Page("predict", "/predict", "app.predict.training", "predict.html", nav="more", heavy=True),
    Page("lens", "/lens", "app.predict.lens", "lens.html", nav="more", heavy=True),
    Page("heads", "/heads", "app.heads.page", "heads.html", nav="more", heavy=True),
    Page("patch", "/patch", "app.heads.page", "patch.html", heavy=True, here="heads"),
    Page("attribution", "/attribution", "app.attribution.page", "attribution.html", nav="more", heavy=True),
    Page("train", "/train", "app.train.page", "train.html", nav="more"),
    Page("cross", "/cross", "app.cross.page", "cross.html", nav="more"),
    Page("architectures", "/architectures", "app.architectures.page", "architectures.html", nav="more", heavy=True),
    Page("cost", "/cost", "app.cost.page", "cost.html", nav="more", heavy=True),
    Page("tiles", "/tiles", "app.attention.tiles", "tiles.html", nav="more"),
    Page("demos", "/demos", "app.demos.page", "demos.html", nav="more"),
    Page("params", "/params", "app.params.page", "params.html", nav="more"),
    Page("models", "/models", "app.models.page", "models.html", nav="more", followable=False),
    Page("room", "/r", "app.rooms.page", "room_join.html", followable=False),
)

# The API's routes whose work is always heavy (generation, the model view, the predictions): with the heavy pages,
# each takes its place in the queue before it tokenises (`HeavyWork`, `Lab.admit`), and whatever it computes
# (`Lab.compute`) takes a slot unless already cached.
HEAVY_API = frozenset({
    "/api/v1/generate", "/api/v1/model_view", "/api/v1/predict", "/api/v1/logit_lens", "/api/v1/head_ranking",
    "/api/v1/head_roles", "/api/v1/generate.npz", "/api/v1/prune", "/api/v1/patch", "/api/v1/attribution",
})  # fmt: skip


def heavy_paths() -> frozenset[str]:
    return HEAVY_API | {p.path for p in PAGES if p.heavy}


def routers() -> list[APIRouter]:
    """Each page module's router, once, in `PAGES` order."""
    return [importlib.import_module(m).router for m in dict.fromkeys(p.module for p in PAGES)]


@lru_cache(maxsize=8)
def _followable(pages: tuple[Page, ...]) -> re.Pattern[str]:
    alternatives = [re.sub(r"\{\w+\}", SLUG, p.path[1:]) for p in pages if p.followable and p.path != "/"]
    return re.compile(r"^/(?:" + "|".join(alternatives) + r")?$")


def followable_pattern() -> re.Pattern[str]:
    """The paths a class can follow in a room (app/rooms): the lab and the pages built on it, not /embed, /docs,
    a room's own pages or the API."""
    return _followable(PAGES)


def followable(path: str) -> bool:
    return followable_pattern().fullmatch(path) is not None


def nav(group: str) -> list[Page]:
    """The menu's entries of `group` ("first" or "more"), in order."""
    return [p for p in PAGES if p.nav == group]


def here(page: str) -> str:
    """The menu entry marked current while the page named `page` is shown."""
    found = next((p for p in PAGES if p.name == page), None)
    return (found.here or found.name) if found else page
