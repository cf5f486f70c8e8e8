"""A page's query as a pydantic model (`PageQuery`: what every page shares, each page's own fields in its
subclass), and the parsers of the view parameters that are not request fields (`stage`, `head`, `cell`, `tile` and
the integer knobs of the image and window routes), as pydantic validators (`Digits`, `Stage`, `Choice`, …).

Every integer is ASCII digits only (`²`, `٣` and `1_1` are refused, though Python's `int()` would take some of
them), range-checked, and reported naming the key the user typed: a 422 in the API, an inline error on a page, in
the English words the catalogues translate. Nothing here knows about HTTP beyond a mapping of query parameters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, ClassVar, TypeVar
from urllib.parse import urlencode

from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, PrivateAttr, ValidationError, WithJsonSchema
from pydantic_core import PydanticCustomError

from engine.errors import Message
from engine.spec import PRESETS

from ..errors import coded
from ..schemas import ASCII_INT, BlockRequest, FieldError, int_or_empty, query_model, request_fields, said


def parse_stage(raw: str | None, order: Sequence[str], default: str | None = None) -> str:
    """A stage by key or by its 1-based place in `order`."""
    text = (raw or "").strip()
    if not text:
        return default if default is not None else order[0]
    if text in order:
        return text
    if ASCII_INT.fullmatch(text) and 1 <= int(text) <= len(order):
        return order[int(text) - 1]
    raise FieldError("stage", said("unknown_stage", value=show(text), n=len(order), stages=", ".join(order)))


@dataclass(frozen=True)
class Cell:
    """One number of one tensor: `tensor.head.row.col`, every index 0-based."""

    tensor: str
    head: int
    row: int
    col: int


CELL = re.compile(r"([a-z_]{1,32})\.([0-9]{1,9})\.([0-9]{1,9})\.([0-9]{1,9})")  # tensor.head.row.col


def show(text: str, limit: int = 40) -> str:
    """A bounded, printable echo of a bad value."""
    shown = text if len(text) <= limit else text[:limit] + "…"
    return ascii(shown) if not shown.isprintable() else repr(shown)


# --- The request fields a page's URL carries --------------------------------------------------------------------

# A field that only one choice of another field uses; left over from another choice, the page drops it. Derived
# from the request models' field metadata (app/schemas/fields.py `LabField`): nothing to edit here.
DEPENDS: dict[str, tuple[str, str]] = {
    n: f.depends for n, f in request_fields(BlockRequest).items() if f.depends is not None
}


def url_fields(model: type[BaseModel], drop: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The request fields a page's URL carries, in the request model's order: the one field list."""
    return tuple(n for n, f in request_fields(model).items() if f.form is not None and n not in drop)


def changed(params: Mapping[str, str], changes: Mapping[str, object]) -> dict[str, str]:
    """`params` with `changes` applied (None drops a field), less the fields their switch no longer uses."""
    p = dict(params)
    for k, v in changes.items():
        if v is None:
            p.pop(k, None)
        else:
            p[k] = str(v)
    return drop_unused(p)


def drop_unused(p: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in p.items() if k not in DEPENDS or p.get(DEPENDS[k][0]) == DEPENDS[k][1]}


@cache
def link_keys(page: type[PageQuery], api_keys: tuple[str, ...]) -> tuple[str, ...]:
    """`PageQuery.page_keys` of a page's query model and request fields, worked out once: a page writes hundreds of
    links (one per cell of a matrix), each in this order, and reading the models' fields again for each was a
    third of drawing the lab's stage."""
    shared = tuple(PageQuery.aliases())
    own = tuple(k for k in page.aliases() if k not in shared and k not in api_keys)
    return (*api_keys, *own, *(k for k in shared if k != "lang"), "lang")


# The toy's example when a page's URL names no tokens, in the page's language (#42): the course's sentence in Chinese
# (the engine's default, so the API's: PRESETS["toy"]) and its English counterpart in English, five tokens each, so
# that every matrix keeps its shape and every lesson its cells. A page's default only: /api/v1/… keeps the engine's.
EXAMPLES = {"en": "cat sat on the mat", "zh": " ".join(PRESETS["toy"].tokens)}
API_EXAMPLE = EXAMPLES["zh"]


def within(name: str, value: int, lo: int | None, hi: int | None) -> int:
    """`value` in [lo, hi] (either bound may be None), or a FieldError naming `name` and the bounds: the bounds a
    page knows only once it has computed (a trace's heads, a generation's steps; `digits` says the same)."""
    if (message := bounds_message(value, lo, hi)) is not None:
        raise FieldError(name, message)
    return value


HEAD = re.compile(r"([0-9]{1,5})[.:]([0-9]{1,5})")  # 1:0, and 1.0 as links and forms once wrote it
NAMED_HEAD = re.compile(r"[Ll]\s*([0-9]{1,5})\s*[Hh]\s*([0-9]{1,5})")  # L1 H0, as the pages write it


def parse_heads(raw: str, name: str = "heads") -> list[list[int]]:
    """`L1 H0, L16 H0` (layer 1 head 0, layer 16 head 0; separated by commas or spaces) as the API's `ablate`:
    [[1, 0], [16, 0]]: how the training view's and the model view's forms write heads (`1:0`, and `1.0` as older
    links wrote it, read the same)."""
    out: list[list[int]] = []
    for item in (p for p in re.split(r"[\s,;，；、]+", NAMED_HEAD.sub(r"\1:\2", raw.strip())) if p):
        m = HEAD.fullmatch(item)
        if m is None:
            raise FieldError(name, said("head_syntax", value=show(item, 30)))
        out.append([int(m[1]), int(m[2])])
    if len(out) > 4096:
        raise FieldError(name, said("many_heads", n=len(out)))
    return out


# --- A page's query, a pydantic model ------------------------------------------------------------------------


def refused(message: str) -> PydanticCustomError:
    """A field's refusal in the API's English words, its loc the key typed; a coded message (`said`) keeps its code
    and parameters in the error's context, for a page to say it from the catalogue (app/errors.py `coded`)."""
    if isinstance(message, Message):
        return PydanticCustomError("value_error", message, {"code": message.code, **message.params})
    return PydanticCustomError("value_error", message)


def bounds_message(value: int, lo: int | None, hi: int | None) -> Message | None:
    """What `within` says of `value` outside [lo, hi]; None inside."""
    if (lo is None or value >= lo) and (hi is None or value <= hi):
        return None
    if lo is not None and hi is not None:
        return said("no_valid_value", value=value) if hi < lo else Message("between", low=lo, high=hi, value=value)
    return said("at_least", low=lo, value=value) if lo is not None else said("at_most", high=hi)


def Digits(lo: int | None = 0, hi: int | None = None, documented: tuple[int | None, int | None] | None = None) -> Any:
    """An integer written with the digits 0-9 (`²` and `١` refused, as `int()` would take them), in [lo, hi]; its
    JSON Schema (a route's query in /openapi.json) an integer in [lo, hi] or empty, or in the `documented` bounds
    where the route checks tighter ones once it knows them (a window's row within the matrix)."""
    schema = int_or_empty(*(documented or (lo, hi)))
    return Annotated[int, BeforeValidator(lambda raw: digits(raw, lo, hi)), WithJsonSchema(schema)]


def digits(raw: Any, lo: int | None = 0, hi: int | None = None) -> int:
    """`raw` as an integer written with the digits 0-9, in [lo, hi] (empty text: 0), or a field's refusal."""
    if type(raw) is not int:
        if (text := str(raw)) == "":
            return 0
        if not ASCII_INT.fullmatch(text):
            raise refused(said("digits", value=show(text)))
        raw = int(text)
    if (message := bounds_message(raw, lo, hi)) is not None:
        raise refused(message)
    return raw


def ascii_int(raw: Any) -> Any:
    """Query text as an integer only when it is written with the digits 0-9 (" 3 ", "3_0", "+3" and "3.0" are
    refused, though pydantic's lax int would take them); anything not text passes on to the field's own checks."""
    if isinstance(raw, str):
        if not ASCII_INT.fullmatch(raw):
            raise refused(said("digits", value=show(raw)))
        return int(raw)
    return raw


# An integer field of a query model read by pydantic itself (no empty-means-0, bounds from its Field): ASCII digits.
AsciiInt = Annotated[int, BeforeValidator(ascii_int)]
AsciiIntOrNone = Annotated[int | None, BeforeValidator(ascii_int)]  # the check outside the union: one error, its bounds


def Stage(order: Sequence[str]) -> Any:
    """A stage by key or by its 1-based place in `order`."""

    def read(raw: Any) -> str:
        try:
            return parse_stage(str(raw), order)
        except FieldError as e:
            raise refused(e.message) from None

    return Annotated[str, BeforeValidator(read)]


def Choice(choices: Sequence[str]) -> Any:
    """One of `choices`, written as it is."""

    def read(raw: Any) -> str:
        if raw not in choices:
            raise refused(f"one of {', '.join(choices)}")
        return str(raw)

    return Annotated[str, BeforeValidator(read)]


def _cell(raw: Any) -> Cell | None:
    """`tensor.head.row.col`, every index 0-based."""
    if not isinstance(raw, str):
        return raw
    if (m := CELL.fullmatch(raw)) is None:
        raise refused(f"must be tensor.head.row.col with 0-based indices, e.g. weights.0.2.1; got {show(raw)}")
    return Cell(m[1], int(m[2]), int(m[3]), int(m[4]))


def _tile(raw: Any) -> tuple[int, int]:
    """The top-left corner `row,col` of the tile inspector (each clamped by the caller to the matrix)."""
    if not isinstance(raw, str):
        return tuple(raw)
    r, _, c = raw.partition(",")
    return digits(r or "0"), digits(c or "0")


CellField = Annotated[Cell | None, BeforeValidator(_cell)]
TileField = Annotated[tuple[int, int], BeforeValidator(_tile)]
Flag = Annotated[bool, BeforeValidator(lambda raw: raw is True or raw == "1")]  # `present=1`
Unless = Annotated[bool, BeforeValidator(lambda raw: raw is not False and raw != "off")]  # `hints=off`


def head_cell(raw: Any) -> tuple[int, int]:
    """A page's `layer.head` (/heads, /attribution; checked against the model's once known)."""
    if not isinstance(raw, str):
        return raw
    layer, dot, head = raw.partition(".")
    if not dot:
        raise refused(said("layer_head", value=show(raw, 30)))
    return digits(layer, 0), digits(head, 0)


HeadCell = Annotated[tuple[int, int], BeforeValidator(head_cell)]


class PageQuery(BaseModel):
    """A page's URL query as a pydantic model: what every page shares (presenter mode, hints, a lesson step beside
    the page, the language), each page's own fields added by its subclass (older spellings as pydantic aliases,
    `Field(validation_alias=AliasChoices(key, old))`), and the request fields it carries as their text (`API_KEYS`,
    made into the request by its model, once). `of` reads a query once: stripped, empty values left out, unknown
    keys dropped; a bad field's error names the key the user typed (`check` raises it, inside the page). The text
    the user gave stays for the links (`url`), the form and the JSON twin's query (`api_query`)."""

    model_config = ConfigDict(frozen=True, extra="ignore", arbitrary_types_allowed=True, populate_by_name=True)

    FORM: ClassVar[tuple[str, ...]] = ()  # request fields its form writes in its own words (/predict's replace_at)
    ALIASES: ClassVar[dict[str, str]] = {}  # older spellings of a request field it carries as text: old -> key

    present: Flag = False
    hints: Unless = True
    lesson: str = ""
    lesson_step: Digits(1) | None = None  # type: ignore[valid-type]
    lang: str = ""

    _path: str = PrivateAttr("/")
    _api_keys: tuple[str, ...] = PrivateAttr(())
    _text: dict[str, str] = PrivateAttr(default_factory=dict)
    _spelled: dict[str, str] = PrivateAttr(default_factory=dict)
    _error: FieldError | None = PrivateAttr(None)
    _encoded: dict[tuple[str, str], str] = PrivateAttr(default_factory=dict)
    # The toy's example of the page's language, which it shows when its URL names no tokens (`lab_like`): the page
    # computes it (and its links to the API name it), its links leave it unnamed (another language shows its own:
    # the language links leave it out even when the URL names it, `lang_url`), and what leaves the page for other
    # screens (the students' QR code, the address a class follows: `pinned`) names it.
    _example: str | None = PrivateAttr(None)

    @classmethod
    def aliases(cls) -> dict[str, tuple[str, ...]]:
        """Each field's spellings, its own key first."""
        out = {}
        for name, f in cls.model_fields.items():
            alias = f.validation_alias
            out[name] = tuple(str(a) for a in alias.choices) if isinstance(alias, AliasChoices) else (name,)
        return out

    @classmethod
    def keys(cls) -> frozenset[str]:
        """Every key this page's URL may spell a parameter of its own with: its names, aliases and form words."""
        return frozenset({*(k for names in cls.aliases().values() for k in names), *cls.ALIASES, *cls.FORM})

    @classmethod
    def of(cls: type[Q], query: Mapping[str, str], path: str, api_keys: tuple[str, ...] = ()) -> Q:
        """The query of a page at `path` whose request fields are `api_keys`, read once; never raises (`check`)."""
        text: dict[str, str] = {}
        spelled: dict[str, str] = {}
        given: dict[str, str] = {}
        fields = cls.aliases()
        spellings = {k: (k, *(old for old, new in cls.ALIASES.items() if new == k)) for k in api_keys} | fields
        for key, names in spellings.items():
            if (name := next((n for n in names if query.get(n, "").strip()), None)) is None:
                continue
            text[key] = query[name].strip()
            if name != key:
                spelled[key] = name
            if key in fields:
                given[name] = text[key]
        try:
            done = cls.model_validate(given)
            error = None
        except ValidationError as exc:
            first = exc.errors()[0]
            error = FieldError(str(first["loc"][0]), coded(first["msg"], first["type"], first.get("ctx")))
            bad = {str(e["loc"][0]) for e in exc.errors()}
            done = cls.model_validate({k: v for k, v in given.items() if k not in bad})  # the rest, for the links
        done._path, done._api_keys, done._spelled, done._error = path, api_keys, spelled, error
        done._text = drop_unused(text)
        return done

    def check(self) -> None:
        """The query's first bad field, as the request's error naming the key typed (raised inside the page)."""
        if self._error is not None:
            raise self._error

    @property
    def path(self) -> str:
        return self._path

    @property
    def params(self) -> dict[str, str]:
        """The text of every key given (its own spelling), as the links write it."""
        return self._text

    @property
    def spelled(self) -> dict[str, str]:
        return self._spelled

    @property
    def example(self) -> str | None:
        """The example the page shows: None when its URL names tokens."""
        return None if "tokens" in self._text else self._example

    def shows(self, example: str | None) -> None:
        """The page shows `example`, its language's, when its URL names no tokens."""
        self._example = example

    @property
    def page_keys(self) -> tuple[str, ...]:
        """Every key of the page's links, in their order: the request's fields, the page's own, the shared ones,
        `lang` last."""
        return link_keys(type(self), self._api_keys)

    def get(self, key: str, default: str = "") -> str:
        return self._text.get(key, default)

    def _encode(self, pairs: list[tuple[str, str]]) -> str:
        """urlencode(pairs), each pair encoded once per query: a page of a long text writes dozens of links, each
        carrying the whole text, and percent-encoding it again for each one cost more than drawing the page."""
        out = []
        encoded = self._encoded  # read once: a private attribute is a lookup through pydantic's __getattr__
        for pair in pairs:
            if (done := encoded.get(pair)) is None:
                done = encoded[pair] = urlencode((pair,))
            out.append(done)
        return "&".join(out)

    def url(self, **changes: object) -> str:
        """The page's link with `changes` (None drops a key), less the fields their switch no longer uses."""
        p = changed(self._text, changes)
        ordered = [(k, p[k]) for k in self.page_keys if k in p]
        return f"{self._path}?{self._encode(ordered)}" if ordered else self._path

    def lang_url(self, lang: str) -> str:
        """The page's link in the language `lang`: the example of the page's own language left out, named in the
        URL or not, so that language shows its own (#42)."""
        if self._example is not None and self._text.get("tokens") == self._example:
            return self.url(lang=lang, tokens=None)
        return self.url(lang=lang)

    def api_params(self) -> dict[str, str]:
        """The request the page computes: its fields, and the example it shows when it names no tokens (the API's
        own default is the Chinese one: named when it is another)."""
        text = self._text
        p = {k: text[k] for k in self._api_keys if k in text}
        if self.example is not None and self.example != API_EXAMPLE and "tokens" not in p:
            p = {"tokens": self.example, **p}
        return p

    def api_query(self, **changes: object) -> str:
        """The JSON twin's query, with some fields changed or added (None drops one): each field once."""
        p = changed(self.api_params(), changes)
        order = (*self._api_keys, *(k for k in changes if k not in self._api_keys))
        return self._encode([(k, p[k]) for k in order if k in p])

    def pinned(self, **changes: object) -> str:
        """`url(**changes)` naming the example the page shows, for a screen in another language (a student's phone,
        a class's followers): the same numbers there."""
        if self.example is not None and "tokens" not in self._text and "tokens" not in changes:
            changes = {"tokens": self.example, **changes}
        return self.url(**changes)

    def request(self, model: type[M], **extra: str) -> M:
        """The request model of the page's fields (and `extra` text), their text read once by its query model."""
        return query_model(model).model_validate(self.api_params() | extra)


Q = TypeVar("Q", bound=PageQuery)
SHARED = tuple(k for k in PageQuery.model_fields if k != "lang")  # what every page's links keep but the language
M = TypeVar("M", bound=BaseModel)


def lab_like(q: Q, models: Mapping[str, object] | None = None, lang: str | None = None) -> Q:
    """A lab-like page's query (lab, embed, block, decode, tiles). The form keeps its fields when the preset
    changes, so the sequence is carried across: `tokens` for built-in presets, `text` for pretrained models. The
    toy with no tokens shows the example of the page's language `lang` (`example`)."""
    params = q._text
    if params.get("preset") in (models or {}):
        if "token_ids" in params:  # ids typed into the form replace the text beside them
            params.pop("text", None)
        if "tokens" in params and "text" not in params and "token_ids" not in params:
            params["text"] = params.pop("tokens")
        for k in ("tokens", "d_model", "n_heads"):
            params.pop(k, None)
    else:
        for k in ("layer", "token_ids"):
            params.pop(k, None)
        if "text" in params and "tokens" not in params:
            params["tokens"] = params.pop("text")
        params.pop("text", None)
        if lang in EXAMPLES and params.get("preset", "toy") == "toy":
            q.shows(EXAMPLES[lang])
    return q
