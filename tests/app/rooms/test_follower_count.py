"""The teacher's count of followers while the class is busy (found by the class walk: the projector's bar said 0
while a phone followed). A follower is counted while its stream sends heartbeats (FOLLOWER_TTL_S); the stream sent
one only after keepalive seconds without a change, so a teacher stepping the class more often than that stopped
every follower's heartbeat, and 45 s on the bar counted nobody until the class paused. And how the count reaches the
teacher: over its stream, as followers join and leave (on any worker), never polled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sse_starlette import ServerSentEvent

from app.rooms.redis_store import RedisStore
from app.rooms.store import FOLLOWER_TTL_S, MemoryStore, Store, new_code
from app.rooms.stream import Follow
from tests.rooms_client import run
from tests.wait import BOUND_S


def test_a_follower_stays_counted_while_the_teacher_steps_faster_than_the_keepalive() -> None:
    now = [0.0]
    store = MemoryStore(idle_s=3600, clock=lambda: now[0])
    keepalive = 10.0

    async def main() -> None:
        assert await store.create("FLWCNT", "h", "/", "")
        assert await store.follow("FLWCNT", "f1")  # as the events route counts it, before its stream starts
        follow = Follow(store, "FLWCNT", 1, "f1", None, keepalive, clock=lambda: now[0])
        events = follow.stream()
        first = await anext(events)  # the stream's opening comment
        assert first.comment and (await anext(events)).event == "state"  # the room as it is
        for k in range(12):  # a step every 9 s (under the keepalive) for 108 s, well past FOLLOWER_TTL_S
            now[0] += 9
            await store.publish("FLWCNT", "state", {"page": "/", "query": f"stage={k % 5 + 1}"}, ("/", f"stage={k}"))
            sent = await anext(events)
            assert sent.event == "state"
            assert await store.followers("FLWCNT") == 1, (now[0], k)  # the follower counted at every step
        assert now[0] > 2 * FOLLOWER_TTL_S
        await events.aclose()
        assert await store.followers("FLWCNT") == 0  # its stream closed: no longer counted

    run(main())


# ---- the count pushed to the teacher (its bar and remote polled /followers every 5 s) --------------------------------


async def counted(events: AsyncIterator[ServerSentEvent]) -> str:
    """The next count a stream sends (`followers`), past any other event."""
    while (sent := await asyncio.wait_for(anext(events), BOUND_S)).event != "followers":
        pass
    return str(sent.data)


@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_each_join_and_leave_reaches_the_teachers_stream_from_any_worker(kind: str,
                                                                         request: pytest.FixtureRequest) -> None:  # fmt: skip
    """A follower that joins or leaves is on the teacher's stream at once, with no poll; with Redis, followers counted
    by another process (a second worker's store) reach a teacher served by this one: the change goes through Redis."""

    async def main() -> None:
        url = request.getfixturevalue("redis_url") if kind == "redis" else ""
        here: Store = RedisStore(url, 60) if url else MemoryStore(60)
        there = RedisStore(url, 60) if url else here  # the worker that serves the students
        code = new_code()
        try:
            await here.start()
            await there.start()
            assert await there.create(code, "h", "/", "")
            teacher = Follow(here, code, 1, None, None, BOUND_S).stream()
            student = Follow(here, code, 1, "s0", None, BOUND_S).stream()
            assert await counted(teacher) == "0"  # on connect: the count as it is
            assert [(await anext(student)).event for _ in range(2)] == [None, "state"]  # its opening comment, the view
            for n in (1, 2, 3):
                assert await there.follow(code, f"s{n}", 10)
                assert await counted(teacher) == str(n)
            await there.unfollow(code, "s2")
            assert await counted(teacher) == "2"
            assert await there.follow(code, "s1")  # a heartbeat counts no one twice
            await there.unfollow(code, "s1")
            await there.unfollow(code, "s1")  # nor does a leave
            assert await counted(teacher) == "1"
            assert await there.follow(code, "s4")
            assert await counted(teacher) == "2"
            assert await here.followers(code) == 2 and await there.followers(code) == 2
            await there.publish(code, "state", {"page": "/", "query": "stage=2"}, ("/", "stage=2"))
            assert (await anext(student)).event == "state"  # a student's stream is sent no count: the view is next
            await student.aclose()
            await teacher.aclose()
        finally:
            await there.delete(code)
            await here.close()
            if there is not here:
                await there.close()

    run(main())


def test_counts_that_come_at_once_reach_the_teacher_as_the_newest_and_the_stale_are_dropped() -> None:
    """A class joining at once: the teacher's stream sends the newest count, not every one on the way (its queue of
    64 would otherwise end it); a follower a gone process left behind is dropped on the teacher's quiet stream."""
    now = [0.0]
    store = MemoryStore(idle_s=3600, clock=lambda: now[0])

    async def main() -> None:
        assert await store.create("FLWNOW", "h", "/", "")
        teacher = Follow(store, "FLWNOW", 1, None, None, 0.05, clock=lambda: now[0]).stream()
        assert await counted(teacher) == "0"
        for i in range(200):  # more than a queue holds, before the stream reads one
            assert await store.follow("FLWNOW", f"f{i}")
        assert await counted(teacher) == "200"
        now[0] += FOLLOWER_TTL_S + 1  # their streams' process went away: no heartbeat, no leave
        assert await store.follow("FLWNOW", "f0")  # one is still there
        assert await counted(teacher) == "1"  # the teacher's stream, quiet, counted them
        await teacher.aclose()

    run(main())
