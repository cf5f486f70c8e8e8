"""A request's progress key: the short name /api/v1/progress knows a computation in flight by. A page's htmx request
names its own (the `X-Progress-Key` header, a random one static/lab.js makes before it sends the request, and polls
by); any other request is known by a hash of its URL, computed here only, lazily (`ProgressKey`) and off the event
loop, which a page asks for with `for=` and its URL."""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable
from urllib.parse import parse_qsl, quote_plus

from fastapi import Request
from starlette.datastructures import QueryParams

HEADER = "x-progress-key"  # the key a page's request names itself by (static/lab.js)
KEY = re.compile(r"[0-9a-f]{16}")


def url_digest(data: bytes) -> str:
    """The hash behind a URL's key: BLAKE2b, 8 bytes, as 16 hex digits."""
    return hashlib.blake2b(data, digest_size=8).hexdigest()


# A class asks for the same URLs: the URL is parsed and hashed once per URL (the last KEYS_KEPT of them).
KEYS_KEPT = 2048
_keys: OrderedDict[tuple[str, str], str] = OrderedDict()
_keys_lock = threading.Lock()


def progress_key(path: str, query: str, pairs: Iterable[tuple[str, str]] | None = None) -> str:
    """A request's identity for /api/v1/progress, 16 hex digits however long its URL (a long text's is 17 KB):
    BLAKE2b (8 bytes) of its path, "?", and its parameters each written `quote_plus(name) + "=" + quote_plus(value)`,
    sorted and joined by "&". So a request and a poll that names it by its URL (`for=`) agree however each encoded
    or ordered the query. The key only tells apart the computations in flight.

    `pairs`: the query already parsed (exactly as `parse_qsl(query, keep_blank_values=True)`), not parsed again."""
    with _keys_lock:
        known = _keys.get((path, query))
        if known is not None:
            _keys.move_to_end((path, query))
            return known
    if pairs is None:
        pairs = parse_qsl(query, keep_blank_values=True)
    written = sorted(f"{quote_plus(k, safe='')}={quote_plus(v, safe='')}" for k, v in pairs)
    key = url_digest(f"{path}?{'&'.join(written)}".encode())
    with _keys_lock:
        _keys[(path, query)] = key
        if len(_keys) > KEYS_KEPT:
            _keys.popitem(last=False)
    return key


class ProgressKey(str):
    """A request's progress key, not computed yet: the string is the request's path and query (what the key names),
    `hex` the key itself (`progress_key`), computed on first use and kept. Hashing a long URL takes milliseconds of
    pure Python, so it is not done on the event loop, nor for a request whose work never begins (refused, or
    cancelled in the queue): `Lab.tracking` asks for it in the worker thread that starts the work, or a poll does.
    `params`: the request's query as Starlette parsed it, reused (None: parse `query` then). `named`: the key the
    request named itself by (its X-Progress-Key header), which is then its key when it is one."""

    path: str
    query: str
    params: QueryParams | None
    _hex: str | None

    def __new__(cls, path: str, query: str, params: QueryParams | None = None, named: str | None = None) -> ProgressKey:
        self = super().__new__(cls, f"{path}?{query}")
        self.path, self.query, self.params = path, query, params
        self._hex = named if named is not None and KEY.fullmatch(named) else None  # a key only if 16 hex digits
        return self

    @property
    def hex(self) -> str:
        if self._hex is None:
            pairs = self.params.multi_items() if self.params is not None else None
            self._hex = progress_key(self.path, self.query, pairs)
        return self._hex


def request_key(request: Request) -> ProgressKey:
    """The request's progress key: the one it names itself by (X-Progress-Key), else its URL's, computed when its
    work begins (`ProgressKey`). Its query as the route already parsed it (Starlette's `query_params`, the one parse
    of it) when that is the same text: an ASCII query string (Starlette reads the bytes as Latin-1, the URL as
    UTF-8)."""
    url = request.url
    raw: bytes = request.scope.get("query_string", b"")
    params = request.query_params if raw.isascii() else None
    return ProgressKey(url.path, url.query, params, request.headers.get(HEADER))


def get_key(request: Request) -> ProgressKey | None:
    """A GET's progress key (`request_key`); a POST's work reports under none (its body is not in its URL)."""
    return request_key(request) if request.method == "GET" else None
