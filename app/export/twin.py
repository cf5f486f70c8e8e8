"""A page's JSON twin fetched in-process: the page's own route asked for `application/json` through the app itself
(an ASGI transport), so every export reads exactly the numbers the page shows and recomputes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.types import ASGIApp

PAGE_PATHS = ("/", "/embed", "/block", "/heads", "/model", "/lens", "/predict", "/sinks")  # what exports draw


class BadPage(ValueError):
    """The `page` parameter names no page an export covers, or the page refused its query (`status`)."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Page:
    path: str
    query: tuple[tuple[str, str], ...]
    twin: dict[str, Any]

    @property
    def params(self) -> dict[str, str]:
        return dict(self.query)

    @property
    def url(self) -> str:
        """The page's permalink (path and query), as the user gave it."""
        return self.path + (f"?{urlencode(self.query)}" if self.query else "")

    @property
    def summary(self) -> dict[str, Any]:
        """The settings the page ran (`summary` of the lab's Views; {} where a page has none)."""
        s = self.twin.get("summary")
        return s if isinstance(s, dict) else {}

    @property
    def lang(self) -> str:
        return str(self.twin.get("lang") or self.params.get("lang") or "en")


def parse(page: str, paths: tuple[str, ...] = PAGE_PATHS) -> tuple[str, tuple[tuple[str, str], ...]]:
    """`/block?tokens=a+b` (or its twin `/block.json?…`) -> ("/block", (("tokens", "a b"),)); a page no export
    covers is refused naming it."""
    parts = urlsplit(page.strip())
    if parts.scheme or parts.netloc or not parts.path.startswith("/"):
        raise BadPage("give the page's path and query, e.g. /?tokens=cat+sat&stage=4")
    path = parts.path.removesuffix(".json")
    path = "/" if path in ("", "/index") else path.rstrip("/") or "/"
    if path not in paths:
        raise BadPage(f"{path} has no export; one of {', '.join(paths)}")
    return path, tuple(parse_qsl(parts.query, keep_blank_values=False))


async def fetch(app: ASGIApp, page: str, paths: tuple[str, ...] = PAGE_PATHS) -> Page:
    """The page's JSON twin, asked of the app itself. A page that refuses its query (422, 404…) is refused here
    with its own message, naming `page`."""
    import httpx  # here, not at start: with click, rich and pygments it is ~0.07 s of a server's start (first export)

    path, query = parse(page, paths)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=600) as client:
        r = await client.get(path, params=list(query), headers={"Accept": "application/json"})
    try:
        data = r.json()
    except ValueError:
        data = {}
    if r.status_code >= 400:
        raise BadPage(f"the page answered {r.status_code}: {data.get('message', r.text[:200])}",
                      422 if r.status_code < 500 else r.status_code)  # fmt: skip
    if not isinstance(data, dict):
        raise BadPage("the page's JSON twin is not an object")
    return Page(path, query, data)
