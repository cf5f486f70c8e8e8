"""Staged attention against fused SDPA for gpt2-small, and the toy request through the API.

    python -m bench.attention [--sizes 128,512,1024] [--repeat 5] [--json]

For each N: the median time of each of the five stages, their total, the fused path with the same projections
(X W_Q … → scaled_dot_product_attention → W_O), and staged / fused. Then the toy request's time through the
API, first (computed) and repeated (served from the cache), and the first request for a large trace: through a
real `attention-lab serve` on a loopback port (httpx), against the same attention written as a user would in
PyTorch in one process with its weights already made. Ratios come from one run on one machine.
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
        # 4-D, as a user's (batch, heads, N, d_k): PyTorch's fused kernel; 3-D inputs take its unfused math path.
        y = F.scaled_dot_product_attention(q.q[None], q.k[None], q.v[None], is_causal=True, scale=1 / s)[0]
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
    parts: dict[str, list[float]] = {"http": [], "sources": [], "stages": [], "check": [], "check_all": [], "npz": [],
                                     "fused": []}  # fmt: skip
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
                trace = attention.run(spec, x, w)
                parts["stages"].append(sum(sec for _, sec in trace.timings))
                t0 = time.perf_counter()
                trace.verify((0,))  # the check of what the request shows
                parts["check"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                trace.verify(range(spec.n_heads))  # every head (what a page shows)
                parts["check_all"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                to_npz(trace, ("softmax",), (0,))
                parts["npz"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                p = attention.project(x, w, spec)
                causal = spec.mask == "causal"
                y = F.scaled_dot_product_attention(p.q[None], p.k[None], p.v[None], is_causal=causal,
                                                   scale=1 / spec.scale_value)[0]  # fmt: skip
                torch.addmm(w.b_o, y.transpose(0, 1).reshape(n, -1), w.w_o)
                parts["fused"].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in parts.items()}
    return {"bench": "first_request", "n": n, **{f"{k}_ms": round(v, 2) for k, v in med.items()},
            "ratio": round(med["http"] / med["fused"], 2)}  # fmt: skip


def _user_attention(n: int) -> Callable[[], torch.Tensor]:
    """gpt2-small attention over n tokens as a user writes it in PyTorch, its weights and input already made and
    warm (called three times): one `nn.Linear` for Q, K and V, `scaled_dot_product_attention(is_causal=True)`, W_O."""
    from torch import nn

    spec = make_spec([f"t{i}" for i in range(n)], preset="gpt2-small")
    d, h = spec.d_model, spec.n_heads
    with torch.inference_mode():
        x, w = sources.load(spec, torch.device("cpu"), torch.float32)
        qkv, out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        qkv.weight.copy_(torch.cat([w.w_q, w.w_k, w.w_v], dim=1).T)
        biases = [b for b in (w.b_q, w.b_k, w.b_v) if b is not None]
        qkv.bias.copy_(torch.cat(biases) if biases else torch.zeros(3 * d))
        out.weight.copy_(w.w_o.T)
        out.bias.copy_(w.b_o if w.b_o is not None else torch.zeros(d))

    @torch.inference_mode()
    def user() -> torch.Tensor:
        q, k, v = qkv(x).view(1, n, 3, h, d // h).permute(2, 0, 3, 1, 4)  # each (1, H, N, d_k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return out(y[0].transpose(0, 1).reshape(n, d))

    for _ in range(3):
        user()
    return user


def _post_large(client: Any, toks: list[str], seed: int) -> tuple[float, int]:
    """One gpt2-small `POST /api/v1/attention.npz` for the softmax of head 0 that no cache holds: seconds, bytes."""
    body = {"preset": "gpt2-small", "tokens": toks, "stages": ["softmax"], "heads": [0], "seed": seed}
    t0 = time.perf_counter()
    r = client.post("/api/v1/attention.npz", json=body)
    took = time.perf_counter() - t0
    assert r.status_code == 200 and r.headers["x-cache"] == "miss", r.text[:300]
    return took, len(r.content)


SERVED = {"DEVICE": "cpu", "PRETRAINED": "false"}  # the servers the first-trace benchmarks start


def fresh_served(n: int = 1024, seeds: int = 3, then: int = 2, pause_s: float = 1.0) -> dict[str, Any]:
    """A freshly started server's first large trace, `seeds` times: for each seed a new `attention-lab serve` (on a
    free 127.0.0.1 port, once /healthz answers) whose very first request is that seed's gpt2-small
    `POST /api/v1/attention.npz` (softmax of head 0), against the user's warm fused attention (`_user_attention`,
    the median of three runs right after it); one ratio per seed. The last server then answers `then` more seeds,
    each the first request for its seed and `pause_s` after the answer before (a user's next click; a fresh server's
    arena refills in such a pause, engine/arena.py `Arena.stock`): a fresh server's second and third large traces."""
    import httpx

    from tests.servers import server

    toks = [f"t{i}" for i in range(n)]
    user = _user_attention(n)
    firsts, fused, following = [], [], []
    for i in range(seeds):
        with server(SERVED, wait_s=60) as running, httpx.Client(base_url=running.base, timeout=120) as client:
            firsts.append(_post_large(client, toks, 8_100_000 + 10 * i)[0])
            fused.append(_timed(user, 3, "cpu")[0])  # the warm path is steady: a median of three
            for j in range(then if i == seeds - 1 else 0):
                time.sleep(pause_s)
                following.append(_post_large(client, toks, 8_100_001 + 10 * i + j)[0])
    ms = [round(s * 1e3, 1) for s in firsts]
    return {"bench": "fresh_served", "n": n, "first_ms": ms, "fused_warm_ms": [round(f * 1e3, 1) for f in fused],
            "ratios": [round(s / f, 2) for s, f in zip(firsts, fused, strict=True)],
            "then_ms": [round(s * 1e3, 1) for s in following], "pause_s": pause_s, "load_average": round(os.getloadavg()[0], 2)}  # fmt: skip


def first_served(n: int = 1024, repeat: int = 5) -> dict[str, Any]:
    """The first gpt2-small request for the softmax of head 0 as .npz (`POST /api/v1/attention.npz`, a fresh seed
    each try: embeddings, weights, trace, check and answer all computed), through `attention-lab serve` started on
    a free 127.0.0.1 port and asked over HTTP by httpx, against what a user would write in PyTorch in this process:
    one `nn.Linear` for Q, K and V with its weights already made, `scaled_dot_product_attention(is_causal=True)`
    and W_O, warm. The two alternate, so both see the same load on the machine; medians of `repeat`.

    The server is warm too: one small request, then two large ones with other seeds (the trace cache full, its
    memory recycled, as in a server that has been running). The first of those, the server's very first large
    trace, is reported on its own (`cold_ms`)."""
    import httpx

    from tests.servers import server

    toks = [f"t{i}" for i in range(n)]
    user = _user_attention(n)
    served, fused, sizes = [], [], []
    with server(SERVED, wait_s=60) as running, httpx.Client(base_url=running.base, timeout=120) as client:
        warm = client.post("/api/v1/attention.npz", json={"preset": "gpt2-small", "tokens": "warm up"})
        assert warm.status_code == 200, warm.text[:300]

        def first(seed: int) -> float:
            took, size = _post_large(client, toks, seed)
            sizes.append(size)
            return took

        cold = first(7_999_998)
        first(7_999_999)
        for i in range(repeat):
            served.append(first(8_000_000 + i))
            t0 = time.perf_counter()
            user()
            fused.append(time.perf_counter() - t0)
    s_ms, f_ms = statistics.median(served) * 1e3, statistics.median(fused) * 1e3
    return {"bench": "first_served", "n": n, "served_ms": round(s_ms, 2), "fused_warm_ms": round(f_ms, 2),
            "ratio": round(s_ms / f_ms, 2), "cold_ms": round(cold * 1e3, 2), "body_bytes": sizes[-1],
            "load_average": round(os.getloadavg()[0], 2)}  # fmt: skip


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
    ap.add_argument("--fresh", action="store_true", help="only a freshly started server's first large trace")
    args = ap.parse_args()
    if args.fresh:
        _print_fresh(fresh_served(), args.json)
        return
    device = resolve(args.device)
    rows = [machine()]
    for n in (int(v) for v in args.sizes.split(",")):
        staged_vs_fused(n, 1, device)  # warm-up
        rows.append(staged_vs_fused(n, args.repeat, device))
    rows.append(toy_request(args.repeat))
    n_first = max(int(v) for v in args.sizes.split(","))
    first = first_request(n_first, args.repeat)
    served = first_served(n_first, args.repeat)
    fresh = fresh_served(n_first)
    extra = [first, served, *pretrained()]
    if args.json:
        for r in rows + extra:
            print(orjson.dumps(r).decode())
        _print_fresh(fresh, True)
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
    f, sv = first, served
    print(
        f"first gpt2-small request, {sv['n']} tokens, POST attention.npz softmax head 0, fresh seed, through "
        f"`attention-lab serve` on loopback (httpx): {sv['served_ms']:.0f} ms against {sv['fused_warm_ms']:.0f} ms "
        f"for the same attention in PyTorch in one process (nn.Linear QKV with its weights made, SDPA is_causal, "
        f"W_O; warm) = {sv['ratio']:.2f}× (the server's very first large trace: {sv['cold_ms']:.0f} ms; "
        f"load average {sv['load_average']:.2f})"
    )
    print(
        f"  in-process (TestClient): {f['http_ms']:.0f} ms against {f['fused_ms']:.0f} ms fused SDPA projecting "
        f"with fresh weights = {f['ratio']:.2f}× (sources {f['sources_ms']:.0f} ms, stages {f['stages_ms']:.0f} ms, "
        f"check of head 0 {f['check_ms']:.0f} ms (every head {f['check_all_ms']:.0f} ms), .npz {f['npz_ms']:.0f} ms)"
    )
    for r in extra[2:]:
        print(
            f"{r['model']}: loading {r['load_s']:.2f} s; {r['tokens']} tokens at layer {r['layer']}: {r['trace_ms']:.1f} ms"
        )
    _print_fresh(fresh, False)


def _print_fresh(r: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(orjson.dumps(r).decode())
        return
    pairs = ", ".join(f"{s:.0f} ms against {f:.0f} ms ({q:.2f}×)" for s, f, q in
                      zip(r["first_ms"], r["fused_warm_ms"], r["ratios"], strict=True))  # fmt: skip
    print(
        f"a freshly started server's first request, gpt2-small {r['n']} tokens, POST attention.npz softmax head 0, "
        f"one server per seed, against the warm fused path: {pairs}; the last server's next "
        f"{len(r['then_ms'])} seeds, each {r['pause_s']:.1f} s after the answer before: "
        f"{', '.join(f'{s:.0f} ms' for s in r['then_ms'])} "
        f"(load average {r['load_average']:.2f})"
    )


if __name__ == "__main__":
    main()
