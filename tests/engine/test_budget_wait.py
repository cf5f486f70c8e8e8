"""A wait for the memory budget gives up early when its caller says so (issue #24, item 4): `reserve` and `hold`
waited up to `wait_s` for room whatever happened meanwhile, so a stopping server (or a request whose client left)
kept its thread in the queue. Each test waits for the state it needs (a call counted in `waiting`) instead of
sleeping a guessed time, and gives the waits a `wait_s` far longer than any test should take."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from engine.budget import WAKE_S, Busy, MemoryBudget
from tests.wait import wait_until

LONG = 600.0  # a wait_s no test reaches: a wait that ends did so because it was cancelled


class Stopping(Exception):
    """The caller's own exception (the lab raises its Cancelled)."""


def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    wait_until(condition, timeout, "the state the test needs", interval=0.005)


@contextmanager
def in_thread(fn: Callable[[], object]) -> Iterator[dict[str, object]]:
    """Runs `fn` in a thread; the dict gets its "result" or "error" once it ends (joined on exit)."""
    out: dict[str, object] = {}

    def run() -> None:
        try:
            out["result"] = fn()
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield out
    finally:
        thread.join(10)
        assert not thread.is_alive(), "the wait never ended"


def waits_for_room(budget: MemoryBudget, nbytes: int, cancelled: Callable[[], BaseException | None] | None) -> None:
    with budget.reserve(nbytes, cancelled):
        pass


@pytest.mark.parametrize("way", ["reserve", "hold"])
def test_a_waiting_call_raises_the_callers_exception_once_cancelled(way: str) -> None:
    budget = MemoryBudget(100, wait_s=LONG)
    stop = threading.Event()

    def cancelled() -> BaseException | None:
        return Stopping() if stop.is_set() else None

    with budget.reserve(80):  # the room the waiting call needs is taken
        call = (lambda: waits_for_room(budget, 40, cancelled)) if way == "reserve" else (
            lambda: budget.hold(40, cancelled))  # fmt: skip
        with in_thread(call) as out:
            until(lambda: budget.waiting == 1)
            stop.set()
            until(lambda: "error" in out or "result" in out)
        assert isinstance(out.get("error"), Stopping)
        assert budget.waiting == 0 and budget.in_use == 80  # it took nothing
    assert budget.in_use == 0


def test_the_budgets_own_check_covers_every_wait() -> None:
    """The lab gives one check to the budget (its `stopping`): each `reserve` and `hold` waits on it."""
    stop = threading.Event()
    budget = MemoryBudget(100, wait_s=LONG, cancelled=lambda: Stopping() if stop.is_set() else None)
    with budget.reserve(100):
        with in_thread(lambda: budget.hold(1)) as held, in_thread(lambda: waits_for_room(budget, 50, None)) as kept:
            until(lambda: budget.waiting == 2)
            stop.set()
        assert isinstance(held.get("error"), Stopping) and isinstance(kept.get("error"), Stopping)
    assert budget.in_use == 0 and budget.waiting == 0


def test_a_calls_own_check_replaces_the_budgets() -> None:
    budget = MemoryBudget(100, wait_s=LONG, cancelled=lambda: Stopping())
    with budget.reserve(100):
        mine = threading.Event()
        with in_thread(lambda: waits_for_room(budget, 10, lambda: KeyError("mine") if mine.is_set() else None)) as out:
            until(lambda: budget.waiting == 1)
            mine.set()
        assert isinstance(out.get("error"), KeyError)


def test_room_freed_while_cancelled_is_not_taken() -> None:
    """Room that frees up for a cancelled waiter stays free: a stopping server starts nothing new."""
    budget = MemoryBudget(100, wait_s=LONG)
    stop = threading.Event()
    held = budget.reserve(50)
    held.__enter__()
    with in_thread(lambda: budget.hold(60, lambda: Stopping() if stop.is_set() else None)) as out:
        until(lambda: budget.waiting == 1)
        stop.set()  # cancelled before the room frees: whichever it sees first, it must not take it
        held.__exit__(None, None, None)
        until(lambda: "error" in out or "result" in out)
    assert isinstance(out.get("error"), Stopping) and budget.in_use == 0


def test_without_a_cancel_the_wait_still_ends_in_busy_and_room_is_taken_when_it_frees() -> None:
    budget = MemoryBudget(100, wait_s=0.0)
    with budget.reserve(100), pytest.raises(Busy):
        budget.hold(1)
    checks = [0]

    def never() -> None:
        checks[0] += 1

    budget = MemoryBudget(100, wait_s=LONG)
    held = budget.reserve(100)
    held.__enter__()
    with in_thread(lambda: waits_for_room(budget, 30, never)) as out:
        until(lambda: budget.waiting == 1)
        until(lambda: checks[0] >= 3)  # asked again and again while it waits (every WAKE_S at most)
        held.__exit__(None, None, None)
    assert "error" not in out and budget.in_use == 0


def test_a_call_with_room_never_asks() -> None:
    """No wait, nothing to give up: the check is for waits only (so a budget with room costs nothing more)."""
    budget = MemoryBudget(100, wait_s=LONG, cancelled=lambda: Stopping())
    with budget.reserve(100):
        assert budget.in_use == 100
    budget.hold(10)
    assert budget.in_use == 10 and WAKE_S <= 0.1
