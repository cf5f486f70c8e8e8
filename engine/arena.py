"""Memory for the large stage tensors that is already mapped: what a finished trace gave back, reused.

A trace of gpt2-small over 1,024 tokens writes four (12, 1024, 1024) float32 stages, 48 MB each. Fresh from the
allocator, such a block is a new mapping whose 4 KiB pages fault in one by one as the stage writes them: 15–25 ms
per stage on the 2-core machine, more than the arithmetic (a scores product written into mapped memory takes
11 ms, into fresh memory 26 ms). `Arena.empty` hands out CPU float32 tensors over blocks that come back to the
arena when the last tensor or view over them is gone (a finaliser on the NumPy array torch keeps alive), and keeps
up to `max_bytes` of such blocks for the next trace of the same size. Small tensors, other dtypes and other devices
are plain `torch.empty`. The numbers are the same: the stages run the same kernels with `out=`.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import defaultdict

import numpy as np
import torch

MIN_BYTES = 1 << 22  # 4 MiB: smaller tensors come from the allocator's own free lists without faults


class Arena:
    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self.max_bytes = max_bytes
        self._free: defaultdict[int, list[np.ndarray]] = defaultdict(list)
        self._held = 0
        self._lock = threading.Lock()
        self.reused = 0  # blocks handed out again (tests and metrics read it)

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
        view = block.reshape(shape)  # a new array object over the block: torch keeps it alive, views and all
        weakref.finalize(view, self._give_back, block)
        return torch.from_numpy(view)

    def _give_back(self, block: np.ndarray) -> None:
        with self._lock:
            if self._held + block.nbytes <= self.max_bytes:
                self._free[block.nbytes].append(block)
                self._held += block.nbytes
            # else: dropped, and the allocator returns it to the system

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
