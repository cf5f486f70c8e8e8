"""GET /api/v1/code: the snippets are RUN (a subprocess of this venv, offline) and print the page's numbers, held to
the page's JSON twin to 1e-4."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.conftest import make_client

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with make_client() as c:
        yield c


def run(*codes: str) -> list[dict[str, list[list[float]]]]:
    """Run snippets as a user would (python, from the repository, offline; each in a namespace of its own, all in
    one process so that torch is imported once) and read the matrices each prints."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    program = "".join(f"print('=== snippet {i}')\nexec(compile({c!r}, 'snippet{i}.py', 'exec'), {{'__name__': '__main__'}})\n"
                      for i, c in enumerate(codes))  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out: list[dict[str, list[list[float]]]] = []
    name = ""
    for line in done.stdout.splitlines():
        if line.startswith("=== snippet"):
            out.append({})
            continue
        words = line.split()
        try:
            out[-1][name].append([float(w) for w in words])
        except (ValueError, KeyError):
            name = line.strip()
            out[-1][name] = []
    return out


def close(printed: list[list[float]], shown: list[list[float | None]]) -> None:
    assert len(printed) == len(shown)
    for a_row, b_row in zip(printed, shown, strict=True):
        for a, b in zip(a_row, b_row, strict=True):
            if b is None:
                assert a == -math.inf
            else:
                assert a == pytest.approx(b, abs=1e-4)


def check(client: TestClient, pages: list[str], kinds: tuple[str, ...] = ("lab", "torch")) -> None:
    codes, expected = [], []
    for page in pages:
        twin = client.get(page, headers={"Accept": "application/json"}).json()
        for kind in kinds:
            r = client.get("/api/v1/code", params={"page": page, "kind": kind})
            assert r.status_code == 200, r.text
            assert r.headers["content-type"].startswith("text/x-python")
            codes.append(r.text)
            expected.append((page, kind, {m["name"]: m["values"] for m in twin["matrices"]}))
    for printed, (page, kind, shown) in zip(run(*codes), expected, strict=True):
        assert set(printed) == set(shown), (page, kind)
        for name, values in shown.items():
            close(printed[name], values)


TOY = [
    "tokens=cat+sat+on+the+mat&stage=1",
    "tokens=cat+sat+on+the+mat&stage=2&scale=none",
    "tokens=cat+sat+on+the+mat&stage=3&mask=sliding_window&window=2",
    "tokens=cat+sat+on+the+mat&stage=4&mask=causal",
    "tokens=cat+sat+on+the+mat&stage=4&mask=none&scale=dk",
    "tokens=cat+sat+on+the+mat&stage=4&mask=padding&pad_positions=1,3",
    "tokens=cat+sat+on+the+mat&stage=4&mask=prefix_lm&prefix=2",
    "tokens=a+b+c+d&stage=4&mask=document&segment_ids=0,0,1,1",
    "tokens=猫+坐+在+垫子+上&stage=5&lang=zh",
    "tokens=cat+sat+on&stage=4&d_model=8&n_heads=4&n_kv_heads=2&head=3",
    "tokens=the+cat+sat+on&stage=5&d_model=6&n_heads=3&head=2&seed=7",
]


def test_the_toy_labs_snippets_print_its_numbers(client: TestClient) -> None:
    """Every stage, several masks and scales, GQA, Chinese tokens, and the random GPT-2-sized block: both kinds."""
    check(client, ["/?" + q for q in TOY])


def test_a_real_models_torch_snippet_is_transformers_own_weights(client: TestClient, smollm2) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    check(client, ["/?preset=smollm2&text=The+cat+sat+on+the+mat&layer=3&head=4&stage=4"], kinds=("torch",))
    lab = client.get("/api/v1/code", params={"page": "/?preset=smollm2&text=The+cat&stage=4", "kind": "lab"})
    assert "Client(" in lab.text and "'preset': 'smollm2'" in lab.text
    compile(lab.text, "lab.py", "exec")


def test_htmx_gets_the_snippet_as_escaped_html(client: TestClient) -> None:
    r = client.get("/api/v1/code", params={"page": "/?tokens=a+b&stage=4"}, headers={"HX-Request": "true"})
    assert r.headers["content-type"].startswith("text/html")
    assert r.text.startswith("<code") and "trace(" in r.text


def test_pages_without_a_snippet_are_a_422_naming_the_field(client: TestClient) -> None:
    r = client.get("/api/v1/code", params={"page": "/?tokens=a+b&positions=rope&stage=4", "kind": "torch"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "kind"]
    r = client.get("/api/v1/code", params={"page": "/lens?text=a", "kind": "lab"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "page"]
