"""Memory for the large stage tensors that is already mapped: what a finished trace gave back, reused.

A trace of gpt2-small over 1,024 tokens writes four (12, 1024, 1024) float32 stages, 48 MB each. Fresh from the
allocator, such a block is a new mapping whose 4 KiB pages fault in one by one as the stage writes them: 15–25 ms
per stage on the 2-core machine, more than the arithmetic (a scores product written into mapped memory takes
11 ms, into fresh memory 26 ms). `Arena.empty` hands out CPU float32 tensors over blocks that come back to the
arena when the last tensor or view over them is gone (a finaliser on the NumPy array torch keeps alive), and keeps
up to `max_bytes` of such blocks for the next trace of the same size. Small tensors, other dtypes and other devices
are plain `torch.empty`. The numbers are the same: the stages run the same kernels with `out=`.

A freshly started server has given nothing back yet: its first large traces would write every stage into fresh
memory (355–412 ms for the first three gpt2-small traces of 1,024 tokens, against some 100 ms once memory came
back). `warm_up`, run by the served app before it accepts connections, fills the arena with blocks of the largest
built-in preset's stage, written once so their pages are mapped (`Arena.prefault`), within the same bound
(ATTENTION_LAB_ARENA_MB), and runs one trace of that size over them, so that the kernels' first calls and the
allocator's own first mappings are paid then too.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections import defaultdict

import numpy as np
import torch

MIN_BYTES = 1 << 22  # 4 MiB: smaller tensors come from the allocator's own free lists without faults
QUIET_S = 0.3  # a stocked arena refills once no block has been taken for this long (between a user's clicks)


class Arena:
    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self.max_bytes = max_bytes
        self._free: defaultdict[int, list[np.ndarray]] = defaultdict(list)
        self._held = 0
        self._lock = threading.Lock()
        self.reused = 0  # blocks handed out again (tests and metrics read it)
        self._stock = 0  # the block size kept stocked (`stock`); 0: none
        self._taken = threading.Event()  # a block of that size was handed out (or stocking ended)

    @property
    def held(self) -> int:
        """Bytes of blocks kept for reuse (free, not in any tensor)."""
        return self._held

    def empty(self, shape: tuple[int, ...], device: torch.device | str = "cpu",
              dtype: torch.dtype = torch.float32) -> torch.Tensor:  # fmt: skip
        """An uninitialised tensor, over a reused block when it is a large CPU float32 one."""
        nbytes = math.prod(shape) * 4
        if torch.device(device).type != "cpu" or dtype != torch.float32 or nbytes < MIN_BYTES or not self.max_bytes:
            return torch.empty(shape, device=device, dtype=dtype)
        with self._lock:
            blocks = self._free.get(nbytes)
            block = blocks.pop() if blocks else None
            if block is not None:
                self._held -= nbytes
                self.reused += 1
        if block is None:
            block = np.empty(nbytes // 4, dtype=np.float32)
        if nbytes == self._stock:
            self._taken.set()
        view = block.reshape(shape)  # a new array object over the block: torch keeps it alive, views and all
        weakref.finalize(view, self._give_back, block)
        return torch.from_numpy(view)

    def _give_back(self, block: np.ndarray) -> None:
        with self._lock:
            if self._stock:  # finished traces refill the arena from now on: no more stocking
                self._stock = 0
                self._taken.set()
            if self._held + block.nbytes <= self.max_bytes:
                self._free[block.nbytes].append(block)
                self._held += block.nbytes
            # else: dropped, and the allocator returns it to the system

    def prefault(self, nbytes: int, count: int | None = None) -> int:
        """Add free blocks of `nbytes`, each written once (its pages mapped now, not by the trace that uses it), as
        many as fit under `max_bytes` beside what is held already (at most `count`); how many were added."""
        nbytes -= nbytes % 4
        if nbytes < MIN_BYTES:
            return 0
        added = 0
        while count is None or added < count:
            with self._lock:
                if self._held + nbytes > self.max_bytes:
                    break
            block = np.empty(nbytes // 4, dtype=np.float32)
            block.fill(0.0)  # np.zeros would map the pages lazily, on the trace's first write
            with self._lock:
                if self._held + nbytes > self.max_bytes:  # a trace gave blocks back meanwhile
                    break
                self._free[nbytes].append(block)
                self._held += nbytes
            added += 1
        return added

    @property
    def stocking(self) -> bool:
        return bool(self._stock)

    def stock(self, nbytes: int) -> None:
        """Keep blocks of `nbytes` stocked up to the bound: once traces have taken some and none was taken for
        QUIET_S, a background thread prefaults as many again, until a trace first gives a block back (then, cached
        traces being evicted, finished traces refill the arena as they end). A fresh server's first traces stay in
        the cache, so without this only the first would find mapped memory."""
        if nbytes < MIN_BYTES or self._stock:
            return
        self._stock = nbytes
        self._taken.clear()
        threading.Thread(target=self._restock, name="arena-stock", daemon=True).start()

    def _restock(self) -> None:
        while self._stock:
            self._taken.wait()
            while self._taken.wait(QUIET_S):  # until a quiet spell: nothing taken for QUIET_S
                self._taken.clear()
                if not self._stock:
                    return
            if size := self._stock:
                self.prefault(size)

    def limit(self, max_bytes: int) -> None:
        """Keep at most `max_bytes` of free blocks from now on (0: none), dropping what is over it now."""
        with self._lock:
            self.max_bytes = max_bytes
            while self._held > max_bytes:
                size, blocks = next(iter(self._free.items()))
                blocks.pop()
                self._held -= size
                if not blocks:
                    del self._free[size]


ARENA = Arena()


def configure(max_bytes: int) -> None:
    """The most bytes of free blocks kept (the server's ATTENTION_LAB_ARENA_MB); 0 turns reuse off."""
    ARENA.limit(max_bytes)


def stage_bytes(max_tokens: int) -> int:
    """The bytes of one N × N stage of the largest built-in preset at its longest allowed sequence: gpt2-small's
    (12, 1024, 1024) float32, 48 MiB, with the default limits."""
    from .spec import PRESETS

    return max(p.n_heads * min(p.n_ctx, max_tokens) ** 2 * 4 for p in PRESETS.values())


def warm_up(max_tokens: int, stock: bool = True) -> dict[str, float]:
    """What a served app does before it accepts its first request (CPU only): `ARENA` filled with mapped blocks of
    the largest stage (`stage_bytes`) up to its bound, then one gpt2-small trace as long as the server allows (at
    most 1,024 tokens, causal, head 0 checked; cached nowhere), over those blocks, which come back when it is done.
    The first large trace then finds its stages' pages mapped, the allocator's smaller blocks (projections, the
    mask, the answer) mapped too, and the kernels past their first call; with `stock`, the next ones until traces
    give memory back (`Arena.stock`). Returns what it did."""
    from .attention import run
    from .sources import load
    from .spec import PRESETS, make_spec

    t0 = time.perf_counter()
    blocks = ARENA.prefault(stage_bytes(max_tokens))
    t1 = time.perf_counter()
    n = min(PRESETS["gpt2-small"].n_ctx, max_tokens)
    spec = make_spec([f"w{i}" for i in range(n)], preset="gpt2-small", mask="causal")
    with torch.inference_mode():
        x, w = load(spec, torch.device("cpu"), torch.float32)
        run(spec, x, w).verify((0,))  # its stages go back to ARENA as it ends here
    if stock:
        ARENA.stock(stage_bytes(max_tokens))
    return {"blocks": blocks, "held_mb": ARENA.held / 2**20, "prefault_s": t1 - t0,
            "trace_s": time.perf_counter() - t1}  # fmt: skip
