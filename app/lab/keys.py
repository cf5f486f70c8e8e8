"""A request's progress key: the short name /api/v1/progress knows a computation in flight by, the same in the
server and in the browser (static/lab.js `progressKey`), computed lazily (`ProgressKey`) and off the event loop."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from urllib.parse import parse_qsl, quote_plus

from fastapi import Request
from starlette.datastructures import QueryParams

FNV_OFFSET, FNV_PRIME, MASK_64 = 0xCBF29CE484222325, 0x100000001B3, 2**64 - 1


def fnv1a64(data: bytes) -> str:
    """FNV-1a, 64 bits, as 16 hex digits."""
    h = FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * FNV_PRIME) & MASK_64
    return f"{h:016x}"


# A class asks for the same URLs: the pure-Python hash runs once per URL (the last KEYS_KEPT of them).
KEYS_KEPT = 2048
_keys: OrderedDict[tuple[str, str], str] = OrderedDict()
_keys_lock = threading.Lock()


def progress_key(path: str, query: str, pairs: Iterable[tuple[str, str]] | None = None) -> str:
    """A request's identity for /api/v1/progress, 16 hex digits however long its URL (a long text's is 17 KB, past
    what a poll may send): FNV-1a 64 of its path, "?", and its parameters each written `quote_plus(name) + "=" +
    quote_plus(value)` (UTF-8; space as +; only A-Z a-z 0-9 _ . - ~ left bare), sorted as plain ASCII strings and
    joined by "&". So a page and the script polling for it agree however each encoded or ordered the query.

    static/lab.js (`progressKey`) computes the same key in the browser before it sends the request, so a page can
    poll while it waits. Why not SHA-256: the browser's SubtleCrypto exists only on secure contexts (https or
    loopback), and a class reaches the lab over plain http on a LAN address; FNV-1a is a few lines in both
    languages. The key only tells apart the computations in flight; a collision would show another request's
    progress bar, nothing more.

    `pairs`: the query already parsed (exactly as `parse_qsl(query, keep_blank_values=True)`), not parsed again."""
    with _keys_lock:
        known = _keys.get((path, query))
        if known is not None:
            _keys.move_to_end((path, query))
            return known
    if pairs is None:
        pairs = parse_qsl(query, keep_blank_values=True)
    written = sorted(f"{quote_plus(k, safe='')}={quote_plus(v, safe='')}" for k, v in pairs)
    key = fnv1a64(f"{path}?{'&'.join(written)}".encode())
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
    `params`: the request's query as Starlette parsed it, reused (None: parse `query` then)."""

    path: str
    query: str
    params: QueryParams | None
    _hex: str | None

    def __new__(cls, path: str, query: str, params: QueryParams | None = None) -> ProgressKey:
        self = super().__new__(cls, f"{path}?{query}")
        self.path, self.query, self.params, self._hex = path, query, params, None
        return self

    @property
    def hex(self) -> str:
        if self._hex is None:
            pairs = self.params.multi_items() if self.params is not None else None
            self._hex = progress_key(self.path, self.query, pairs)
        return self._hex


def request_key(request: Request) -> ProgressKey:
    """The request's progress key, computed when its work begins (`ProgressKey`). Its query as the route already
    parsed it (Starlette's `query_params`, the one parse of it) when that is the same text: an ASCII query string
    (Starlette reads the bytes as Latin-1, the URL as UTF-8)."""
    url = request.url
    raw: bytes = request.scope.get("query_string", b"")
    return ProgressKey(url.path, url.query, request.query_params if raw.isascii() else None)


def get_key(request: Request) -> ProgressKey | None:
    """A GET's progress key (`request_key`); a POST's work reports under none (its body is not in its URL)."""
    return request_key(request) if request.method == "GET" else None
