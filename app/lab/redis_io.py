"""What every part of the lab that keeps state in Redis shares (the rooms, the training runs, the heavy jobs): the
async client on a bounded pool, a reply read as text, the Lua scripts' clock, a queue message naming one id."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import dramatiq
    import redis.asyncio as aioredis

# What the scripts of the job queue begin with: the time on Redis's clock (one clock for every machine).
LUA_NOW = """
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
"""


def async_client(url: str) -> aioredis.Redis:
    """A client on a bounded pool that waits for a free connection (the default pool refuses past its size): a class
    of hundreds shares a few dozen connections per process."""
    import redis.asyncio as aioredis

    pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=32, timeout=10, socket_timeout=5,
                                                    socket_connect_timeout=5)  # fmt: skip
    return aioredis.Redis(connection_pool=pool)


def as_str(v: Any) -> str:
    """A Redis reply (bytes) as text."""
    return v.decode() if isinstance(v, bytes) else str(v)


def as_strs(h: dict[Any, Any]) -> dict[str, str]:
    """A hash as Redis gives it (bytes to bytes), as text."""
    return {as_str(k): as_str(v) for k, v in h.items()}


def queue_message(queue: str, actor: str, id_: str) -> dramatiq.Message[Any]:
    """A queue message naming only the id of what it asks for (JSON, as every message of the queue is)."""
    import dramatiq

    return dramatiq.Message(queue_name=queue, actor_name=actor, args=(id_,), kwargs={}, options={})
