"""The lab's message catalogues: every string the pages show, in English and Chinese.

The catalogues are data, one JSON file per language in locales/ (a translator opens zh.json beside en.json; a
test keeps their keys and `{placeholders}` equal). Templates call `t("key", **values)`; a missing key is a bug.
The language comes from `?lang=`, else from Accept-Language (by quality), else English: `negotiate`, called once
per request by the page kernel.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

LANGS = ("en", "zh")
LOCALES = Path(__file__).with_name("locales")

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
