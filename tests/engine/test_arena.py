"""engine/arena.py: the large stage tensors reuse memory a finished trace gave back, never while any view of it is
alive, within the configured bound; the stages' numbers are those of the plain operations."""

from __future__ import annotations

import gc

import torch

from engine import attention, sources
from engine.arena import MIN_BYTES, Arena
from engine.spec import make_spec

BIG = (4, 512, 1024)  # 8 MiB of float32


def test_a_freed_block_is_handed_out_again() -> None:
    arena = Arena(64 << 20)
    t = arena.empty(BIG)
    ptr = t.data_ptr()
    t.fill_(1.0)
    del t
    gc.collect()
    assert arena.held == 8 << 20
    again = arena.empty(BIG)
    assert again.data_ptr() == ptr and arena.reused == 1 and arena.held == 0
    assert again.shape == BIG and again.dtype == torch.float32


def test_a_block_is_not_reused_while_a_view_of_it_lives() -> None:
    arena = Arena(64 << 20)
    t = arena.empty(BIG)
    ptr = t.data_ptr()
    row = t[1, 7]  # a view: shares the block
    row.fill_(3.0)
    del t
    gc.collect()
    other = arena.empty(BIG)
    assert other.data_ptr() != ptr and arena.reused == 0
    other.fill_(5.0)
    assert torch.equal(row, torch.full((1024,), 3.0))  # untouched by the new tensor
    del row
    gc.collect()
    assert arena.empty(BIG).data_ptr() == ptr


def test_the_bound_small_tensors_and_other_dtypes() -> None:
    arena = Arena(8 << 20)  # room for one block
    a, b = arena.empty(BIG), arena.empty(BIG)
    del a, b
    gc.collect()
    assert arena.held == 8 << 20  # the second was returned to the system
    small = arena.empty((4, 4))
    half = arena.empty(BIG, dtype=torch.float16)
    assert small.numel() * 4 < MIN_BYTES and half.dtype == torch.float16 and arena.reused == 0
    off = Arena(0)
    t = off.empty(BIG)
    del t
    gc.collect()
    assert off.held == 0


def test_the_stages_written_into_reused_memory_are_the_plain_operations() -> None:
    toks = " ".join(f"t{i}" for i in range(300))
    for seed in (1, 2, 3):  # the second and third traces reuse what the first gave back
        spec = make_spec(toks, preset="gpt2-small", seed=seed, mask="causal")
        x, w = sources.load(spec, torch.device("cpu"), torch.float32)
        with torch.inference_mode():
            trace = attention.run(spec, x, w)
            q = trace.projection.query
            k = attention.per_head(trace.projection.key, spec.n_heads).transpose(-2, -1)
            raw = q @ k
            assert torch.equal(trace.scores.raw, raw)
            assert torch.equal(trace.scores.scaled, raw / spec.scale_value)
            masked = raw / spec.scale_value + trace.mask.mask
            assert torch.equal(trace.mask.masked, masked)
            assert torch.equal(trace.softmax.weights, torch.softmax(masked, dim=-1))
        del trace
        gc.collect()
