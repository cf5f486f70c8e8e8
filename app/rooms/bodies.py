"""The rooms API's bodies and answers: strict JSON models whose JSON Schema states every rule the routes check
(schemathesis holds the two to each other)."""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from ..schemas import said
from ..settings import Settings
from ..web import lessons
from ..web.share import FOLLOWABLE
from .service import SHOWN_WITH, query_limit

STRICT = ConfigDict(extra="forbid", strict=True)


def _whole(value: Any) -> Any:
    """41.0 as 41: JSON Schema's integer is any number without a fraction (schemathesis sends 41.0), and strict
    pydantic would refuse it. Anything else (41.5, "41", true) is left for the field's own check."""
    return int(value) if type(value) is float and value.is_integer() else value


class Body(BaseModel):
    """A room API body: strict JSON (no strings for numbers, no unknown fields), whole floats read as integers."""

    model_config = STRICT

    @model_validator(mode="before")
    @classmethod
    def _whole_numbers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return {k: [_whole(x) for x in v] if isinstance(v, list) else _whole(v) for k, v in data.items()}


# What the schema states of each body is what the code refuses (schemathesis' positive_data_acceptance: a request
# the schema calls valid must not be refused for a rule it does not state). The rules below are checked by the
# models' validators or the route's own `clean_*` with their own messages; the patterns are those checks written
# as JSON Schema. What no schema can say (a view the lab refuses, an answer that is not one of the poll's options, a
# cell outside the poll's matrix, a step past the lesson's last) is a 422 that names it, as a d_model that n_heads
# does not divide is for the lab's own requests.


def _page_pattern() -> str:
    """FOLLOWABLE, with "" (meaning "/") and each lesson's own slug (`clean_page` refuses any other)."""
    pages = FOLLOWABLE.pattern.removeprefix("^").removesuffix("$")
    slugs = sorted(lessons.BY_SLUG)
    if SLUG in pages and all(re.fullmatch(SLUG, slug) for slug in slugs):
        pages = pages.replace(SLUG, "(?:" + "|".join(slugs) + ")")
    return "^(?:" + pages + ")?$"


def _unprintable() -> str:
    """A regex class of the characters `str.isprintable` refuses, as far as a JSON Schema pattern can say it
    plainly: those assigned in the Basic Multilingual Plane (controls, format characters, separators but the
    space, private use). Unassigned and astral ones are refused too; the field's description says so."""
    ranges: list[tuple[int, int]] = []
    for cp in range(0x10000):
        c = chr(cp)
        if c.isprintable() or unicodedata.category(c) in ("Cn", "Cs"):
            continue
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1] = (ranges[-1][0], cp)
        else:
            ranges.append((cp, cp))
    return "".join(f"\\u{a:04x}" if a == b else f"\\u{a:04x}-\\u{b:04x}" for a, b in ranges)


SLUG = "[a-z0-9-]{1,64}"  # a lesson's slug in FOLLOWABLE
PAGE_PATTERN = _page_pattern()
NICKNAME_PATTERN = f"^[^{_unprintable()}]*$"
QUERY_PATTERN = r"^[^\x00-\x1f\x7f #]*$"  # service.clean_query: no control characters, spaces or '#'
NUMBER_4095 = r"0*(?:[0-9]{1,3}|[0-3][0-9]{3}|40[0-8][0-9]|409[0-5])"  # 0..4095, as int() reads it
CELL_PATTERN = rf"^\s*{NUMBER_4095}\s*,\s*{NUMBER_4095}\s*$"  # cell_key's "row,col" (rows, cols: at most 4096)
MAX_CELL = 4095
MAX_LABEL = 64  # a row's or a column's label: a token as the matrix shows it
ROW_LABELS = ("a cell poll's matrix's row labels, as the page shows them (for attention weights, the queries' tokens): "
              "one per row, so every screen names a cell by its tokens")  # fmt: skip
COL_LABELS = "…and its column labels (the keys' tokens), one per column"


def view_limits(schema: dict[str, Any], settings: Settings) -> None:
    """State this server's query limit (from MAX_QUERY_KB, `query_limit`) in its OpenAPI schema."""
    max_query_bytes = query_limit(settings)
    query = schema.get("components", {}).get("schemas", {}).get("ViewIn", {}).get("properties", {}).get("query")
    if query is not None:
        query["maxLength"] = min(query.get("maxLength", max_query_bytes), max_query_bytes)
        query["description"] += (
            f"; at most {max_query_bytes:,} bytes (UTF-8) on this server (MAX_QUERY_KB, less "
            f"{len(SHOWN_WITH)} for the language a view is shown in)"
        )


class ViewIn(Body):
    query: str = Field("", max_length=65536, description="the lab's URL query, e.g. stage=softmax&mask=causal; a "
                       "leading '?' is dropped; the lab must accept the view (else 422)",
                       json_schema_extra={"pattern": QUERY_PATTERN})  # fmt: skip
    page: str = Field("/", max_length=80, description="the lab page: /, /block, /decode, /lessons/<slug>, …",
                      json_schema_extra={"pattern": PAGE_PATTERN})  # fmt: skip


class RoomOut(BaseModel):
    code: str
    teacher_token: str = Field(description="shown once; send it as Authorization: Bearer <token> to change the room")
    join_url: str
    page: str
    query: str
    version: int


class RoomInfo(BaseModel):
    code: str
    page: str
    query: str
    version: int
    followers: int
    poll: str | None = Field(description="the open poll's id")


class VersionOut(BaseModel):
    version: int


def _poll_kinds(schema: dict[str, Any]) -> None:
    """What `PollIn._consistent` checks of each kind, as JSON Schema: a choice poll's two or more different options,
    a cell poll's none and its key as "row,col". (A choice poll's key must also be one of its options, and a cell's
    inside rows × cols: rules no JSON Schema states; a 422 names them.)"""
    schema["oneOf"] = [
        {"properties": {"kind": {"const": "choice"}, "options": {"minItems": 2, "uniqueItems": True}}},
        {"properties": {"kind": {"const": "cell"}, "options": {"maxItems": 0},
                        "answer": {"anyOf": [{"type": "string", "pattern": CELL_PATTERN}, {"type": "null"}]}}},
    ]  # fmt: skip


Label = Annotated[str, Field(max_length=MAX_LABEL)]


def refused(field: str, code: str, **params: int) -> PydanticCustomError:
    """A poll's refusal as the API words it ("options: a choice poll needs at least two", a ValueError as before),
    keeping its catalogue code, its parameters and its field (locales/errors.json): the remote's form says it under
    that field in the page's language (app/rooms/page.py `ask_own`), never by reading the English back."""
    english = f"{field}: {said(code, **params)}".replace("{", "{{").replace("}", "}}")
    return PydanticCustomError("value_error", english, {"code": code, "field": field, **params})


class PollIn(Body):
    model_config = ConfigDict(json_schema_extra=_poll_kinds)
    prompt: str = Field(min_length=1, max_length=300)
    kind: Literal["choice", "cell"]
    options: list[Annotated[str, Field(min_length=1, max_length=80)]] = Field([], max_length=12)
    rows: int | None = Field(None, ge=1, le=4096, description="a cell poll's matrix rows (answers are checked)")
    cols: int | None = Field(None, ge=1, le=4096)
    row_labels: list[Label] | None = Field(None, max_length=4096, description=ROW_LABELS)
    col_labels: list[Label] | None = Field(None, max_length=4096, description=COL_LABELS)
    answer: str | None = Field(None, max_length=80, description="the key, revealed when the poll closes: one of the "
                               "options (choice), or 'row,col' inside rows × cols (cell)")  # fmt: skip

    @model_validator(mode="after")
    def _consistent(self) -> PollIn:
        if self.kind == "choice":
            if len(self.options) < 2:
                raise refused("options", "poll_two_options")
            if len(set(self.options)) != len(self.options):
                raise refused("options", "poll_options_differ")
            if self.answer is not None and self.answer not in self.options:
                raise refused("answer", "poll_answer_option")
        else:
            if self.options:
                raise refused("options", "poll_cell_options")
            if self.answer is not None:
                self.answer = cell_key(self.answer, self.rows, self.cols, "answer")
            # Its labels name its matrix's rows and columns, one each when its shape is given (as a cell outside the
            # matrix, no JSON Schema says it). A choice poll's are not kept.
            for name, labels, n in (
                ("row_labels", self.row_labels, self.rows),
                ("col_labels", self.col_labels, self.cols),
            ):
                if labels is not None and n is not None and len(labels) != n:
                    raise refused(name, f"poll_{name}", n=n, given=len(labels))
        return self


def _whole_number(p: Any) -> bool:
    """An integer (not a bool), or a string of ASCII digits (spaces around them allowed)."""
    if isinstance(p, str):
        return p.strip().isascii() and p.strip().isdigit()
    return isinstance(p, int) and not isinstance(p, bool)


def cell_key(raw: Any, rows: int | None, cols: int | None, field: str) -> str:
    """[row, col] (or "row,col") as the key "row,col", counting from 0 like the matrices' headers."""
    parts = raw.split(",") if isinstance(raw, str) else raw
    if not (isinstance(parts, list) and len(parts) == 2 and all(map(_whole_number, parts))):
        raise refused(field, "cell_form")
    r, c = (int(p) for p in parts)
    if r < 0 or c < 0 or (rows is not None and r >= rows) or (cols is not None and c >= cols) or max(r, c) > 4095:
        raise refused(field, "cell_outside", row=r, col=c)
    return f"{r},{c}"


def _answer_forms(schema: dict[str, Any]) -> None:
    """The answer's three forms with the bounds `AnswerIn._bounded` checks."""
    schema["anyOf"] = [
        {"type": "string", "minLength": 1, "maxLength": 80},
        {"type": "integer", "minimum": 0},
        {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": MAX_CELL}, "minItems": 2,
         "maxItems": 2},
    ]  # fmt: skip


class AnswerIn(Body):
    student: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="a random id the student's browser keeps")
    answer: str | int | list[int] = Field(description="an option or its index from 0 (choice), or [row, col] (cell)",
                                          json_schema_extra=_answer_forms)  # fmt: skip
    nickname: str | None = Field(None, max_length=32, description="printable characters only (no controls, format "
                                 "characters, separators but the space, private-use or unassigned characters)",
                                 json_schema_extra={"pattern": NICKNAME_PATTERN})  # fmt: skip

    @model_validator(mode="after")
    def _bounded(self) -> AnswerIn:
        # Each of these answers would be refused by any poll (no option is empty, no index or cell negative): they
        # are refused here, before the poll is looked up, as the schema says (`_answer_forms`).
        if isinstance(self.answer, str) and not 1 <= len(self.answer) <= 80:
            raise ValueError("answer: 1 to 80 characters")
        if isinstance(self.answer, int) and self.answer < 0:
            raise ValueError("answer: an option's index counts from 0")
        if isinstance(self.answer, list) and (len(self.answer) != 2 or not all(0 <= x <= MAX_CELL
                                                                                for x in self.answer)):  # fmt: skip
            raise ValueError("answer: a cell is [row, col], two whole numbers from 0")
        if self.nickname is not None and any(not c.isprintable() for c in self.nickname):
            raise ValueError("nickname: printable characters only")
        return self


class AnswerOut(BaseModel):
    answer: str = Field(description="the answer as counted: the option's text, or 'row,col'")


LESSON_SLUGS: list[Any] = sorted(lessons.BY_SLUG)  # prepared_poll refuses any other (422)


class LessonPollIn(Body):
    lesson: str = Field(max_length=64, description="a lesson's slug, as in /lessons/<slug>",
                        json_schema_extra={"enum": LESSON_SLUGS})  # fmt: skip
    step: int = Field(ge=1, le=64, description="the step, counting from 1 as the lesson page does")
    lang: Literal["en", "zh"] = Field("en", description="the language of the question and its options")
    rows: int | None = Field(None, ge=1, le=4096, description="a cell poll's matrix rows, as the page shows it")
    cols: int | None = Field(None, ge=1, le=4096)
    row_labels: list[Label] | None = Field(None, max_length=4096, description=ROW_LABELS)
    col_labels: list[Label] | None = Field(None, max_length=4096, description=COL_LABELS)


class PollCreated(BaseModel):
    id: str
    version: int


class PollOut(BaseModel):
    id: str
    prompt: str
    kind: str
    options: list[str]
    rows: int | None
    cols: int | None
    row_labels: list[str] | None = Field(None, description="a cell poll's row labels (the queries' tokens)")
    col_labels: list[str] | None = Field(None, description="…and its column labels (the keys' tokens)")
    status: str
    answer: str | None = Field(None, description="once the poll is closed")
    counts: dict[str, int] = Field(
        description="answers by value (a cell as 'row,col'); while the poll is open, only the teacher gets them"
    )
    total: int | None = Field(description="answers so far; while the poll is open, null to everyone but the teacher")
    languages: dict[str, Any] | None = Field(
        None, description="a lesson's poll in every language: {lang: {prompt, options}}, options in the same order"
    )


class SummaryOut(BaseModel):
    """The class summary (app/rooms/summary.py): each poll and participation."""

    version: int
    code: str
    ended: bool = Field(description="the class has ended (the summary is the one kept at its end)")
    ended_at: str | None = Field(description="when it ended, UTC (ISO 8601)")
    polls: list[dict[str, Any]] = Field(description="every poll in the order asked: n, id, prompt, languages, kind, "
                                        "options, key, status, opened_at, closed_at, open_s, audience (screens "
                                        "following when it opened), total, share (total / audience), correct, "
                                        "counts, answers [{student, nickname, answer, after_s, correct}]")  # fmt: skip
    participation: dict[str, Any] = Field(description="polls, students (who answered at least one), answered_all, "
                                          "by_student [{student, nickname, polls}]")  # fmt: skip
