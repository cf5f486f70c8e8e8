"""What a screen keeps on every link and form it draws: presenter mode (`present=1`), hints off and the language.

A page's own links (`ViewState.url`) and forms (`carried`) keep them already; the links to *other* pages are written
by many hands — the header's navigation, a lesson's "Open in the lab", the heads view's "Patch", the model view's
"same head in the lab" — and each dropped presenter mode (#32: a teacher walking from the lessons to the lab lost
the projector's layout on every click). So the kernel (app/web/page.py `serve`) passes a presenter-mode page
through `keep_screen` once, after rendering: every internal link (`<a href="/…">`) and every GET form gets the
screen's parameters it lacks, whoever wrote it, and a new link needs nothing to keep them.

Left alone (`KEEPS_OUT`): the switch out of presenter mode (`data-toggle=present`), downloads (`download`), the
JSON/API twins and files (`/api/`, `/static/`, `/vendor/`, `.json`, `.npz`, `.svg`, `.csv`), the API docs, the
teacher's remote (`/r/…`: its own page) and POST forms (an action, not a view: starting a class, stopping a run).
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from urllib.parse import parse_qsl, urlencode

# Paths that are not pages a projector walks through: files, the API and its docs, a room's own pages.
KEEPS_OUT = re.compile(r"^/(?:api/|static/|vendor/|docs|openapi|redoc|r(?:/|$))|\.(?:json|npz|svg|csv|png)$")

_LINK = re.compile(r"<a\b[^>]*>", re.I)
_HREF = re.compile(r'(\shref=")([^"]*)(")')
_FORM = re.compile(r"(<form\b[^>]*>)(.*?)(</form>)", re.I | re.S)
_ACTION = re.compile(r'\saction="([^"]*)"')
_METHOD = re.compile(r'\smethod="([^"]*)"', re.I)
_NAME = re.compile(r'\sname="([^"]*)"')


def is_page(url: str) -> bool:
    """An address of one of the app's pages (not a file, the API, a room's own page or another site)."""
    path = url.partition("#")[0].partition("?")[0]
    return url.startswith("/") and not url.startswith("//") and not KEEPS_OUT.search(path)


def kept_url(url: str, carry: Mapping[str, str]) -> str:
    """`url` with each of `carry` it lacks added to its query (its fragment kept last); other URLs unchanged."""
    if not is_page(url):
        return url
    rest, hash_, fragment = url.partition("#")
    path, _, query = rest.partition("?")
    have = {k for k, _ in parse_qsl(query, keep_blank_values=True)}
    missing = [(k, v) for k, v in carry.items() if k not in have]
    if not missing:
        return url
    query = "&".join(p for p in (query, urlencode(missing)) if p)
    return f"{path}?{query}{hash_}{fragment}"


def _link(match: re.Match[str], carry: Mapping[str, str]) -> str:
    tag = match.group(0)
    if 'data-toggle="present"' in tag or re.search(r"\sdownload[\s=>]", tag):
        return tag
    return _HREF.sub(lambda m: m.group(1) + html.escape(kept_url(html.unescape(m.group(2)), carry)) + m.group(3), tag)


def _form(match: re.Match[str], carry: Mapping[str, str]) -> str:
    opening, body, closing = match.groups()
    method = _METHOD.search(opening)
    action = _ACTION.search(opening)
    target = html.unescape(action.group(1)) if action else ""
    if (method and method.group(1).lower() != "get") or (target and not is_page(target)):
        return match.group(0)  # a POST form, or one that leaves the pages (an API, a file)
    have = set(_NAME.findall(body))
    extra = "".join(
        f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">' for k, v in carry.items()
        if k not in have
    )  # fmt: skip
    return opening + extra + body + closing


def keep_screen(page: str, carry: Mapping[str, str]) -> str:
    """`page` (rendered HTML) with `carry` added to every internal link and GET form that lacks it."""
    if not carry:
        return page
    page = _FORM.sub(lambda m: _form(m, carry), page)
    return _LINK.sub(lambda m: _link(m, carry), page)


def screen_carry(params: Mapping[str, str], lang: str) -> dict[str, str]:
    """What a page's links keep: in presenter mode, `present=1`, hints off when they are, and the language when the
    URL names it (the page's JSON twin lists the same links)."""
    if params.get("present") != "1":
        return {}
    carry = {"present": "1"}
    if params.get("hints") == "off":
        carry["hints"] = "off"
    if params.get("lang"):  # a language the URL chose (else the next page asks the browser again, as this one did)
        carry["lang"] = lang
    return carry
