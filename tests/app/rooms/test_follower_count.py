"""The teacher's count of followers while the class is busy (found by the class walk: the projector's bar said 0
while a phone followed). A follower is counted while its stream sends heartbeats (FOLLOWER_TTL_S); the stream sent
one only after keepalive seconds without a change, so a teacher stepping the class more often than that stopped
every follower's heartbeat, and 45 s on the bar counted nobody until the class paused."""

from __future__ import annotations

from app.rooms.store import FOLLOWER_TTL_S, MemoryStore
from app.rooms.stream import Follow
from tests.rooms_client import run


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
