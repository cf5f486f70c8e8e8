"""One page request's path through the app, counted by a profiler rather than by reading the code (#43):

    python -m bench.hops [URL]

Builds the app, asks for another view of the lab once (imports and first-use caches are not the request's path),
then asks for URL (default `/?tokens=猫+坐&stage=4&lang=zh`, computed: no stored answer) under `sys.setprofile` and
prints, in order of first entry, every module of app/ a function of which the request entered, and the templates
it rendered. The framework's own layers (Starlette's, FastAPI's) and the engine are not app modules and are not
listed; docs/architecture.md adds the ASGI layers to this list to count hops.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parent.parent
URL = "/?tokens=猫+坐&stage=4&lang=zh"


def path_of(url: str = URL) -> list[str]:
    """The app's modules and the templates the request for `url` entered, in order of first entry."""
    from app.main import create_app

    client = TestClient(create_app())
    client.get("/?tokens=狗+跑&stage=2&lang=en")
    seen: dict[str, None] = {}
    app, templates = f"{ROOT}/app/", f"{ROOT}/templates/"

    def entered(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith((app, templates)):
            seen.setdefault(frame.f_code.co_filename.removeprefix(f"{ROOT}/"))

    sys.setprofile(entered)
    threading.setprofile(entered)  # the trace is computed in a worker thread
    try:
        response = client.get(url)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    response.raise_for_status()
    return list(seen)


if __name__ == "__main__":
    path = path_of(sys.argv[1] if len(sys.argv) > 1 else URL)
    modules = [p for p in path if p.endswith(".py")]
    print("\n".join(path))
    print(f"{len(modules)} app modules, {len(path) - len(modules)} templates")
