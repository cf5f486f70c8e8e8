"""Heavy work waits its turn: generation, a long context's layers and the model view take one of the few large-work
slots whatever their bytes, a wait for a slot has a deadline, and a full queue is refused at once — so 40 generations
asked at once run two at a time while /healthz and small requests keep their threads (issue #24, item 1)."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.lab import Lab
from app.settings import Settings
from engine.budget import Busy
from tests.wait import until


def run(coro_fn):  # type: ignore[no-untyped-def]
    """asyncio.run in a thread of its own: the browser tests leave an event loop running in this one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(coro_fn())).result()


def lab(**overrides: object) -> Lab:
    return Lab(Settings(device="cpu", **overrides))  # type: ignore[arg-type]


def test_heavy_work_runs_a_few_at_a_time_and_the_rest_wait_or_are_refused() -> None:
    work = lab(max_large_concurrent=2, max_large_queued=3, queue_wait_s=60)
    running = 0
    most = 0
    gate = threading.Event()
    lock = threading.Lock()

    def generate() -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        gate.wait(10)
        with lock:
            running -= 1
        return 1

    async def main() -> list[object]:
        tasks = [asyncio.create_task(work.offload(1, generate, heavy=True)) for _ in range(8)]
        await until(lambda: running == 2 and work.large_waiting == 3 and sum(t.done() for t in tasks) == 3,
                    what="two running, three queued, three refused")  # fmt: skip
        small = await asyncio.wait_for(work.offload(1, lambda: "fast"), 5)  # small work is not queued behind
        gate.set()
        return [small, *await asyncio.gather(*tasks, return_exceptions=True)]

    small, *results = run(main)
    assert small == "fast"
    assert most == 2  # never more than the slots at once
    assert sum(r == 1 for r in results) == 5  # 2 running + 3 queued
    refused = [r for r in results if isinstance(r, Busy)]
    assert len(refused) == 3 and all(r.retry_after >= 1 for r in refused)


def test_a_wait_for_a_slot_has_a_deadline() -> None:
    work = lab(max_large_concurrent=1, max_large_queued=5, queue_wait_s=0.3)
    gate = threading.Event()

    async def main() -> tuple[object, float]:
        first = asyncio.create_task(work.offload(1, lambda: gate.wait(10), heavy=True))
        await until(lambda: work.large_running == 1, what="the first holds the one slot")
        start = time.monotonic()
        with pytest.raises(Busy):
            await work.offload(1, lambda: None, heavy=True)
        waited = time.monotonic() - start
        gate.set()
        return await first, waited

    done, waited = run(main)
    assert done is True
    assert 0.25 <= waited < 5  # refused after about queue_wait_s, not left waiting for ever


def test_a_waiter_is_woken_when_a_slot_is_given_back_and_when_the_lab_stops() -> None:
    """The wait for a slot sleeps until something changes (a slot given back, the server stopping: even from another
    thread, as a signal handler's), not polling: the next in line starts as the first ends; a stop ends the wait.

    Proved without reading a clock: while the slot is given back and while the lab stops, the event loop's clock is
    held still (`frozen`), so no timer of the loop (a poll's sleep, the wait's own deadline) can fire; only being
    woken ends the wait. A wait that polled, at any interval, would never see the slot free, and the watchdog (a
    generous bound, on the wall clock) would find it still waiting."""
    from app.lab import Cancelled

    work = lab(max_large_concurrent=1, max_large_queued=5, queue_wait_s=60)
    first_gate, third_gate = threading.Event(), threading.Event()
    started: list[bool] = []

    async def frozen(waited: asyncio.Future[object], what: str) -> object:
        """`waited`'s outcome, awaited with the loop's clock stopped; fails if only a timer could have ended it."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        loop.time = lambda: now  # type: ignore[method-assign]  # timers due later never come due
        timed_out: list[bool] = []

        def watchdog() -> None:  # on the wall clock, from another thread: the wait was not woken
            timed_out.append(True)
            del loop.time  # the loop's own clock again, so a timer-driven wait ends and the test can say so

        dog = threading.Timer(60, loop.call_soon_threadsafe, (watchdog,))
        dog.start()
        try:
            outcome = (await asyncio.gather(waited, return_exceptions=True))[0]
        finally:
            dog.cancel()
            if not timed_out:
                del loop.time
        assert not timed_out, f"{what}: not woken (only a timer ended the wait)"
        return outcome

    async def main() -> object:
        first = asyncio.create_task(work.offload(1, lambda: first_gate.wait(10), heavy=True))
        await until(lambda: work.large_running == 1, what="the first holds the one slot")
        second = asyncio.create_task(work.offload(1, lambda: started.append(True), heavy=True))
        await until(lambda: work.large_waiting == 1, what="the second waits for the slot")
        first_gate.set()  # the slot is given back...
        assert await frozen(first, "the first") is True
        await frozen(second, "the second, when the first gave back its slot")  # ...and the next in line takes it
        assert started == [True]
        third = asyncio.create_task(work.offload(1, lambda: third_gate.wait(10), heavy=True))
        await until(lambda: work.large_running == 1, what="the third holds the one slot")
        fourth = asyncio.create_task(work.offload(1, lambda: None, heavy=True))
        await until(lambda: work.large_waiting == 1, what="the fourth waits for the slot")
        threading.Thread(target=work.stop).start()  # as SIGTERM's handler does, off the loop
        outcome = await frozen(fourth, "the fourth, when the lab stopped")
        third_gate.set()
        await third
        return outcome

    fourth = run(main)
    assert isinstance(fourth, Cancelled) and fourth.stopping
