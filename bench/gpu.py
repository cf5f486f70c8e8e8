"""`make gpu-check`: the CUDA test subset, then one table of GPU timings for the README.

    python -m bench.gpu [--json]

On a machine with CUDA: runs tests/engine/test_cuda.py, then times gpt2-small attention at N = 128, 512, 1024 and
SmolLM2-135M (its last layer) at 512 and 2048 tokens, in float32, float16 and bfloat16: the five stages (each lap
synchronised), staged against fused SDPA with the same projections, and one request end to end through the app.
Without CUDA it says so and what it skipped, and exits 0.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from typing import Any

import orjson
import torch
import torch.nn.functional as F

from engine import attention, make_spec, sources
from engine.spec import Limits


def _sync() -> None:
    torch.cuda.synchronize()


def _median(fn: Any, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        _sync()
        t0 = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@torch.inference_mode()
def gpt2(n: int, dtype: str) -> dict[str, Any]:
    spec = make_spec([f"t{i}" for i in range(n)], preset="gpt2-small", mask="causal", device="cuda", dtype=dtype)
    x, w = sources.load(spec, torch.device("cuda"), getattr(torch, dtype))
    attention.run(spec, x, w)  # warm-up
    laps = [dict(attention.run(spec, x, w).timings) for _ in range(5)]
    stages = {k: statistics.median(lap[k] for lap in laps) for k in laps[0]}

    def fused() -> None:
        p = attention.project(x, w, spec)
        y = F.scaled_dot_product_attention(p.q[None], p.k[None], p.v[None], is_causal=True)[0]  # 4-D: the fused kernel
        torch.addmm(w.b_o, y.transpose(0, 1).reshape(n, -1), w.w_o)

    fused_s = _median(fused)
    staged = sum(stages.values())
    return {"model": "gpt2-small", "n": n, "dtype": dtype, "staged_ms": staged * 1e3, "fused_ms": fused_s * 1e3,
            "ratio": staged / fused_s, "stages_ms": {k: v * 1e3 for k, v in stages.items()}}  # fmt: skip


@torch.inference_mode()
def smollm2(n: int, dtype: str) -> dict[str, Any] | None:
    from engine.pretrained import SmolLM2
    from engine.tracing import compute

    model = SmolLM2.find()
    if model is None:
        return None
    model.place("cuda")
    ids = (model.tokenize("The cat sat on the mat. ") * (n // 6 + 1))[:n]
    spec = make_spec(token_ids=ids, preset="smollm2", layer=29, models={"smollm2": model}, device="cuda", dtype=dtype,
                     limits=Limits(max_tokens=max(n, 1024)))  # fmt: skip
    compute(spec, model)
    total = _median(lambda: compute(spec, model), 3)
    return {"model": "smollm2", "n": n, "dtype": dtype, "trace_ms": total * 1e3}


def request_ms(n: int) -> float:
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings

    toks = " ".join(f"t{i}" for i in range(n))
    with TestClient(create_app(Settings(device="cuda", pretrained=False))) as c:
        c.get("/api/v1/attention", params={"preset": "gpt2-small", "tokens": "warm"})
        t0 = time.perf_counter()
        r = c.get("/api/v1/attention.npz", params={"preset": "gpt2-small", "tokens": toks, "stages": "softmax",
                                                    "heads": "0", "seed": 99})  # fmt: skip
        assert r.status_code == 200
        return (time.perf_counter() - t0) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-tests", action="store_true", help="skip the CUDA test subset")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: skipped tests/engine/test_cuda.py (CUDA traces in float32/float16/bfloat16, placement, the "
              "server on CUDA) and every GPU timing (gpt2-small N = 128/512/1024, SmolLM2 512/2048 tokens). "
              "Run `make gpu-check` on a machine with a GPU.")  # fmt: skip
        return 0
    if not args.no_tests:
        code = subprocess.call([sys.executable, "-m", "pytest", "-q", "tests/engine/test_cuda.py"])
        if code:
            return code
    rows: list[dict[str, Any]] = []
    for dtype in ("float32", "float16", "bfloat16"):
        rows += [gpt2(n, dtype) for n in (128, 512, 1024)]
        rows += [r for r in (smollm2(n, dtype) for n in (512, 2048)) if r]
    e2e = request_ms(1024)
    if args.json:
        for r in rows:
            print(orjson.dumps(r).decode())
        print(orjson.dumps({"request_1024_npz_ms": e2e}).decode())
        return 0
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| model | N | dtype | staged (ms) | fused SDPA (ms) | staged / fused | trace (ms) |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for r in rows:
        if r["model"] == "gpt2-small":
            print(f"| gpt2-small | {r['n']} | {r['dtype']} | {r['staged_ms']:.2f} | {r['fused_ms']:.2f} | "
                  f"{r['ratio']:.2f}× | |")  # fmt: skip
        else:
            print(f"| SmolLM2 layer 29 | {r['n']} | {r['dtype']} | | | | {r['trace_ms']:.1f} |")
    print(f"\nfirst gpt2-small request, 1,024 tokens, attention.npz softmax head 0, end to end: {e2e:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
