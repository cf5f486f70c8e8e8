"""Whether a request that changes something comes from the lab's own pages: no other site's form, link or fetch may
start, end, step or answer anything with the cookies of a browser that visits it. A browser's Sec-Fetch-Site decides
(a page cannot forge it); a browser without it is judged by Origin, which must be this server's own (as the request
reached it, or the public URL); a client that sends neither (curl, a script) is no browser page at all."""

from __future__ import annotations

from urllib.parse import urlsplit

from fastapi import Request

SAFE_SITES = frozenset({"same-origin", "none"})  # Sec-Fetch-Site of the lab's own pages, and of a typed address
DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(url: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(url.strip().lower())
        port = parts.port or DEFAULT_PORTS.get(parts.scheme, 0)
    except ValueError:
        return None
    return (parts.scheme, parts.hostname or "", port) if parts.scheme and parts.hostname else None


def foreign(request: Request, what: str) -> tuple[str, str] | None:
    """None for the lab's own pages (or a non-browser client); else the header that says otherwise and why, in
    words naming `what` the request may not do ("change a room")."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        if site.strip().lower() not in SAFE_SITES:
            return (
                "sec-fetch-site",
                f"a {site[:20]!r} request may not {what}; only this lab's own pages may (same-origin)",
            )
        return None
    origin = request.headers.get("origin")
    if origin is None:
        return None
    own = {origin_of(f"{request.url.scheme}://{request.url.netloc}")}
    if request.app.state.settings.public_url:
        own.add(origin_of(request.app.state.settings.public_url))
    if origin_of(origin) not in own - {None}:
        return "origin", f"{origin[:80]!r} is not this lab's origin; only its own pages may {what}"
    return None
