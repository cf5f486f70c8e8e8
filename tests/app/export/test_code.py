"""GET /api/v1/code: the snippets are RUN (a subprocess of this venv, offline) and print the page's numbers, held to
the page's JSON twin to 1e-4."""

from __future__ import annotations

import json
import math
import os
import re
import select
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from fastapi.testclient import TestClient

from app.export.code import printed
from tests.conftest import make_client
from tests.servers import served

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with make_client() as c:
        yield c


# One interpreter per module runs every snippet of its tests, as a user would (python, from the repository, offline),
# each in a namespace of its own: torch and transformers are imported once, not once a test. Snippets that load the
# same model get a fresh copy of it, loaded once (transformers de-quantizes a GGUF file for a minute on a busy
# machine, the file's metadata read once: tests/gguf_once.py): each snippet still hooks and runs a model of its own.
RUNNER = """import contextlib, copy, io, json, sys, traceback
reply, patched = sys.stdout, False
kept_open = contextlib.ExitStack()  # read_once() stays open as long as the interpreter (a bare __enter__() was closed
                                    # at once: its generator collected, its finally undid the patch)


def load_once():
    import transformers
    from tests.gguf_once import read_once

    kept_open.enter_context(read_once())
    for cls in (transformers.AutoModel, transformers.AutoModelForCausalLM):
        def cached(*a, _load=cls.from_pretrained, _kept={}, **k):
            key = repr((a, sorted(k.items(), key=str)))
            if key not in _kept:
                _kept[key] = _load(*a, **k)
            return copy.deepcopy(_kept[key])
        cls.from_pretrained = cached


for line in sys.stdin:
    codes, out, error = json.loads(line), io.StringIO(), ''
    try:
        with contextlib.redirect_stdout(out):
            if not patched and any('transformers' in c for c in codes):
                load_once()
                patched = True
            for i, c in enumerate(codes):
                print(f'=== snippet {i}')
                exec(compile(c, f'snippet{i}.py', 'exec'), {'__name__': '__main__'})
    except BaseException:
        error = traceback.format_exc()
    reply.write(json.dumps({'out': out.getvalue(), 'error': error}) + '\\n')
    reply.flush()
"""


class Snippets:
    """The module's interpreter: `run(*codes)` execs each snippet in a fresh namespace and reads what it printed."""

    def __init__(self, stderr: IO[str]) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
        self.stderr = stderr  # transformers' progress bars: read back only on a failure
        self.process = subprocess.Popen(
            [sys.executable, "-c", RUNNER], cwd=ROOT, env=env, text=True, bufsize=1,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
        )  # fmt: skip

    def run(self, *codes: str, timeout: float = 240) -> list[dict[str, list[list[float]]]]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(codes) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self.process.kill()
            self.stderr.seek(0)
            pytest.fail(f"the snippets ran past {timeout} s or their interpreter ended: {self.stderr.read()[-3000:]}")
        done = json.loads(line)
        assert not done["error"], done["error"][-3000:]
        out: list[dict[str, list[list[float]]]] = []
        name = ""
        for line in done["out"].splitlines():
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

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


@pytest.fixture(scope="module")
def lab_server() -> Iterator[str]:
    """One running lab (`attention-lab serve`) for the module's kind=lab snippets, started once: they only read
    pages from it (the toy block's, SmolLM2's), so no test leaves it a state another one's numbers depend on."""
    with served({}) as (base, _):
        yield base


@pytest.fixture(scope="module")
def snippets() -> Iterator[Snippets]:
    with tempfile.TemporaryFile("w+") as stderr:
        runner = Snippets(stderr)
        yield runner
        runner.close()


def close(printed: list[list[float]], shown: list[list[float | None]]) -> None:
    assert len(printed) == len(shown)
    for a_row, b_row in zip(printed, shown, strict=True):
        for a, b in zip(a_row, b_row, strict=True):
            if b is None:
                assert a == -math.inf
            else:
                assert a == pytest.approx(b, abs=1e-4)


def check(
    snippets: Snippets,
    client: TestClient,
    pages: list[str],
    kinds: tuple[str, ...] = ("lab", "torch"),
    timeout: float = 240,
) -> None:
    codes, expected = [], []
    for page in pages:
        twin = client.get(page, headers={"Accept": "application/json"}).json()
        for kind in kinds:
            r = client.get("/api/v1/code", params={"page": page, "kind": kind})
            assert r.status_code == 200, r.text
            assert r.headers["content-type"].startswith("text/x-python")
            codes.append(r.text)
            expected.append((page, kind, printed(twin)))
    assert all(shown for _, _, shown in expected)
    for got, (page, kind, shown) in zip(snippets.run(*codes, timeout=timeout), expected, strict=True):
        assert set(got) == set(shown), (page, kind)
        for name, values in shown.items():
            close(got[name], values)


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


def test_the_toy_labs_snippets_print_its_numbers(snippets: Snippets, client: TestClient) -> None:
    """Every stage, several masks and scales, GQA, Chinese tokens, and the random GPT-2-sized block: both kinds."""
    check(snippets, client, ["/?" + q for q in TOY])


BLOCK = [f"/block?tokens=cat+sat+on+the+mat&stage={stage}" for stage in (
    "ln1", "projection", "scores", "mask", "softmax", "weighted_sum", "residual1", "ln2", "ffn_hidden", "ffn_out",
    "output")] + ["/block?tokens=a+b+c+d&stage=output&mask=none&seed=3&d_model=8&n_heads=2&head=1&bias=true"]  # fmt: skip


def test_the_gpt2_blocks_snippets_print_its_numbers(snippets: Snippets, client: TestClient, lab_server: str) -> None:
    """/block (GPT-2's block: pre-norm LayerNorm, attention, GELU-tanh MLP, residuals), every stage, both kinds:
    the lab's `Client` against a running lab, plain torch from the engine's seeded inputs alone."""
    check(snippets, client, BLOCK, kinds=("torch",))
    check_lab(snippets, client, lab_server, BLOCK[-3:])


def check_lab(snippets: Snippets, client: TestClient, base: str, pages: list[str]) -> None:
    """kind=lab against the running lab at `base`: the snippet names it, and prints the page's numbers."""
    codes, expected = [], []
    for page in pages:
        twin = client.get(page, headers={"Accept": "application/json"}).json()
        code = client.get("/api/v1/code", params={"page": page, "kind": "lab"}).text
        assert "Client('http://testserver')" in code
        codes.append(code.replace("http://testserver", base))
        expected.append(printed(twin))
    for got, shown in zip(snippets.run(*codes), expected, strict=True):
        assert set(got) == set(shown)
        for name, values in shown.items():
            close(got[name], values)


REAL = [
    "/?preset=smollm2&text=The+cat+sat+on+the+mat&layer=3&head=4&stage=4",  # a chosen layer and head
    "/lens?text=The+cat+sat&ablate=L1+H0,L3+H2",  # the logit lens, two heads knocked out
    "/predict?text=The+cat+sat+on&ablate=L0+H1&ablate_mode=mean",  # a knock-out: the loss per position
]


@pytest.mark.timeout(1200)
def test_a_real_models_snippets_are_transformers_own_numbers(
    snippets: Snippets, client: TestClient, smollm2, lab_server: str
) -> None:  # type: ignore[no-untyped-def]
    """SmolLM2 at a chosen layer and head, its logit lens and knock-outs: kind=torch with transformers' own model
    (eager attention, float32), kind=lab against a running lab serving it."""
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    check(snippets, client, REAL, kinds=("torch",), timeout=600)  # transformers de-quantizes the GGUF file once
    check_lab(snippets, client, lab_server, REAL)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_first_visit_to_lens_has_its_torch_snippet(client: TestClient, smollm2, lang: str) -> None:  # type: ignore[no-untyped-def]
    """/lens with no text in its URL shows its language's first text: its torch snippet reads that text's ids (it
    asked /api/v1/logit_lens with no query, a 422 in the browser's console, and the snippet was refused), read as
    the API reads them without asking it (a heavy request, refused while the page's other snippet computes); its
    lab snippet reads the page in the page's language."""
    page = f"/lens?lang={lang}"
    twin = client.get(page, headers={"Accept": "application/json"}).json()
    r = client.get("/api/v1/code", params={"page": page, "kind": "torch"})
    assert r.status_code == 200, r.text
    ids = client.get("/api/v1/logit_lens", params={"text": twin["text"]}).json()["token_ids"]
    assert f"ids = torch.tensor([{ids!r}])" in r.text
    # The lab's client asks for the page in its language, whose first text it is (the client's default is English).
    lab = client.get("/api/v1/code", params={"page": page, "kind": "lab"}).text
    assert ("Client('http://testserver', lang='zh')" if lang == "zh" else "Client('http://testserver')") in lab


ZH_PAGES = ["/?tokens=cat+sat+on+the+mat&stage=4&mask=causal&lang=zh",
            "/block?tokens=cat+sat+on+the+mat&stage=output&lang=zh"]  # fmt: skip


def comment_words(lang: str) -> set[str]:
    """Each line of the snippets' comments and docstrings in `lang` (the catalogues' export.code.c.*), but the ones
    written the same in both languages."""
    from app.templating import MESSAGES

    def lines(table: dict[str, str]) -> set[str]:  # the words between the placeholders, long enough to say something
        return {part.strip() for k, v in table.items() if k.startswith("export.code.c.") for line in v.splitlines()
                for part in re.split(r"\{[^}]*\}", line) if len(re.findall(r"[A-Za-z\u4e00-\u9fff]", part)) >= 8}  # fmt: skip

    return lines(MESSAGES[lang]) - lines(MESSAGES["zh" if lang == "en" else "en"])


def test_a_chinese_pages_snippets_comment_in_chinese_and_still_run(snippets: Snippets, client: TestClient) -> None:
    """A zh page's snippets say their docstrings and comments in Chinese (the catalogues' export.code.c.*: they were
    English on every page), by the page's lang or the reader's Accept-Language; they run and print the page's
    numbers as before."""
    english, chinese = comment_words("en"), comment_words("zh")
    for page in ZH_PAGES:
        for kind in ("lab", "torch") if page.startswith("/?") else ("torch",):
            for url, headers in ((page, {}), (page.replace("&lang=zh", ""), {"Accept-Language": "zh-CN,zh;q=0.9"})):
                text = client.get("/api/v1/code", params={"page": url, "kind": kind}, headers=headers).text
                compile(text, "snippet.py", "exec")
                assert not [w for w in english if w in text], (url, kind, [w for w in english if w in text])
                assert len([w for w in chinese if w in text]) >= (3 if kind == "lab" else 8), (url, kind, text)
    check(snippets, client, ZH_PAGES[:1])
    check(snippets, client, ZH_PAGES[1:], kinds=("torch",))


def test_htmx_gets_the_snippet_as_escaped_html(client: TestClient) -> None:
    r = client.get("/api/v1/code", params={"page": "/?tokens=a+b&stage=4"}, headers={"HX-Request": "true"})
    assert r.headers["content-type"].startswith("text/html")
    assert r.text.startswith("<code") and "trace(" in r.text


def test_pages_without_a_snippet_are_a_422_naming_the_field(client: TestClient) -> None:
    r = client.get("/api/v1/code", params={"page": "/?tokens=a+b&positions=rope&stage=4", "kind": "torch"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "kind"]
    r = client.get("/api/v1/code", params={"page": "/block?tokens=a+b&stage=4&ffn=swiglu", "kind": "torch"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "page"]


ATTENTION_PAGES = [
    "/heads?text=The+cat+sat&head=18.6",  # the chosen head's pattern on the induction probe
    "/model?text=The+cat+sat+on+the+mat",  # the entropy of every head
    "/model?text=The+cat+sat+on+the+mat&stat=sink&ablate=L1+H0",  # the clean grid beside a knock-out
    "/model?text=The+cat+sat&stat=previous",
    "/model?text=The+cat+sat&stat=self",
    "/sinks?text=The+cat+sat+on+the+mat&layer=3&head=2",  # A and A′ without the sink
]


@pytest.mark.timeout(1200)
def test_heads_model_and_sinks_torch_snippets_are_transformers_own_numbers(
    snippets: Snippets, client: TestClient, smollm2
) -> None:  # type: ignore[no-untyped-def]
    """/heads (the chosen head on the probe), /model (one statistic of every head, recomputed from transformers'
    attention weights) and /sinks (the weights with and without key 0), kind=torch, held to the page's twin."""
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    check(snippets, client, ATTENTION_PAGES, kinds=("torch",), timeout=600)


def test_a_real_blocks_page_has_no_numbers_to_print(client: TestClient, smollm2) -> None:  # type: ignore[no-untyped-def]
    """A real model's /block shows heat maps, no numbers: kind=torch says so, naming the page."""
    page = "/block?preset=smollm2&text=The+cat&stage=softmax"
    r = client.get("/api/v1/code", params={"page": page, "kind": "torch"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "page"]


@pytest.mark.parametrize("page", ["/sinks?text=The+cat", "/model?text=The+cat", "/heads?text=The+cat"])
def test_the_show_code_panel_offers_the_torch_snippet(client: TestClient, smollm2, page: str) -> None:  # type: ignore[no-untyped-def]
    """/heads, /model and /sinks now have both snippets: their "Show code" panel links and loads kind=torch."""
    html = client.get(page).text
    assert 'data-code="torch"' in html and 'data-code-text="torch"' in html
