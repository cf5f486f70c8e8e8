"""A served app starts warm (engine/arena.py `warm_up`, from the lifespan of a served app): the arena holds mapped
blocks of the largest stage, within its bound, and the next large trace's stages are written into them."""

from __future__ import annotations

import gc

import torch

from engine import attention, sources
from engine.arena import ARENA, MIN_BYTES, Arena, stage_bytes, warm_up
from engine.spec import make_spec
from tests.wait import wait_until

BLOCK = 8 << 20


def test_prefault_fills_the_arena_up_to_its_bound_with_written_blocks() -> None:
    arena = Arena(28 << 20)
    assert arena.prefault(BLOCK) == 3  # 24 MiB of 28: a fourth would pass the bound
    assert arena.held == 3 * BLOCK and arena.reused == 0
    assert arena.prefault(BLOCK) == 0  # full already
    t = arena.empty((2, 1024, 1024))  # 8 MiB: one of them, not a fresh one
    assert arena.reused == 1 and arena.held == 2 * BLOCK
    assert t.abs().sum().item() == 0.0  # written once (zeros), so its pages are mapped already


def test_prefault_keeps_within_a_count_and_ignores_small_or_off_arenas() -> None:
    assert Arena(64 << 20).prefault(BLOCK, count=2) == 2
    assert Arena(64 << 20).prefault(MIN_BYTES - 4) == 0  # small tensors never come from the arena
    off = Arena(0)
    assert off.prefault(BLOCK) == 0 and off.held == 0  # ATTENTION_LAB_ARENA_MB=0: nothing kept, nothing made


def test_the_largest_stage_is_gpt2_smalls_at_the_longest_sequence() -> None:
    assert stage_bytes(1024) == 12 * 1024 * 1024 * 4
    assert stage_bytes(512) == 12 * 512 * 512 * 4  # a server that allows fewer tokens makes smaller blocks


def test_warm_up_stocks_the_arena_and_the_next_large_trace_is_written_into_it() -> None:
    size, bound = stage_bytes(384), ARENA.max_bytes
    ARENA.limit(0)  # nothing held: as in a fresh process
    ARENA.limit(4 * size)
    try:
        done = warm_up(384, stock=False)
        gc.collect()
        assert done["blocks"] == 4
        assert ARENA.held == 4 * size  # its own trace ran over them and gave them back
        reused = ARENA.reused
        spec = make_spec([f"t{i}" for i in range(384)], preset="gpt2-small", mask="causal", seed=3)
        with torch.inference_mode():
            x, w = sources.load(spec, torch.device("cpu"), torch.float32)
            trace = attention.run(spec, x, w)
        assert ARENA.reused == reused + 4 and ARENA.held == 0  # QKᵀ, QKᵀ/s, masked, weights: no fresh memory
        assert trace.checks.rows_sum_to_one and trace.checks.max_abs_diff_vs_sdpa < 1e-4
    finally:
        ARENA.limit(bound)


def _until(condition, seconds: float = 30.0) -> bool:
    return bool(wait_until(condition, seconds, "the arena's state", interval=0.02))  # fails naming it past the bound


def test_a_stocked_arena_refills_after_traces_take_blocks_until_one_comes_back() -> None:
    arena = Arena(3 * BLOCK)
    arena.stock(BLOCK)
    assert arena.stocking and arena.held == 0  # nothing made before anything is taken
    assert arena.prefault(BLOCK) == 3
    first = [arena.empty((2, 1024, 1024)) for _ in range(3)]  # a trace's stages, kept (as the cache keeps them)
    assert arena.held == 0
    assert _until(lambda: arena.held == 3 * BLOCK)  # refilled in the background, up to the bound
    second = [arena.empty((2, 1024, 1024)) for _ in range(2)]
    assert arena.reused == 5 and _until(lambda: arena.held == 3 * BLOCK)
    del first
    gc.collect()  # the first trace is evicted: its blocks come back, and stocking ends
    assert not arena.stocking and arena.held == 3 * BLOCK  # still within the bound (the rest dropped)
    del second
