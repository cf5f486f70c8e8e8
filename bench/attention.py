"""Staged attention against fused SDPA for gpt2-small, and the toy request through the API.

    python -m bench.attention [--sizes 128,512,1024] [--repeat 5] [--json]

For each N: the median time of each of the five stages, their total, the fused path with the same projections
(X W_Q … → scaled_dot_product_attention → W_O), and staged / fused. Then the toy request's time through the
API, first (computed) and repeated (served from the cache). Ratios come from one run on one machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import orjson
import torch
import torch.nn.functional as F

from engine import attention, make_spec, masks, sources
from engine.device import resolve, torch_dtype


def _timed(fn: Callable[[], Any], repeat: int, device: str) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


@torch.inference_mode()
def staged_vs_fused(n: int, repeat: int, device: str) -> dict[str, Any]:
    spec = make_spec([f"t{i}" for i in range(n)], preset="gpt2-small", mask="causal", device=device)
    x, w = sources.load(spec, torch.device(device), torch_dtype(spec.dtype))
    add = masks.additive(masks.allowed("causal", n)).to(device)
    s = spec.scale_value
    t: dict[str, float] = {}
    t["projection"], p = _timed(lambda: attention.project(x, w, spec), repeat, device)
    t["scores"], sc = _timed(lambda: attention.scores(p, s), repeat, device)
    t["mask"], m = _timed(lambda: attention.mask(sc, add), repeat, device)
    t["softmax"], a = _timed(lambda: attention.softmax(m), repeat, device)
    t["weighted_sum"], _ = _timed(lambda: attention.weighted_sum(a, p, w), repeat, device)
    staged = sum(t.values())

    def fused() -> torch.Tensor:
        q = attention.project(x, w, spec)
        y = F.scaled_dot_product_attention(q.q, q.k, q.v, is_causal=True, scale=1 / s)
        return torch.addmm(w.b_o, y.transpose(0, 1).reshape(n, -1), w.w_o)

    t_fused, _ = _timed(fused, repeat, device)
    return {
        "bench": "staged_vs_fused",
        "preset": "gpt2-small",
        "n": n,
        "device": device,
        "stages_ms": {k: round(v * 1e3, 3) for k, v in t.items()},
        "staged_ms": round(staged * 1e3, 3),
        "fused_ms": round(t_fused * 1e3, 3),
        "ratio": round(staged / t_fused, 3),
    }


def toy_request(repeat: int) -> dict[str, Any]:
    warnings.filterwarnings("ignore", message="Using `httpx`")
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings

    with TestClient(create_app(Settings(device="cpu"))) as c:
        params = {"mask": "causal", "seed": 12345}
        t0 = time.perf_counter()
        assert c.get("/api/v1/attention", params=params).status_code == 200
        first = time.perf_counter() - t0
        cached, _ = _timed(lambda: c.get("/api/v1/attention", params=params), max(repeat, 20), "cpu")
    return {"bench": "toy_request", "first_ms": round(first * 1e3, 3), "cached_ms": round(cached * 1e3, 3)}


def first_request(n: int = 1024, repeat: int = 5) -> dict[str, Any]:
    """The first (uncached) gpt2-small request for the softmax of head 0 as .npz, end to end through the app, against
    in-process fused SDPA with the same projections; and where the request's time goes. Each try uses a new seed,
    so embeddings, weights, trace and answer are all computed afresh."""
    warnings.filterwarnings("ignore", message="Using `httpx`")
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.render.payload import to_npz
    from app.settings import Settings

    toks = " ".join(f"t{i}" for i in range(n))
    dev = torch.device("cpu")
    parts: dict[str, list[float]] = {"http": [], "sources": [], "stages": [], "check": [], "npz": [], "fused": []}
    with TestClient(create_app(Settings(device="cpu", pretrained=False))) as c:
        c.get("/api/v1/attention", params={"preset": "gpt2-small", "tokens": "warm up"})
        for i in range(repeat):
            seed = 7_000_000 + i
            params = {"preset": "gpt2-small", "tokens": toks, "stages": "softmax", "heads": "0", "seed": seed}
            t0 = time.perf_counter()
            assert c.get("/api/v1/attention.npz", params=params).status_code == 200
            parts["http"].append(time.perf_counter() - t0)
            # The same work, piece by piece, on another fresh seed.
            spec = make_spec(toks, preset="gpt2-small", seed=seed + 1000)
            t0 = time.perf_counter()
            x, w = sources.load(spec, dev, torch.float32)
            parts["sources"].append(time.perf_counter() - t0)
            with torch.inference_mode():
                t0 = time.perf_counter()
                trace = attention.run(spec, x, w)
                total = time.perf_counter() - t0
                staged = sum(sec for _, sec in trace.timings)
                parts["stages"].append(staged)
                parts["check"].append(total - staged)
                t0 = time.perf_counter()
                to_npz(trace, ("softmax",), (0,))
                parts["npz"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                p = attention.project(x, w, spec)
                causal = spec.mask == "causal"
                y = F.scaled_dot_product_attention(p.q, p.k, p.v, is_causal=causal, scale=1 / spec.scale_value)
                torch.addmm(w.b_o, y.transpose(0, 1).reshape(n, -1), w.w_o)
                parts["fused"].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in parts.items()}
    return {"bench": "first_request", "n": n, **{f"{k}_ms": round(v, 2) for k, v in med.items()},
            "ratio": round(med["http"] / med["fused"], 2)}  # fmt: skip


def pretrained(tokens: int = 32) -> list[dict[str, Any]]:
    """Loading each packaged model (once per process), and a trace of `tokens` tokens at its last layer."""
    from engine.pretrained import MiniLM, SmolLM2
    from engine.tracing import compute

    rows = []
    for finder in (MiniLM.find, SmolLM2.find):
        model = finder()
        if model is None:
            continue
        t0 = time.perf_counter()
        model.tensors()
        load = time.perf_counter() - t0
        name = model.info.name
        text = " ".join(["word"] * tokens)
        ids = model.tokenize(text)[:tokens]
        spec = make_spec(token_ids=ids, preset=name, layer=model.info.n_layer - 1, models={name: model})
        traced, _ = _timed(lambda spec=spec, model=model: compute(spec, model), 3, "cpu")
        rows.append({"bench": "pretrained", "model": name, "load_s": round(load, 3), "tokens": len(ids),
                     "layer": model.info.n_layer - 1, "trace_ms": round(traced * 1e3, 2)})  # fmt: skip
    return rows


def machine() -> dict[str, Any]:
    return {
        "bench": "machine",
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="128,512,1024")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--json", action="store_true", help="one JSON object per measurement")
    args = ap.parse_args()
    device = resolve(args.device)
    rows = [machine()]
    for n in (int(v) for v in args.sizes.split(",")):
        staged_vs_fused(n, 1, device)  # warm-up
        rows.append(staged_vs_fused(n, args.repeat, device))
    rows.append(toy_request(args.repeat))
    first = first_request(max(int(v) for v in args.sizes.split(",")), args.repeat)
    extra = [first, *pretrained()]
    if args.json:
        for r in rows + extra:
            print(orjson.dumps(r).decode())
        return
    m = rows[0]
    print(
        f"machine: {m['processor']}, {m['cpus']} CPUs, torch {m['torch']} ({m['threads']} threads), "
        f"device {device}{' ' + m['cuda'] if m['cuda'] else ''}"
    )
    print("| N | projection | scores | mask | softmax | weighted sum | staged | fused SDPA | staged / fused |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows[1:-1]:
        st = r["stages_ms"]
        print(
            f"| {r['n']} | "
            + " | ".join(f"{st[k]:.1f}" for k in st)
            + f" | {r['staged_ms']:.1f} | {r['fused_ms']:.1f} | {r['ratio']:.2f}× |"
        )
    toy = rows[-1]
    print(
        f"\ntoy request through the API: first {toy['first_ms']:.1f} ms, repeated (cached) {toy['cached_ms']:.2f} ms "
        f"({toy['first_ms'] / toy['cached_ms']:.0f}× faster)"
    )
    f = first
    print(
        f"first gpt2-small request, {f['n']} tokens, attention.npz softmax head 0: {f['http_ms']:.0f} ms end to end "
        f"against {f['fused_ms']:.0f} ms fused SDPA with the same projections = {f['ratio']:.2f}× "
        f"(sources {f['sources_ms']:.0f} ms, stages {f['stages_ms']:.0f} ms, check {f['check_ms']:.0f} ms, "
        f".npz {f['npz_ms']:.0f} ms)"
    )
    for r in extra[1:]:
        print(
            f"{r['model']}: loading {r['load_s']:.2f} s; {r['tokens']} tokens at layer {r['layer']}: {r['trace_ms']:.1f} ms"
        )


if __name__ == "__main__":
    main()
