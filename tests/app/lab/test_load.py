"""A real server under the memory and load repros of the hardening issue: the process stays within its bound, and
/healthz answers while large requests queue."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest

from tests.servers import served
from tests.wait import wait_until

CACHE_MB, BUDGET_MB, RESPONSES_MB = 96, 384, 16
MEMO_MB = 64 + 32  # engine/sources.py: seeded weights and token embeddings


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    settings = {"PRETRAINED": "false", "THREADS": "1", "CACHE_MB": str(CACHE_MB), "MEMORY_BUDGET_MB": str(BUDGET_MB),
                "RESPONSE_CACHE_MB": str(RESPONSES_MB), "MAX_LARGE_CONCURRENT": "1"}  # fmt: skip
    with served(settings) as running:
        yield running


def test_generated_weights_count_against_the_cache(server) -> None:
    """Each request draws fresh 4 × 2048² weights (64 MiB); the cache must count them, so RSS stays bounded."""
    base, pid = server
    with httpx.Client(base_url=base, timeout=120) as c:
        c.get("/api/v1/attention", params={"d_model": 2048, "n_heads": 1, "tokens": "a", "stages": "softmax"})
        before = rss_mb(pid)
        for seed in range(1, 13):
            r = c.get("/api/v1/attention", params={"d_model": 2048, "n_heads": 1, "tokens": "a", "seed": seed,
                                                   "stages": "softmax"})  # fmt: skip
            assert r.status_code == 200
        grown = rss_mb(pid) - before
    # 12 × 64 MiB = 768 MiB if the weights were not counted. Counted, the process holds the trace cache, the
    # seeded-weights memo (64 MiB) and the allocator's slack.
    assert grown < CACHE_MB + MEMO_MB + 96, grown


def test_unused_parameters_count_against_the_response_cache() -> None:
    """1,556 URLs with a 60 KB unused parameter once added 93 MB the cache did not see: the key is counted now, so a
    1 MiB cache keeps at most 1 MiB of keys (it kept every one of 200 when only the ~1 KB bodies counted)."""
    from tests.conftest import make_client

    with make_client(response_cache_mb=1) as c:
        for i in range(200):
            assert c.get(f"/api/v1/attention?stages=softmax&seed={i}&compare_text=" + "x" * 20_000).status_code == 200
        responses = c.app.state.lab.responses
        assert responses.nbytes <= 2**20 and 0 < len(responses) <= 2**20 // 20_000


def computed(client: httpx.Client) -> list[str]:
    """What the server has computed so far, as /metrics counts it: the traces computed (the trace cache's misses)
    and each stage's computations."""
    counts = ("attention_lab_cache_misses_total", "attention_lab_stage_seconds_count")
    return sorted(line for line in client.get("/metrics").text.splitlines() if line.startswith(counts))


def test_a_json_answer_sure_to_be_too_large_is_refused_before_computing(server) -> None:
    """Decided from the sizes: nothing was computed. Read from the server's own counts, not from how long the answer
    took (under 1 s was asked: 0.09 s here, but a loaded machine can take longer to answer anything)."""
    base, _ = server
    toks = " ".join(f"t{i}" for i in range(1024))
    with httpx.Client(base_url=base, timeout=60) as c:
        before = computed(c)
        r = c.get("/api/v1/attention", params={"preset": "gpt2-small", "tokens": toks, "seed": 424242})
        assert r.status_code == 413 and r.json()["detail"][0]["loc"] == ["query", "stages"]
        assert computed(c) == before
        small = c.get("/api/v1/attention", params={"preset": "gpt2-small", "tokens": "a b c", "seed": 424242})
        assert small.status_code == 200 and computed(c) != before  # the counts do see a computation


def test_decode_applies_the_json_limit() -> None:
    from tests.conftest import make_client

    with make_client(json_limit_mb=0.05) as c:
        r = c.get("/api/v1/decode", params={"preset": "gpt2-small", "tokens": " ".join("abcdefghijklmnop")})
        assert r.status_code == 413 and "JSON limit" in r.json()["message"]
        assert c.get("/api/v1/decode").status_code == 200


def test_healthz_answers_while_large_requests_queue(server) -> None:
    base, _ = server
    toks = " ".join(f"t{i}" for i in range(1024))
    statuses: list[int] = []
    urls = ["/api/v1/attention.npz?" + urlencode({"preset": "gpt2-small", "tokens": toks, "seed": 1000 + i,
            "stages": "softmax", "heads": "0"}) for i in range(24)]  # fmt: skip

    def large(url: str) -> None:
        statuses.append(httpx.get(base + url, timeout=120).status_code)

    def in_flight() -> int:
        """How many of the large requests the server is serving now (known to /api/v1/progress until answered)."""
        return sum(httpx.get(base + "/api/v1/progress", params={"for": u}, timeout=10).status_code == 200 for u in urls)

    with httpx.Client(base_url=base, timeout=120) as c:  # one large request alone: how long one computes here, now
        t0 = time.perf_counter()
        assert c.get(urls[0].replace("seed=1000", "seed=999")).status_code == 200
        one_large = time.perf_counter() - t0
    threads = [threading.Thread(target=large, args=(url,)) for url in urls]
    for t in threads:
        t.start()
    wait_until(lambda: in_flight() >= 2, 60, "one large request computing and another queued", interval=0.05)
    # Each small request's own answer time, on a connection already open (not a client's setup). A small request
    # waiting behind the large ones would wait for the 20 or more queued ahead of it (each as long as `one_large`) or
    # be refused; answered beside them it took 0.06-0.56 s on the 2-core machine at a load of 7, with one large
    # request alone 1.5 s. The bound: twice a large request measured just now (a loaded machine slows both), never
    # under 2 s — a tenth of the wait behind the queue, 4x the worst seen.
    bound = max(2.0, 2 * one_large)
    worst = 0.0
    with httpx.Client(base_url=base, timeout=60) as c:
        c.get("/healthz")
        for _ in range(5):  # five samples while they queue
            t0 = time.perf_counter()
            assert c.get("/healthz").status_code == 200
            worst = max(worst, time.perf_counter() - t0)
            t0 = time.perf_counter()
            assert c.get("/api/v1/attention", params={"seed": int(t0 * 1000) % 10**6}).status_code == 200
            worst = max(worst, time.perf_counter() - t0)
    assert in_flight() >= 1  # measured under load: large requests were still being served
    for t in threads:
        t.join()
    assert worst < bound, (worst, bound, one_large)
    assert len(statuses) == 24 and set(statuses) <= {200, 503} and statuses.count(200) >= 1
