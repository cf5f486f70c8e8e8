"""Rooms in Redis (`attention-lab serve --redis redis://host:port/db`): every worker and machine pointed at the same
Redis shares them.

Keys, all under `lab:room:<code>` and all expiring after `idle_s` without activity:
  (hash)        page, query, version, token, poll    the view students follow, the teacher token's hash
  :log          (list)   the last events, newest first, for streams that reconnect with Last-Event-ID (at most
                         LOG_LENGTH of them and LOG_BYTES in all)
  :followers    (zset)   stream id -> time of its last heartbeat (a change of their number is published on
                         the room's channel, without a version: store.counted)
  :polls        (hash)   poll id -> poll JSON
  :answers:<id> (hash)   student -> answer JSON (a later answer replaces the earlier)
  :voters:<id>  (hash)   client address -> students from it who answered (the per-address cap)
  :summary      (string) an ended room's class summary and its teachers' token hashes, kept for `idle_s`
`lab:rooms` (zset, code -> last activity) counts the rooms; `lab:rooms:from:<address>` (set) holds the codes an
address started (the hash's `address` says whose a code is, so an ended or expired room no longer counts). A change bumps the version, logs and publishes the
event in one Lua script, so versions never repeat and no stream sees an event out of order; each process listens
on `lab:room:*:events` with one connection and hands events to its own streams. When that subscription breaks (Redis
went away, or came back), the process's streams end with `event: retry`: they reconnect with Last-Event-ID and get
what they missed from the log, so no stream stays open across a gap in which it could have missed an event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, cast

import orjson
from redis.exceptions import ConnectionError as RedisConnectionError

from ..lab.redis_io import as_str, as_strs, async_client
from .store import FOLLOWER_TTL_S, LOG_BYTES, LOG_LENGTH, Answer, Event, Kind, Poll, Room, Store, logged_after

PREFIX = "lab:room:"
ROOMS = "lab:rooms"
LOG = logging.getLogger("attention_lab.rooms")

# KEYS: room hash, log; ARGV: kind, data JSON, page, query, idle seconds, channel, log length, set state (1/0),
# log bytes. The log keeps the newest events up to `log length` of them and `log bytes` in all (at least one).
PUBLISH = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local v = redis.call('HINCRBY', KEYS[1], 'version', 1)
if ARGV[8] == '1' then redis.call('HSET', KEYS[1], 'page', ARGV[3], 'query', ARGV[4]) end
local ev = '{"id":' .. v .. ',"kind":"' .. ARGV[1] .. '","data":' .. ARGV[2] .. '}'
redis.call('LPUSH', KEYS[2], ev)
local kept, bytes, budget = 0, 0, tonumber(ARGV[9])
for _, old in ipairs(redis.call('LRANGE', KEYS[2], 0, tonumber(ARGV[7]) - 1)) do
  bytes = bytes + #old
  if kept > 0 and bytes > budget then break end
  kept = kept + 1
end
redis.call('LTRIM', KEYS[2], 0, kept - 1)
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('EXPIRE', KEYS[2], ARGV[5])
redis.call('PUBLISH', ARGV[6], ev)
return v
"""


# KEYS: answers hash, voters hash; ARGV: student, record, address, cap (0: none), idle seconds. 1: recorded,
# 0: a new student past the address's cap. One script, so concurrent answers never overshoot the cap.
ANSWER = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  local cap = tonumber(ARGV[4])
  if cap > 0 and tonumber(redis.call('HGET', KEYS[2], ARGV[3]) or '0') >= cap then return 0 end
  redis.call('HINCRBY', KEYS[2], ARGV[3], 1)
  redis.call('EXPIRE', KEYS[2], ARGV[5])
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""


# Both follower scripts: publish the count (store.counted) on the room's channel when it is no longer `before`.
COUNTED = """
local function counted(before, channel)
  local n = redis.call('ZCARD', KEYS[1])
  if n ~= before then redis.call('PUBLISH', channel, '{"id":0,"kind":"followers","data":{"n":' .. n .. '}}') end
  return n
end
"""

# KEYS: followers zset, room hash; ARGV: follower, now, follower TTL, limit (0: none), channel. 1: following,
# 0: a new follower past the limit. Dropping the stale, counting and adding are one step, so a burst of connections
# to one room cannot all be counted before any of them is recorded.
FOLLOW = (
    COUNTED
    + """
if redis.call('EXISTS', KEYS[2]) == 0 then return 1 end
local now, limit, before = tonumber(ARGV[2]), tonumber(ARGV[4]), redis.call('ZCARD', KEYS[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
local refused = limit > 0 and not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= limit
if not refused then redis.call('ZADD', KEYS[1], now, ARGV[1]) end
counted(before, ARGV[5])
return refused and 0 or 1
"""
)

# KEYS: followers zset; ARGV: a follower that leaves ('': none), now, follower TTL, channel. The count, the stale
# dropped (the change published, as FOLLOW's).
COUNT = (
    COUNTED
    + """
local before = redis.call('ZCARD', KEYS[1])
if ARGV[1] ~= '' then redis.call('ZREM', KEYS[1], ARGV[1]) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[2]) - tonumber(ARGV[3]))
return counted(before, ARGV[4])
"""
)


class RedisStore(Store):
    def __init__(self, url: str, idle_s: float) -> None:
        super().__init__(idle_s)
        self.redis = async_client(url)  # a few dozen connections per process, shared by a class of hundreds
        self._publish = self.redis.register_script(PUBLISH)
        self._answer = self.redis.register_script(ANSWER)
        self._follow = self.redis.register_script(FOLLOW)
        self._count = self.redis.register_script(COUNT)
        self._listener: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()  # set while this process receives every room's events
        self.idle = max(1, int(idle_s))

    async def start(self) -> None:
        if self._listener is None or self._listener.done():
            ready = asyncio.get_running_loop().create_future()
            self._listener = asyncio.create_task(self._listen(ready))
            await asyncio.wait_for(asyncio.shield(ready), 10)

    async def _listen(self, ready: asyncio.Future[None]) -> None:
        """Hand every room event published by any process to this process's streams. Whenever the subscription
        breaks or is made again (redis-py may resubscribe on its own), this process's streams end with `event:
        retry`: events published in the gap never reached them, and their reconnects (Last-Event-ID) replay them."""
        lost = False
        while True:
            pubsub = self.redis.pubsub()
            try:
                await pubsub.psubscribe(PREFIX + "*:events")
                async for message in pubsub.listen():
                    kind = message.get("type")
                    if kind == "psubscribe":  # the first subscription, or one made again after a broken connection
                        if self._subscribed.is_set() or lost:
                            self.hub.retry_all()
                        if lost:
                            LOG.warning("rooms: the Redis subscription is back")
                        lost = False
                        self._subscribed.set()
                        if not ready.done():
                            ready.set_result(None)
                        continue
                    if kind != "pmessage":
                        continue
                    code = as_str(message["channel"])[len(PREFIX) : -len(":events")]
                    event = Event.loads(message["data"])
                    self.hub.deliver(code, event)
                    if event.kind == "end":
                        self.hub.deliver(code, None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis went away: end the streams (they reconnect), tell the log once, retry
                self._subscribed.clear()
                self.hub.retry_all()
                if not ready.done():
                    ready.set_exception(exc)
                    return
                if not lost:
                    LOG.warning("rooms: lost the Redis subscription (%s: %s); retrying", type(exc).__name__, exc)
                lost = True
                await asyncio.sleep(1)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    async def listening(self) -> None:
        await self.start()  # again, if the listener ended
        try:
            await asyncio.wait_for(self._subscribed.wait(), 5)
        except TimeoutError:
            raise RedisConnectionError("no subscription to the rooms' events") from None

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
        await self.redis.aclose()
        await self.redis.connection_pool.disconnect()  # a pool passed in is not closed with its client

    def _key(self, code: str, suffix: str = "") -> str:
        return PREFIX + code + suffix

    async def _touch(self, code: str) -> None:
        async with self.redis.pipeline(transaction=False) as p:
            for suffix in ("", ":log", ":followers", ":polls"):
                p.expire(self._key(code, suffix), self.idle)
            p.zadd(ROOMS, {code: time.time()})
            await p.execute()

    async def create(self, code: str, token_hash: str, page: str, query: str, address: str = "") -> bool:
        fields: dict[str, str | int] = {"page": page, "query": query, "version": 1, "token": token_hash, "poll": "",
                                        "address": address}  # fmt: skip
        if not await self.redis.hsetnx(self._key(code), "token", token_hash):
            return False
        async with self.redis.pipeline(transaction=True) as p:
            p.hset(self._key(code), mapping=cast(Any, fields))
            p.expire(self._key(code), self.idle)
            p.zadd(ROOMS, {code: time.time()})
            p.sadd(ROOMS + ":from:" + address, code)
            p.expire(ROOMS + ":from:" + address, self.idle)
            await p.execute()
        return True

    async def add_pairing(self, code: str, pairing_hash: str, ttl_s: float) -> None:
        await self.redis.set(self._key(code, ":pair:" + pairing_hash), "1", px=max(1, int(ttl_s * 1000)))

    async def take_pairing(self, code: str, pairing_hash: str) -> bool:
        return await self.redis.getdel(self._key(code, ":pair:" + pairing_hash)) is not None  # one step: used once

    async def set_devices(self, code: str, hashes: tuple[str, ...]) -> None:
        if await self.redis.exists(self._key(code)):
            await self.redis.hset(self._key(code), "devices", " ".join(hashes))

    async def rooms_of(self, address: str) -> int:
        key = ROOMS + ":from:" + address
        codes = [as_str(c) for c in await self.redis.smembers(key)]
        if not codes:
            return 0
        async with self.redis.pipeline(transaction=False) as p:
            for code in codes:
                p.hget(self._key(code), "address")
            owners = await p.execute()
        gone = [c for c, owner in zip(codes, owners, strict=True) if owner is None or as_str(owner) != address]
        if gone:
            await self.redis.srem(key, *gone)
        return len(codes) - len(gone)

    async def get(self, code: str) -> Room | None:
        h = await self.redis.hgetall(self._key(code))
        if not h or b"version" not in h:
            return None
        d = as_strs(h)
        return Room(code, d["page"], d["query"], int(d["version"]), d["token"], d["poll"] or None,
                    tuple(d.get("devices", "").split()))  # fmt: skip

    async def count(self) -> int:
        await self.redis.zremrangebyscore(ROOMS, "-inf", time.time() - self.idle)
        return int(await self.redis.zcard(ROOMS))

    async def delete(self, code: str) -> bool:
        if not await self.publish(code, "end", {}):  # 0: no such room
            return False
        polls = await self.redis.hkeys(self._key(code, ":polls"))
        keys = [self._key(code, s) for s in ("", ":log", ":followers", ":polls")]
        keys += [self._key(code, f":{what}:" + as_str(p)) for p in polls for what in ("answers", "voters")]
        await self.redis.delete(*keys)
        await self.redis.zrem(ROOMS, code)
        return True

    async def publish(self, code: str, kind: Kind, data: dict[str, Any], state: tuple[str, str] | None = None) -> int:
        page, query = state or ("", "")
        args = [kind, orjson.dumps(data), page, query, self.idle, self._key(code, ":events"), LOG_LENGTH,
                "1" if state else "0", LOG_BYTES]  # fmt: skip
        version = int(await self._publish(keys=[self._key(code), self._key(code, ":log")], args=args))
        if version:
            await self.redis.zadd(ROOMS, {code: time.time()})
        return version

    async def events_after(self, code: str, version: int) -> list[Event] | None:
        async with self.redis.pipeline(transaction=True) as p:
            p.lrange(self._key(code, ":log"), 0, -1)
            p.hget(self._key(code), "version")
            raw, current = await p.execute()
        if current is None:
            return None
        return logged_after([Event.loads(r) for r in reversed(raw)], version, int(current))

    async def follow(self, code: str, follower: str, limit: int | None = None) -> bool:
        keys = [self._key(code, ":followers"), self._key(code)]
        args: list[str | float | int] = [follower, time.time(), FOLLOWER_TTL_S, limit or 0, self._key(code, ":events")]
        if not int(await self._follow(keys=keys, args=args)):
            return False
        await self._touch(code)
        return True

    async def _counted(self, code: str, leaving: str = "") -> int:
        args: list[str | float] = [leaving, time.time(), FOLLOWER_TTL_S, self._key(code, ":events")]
        return int(await self._count(keys=[self._key(code, ":followers")], args=args))

    async def unfollow(self, code: str, follower: str) -> None:
        await self._counted(code, follower)

    async def followers(self, code: str) -> int:
        return await self._counted(code)

    async def _save_poll(self, code: str, poll: Poll) -> None:
        if poll.status == "open":
            async with self.redis.pipeline(transaction=True) as p:
                p.hset(self._key(code, ":polls"), poll.id, orjson.dumps(poll))
                p.hset(self._key(code), "poll", poll.id)
                await p.execute()
            await self._touch(code)
            return
        await self.redis.hset(self._key(code, ":polls"), poll.id, orjson.dumps(poll))
        if as_str(await self.redis.hget(self._key(code), "poll") or b"") == poll.id:
            await self.redis.hset(self._key(code), "poll", "")

    async def poll(self, code: str, poll_id: str) -> Poll | None:
        raw = await self.redis.hget(self._key(code, ":polls"), poll_id)
        return Poll.loads(raw) if raw else None

    async def answer(self, code: str, poll_id: str, answer: Answer, address: str = "", cap: int | None = None) -> bool:
        keys = [self._key(code, ":answers:" + poll_id), self._key(code, ":voters:" + poll_id)]
        record = orjson.dumps({"answer": answer.answer, "nickname": answer.nickname, "at": answer.at})
        args: list[str | bytes | int] = [answer.student, record, address, cap or 0, self.idle]
        return bool(int(await self._answer(keys=keys, args=args)))

    async def answers(self, code: str, poll_id: str) -> list[Answer]:
        raw = await self.redis.hgetall(self._key(code, ":answers:" + poll_id))
        out = []
        for student, record in raw.items():
            d = orjson.loads(record)
            out.append(Answer(as_str(student), d["answer"], d.get("nickname"), d.get("at", 0.0)))
        return out

    async def polls(self, code: str) -> list[Poll]:
        raw = await self.redis.hvals(self._key(code, ":polls"))
        return sorted((Poll.loads(r) for r in raw), key=lambda p: p.opened_at)

    async def keep(self, code: str, record: bytes, ttl_s: float) -> None:
        await self.redis.set(self._key(code, ":summary"), record, px=max(1, int(ttl_s * 1000)))

    async def kept(self, code: str) -> bytes | None:
        raw = await self.redis.get(self._key(code, ":summary"))
        return None if raw is None else raw.encode() if isinstance(raw, str) else bytes(raw)
