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

# What the scripts of a queue's leases share (the jobs', the runs'), after the module's own `key(id)`, the hash of a
# job or a run: a queue worker's claim of a queued one, whether it still holds it, and reaping, from the set `live`,
# the ids gone and the running ones whose lease ran out (each ended by `lost(id)`).
LUA_LEASES = """
local function claim(id, owner, lease)
  if redis.call('HGET', key(id), 'status') ~= 'queued' then return 0 end
  redis.call('HSET', key(id), 'status', 'running', 'owner', owner, 'started', now(), 'lease', now() + tonumber(lease))
  return 1
end
local function holds(id, owner)
  return redis.call('HGET', key(id), 'status') == 'running' and redis.call('HGET', key(id), 'owner') == owner
end
local function reap(live, lost)
  local reaped, t = 0, now()
  for _, id in ipairs(redis.call('SMEMBERS', live)) do
    local st = redis.call('HGET', key(id), 'status')
    if st ~= 'queued' and st ~= 'running' then
      redis.call('SREM', live, id)
    elseif st == 'running' and tonumber(redis.call('HGET', key(id), 'lease') or '0') < t then
      lost(id)
      reaped = reaped + 1
    end
  end
  return reaped
end
"""
# ARGV: id, owner, lease seconds. 1: this worker computes (or trains) it now; 0: it is not queued (stopped, failed,
# taken, gone).
CLAIM = "return claim(ARGV[1], ARGV[2], ARGV[3])"


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
