"""The class summary: what a class leaves behind for its teacher — each poll (its question, options and key, when it
opened and closed, its counts and every answer with the seconds it took), and participation (the screens that
followed when each poll opened, the students who answered each and how many polls each student answered).

While the class runs it is read from the room; when the teacher ends the class it is written once, with the hashes
of the room's teacher tokens (the teacher's browser and its paired devices), and kept under the room's code for
ROOM_IDLE_S: the teacher reads or downloads it (JSON, CSV) after the end with the same token as the remote.
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import replace
from typing import Any, cast

import orjson
from fastapi import Request, Response

from .service import Rooms, not_teacher, presented_token, store_errors, teaches
from .store import Poll, Room, Store

VERSION = 1  # of the summary's JSON


def _seconds(t: float | None, since: float) -> float | None:
    return None if t is None or not t or not since else round(max(0.0, t - since), 3)


def _iso(t: float | None) -> str | None:
    return None if not t else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


async def summary_of(store: Store, room: Room, ended_at: float | None = None) -> dict[str, Any]:
    """The room's summary now (or as it ends, at `ended_at`)."""
    polls: list[dict[str, Any]] = []
    answered: dict[str, dict[str, Any]] = {}  # student -> their nickname and how many polls they answered
    for k, poll in enumerate(await store.polls(room.code), 1):
        if ended_at is not None and poll.status == "open":  # the end closes the poll still open
            poll = replace(poll, status="closed", closed_at=ended_at)
        answers = sorted(await store.answers(room.code, poll.id), key=lambda a: (a.at, a.student))
        counts = await store.counts(room.code, poll.id)
        for a in answers:
            seen = answered.setdefault(a.student, {"student": a.student, "nickname": None, "polls": 0})
            seen["polls"] += 1
            seen["nickname"] = a.nickname or seen["nickname"]
        polls.append(poll_summary(k, poll, counts, answers))
    students = sorted(answered.values(), key=lambda s: (-s["polls"], s["student"]))
    return {
        "version": VERSION,
        "code": room.code,
        "ended": ended_at is not None,
        "ended_at": _iso(ended_at),
        "polls": polls,
        "participation": {
            "polls": len(polls),
            "students": len(students),  # who answered at least one poll
            "answered_all": sum(s["polls"] == len(polls) for s in students) if polls else 0,
            "by_student": students,
        },
    }


def poll_summary(k: int, poll: Poll, counts: dict[str, int], answers: list[Any]) -> dict[str, Any]:
    total = len(answers)
    correct = None if poll.answer is None else sum(a.answer == poll.answer for a in answers)
    return {
        "n": k,
        "id": poll.id,
        "prompt": poll.prompt,
        "languages": poll.languages or None,
        "kind": poll.kind,
        "options": list(poll.options),
        "key": poll.answer,
        "status": poll.status,
        "opened_at": _iso(poll.opened_at),
        "closed_at": _iso(poll.closed_at),
        "open_s": _seconds(poll.closed_at, poll.opened_at),
        "audience": poll.audience,
        "total": total,
        "share": None if not poll.audience else round(min(1.0, total / poll.audience), 4),
        "correct": correct,
        "counts": counts,
        # A cell poll's cells by their tokens ("猫→猫"), each answered cell and the key, for the page (the CSV keeps row,col).
        "cell_labels": {cell: poll.cell_label(cell) for cell in sorted({*counts, *([poll.answer] if poll.answer else [])})}
        if poll.kind == "cell" else None,
        "answers": [
            {"student": a.student, "nickname": a.nickname, "answer": a.answer, "after_s": _seconds(a.at, poll.opened_at),
             "correct": None if poll.answer is None else a.answer == poll.answer}
            for a in answers
        ],
    }  # fmt: skip


# Spreadsheets on Windows (Excel) read a CSV file as the system's code page unless it starts with a UTF-8 byte order
# mark: with it, a class's Chinese prompts, options and nicknames open as written. The header names stay as they are
# (a script reads the file as utf-8-sig, or drops the first three bytes).
BOM = "\ufeff"
CSV_HEADER = ["poll", "prompt", "key", "opened_at", "closed_at", "audience", "student", "nickname", "answer",
              "correct", "after_s"]  # fmt: skip


def summary_rows(summary: dict[str, Any]) -> list[list[Any]]:
    """The summary's CSV: one row per answer (a poll nobody answered: one row with no student), every poll in the order
    asked."""
    rows: list[list[Any]] = [CSV_HEADER]
    for p in summary["polls"]:
        head = [p["n"], cell_safe(p["prompt"]), cell_safe(p["key"] or ""), p["opened_at"] or "", p["closed_at"] or "",
                "" if p["audience"] is None else p["audience"]]  # fmt: skip
        if not p["answers"]:
            rows.append([*head, "", "", "", "", ""])
        for a in p["answers"]:
            correct = "" if a["correct"] is None else str(a["correct"]).lower()
            rows.append([*head, a["student"], cell_safe(a["nickname"] or ""), cell_safe(a["answer"]), correct,
                         "" if a["after_s"] is None else a["after_s"]])  # fmt: skip
    return rows


def csv_file(rows: list[list[Any]], name: str, headers: dict[str, str] | None = None) -> Response:
    """The rows as a CSV file to download, its text starting with a byte order mark (BOM): Excel opens it as UTF-8."""
    out = io.StringIO()
    out.write(BOM)
    csv.writer(out, lineterminator="\n").writerows(rows)
    return Response(out.getvalue(), media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'} | (headers or {}))  # fmt: skip


def cell_safe(text: str) -> str:
    """A spreadsheet runs a cell that starts with = + - @ as a formula: such a text is quoted."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


async def end_class(rooms: Rooms, room: Room) -> None:
    """End the class: its summary is kept for ROOM_IDLE_S (its teachers may still read it), then the room goes."""
    summary = await summary_of(rooms.store, room, ended_at=time.time())
    # What is kept: the summary and who may read it (the teacher tokens' hashes).
    kept = orjson.dumps({"teachers": list(room.teachers), "summary": summary})
    await rooms.store.keep(room.code, kept, rooms.settings.room_idle_s)
    await rooms.store.delete(room.code)


async def teachers_summary(rooms: Rooms, request: Request, raw_code: str) -> dict[str, Any]:
    """The class summary, for the room's teacher only (the remote's token: Authorization: Bearer, or the teacher's
    cookie): the running class's, or the one kept when it ended. A 401 without a token, a 403 with another one
    (a student's), a 404 when there is neither a room nor a kept summary."""
    code = await rooms.checked_code(raw_code, request)
    with store_errors():
        raw = await rooms.store.kept(code) if code else None
        live = await rooms.store.get(code) if raw is not None and code else None
    if raw is not None and code:
        token = presented_token(request, code)
        kept = orjson.loads(raw)
        if teaches(token, kept["teachers"]):
            return cast(dict[str, Any], kept["summary"])
        if live is None:  # the class has ended: its summary is its teachers' alone
            raise not_teacher(token)
    room = await rooms.teacher(request, raw_code)
    return await summary_of(rooms.store, room)
