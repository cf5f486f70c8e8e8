"""Drawing a large trace's heat maps ahead of the class.

When a teacher opens a large trace (gpt2-small over 256 tokens, say), the class will soon step through its five
stages and click its heads: every (stage, head) shows twelve thumbnails and one zoomed head, each a PNG that takes
a few milliseconds to draw. Drawn on demand, the first students to reach a stage queue behind dozens of them. Once a
trace's page has been shown, `DrawAhead` draws them all in the background, one at a time (the stage on screen
first), into the response store under the exact URL the page's <img> asks for (`view.heatmap_query`), so a step's
first render is not on the class's slowest path.

Bounded (ATTENTION_LAB_DRAW_AHEAD_TRACES, 0 turns it off): at most that many traces wait, what one trace draws
ahead stays under an eighth of the response store, a URL already stored (or being drawn for a request) is skipped,
and a trace is drawn ahead once. A trace of
a long context (its lazy trace) is not: its heat maps are computed from the model on demand.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from typing import Any

from engine.spec import MAIN_TENSOR, STAGES

from ..render.arrays import to_numpy
from ..web.page import keep
from ..web.tensors import drawn, hatched
from .view import HEATMAP_PATH, THUMB, LabQuery, heat_mode, heatmap_query, zoom_size

SEEN = 256  # traces remembered as drawn ahead (a trace's API query), so a page view schedules nothing twice


class DrawAhead:
    def __init__(self, store: Any, flights: dict[Any, asyncio.Event], max_traces: int) -> None:
        self.store = store
        self.flights = flights  # URLs being answered now (cache.single_flight): not drawn twice
        self.max_traces = max_traces
        self.jobs: OrderedDict[str, tuple[Any, LabQuery, str]] = OrderedDict()  # trace, its query, stage on screen
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.drawn = 0  # heat maps drawn ahead, all told
        self.task: asyncio.Task[None] | None = None

    @property
    def pending(self) -> int:
        """Traces waiting or being drawn (`/healthz` reports it)."""
        task = self.task
        return len(self.jobs) + (task is not None and not task.done() and not task.get_loop().is_closed())

    def schedule(self, trace: Any, state: LabQuery, stage: str) -> None:
        """Draw this trace's heat maps soon (called on the event loop, after its page was built)."""
        key = state.api_query()
        if self.max_traces <= 0 or self.store.max_bytes <= 0 or key in self.seen or key in self.jobs:
            return
        if len(self.jobs) >= self.max_traces:
            return  # the class has moved on faster than drawing: the rest is drawn on demand
        self.jobs[key] = (trace, state, stage)
        loop = asyncio.get_running_loop()
        # One drawing task per event loop (a test client may run each request on a loop of its own).
        if self.task is None or self.task.done() or self.task.get_loop() is not loop:
            self.task = loop.create_task(self._run())

    async def _run(self) -> None:
        while self.jobs:
            key, job = self.jobs.popitem(last=False)
            self.seen[key] = None
            while len(self.seen) > SEEN:
                self.seen.popitem(last=False)
            await self._draw(*job)

    async def _draw(self, trace: Any, state: LabQuery, first: str) -> None:
        room = self.store.max_bytes // 8
        for key in [first, *(k for k in STAGES if k != first)]:  # the stage on screen first
            tensor = MAIN_TENSOR[key]
            mode = heat_mode(state.color, tensor)
            heads = [to_numpy(h) for h in getattr(getattr(trace, key), tensor)]  # one matrix per head
            masked = hatched(trace, tensor, heads[0])  # the mask is every head's
            for size in (THUMB, zoom_size(heads[0].shape[0])):  # every thumbnail first: the page shows them all
                for head, a in enumerate(heads):
                    url = (HEATMAP_PATH, heatmap_query(state, key, head, size, mode))
                    if self.store.get(url) is not None or url in self.flights:
                        continue
                    room -= keep(self.store, url, await drawn(tensor, a, size, mode, masked))
                    self.drawn += 1
                    if room <= 0:
                        return

    async def close(self) -> None:
        self.jobs.clear()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
