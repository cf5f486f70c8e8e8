"""The Jinja2 environment every page shares (jinja2-fragments, so a route can render one block), and the words
it says: the lab's message catalogues, every string the pages show, in English and Chinese.

The catalogues are data, one JSON file per language in app/web/locales/ (a translator opens zh.json beside en.json;
a test keeps their keys and `{placeholders}` equal). Templates call `t("key", **values)`; a missing key is a bug.
The language comes from `?lang=`, else from Accept-Language (by quality), else English: `negotiate`, called once
per request by the page kernel. An error message is said by its code from locales/errors.json (`error_message`).
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode

from jinja2 import pass_context
from jinja2.runtime import Context
from jinja2_fragments.fastapi import Jinja2Blocks
from markupsafe import Markup, escape

from .schemas import BlockRequest, request_fields
from .web import registry
from .web.knockouts import heads_typed
from .web.lessons import LESSONS
from .web.share import QR
from .web.state import SHARED, url_fields

if TYPE_CHECKING:
    from pydantic import BaseModel

LANGS = ("en", "zh")
LOCALES = Path(__file__).resolve().parent / "web" / "locales"

MESSAGES: dict[str, dict[str, str]] = {
    lang: json.loads((LOCALES / f"{lang}.json").read_text(encoding="utf-8")) for lang in LANGS
}


def negotiate(query_lang: str | None, accept_language: str | None) -> str:
    """`?lang=` wins; otherwise the first supported language in Accept-Language by quality; else English."""
    if query_lang in LANGS:
        return query_lang
    best, best_q = "en", -1.0
    for part in (accept_language or "").split(",")[:32]:
        tag, _, params = part.strip().partition(";")
        q = 1.0
        if params.strip().startswith("q="):
            try:
                q = float(params.strip()[2:])
            except ValueError:
                q = 0.0
        lang = tag.split("-")[0].lower()
        if lang in LANGS and q > best_q:
            best, best_q = lang, q
    return best


class _Plural(string.Formatter):
    """str.format, plus a count's word forms: `{n:token|tokens}` reads "token" when n is 1, else "tokens" (a
    catalogue writes `{n} {n:token|tokens}`; Chinese needs no such field), and a list's separator: `{choices:、}`
    joins a tuple's values with "、". Other format specs are Python's."""

    def format_field(self, value: Any, format_spec: str) -> str:
        if isinstance(value, tuple):  # a list of values (a field's choices): `{choices:、}` joins them with "、"
            return format_spec.join(map(str, value))
        if "|" in format_spec:
            one, _, other = format_spec.partition("|")
            return one if value == 1 else other
        return super().format_field(value, format_spec)


_PLURAL = _Plural()


def translator(lang: str) -> Callable[..., str]:
    table = MESSAGES[lang]

    def t(key: str, **values: object) -> str:
        if key not in table and key.startswith("preset."):  # a model the server loaded (--model) is its own name
            return key.removeprefix("preset.")
        text = table[key]
        return _PLURAL.format(text, **values) if values else text

    return t


ERRORS = json.loads((LOCALES / "errors.json").read_text(encoding="utf-8"))
# A message by its code (engine.errors.Message, the app's `said`; "pydantic.<type>" for validation errors, filled
# from their ctx). English is the message itself (the API's words): "en" holds the app's templates for `said`.
ERROR_CODES: dict[str, dict[str, str]] = {lang: ERRORS[lang] for lang in LANGS if lang != "en"}


def error_message(message: str, lang: str) -> str:
    """An engine or validation message (always English at the source: the API's words) in the page's language, by
    its code and parameters from locales/errors.json (`engine.errors.Message`); one without a code, or whose code
    the catalogue does not know, stays as it is (never read back from its English)."""
    code = getattr(message, "code", None)
    template = ERROR_CODES.get(lang, {}).get(code) if code else None
    if template is None:
        return message
    try:
        return _PLURAL.format(template, **getattr(message, "params", {}))
    except (KeyError, IndexError, ValueError):  # a validation error whose ctx lacks a parameter: its English
        return message


TEMPLATES = Jinja2Blocks(directory=str(Path(__file__).resolve().parent.parent / "templates"))
TEMPLATES.env.globals["zip"] = zip
# A page a class can follow: it offers "Start a class" (app/rooms).
TEMPLATES.env.globals["followable"] = registry.followable
# The header's menu (templates/_base.html): the registry's pages, each row in order, and the entry a page marks.
TEMPLATES.env.globals["nav"] = registry.nav
TEMPLATES.env.globals["nav_here"] = registry.here
# Where a newcomer begins (the lab's "Start here" line, #42): the course's first lesson.
TEMPLATES.env.globals["first_lesson"] = LESSONS[0]
# The header's parts that follow the page's URL (templates/_base.html): a swap of part of a whole page whose URL htmx
# pushes takes them from the answer too (hx-select-oob), as a page's htmx blocks bring them (app/web/page.py).
TEMPLATES.env.globals["header_oob"] = ",".join([*(f"#lang-{code}" for code in LANGS), "#view-links"])


def small(v: float) -> str:
    """A number that may be tiny (max |Δ|, KL): 0, 3e-7, 0.012, 17.6 (the templates' `tiny` filter)."""
    if v == 0:
        return "0"
    if abs(v) < 0.01:
        mantissa, _, exp = f"{v:.0e}".partition("e")
        return f"{mantissa}e{int(exp)}"
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


# `{{ kl | tiny }}`: a number that may be tiny, 3e-7 rather than 0.000.
TEMPLATES.env.filters["tiny"] = small
# `{{ state.get('ablate') | heads_typed }}`: heads to knock out as the pages write them (L1 H0, not 1.0).
TEMPLATES.env.filters["heads_typed"] = heads_typed
# `{{ qr | qr_label(t('qr.label', url=…)) }}`: the QR code (app.web.share.qr_svg) named in the page's language.
TEMPLATES.env.filters["qr_label"] = lambda qr, label: qr.svg(label) if isinstance(qr, QR) else qr


def _carried(state: Any, lang: str) -> Markup:
    """`{{ carried(state, lang) }}` in a page's GET form: the hidden fields that belong to the screen, not to the
    form (the language, presenter mode, hints, the lesson and its step), so that submitting it keeps them."""
    pairs = [("lang", lang), *((k, state.params[k]) for k in SHARED if k in getattr(state, "params", {}))]
    return Markup("".join(f'<input type="hidden" name="{k}" value="{escape(v)}">' for k, v in pairs))


TEMPLATES.env.globals["carried"] = _carried

# Paths that are not pages a projector walks through: files, the API and its docs, a room's own pages.
KEEPS_OUT = re.compile(r"^/(?:api/|static/|vendor/|docs|openapi|redoc|r(?:/|$))|\.(?:json|npz|svg|csv|png)$")


def kept_url(href: str, carry: Mapping[str, str]) -> str:
    """`href` with each of `carry` it lacks added to its query (its fragment kept last), when it is one of the app's
    pages; a file, the API, a room's own page or another site unchanged."""
    rest, hash_, fragment = href.partition("#")
    path, _, query = rest.partition("?")
    if not carry or not href.startswith("/") or href.startswith("//") or KEEPS_OUT.search(path):
        return href
    have = {k for k, _ in parse_qsl(query, keep_blank_values=True)}
    missing = [(k, v) for k, v in carry.items() if k not in have]
    if not missing:
        return href
    return f"{path}?{'&'.join(p for p in (query, urlencode(missing)) if p)}{hash_}{fragment}"


@pass_context
def _url(ctx: Context, href: str) -> str:
    """`{{ url(href) }}`: an internal link that keeps what the screen carries (`carry` in the page's context: in
    presenter mode `present=1`, hints off and the language the URL named; app/web/page.py `screen_carry`), whoever
    wrote it (#32: a teacher walking from the lessons to the lab lost the projector's layout on every click). The
    switch out of presenter mode and downloads do not use it."""
    return kept_url(str(href), ctx.get("carry") or {})


TEMPLATES.env.globals["url"] = _url


# Each choice field of the requests (a Literal) and its values, in the model's order: the forms' <select>s.
CHOICES = {name: list(f.choices) for name, f in request_fields(BlockRequest).items() if f.kind == "choice"}
TEMPLATES.env.globals["choices"] = CHOICES


def field_kinds(model: type[BaseModel] | None = None) -> dict[str, str]:
    """Each request field a page's URL carries and the input it needs: choice, integer, number, list, json or
    text (app.schemas.request_fields, from the request model)."""
    from .schemas import AttentionRequest  # read at the call: a test puts a new request model in its place

    fields = request_fields(model or AttentionRequest)
    return {name: fields[name].kind for name in url_fields(model or AttentionRequest)}


def form_fields(model: type[BaseModel] | None = None) -> dict[str, dict[str, Any]]:
    """The lab form's groups (sequence, main, more, hidden), each field -> its metadata, in the model's order: what
    a template needs to place a field with no edit (its input kind, the field it depends on, built-in or
    pretrained presets only)."""
    from .schemas import AttentionRequest

    fields = request_fields(model or AttentionRequest)
    groups: dict[str, dict[str, Any]] = {}
    for name in url_fields(model or AttentionRequest):
        groups.setdefault(fields[name].form or "more", {})[name] = fields[name]
    return groups


# The lab form renders every URL field of the request model: the ones placed by hand in lab.html, and any other
# (a new field) as a generic input from these, labelled from the catalogue.
TEMPLATES.env.globals["field_kinds"] = field_kinds()
TEMPLATES.env.globals["form_fields"] = form_fields()
