"""The lab: the server's compute service (`service`: `Lab.compute`, the one path of every computation), and what it
is made of — cancelling abandoned work (`cancel`), admitting large and heavy work to a few slots (`admission`),
reporting progress (`progress`) under a request's key (`keys`)."""

from .admission import HEAVY, PREPARING, HeavyWork, LoopLimiter, QueuePlace, preparing
from .cancel import CLIENT, Cancelled, Interest, Progress, Watch, WatchClient
from .keys import ProgressKey, fnv1a64, get_key, progress_key, request_key
from .progress import PROGRESS_TTL_S
from .service import Lab, Work, get_lab, verified

__all__ = [
    "CLIENT",
    "HEAVY",
    "PREPARING",
    "PROGRESS_TTL_S",
    "Cancelled",
    "HeavyWork",
    "Interest",
    "Lab",
    "LoopLimiter",
    "Progress",
    "ProgressKey",
    "QueuePlace",
    "Watch",
    "WatchClient",
    "Work",
    "fnv1a64",
    "get_key",
    "get_lab",
    "preparing",
    "progress_key",
    "request_key",
    "verified",
]
