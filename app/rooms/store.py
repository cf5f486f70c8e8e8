"""Where rooms live: the teacher's current view, its version, the polls and their answers.

One small interface, two implementations: `MemoryStore` (this process only: the default, one worker) and
`RedisStore` (app/rooms/redis_store.py: every worker and machine that points at the same Redis shares the rooms).
Both hand each change to this process's `Hub`, which fans it out to the server-sent-event streams connected here;
with Redis, the change reaches the other processes over pub/sub and their own hubs do the same.

Every change to a room is an `Event` with the room's next version as its id, so a stream that reconnects with
`Last-Event-ID: v` is sent exactly the events after v (from a short log), or a fresh snapshot if it missed more.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import unicodedata
from abc import ABC, abstractmethod
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import orjson

# Room codes: no 0/O, 1/I/L look-alikes; read off a projector and typed on a phone, case-insensitively.
ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 6
SEPARATORS = "-‐‑‒–—−"  # the dashes a code may be written with (ASCII, Unicode hyphens, en and em dash, minus)
LOG_LENGTH = 64  # events kept for reconnecting streams; one that missed more gets a snapshot
# ... and at most this many bytes of them: a log of 64 views of 32 KB queries each would hold 2 MB per room (1 GB
# at 500 rooms); a room whose views are that large keeps fewer of them (its streams get snapshots sooner).
LOG_BYTES = 256 * 1024
FOLLOWER_TTL_S = 45.0  # a follower that sent no heartbeat for this long is no longer counted

Kind = Literal["state", "poll", "end", "retry", "followers"]
RETRY_MS = (1000, 4000)  # the `retry:` hint a stream sends, drawn per stream so a class does not reconnect at once


def new_code() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))


def normal_code(raw: str) -> str | None:
    """The code as stored (upper case), or None when it cannot be a room code at all. Read as typed off a wall:
    any case, with spaces or a dash ("yx9 e8z", "YX9-E8Z"), and a phone's full-width letters or dashes (ＹＸ９－Ｅ８Ｚ,
    NFKC folds them to ASCII)."""
    folded = unicodedata.normalize("NFKC", raw)
    code = "".join(c for c in folded if not c.isspace() and c not in SEPARATORS).upper()
    if len(code) == CODE_LENGTH and all(c in ALPHABET for c in code):
        return code
    return None


@dataclass(frozen=True)
class Event:
    """One change to a room, as sent on its event stream. A state event's data gains the version (its id)."""

    id: int
    kind: Kind
    data: dict[str, Any]

    @classmethod
    def loads(cls, raw: bytes | str) -> Event:
        d = orjson.loads(raw)
        return cls(int(d["id"]), d["kind"], d["data"])


# Handed to a process's streams when they can no longer be sure to get every event (the room store went away, or
# came back after a gap): each sends `event: retry` and ends; its client reconnects with Last-Event-ID and gets what
# it missed, or the room as it is then.
RETRY = Event(0, "retry", {"reason": "the room store is unreachable; reconnect"})


def counted(n: int) -> Event:
    """How many follow the room now, for its teacher's screens: sent whenever a follower joins or leaves (or is
    dropped as stale), through the store (Redis: published to every process), never logged and without a version:
    a stream that reconnects is sent the count as it is then."""
    return Event(0, "followers", {"n": n})


@dataclass(frozen=True)
class Poll:
    id: str
    prompt: str
    kind: Literal["choice", "cell"]
    options: tuple[str, ...] = ()
    rows: int | None = None  # a cell poll's matrix shape, when the teacher gave it
    cols: int | None = None
    answer: str | None = None  # the teacher's key, revealed when the poll closes
    status: Literal["open", "closed"] = "open"
    # A lesson's poll in every language: {"zh": {"prompt": …, "options": [… in the same order]}}. Answers are
    # counted under `options` (a student answers by index), so a class reads its own language.
    languages: dict[str, Any] = field(default_factory=dict)
    # For the class summary (app/rooms/summary.py): when it opened and closed (Unix seconds), and how many screens
    # followed the room when it opened (its participation is answers over that).
    opened_at: float = 0.0
    closed_at: float | None = None
    audience: int | None = None
    # The page (path) the poll was asked on: a cell poll is about that page's matrix, so it closes (its answers
    # kept) and leaves the screens when the class moves to another page (app/rooms/api.py, put_state).
    page: str | None = None
    # ...and the place on that page whose matrix it asks about (its stage or step, `view_place`): another stage
    # (the mask's matrices after a question on the weights) closes it as another page does (#42).
    place: str | None = None
    # A cell poll's matrix as the page labels it (its rows' and columns' tokens), so every screen, the class summary
    # and its CSV name a cell by its tokens ("猫→猫") rather than by (0, 0). Empty when the page sent none.
    row_labels: tuple[str, ...] = ()
    col_labels: tuple[str, ...] = ()

    def public(self, counts: dict[str, int] | None = None) -> dict[str, Any]:
        """What students see: the answer and the counts only once the poll is closed (no timing: that is the
        teacher's summary)."""
        out: dict[str, Any] = {"id": self.id, "prompt": self.prompt, "kind": self.kind, "options": list(self.options),
                               "rows": self.rows, "cols": self.cols, "status": self.status}  # fmt: skip
        if self.row_labels or self.col_labels:
            out["row_labels"], out["col_labels"] = list(self.row_labels), list(self.col_labels)
        if self.languages:
            out["languages"] = self.languages
        if self.status == "closed":
            out["answer"] = self.answer
            if counts is not None:
                out["counts"] = counts
                out["total"] = sum(counts.values())
        return out

    @classmethod
    def loads(cls, raw: bytes | str) -> Poll:
        d = orjson.loads(raw)
        lists = {k: tuple(d[k]) for k in ("options", "row_labels", "col_labels") if k in d}
        return cls(**(d | lists))

    def cell_label(self, cell: str) -> str:
        """A cell poll's cell ("row,col") by the tokens of its row and its column, "猫→猫" (the query's token, then the
        key's); a token the matrix labels twice says its place, "the (4)→the (0)". "(row, col)" without labels."""
        r, _, c = cell.partition(",")
        if not (r.isdigit() and c.isdigit()):
            return cell
        i, j = int(r), int(c)
        if not (i < len(self.row_labels) and j < len(self.col_labels)):
            return f"({i}, {j})"
        q, k = self.row_labels[i], self.col_labels[j]
        q += f" ({i})" if self.row_labels.count(q) > 1 else ""
        k += f" ({j})" if self.col_labels.count(k) > 1 else ""
        return f"{q}→{k}"


@dataclass(frozen=True)
class Room:
    code: str
    page: str
    query: str
    version: int
    token_hash: str
    poll: str | None  # the open poll's id
    devices: tuple[str, ...] = ()  # the hashes of the teacher tokens of devices paired since (the teacher's phone)

    @property
    def teachers(self) -> tuple[str, ...]:
        """The hashes of every teacher token: the browser's that started the class, and the paired devices'."""
        return (self.token_hash, *self.devices)


@dataclass(frozen=True)
class Answer:
    student: str
    answer: str
    nickname: str | None
    at: float = 0.0  # when it was given (Unix seconds; a later answer replaces it and its time)


@dataclass(eq=False)  # each listener is itself (hashable by identity)
class Listener:
    """One stream's queue of its room's events. The teacher's (`counts`) also gets `followers` (counted), coalesced:
    while one waits in the queue, a newer count replaces it (`count`, what the stream sends when it gets there), so
    a class joining at once neither fills the queue nor sends the teacher every number on the way."""

    counts: bool = False
    queue: asyncio.Queue[Event | None] = field(default_factory=lambda: asyncio.Queue(maxsize=64))
    dropped: bool = False
    count: Event | None = None

    def latest(self) -> Event | None:
        """The newest count delivered (once: taking it lets the next count queue again)."""
        latest, self.count = self.count, None
        return latest


class Hub:
    """This process's event streams, by room. A stream too slow to take 64 events is ended (its client reconnects
    with Last-Event-ID and catches up), so one stuck phone never holds memory for the class."""

    def __init__(self) -> None:
        self.rooms: dict[str, set[Listener]] = {}

    @contextmanager
    def listen(self, code: str, counts: bool = False) -> Iterator[Listener]:
        listener = Listener(counts)
        self.rooms.setdefault(code, set()).add(listener)
        try:
            yield listener
        finally:
            listeners = self.rooms.get(code)
            if listeners is not None:
                listeners.discard(listener)
                if not listeners:
                    del self.rooms[code]

    def deliver(self, code: str, event: Event | None) -> None:
        for listener in list(self.rooms.get(code, ())):
            if listener.dropped:
                continue
            if event is not None and event.kind == "followers":  # the teacher's alone, coalesced
                if not listener.counts:
                    continue
                waiting, listener.count = listener.count is not None, event
                if waiting:
                    continue
            try:
                listener.queue.put_nowait(event)
            except asyncio.QueueFull:
                listener.dropped = True
                while not listener.queue.empty():
                    listener.queue.get_nowait()
                listener.queue.put_nowait(None)

    def retry_all(self) -> None:
        """End every stream of this process with `event: retry` (see RETRY)."""
        for code in list(self.rooms):
            self.deliver(code, RETRY)


class Store(ABC):
    """Rooms, their state and polls. Every method is a coroutine; `None` means "no such room" (or poll)."""

    def __init__(self, idle_s: float) -> None:
        self.idle_s = idle_s
        self.hub = Hub()

    async def start(self) -> None:
        """Begin receiving other processes' events (Redis); nothing to do in memory."""
        return None

    async def close(self) -> None:
        """Release connections."""
        return None

    async def listening(self) -> None:
        """Return once this process receives every room's events (Redis: its subscription is live); raise when it
        cannot (a stream opened now could miss events)."""
        return None

    @abstractmethod
    async def add_pairing(self, code: str, pairing_hash: str, ttl_s: float) -> None:
        """Remember a one-time pairing (its secret's hash) for `ttl_s` seconds."""

    @abstractmethod
    async def take_pairing(self, code: str, pairing_hash: str) -> bool:
        """Use a pairing up: True once for a live one (the check and the removal are one step), False after."""

    @abstractmethod
    async def set_devices(self, code: str, hashes: tuple[str, ...]) -> None:
        """The teacher tokens of the paired devices (their hashes), replacing those before; () unpairs them all."""

    @abstractmethod
    async def create(self, code: str, token_hash: str, page: str, query: str, address: str = "") -> bool:
        """A new room at version 1, started from client `address`; False when the code is taken."""

    @abstractmethod
    async def rooms_of(self, address: str) -> int:
        """Rooms open now that were started from client `address`."""

    @abstractmethod
    async def get(self, code: str) -> Room | None: ...

    @abstractmethod
    async def count(self) -> int:
        """Rooms not yet expired."""

    @abstractmethod
    async def delete(self, code: str) -> bool:
        """End the room: its streams get an `end` event and close."""

    @abstractmethod
    async def publish(self, code: str, kind: Kind, data: dict[str, Any], state: tuple[str, str] | None = None) -> int:
        """Append an event (with the room's next version), update the state when `state` = (page, query) is given,
        and deliver it everywhere. Returns the version, 0 when the room does not exist."""

    @abstractmethod
    async def events_after(self, code: str, version: int) -> list[Event] | None:
        """The events after `version`, oldest first; None when the log no longer reaches back that far."""

    @abstractmethod
    async def follow(self, code: str, follower: str, limit: int | None = None) -> bool:
        """Count a stream as following (again: a heartbeat); keeps the room alive. A new follower is refused
        (False) when the room already has `limit` of them: the check and the add are one step, so a burst of
        connections cannot overshoot it. True for a known follower, and for a room that is gone. Every change of
        the count (here and below, stale followers dropped too) is delivered everywhere as `counted(n)`."""

    @abstractmethod
    async def unfollow(self, code: str, follower: str) -> None: ...

    @abstractmethod
    async def followers(self, code: str) -> int:
        """How many follow the room (those without a heartbeat for FOLLOWER_TTL_S dropped)."""

    async def open_poll(self, code: str, poll: Poll) -> int:
        """Store the poll as the room's open one (closing any other) and announce it; returns the version."""
        room = await self.get(code)
        if room is None:
            return 0
        if room.poll and room.poll != poll.id:
            await self.close_poll(code, room.poll)
        await self._save_poll(code, poll)
        return await self.publish(code, "poll", poll.public())

    async def close_poll(self, code: str, poll_id: str) -> Poll | None:
        """Close the poll and announce it with its counts (a poll already closed is left as it is)."""
        poll = await self.poll(code, poll_id)
        if poll is None or poll.status == "closed":
            return poll
        closed = replace(poll, status="closed", closed_at=time.time())
        await self._save_poll(code, closed)
        await self.publish(code, "poll", closed.public(await self.counts(code, poll_id)))
        return closed

    @abstractmethod
    async def _save_poll(self, code: str, poll: Poll) -> None:
        """Store the poll: an open one becomes the room's open poll (with no answers yet); a closed one stops being
        it, if it still is (a newer poll may have replaced it)."""

    @abstractmethod
    async def poll(self, code: str, poll_id: str) -> Poll | None: ...

    @abstractmethod
    async def answer(self, code: str, poll_id: str, answer: Answer, address: str = "", cap: int | None = None) -> bool:
        """Record a student's answer; a later one from the same student replaces the earlier. A new student from
        client `address` is refused (False) once `cap` students from that address answered this poll; True
        otherwise (a room or poll that is gone records nothing)."""

    @abstractmethod
    async def answers(self, code: str, poll_id: str) -> list[Answer]: ...

    @abstractmethod
    async def polls(self, code: str) -> list[Poll]:
        """Every poll the room has asked, in the order they opened."""

    @abstractmethod
    async def keep(self, code: str, record: bytes, ttl_s: float) -> None:
        """Keep `record` (the class summary of an ended room, with its teachers' token hashes) for `ttl_s` seconds
        under the room's code."""

    @abstractmethod
    async def kept(self, code: str) -> bytes | None:
        """The record kept for an ended room, while it lasts."""

    async def counts(self, code: str, poll_id: str) -> dict[str, int]:
        counted = Counter(a.answer for a in await self.answers(code, poll_id))
        return dict(sorted(counted.items(), key=lambda kv: (-kv[1], kv[0])))


@dataclass
class _MemoryRoom:
    room: Room
    touched: float
    log: deque[Event] = field(default_factory=deque)
    log_bytes: int = 0  # the size of the log's events, as sent
    followers: dict[str, float] = field(default_factory=dict)
    polls: dict[str, Poll] = field(default_factory=dict)
    answers: dict[str, dict[str, Answer]] = field(default_factory=dict)
    voters: dict[str, dict[str, int]] = field(default_factory=dict)  # poll -> address -> students who answered
    address: str = ""  # the client address that started the room
    pairings: dict[str, float] = field(default_factory=dict)  # a pairing secret's hash -> when it expires


class MemoryStore(Store):
    """Rooms in this process: right for one worker, and what the tests compare the Redis store against."""

    def __init__(self, idle_s: float, clock: Any = time.monotonic) -> None:
        super().__init__(idle_s)
        self.clock = clock
        self.rooms: dict[str, _MemoryRoom] = {}
        self.records: dict[str, tuple[float, bytes]] = {}  # an ended room's code -> (when it goes, its summary)

    def _live(self, code: str) -> _MemoryRoom | None:
        entry = self.rooms.get(code)
        if entry is not None and self.clock() - entry.touched > self.idle_s:
            del self.rooms[code]
            self.hub.deliver(code, None)
            return None
        return entry

    async def create(self, code: str, token_hash: str, page: str, query: str, address: str = "") -> bool:
        for old in list(self.rooms):
            self._live(old)  # expire idle rooms before counting or reusing a code
        if code in self.rooms:
            return False
        self.rooms[code] = _MemoryRoom(Room(code, page, query, 1, token_hash, None), self.clock(), address=address)
        return True

    async def rooms_of(self, address: str) -> int:
        return sum((e := self._live(code)) is not None and e.address == address for code in list(self.rooms))

    async def add_pairing(self, code: str, pairing_hash: str, ttl_s: float) -> None:
        entry = self._live(code)
        if entry is not None:
            now = self.clock()
            entry.pairings = {h: t for h, t in entry.pairings.items() if t > now} | {pairing_hash: now + ttl_s}

    async def take_pairing(self, code: str, pairing_hash: str) -> bool:
        entry = self._live(code)
        expires = entry.pairings.pop(pairing_hash, None) if entry is not None else None
        return expires is not None and expires > self.clock()

    async def set_devices(self, code: str, hashes: tuple[str, ...]) -> None:
        entry = self._live(code)
        if entry is not None:
            entry.room = replace(entry.room, devices=hashes)

    async def get(self, code: str) -> Room | None:
        entry = self._live(code)
        return entry.room if entry else None

    async def count(self) -> int:
        return sum(self._live(code) is not None for code in list(self.rooms))

    async def delete(self, code: str) -> bool:
        entry = self._live(code)
        if entry is None:
            return False
        del self.rooms[code]
        self.hub.deliver(code, Event(entry.room.version + 1, "end", {}))
        self.hub.deliver(code, None)
        return True

    async def publish(self, code: str, kind: Kind, data: dict[str, Any], state: tuple[str, str] | None = None) -> int:
        entry = self._live(code)
        if entry is None:
            return 0
        page, query = state or (entry.room.page, entry.room.query)
        entry.room = replace(entry.room, page=page, query=query, version=entry.room.version + 1)
        event = Event(entry.room.version, kind, data)
        entry.log.append(event)
        entry.log_bytes += len(orjson.dumps(event))
        while len(entry.log) > LOG_LENGTH or (entry.log_bytes > LOG_BYTES and len(entry.log) > 1):
            entry.log_bytes -= len(orjson.dumps(entry.log.popleft()))
        entry.touched = self.clock()
        self.hub.deliver(code, event)
        return event.id

    async def events_after(self, code: str, version: int) -> list[Event] | None:
        entry = self._live(code)
        return logged_after(list(entry.log), version, entry.room.version) if entry else None

    async def follow(self, code: str, follower: str, limit: int | None = None) -> bool:
        entry = self._live(code)
        if entry is None:
            return True
        new = follower not in entry.followers
        if new and limit is not None and await self.followers(code) >= limit:
            return False
        entry.followers[follower] = self.clock()
        entry.touched = self.clock()
        if new:
            self.hub.deliver(code, counted(len(entry.followers)))
        return True

    async def unfollow(self, code: str, follower: str) -> None:
        entry = self.rooms.get(code)
        if entry is not None and entry.followers.pop(follower, None) is not None:
            self.hub.deliver(code, counted(len(entry.followers)))

    async def followers(self, code: str) -> int:
        entry = self._live(code)
        if entry is None:
            return 0
        now, before = self.clock(), len(entry.followers)
        entry.followers = {k: seen for k, seen in entry.followers.items() if now - seen <= FOLLOWER_TTL_S}
        if len(entry.followers) != before:
            self.hub.deliver(code, counted(len(entry.followers)))
        return len(entry.followers)

    async def _save_poll(self, code: str, poll: Poll) -> None:
        entry = self._live(code)
        if entry is None:
            return
        entry.polls[poll.id] = poll
        if poll.status == "open":
            entry.answers[poll.id] = {}
            entry.room = replace(entry.room, poll=poll.id)
        elif entry.room.poll == poll.id:
            entry.room = replace(entry.room, poll=None)

    async def poll(self, code: str, poll_id: str) -> Poll | None:
        entry = self._live(code)
        return entry.polls.get(poll_id) if entry else None

    async def answer(self, code: str, poll_id: str, answer: Answer, address: str = "", cap: int | None = None) -> bool:
        entry = self._live(code)
        if entry is None or poll_id not in entry.answers:
            return True  # gone: nothing to record, nothing the cap refused
        answers = entry.answers[poll_id]
        if answer.student not in answers:
            voters = entry.voters.setdefault(poll_id, {})
            if cap is not None and voters.get(address, 0) >= cap:
                return False
            voters[address] = voters.get(address, 0) + 1
        answers[answer.student] = answer
        entry.touched = self.clock()
        return True

    async def answers(self, code: str, poll_id: str) -> list[Answer]:
        entry = self._live(code)
        return list(entry.answers.get(poll_id, {}).values()) if entry else []

    async def polls(self, code: str) -> list[Poll]:
        entry = self._live(code)
        return sorted(entry.polls.values(), key=lambda p: p.opened_at) if entry else []

    async def keep(self, code: str, record: bytes, ttl_s: float) -> None:
        now = self.clock()
        self.records = {c: r for c, r in self.records.items() if r[0] > now} | {code: (now + ttl_s, record)}

    async def kept(self, code: str) -> bytes | None:
        found = self.records.get(code)
        return found[1] if found is not None and found[0] > self.clock() else None


def logged_after(log: list[Event], version: int, current: int) -> list[Event] | None:
    """The logged events after `version` (oldest first), or None when some of them are no longer logged, or when
    `version` is one the room never reached (a client from before a restart, or a made-up id): a snapshot then,
    never a silent wait for versions that already exist under other events."""
    if version > current:
        return None
    if version == current:
        return []
    missed = [e for e in log if e.id > version]
    if not missed or missed[0].id != version + 1:
        return None
    return missed
