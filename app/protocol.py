"""uvicorn's httptools protocol, with its own refusals answered as the lab's JSON problems.

httptools indexes a URL with 16-bit offsets, so a request line past 64 KiB cannot be parsed: uvicorn answered it
with a bare text 400 ("Invalid HTTP request received.") before the app (and app/limits.py's Edge, which
answers 414 for a query over MAX_QUERY_KB) ever saw it. Here that is a JSON 414 naming the query (or the path), and
any other unparseable request a JSON 400, in the shape of every other 4xx (message, detail[].loc).
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .limits import problem_body

URL_LIMIT = 65_535  # what httptools' parse_url can index


class JsonHttpToolsProtocol(HttpToolsProtocol):
    def send_400_response(self, msg: str) -> None:
        url = getattr(self, "url", b"")
        if len(url) > URL_LIMIT:
            loc = _longest(url)
            text = f"over the {(URL_LIMIT + 1) // 1024} KiB a URL may have here; send large inputs as a POST body"
            status, reason, kind = 414, b"URI Too Long", "too_long"
        else:
            loc, text, status, reason, kind = ["request"], "not a valid HTTP request", 400, b"Bad Request", "http"
        body = problem_body(loc, text, kind)  # named as every other problem is: "for: …", "query: …"
        content = [b"HTTP/1.1 %d %s\r\n" % (status, reason)]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend([b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body),
                        b"connection: close\r\n", b"\r\n", body])  # fmt: skip
        self.transport.write(b"".join(content))
        self.transport.close()


def _longest(url: bytes) -> list[str]:
    """Where an over-long URL is long: ["query", its longest parameter's name], else ["query"] or ["path"]."""
    _, _, query = url.partition(b"?")
    if not query:
        return ["path"]
    pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
    if not pairs:
        return ["query"]
    name = max(pairs, key=lambda p: len(p[0]) + len(p[1]))[0]
    return ["query", name if len(name) <= 40 and name.isprintable() else ascii(name[:40])]
