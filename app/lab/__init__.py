"""The lab: the server's compute service (`service`: `Lab.compute`, the one path of every computation), and what it
is made of — cancelling abandoned work (`cancel`), admitting large and heavy work to a few slots (`admission`),
reporting progress (`progress`) under a request's key (`keys`)."""

from .admission import HEAVY, HeavyWork, LoopLimiter, QueuePlace
from .cancel import CLIENT, Cancelled, Progress, WatchClient
from .keys import ProgressKey, get_key, progress_key, request_key, url_digest
from .service import Lab, Work, get_lab

__all__ = [
    "CLIENT",
    "HEAVY",
    "Cancelled",
    "HeavyWork",
    "Lab",
    "LoopLimiter",
    "Progress",
    "ProgressKey",
    "QueuePlace",
    "WatchClient",
    "Work",
    "get_key",
    "get_lab",
    "progress_key",
    "request_key",
    "url_digest",
]
