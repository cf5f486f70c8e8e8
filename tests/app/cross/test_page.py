"""/cross: cross-attention's five stages on a held-out pair, every number parsed back from the page and checked
against its own definition (scores = QKᵀ/√d_k, the pad columns −∞, softmax rows summing to 1, the weighted sum
= weights · V); the untrained model when no run is chosen; a run's snapshots as step links; en and zh; bad input
a 422 naming the field; the form starting a run."""

from __future__ import annotations

import math
import re
import time

import numpy as np
import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.app.train.test_encdec import TINY, events_until_end
from tests.wait import wait_until


@pytest.fixture(scope="module")
def client():
    app = create_app(Settings(pretrained=False, train_max_steps=3000))
    with TestClient(app) as c:
        yield c


def matrix(table) -> np.ndarray:
    rows = [
        [math.inf * -1 if td.text == "−∞" else float(td.text) for td in tr.select("td")]
        for tr in table.select("tbody tr")
    ]
    return np.array(rows)


def check_stages(soup: BeautifulSoup) -> tuple[int, int]:
    ids = [li["id"] for li in soup.select(".cross-stages > li")]
    assert ids == ["stage-projection", "stage-scores", "stage-mask", "stage-softmax", "stage-weighted_sum"]
    q, k, v = (matrix(t) for t in soup.select("#stage-projection table"))
    scores = matrix(soup.select_one("#stage-scores table"))
    masked = matrix(soup.select_one("#stage-mask table.masked"))
    weights = matrix(soup.select_one("#stage-softmax table"))
    out = matrix(soup.select_one("#stage-weighted_sum table"))
    n_dec, n_enc = scores.shape
    assert q.shape[0] == n_dec and k.shape[0] == v.shape[0] == n_enc
    assert np.allclose(scores, q @ k.T / math.sqrt(q.shape[1]), atol=0.02)  # printed to 3 decimals
    pads = [i for i, th in enumerate(soup.select("#stage-scores thead th")[1:]) if "pad" in (th.get("class") or [])]
    assert pads and np.isneginf(masked[:, pads]).all()
    assert np.isfinite(np.delete(masked, pads, axis=1)).all()  # no causal mask: every real source column is read
    assert np.allclose(weights.sum(1), 1, atol=0.01) and (weights[:, pads] == 0).all()
    assert np.allclose(out, weights @ v, atol=0.02)
    assert soup.select_one(".cross-nocausal")
    return n_dec, n_enc


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_untrained_model_through_five_stages(client: TestClient, lang: str) -> None:
    r = client.get(f"/cross?lang={lang}")
    assert r.status_code == 200
    soup = BeautifulSoup(r.text, "html.parser")
    assert check_stages(soup) == (6, 8)  # <bos> and 5 symbols; 5 symbols and 3 pads: not square
    assert soup.select_one("#cross-run")["data-status"] == "untrained"
    if lang == "zh":
        assert "交叉注意力不加因果掩码" in soup.select_one(".cross-nocausal").text
    twin = client.get(f"/cross.json?lang={lang}").json()
    assert twin["view"] == "cross" and len(twin["stages"]["weights"]) == 6 and twin["stages"]["mask"][-1] is None


def test_a_trained_run_shows_its_snapshots(client: TestClient) -> None:
    run_id = client.post("/api/v1/train", json=TINY).json()["id"]
    assert events_until_end(client, run_id)[-1][1]["status"] == "done"
    soup = BeautifulSoup(client.get(f"/cross?run={run_id}").text, "html.parser")
    assert soup.select_one("#cross-run")["data-status"] == "done"
    snaps = soup.select(".cross-snaps li")
    assert len(snaps) == 3 and snaps[-1].get("aria-current") == "true" and snaps[0].select_one("svg")
    first = BeautifulSoup(client.get(f"/cross?run={run_id}&snap=0&head=1").text, "html.parser")
    assert first.select(".cross-snaps li")[0].get("aria-current") == "true"
    assert check_stages(first) == (5, 5)  # TINY: 4 symbols and <eos> … over 5 source slots
    assert soup.select_one("svg[data-chart='loss']")
    assert run_id in [a.text.split(" · ")[0] for a in soup.select(".cross-runs a")]


def test_the_runs_line_follows_the_run_as_its_card_does(client: TestClient) -> None:
    """The runs line is redrawn with the run's card (the live block that each live run's events ask for with htmx),
    so when the card says the run is done, so does the line: no more "0/40 · training" beside "step 40 of 40"."""
    run_id = client.post("/api/v1/train", json=TINY).json()["id"]
    first = client.get(f"/cross?run={run_id}").text  # the page as first drawn, while the run is queued or trains
    assert BeautifulSoup(first, "html.parser").select_one("#train-live .cross-runs")

    def both() -> tuple[dict, str] | None:  # the fragment, as the page's script asks for it: the card and the line
        soup = BeautifulSoup(client.get(f"/cross?run={run_id}", headers={"HX-Request": "true"}).text, "html.parser")
        card = soup.select_one("#cross-run")
        line = next(a.text for a in soup.select(".cross-runs a") if a.text.startswith(run_id))
        assert line.split(" · ")[2] == f"{card['data-step']}/40", line  # the same step as the card, each redraw
        return (card, line) if card["data-status"] == "done" else None

    card, line = wait_until(both, 120, "the run's card done")
    assert "step 40 of 40" in card.text
    assert line == f"{run_id} · reverse a sequence · 40/40 · done"


def test_a_queued_run_is_shown_as_its_own_model_before_its_first_snapshot(client: TestClient) -> None:
    """Until a run's first snapshot the card showed the DEFAULT config's untrained model: a queued 1,234-step run of
    number words said "reverse a sequence · step 0 of 500" while the runs line beside it said 0/1234. It shows the
    run's own model as initialised now (the weights the run starts from): its task, its steps, its source length."""
    hold = client.post("/api/v1/train", json=TINY | {"steps": 3000, "eval_every": 500}).json()  # the training slot
    queued = client.post("/api/v1/train", json=TINY | {"task": "numbers", "steps": 1234}).json()
    try:
        v = client.get(f"/cross.json?run={queued['id']}").json()
        assert v["run_status"] == "queued" and [s["step"] for s in v["snaps"]] == [0]  # behind `hold` (one at a time)
        assert (v["task"], v["steps"], v["step"]) == ("numbers", 1234, 0)
        own = client.get(f"/cross.json?run={queued['id']}&lang=zh").json()
        assert own["source"] == v["source"] and len(v["source"]) != len(client.get("/cross.json").json()["source"])
    finally:
        for run in (queued, hold):
            client.post(f"/api/v1/train/{run['id']}/stop", json={"stop_token": run["stop_token"]})
    for run in (queued, hold):
        events_until_end(client, run["id"])


@pytest.mark.parametrize(("query", "field"), [("run=nope", "run"), ("head=9", "head"), ("snap=-1", "snap"),
                                             ("preset=train-nope", "preset")])  # fmt: skip
def test_bad_input_is_422_naming_the_field(client: TestClient, query: str, field: str) -> None:
    r = client.get(f"/cross?{query}")
    assert r.status_code == 422 and field in r.headers.get("X-Lab-Error", "")
    # the live block alone, as htmx asks for it: the error in its place, not a 500
    r = client.get(f"/cross?{query}", headers={"HX-Request": "true"})
    assert r.status_code == 422 and field in r.headers.get("X-Lab-Error", "")
    assert field in BeautifulSoup(r.text, "html.parser").select_one("#train-live .error").text


def test_the_direction_is_offered_for_number_words_alone(client: TestClient) -> None:
    """The form's "Numbers: direction" select is drawn hidden unless the task chosen is number words (the task of the
    run shown; reversing by default): the server decides, cross.css follows a change of task without a script."""

    def form(query: str) -> tuple[str, bool, str]:
        soup = BeautifulSoup(client.get(f"/cross?{query}").text, "html.parser")
        direction = soup.select_one(".train-form label.cross-direction")
        chosen = soup.select_one("select[name=task] option[selected]")["value"]
        return chosen, "off" in direction["class"], direction.select_one("option[selected]")["value"]

    assert form("lang=zh") == ("reverse", True, "en-zh")  # hidden
    body = {"arch": "encoder-decoder", "task": "numbers", "steps": 2, "n_snapshots": 2, "direction": "zh-en"}
    run_id = client.post("/api/v1/train", json=body).json()["id"]
    assert events_until_end(client, run_id)[-1][1]["status"] == "done"
    assert form(f"run={run_id}") == ("numbers", False, "zh-en")  # shown, as the run was trained
    reverse = client.post("/api/v1/train", json=TINY).json()["id"]
    assert events_until_end(client, reverse)[-1][1]["status"] == "done"
    assert form(f"run={reverse}")[:2] == ("reverse", True)


def test_the_form_starts_a_run(client: TestClient) -> None:
    form = {"arch": "encoder-decoder", "task": "reverse", "steps": "3", "seed": "1", "lang": "zh", "causal": "1"}
    r = client.post("/train", data=form, follow_redirects=False, headers={"Sec-Fetch-Site": "same-origin"})
    assert r.status_code == 303 and r.headers["location"].startswith("/cross?run=")
    run_id = r.headers["location"].split("run=")[1].split("&")[0]
    assert events_until_end(client, run_id)[-1][1]["status"] == "done"
    state = client.get(f"/api/v1/train/{run_id}").json()
    assert state["config"]["steps"] == 3 and state["config"]["seed"] == 1
    bad = client.post("/train", data=form | {"steps": "0"}, follow_redirects=False)
    assert bad.status_code == 422
    # a person's bad value: /cross again in the form's language with the error under its field (was the API's JSON)
    assert bad.headers["content-type"].startswith("text/html"), bad.text[:300]
    said = BeautifulSoup(bad.text, "html.parser").select_one(".train-form #train-error-steps")
    assert said is not None and "“步数” 有误：应大于或等于 1" in said.get_text(), bad.text[:2000]


# What a student types on /cross: every field the form shows, away from its default, and one of them wrong; (what is
# wrong, the field, the words of its error in en and zh).
TYPED = {"arch": "encoder-decoder", "task": "numbers", "direction": "zh-en", "n_layer": "2", "n_heads": "2",
         "d_model": "64", "steps": "100", "seed": "7"}  # fmt: skip
CASES = {
    "pydantic": ({"steps": "0"}, "steps", {"en": ("Steps", "greater than or equal to 1"), "zh": ("步数", "应大于或等于 1")}),
    "digits": ({"seed": "x7"}, "seed", {"en": ("Seed", "written with the digits 0-9"), "zh": ("随机种子", "用数字 0-9 写成")}),
    "engine": ({"d_model": "33", "n_heads": "4"}, "d_model", {"en": ("d_model", "33 must divide into 4 heads"),
                                                              "zh": ("d_model", "33 必须能平均分给 4 个头")}),
    "server": ({"steps": "4000"}, "steps", {"en": ("Steps", "must be at most 3000 on this server"),
                                            "zh": ("步数", "在本服务器上最多为 3000")}),
}  # fmt: skip


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_value_in_the_form_answers_the_page_with_the_error_under_its_field(
    client: TestClient, case: str, lang: str
) -> None:
    """/cross's form posts to /train's handler: a bad value there answered the API's JSON to a person. Now it is
    /cross again, a 422 in the form's language, the error under the field it names (by its label), what was typed
    kept, and no run started; a script that asks for JSON keeps the API's answer."""
    wrong, field, words = CASES[case]
    form = TYPED | wrong | {"lang": lang}
    before = client.get("/api/v1/train").json()
    r = client.post("/train", data=form, headers={"Sec-Fetch-Site": "same-origin"}, follow_redirects=False)
    assert r.status_code == 422 and r.headers["content-type"].startswith("text/html"), r.text[:300]
    assert r.headers["cache-control"] == "no-store" and field in r.headers["X-Lab-Error"]
    page = BeautifulSoup(r.text, "html.parser")
    assert page.html["lang"].startswith(lang) and page.select_one("main.cross-page")
    said = page.select_one(f".train-form #train-error-{field}")
    assert said is not None, r.text[:2000]
    label, sentence = words[lang]
    assert f"“{label}”" in said.get_text() and sentence in said.get_text(), said.get_text()
    if lang == "zh":
        assert not re.search(r"[A-Za-z]{2,}(?:[ ,;:]+[A-Za-z]{2,}){2,}", said.get_text()), said.get_text()
    assert page.select_one(f".train-form [name={field}]")["aria-invalid"] == "true"
    assert len(page.select(".field-error")) == 1 and not page.select(".error")  # the one error, under its field
    assert page.select_one(".train-form details, details.train-form").has_attr("open")
    for name, value in form.items():  # the values as typed, kept (the wrong one too, to correct it)
        if name in ("task", "direction"):
            assert page.select_one(f".train-form select[name={name}] option[selected]")["value"] == value
        elif name in ("lang", "arch"):
            assert page.select_one(f".train-form input[name={name}]")["value"] == value
        else:
            assert page.select_one(f".train-form input[name={name}]")["value"] == value
    assert client.get("/api/v1/train").json() == before  # nothing started
    # The same post asking for JSON (a script): the API's 422, naming the field.
    r = client.post("/train", data=form, headers={"Sec-Fetch-Site": "same-origin", "Accept": "application/json"})
    assert r.status_code == 422 and r.headers["content-type"].startswith("application/json")
    assert r.json()["detail"][0]["loc"][-1] == field and not re.search(r"[\u4e00-\u9fff]", r.text), r.text
    # and the page itself, asked for again, is the plain page (the refusal was never stored as /cross)
    assert not BeautifulSoup(client.get(f"/cross?lang={lang}").text, "html.parser").select(".field-error")


# -- attention is nonlinear ---------------------------------------------------------------------------------------
def independent_nonlinearity(p: dict, c: dict, source: list[str], target: list[str], head: int) -> dict:
    """The panel's numbers recomputed another way: the inputs X and M of the last decoder layer's cross-attention
    taken by a hook from torch's own nn.Transformer loaded with the run's weights, the head in numpy (its own
    softmax), Y and N the same states reversed (the source's padding left in place)."""
    import torch

    from engine.encdec_tasks import make_task

    task = make_task(c["task"], c["seed"], c["length"], c["symbols"], c["max_number"], c["direction"])
    src, tgt = task.encode([(source, target)])
    tgt_in = tgt[:, : len(target) + 1]
    d, h, layers = c["d_model"], c["n_heads"], c["n_layer"]
    net = torch.nn.Transformer(d_model=d, nhead=h, num_encoder_layers=layers, num_decoder_layers=layers,
                               dim_feedforward=4 * d, dropout=0.0, activation="gelu", batch_first=True,
                               norm_first=True, layer_norm_eps=1e-5)  # fmt: skip
    net.load_state_dict({k.removeprefix("transformer."): v for k, v in p.items() if k.startswith("transformer.")})
    net.eval()
    seen = {}
    net.decoder.layers[-1].multihead_attn.register_forward_pre_hook(lambda mod, args: seen.setdefault("in", args))
    n = tgt_in.shape[1]
    with torch.no_grad():
        net(p["src_embed.weight"][src] + p["src_pos.weight"][: src.shape[1]],
            p["tgt_embed.weight"][tgt_in] + p["tgt_pos.weight"][:n], tgt_mask=net.generate_square_subsequent_mask(n),
            src_key_padding_mask=src == 0, memory_key_padding_mask=src == 0, tgt_is_causal=True)  # fmt: skip
    x, m = (t[0].double().numpy() for t in seen["in"][:2])
    w = p[f"transformer.decoder.layers.{layers - 1}.multihead_attn.in_proj_weight"].double().numpy()
    dk = d // h
    wq, wk, wv = (w[j * d + head * dk : j * d + (head + 1) * dk] for j in range(3))
    real = [j for j, s in enumerate(src[0].tolist()) if s != 0]

    def attend(q, s):
        scores = (q @ wq.T) @ (s @ wk.T).T / math.sqrt(dk)
        scores[:, [j for j in range(s.shape[0]) if j not in real]] = -np.inf
        e = np.exp(scores - scores.max(1, keepdims=True))
        weights = e / e.sum(1, keepdims=True)
        return weights @ (s @ wv.T), weights

    y, nn_ = x[::-1].copy(), m.copy()
    nn_[real] = m[real][::-1]
    ax, px = attend(x, m)
    a2x, p2x = attend(2 * x, 2 * m)
    ay, py = attend(y, nn_)
    axy, pxy = attend(x + y, m + nn_)

    def rel(a, b):
        return float(np.linalg.norm(a - b) / np.linalg.norm(b))

    return {"scale": {"a2x": a2x[0], "two_ax": 2 * ax[0], "diff": rel(a2x, 2 * ax), "wx": px[0, real],
                      "w2x": p2x[0, real]},
            "sum": {"axy": axy[0], "ax_ay": (ax + ay)[0], "diff": rel(axy, ax + ay), "wx": px[0, real],
                    "wy": py[0, real], "wxy": pxy[0, real]}}  # fmt: skip


def check_nonlinear(view: dict, p: dict, source: list[str], target: list[str]) -> dict:
    nl = view["nonlinear"]
    theirs = independent_nonlinearity(p, view["config"], source, target, nl["head"])
    for part in ("scale", "sum"):
        for name, value in theirs[part].items():
            assert np.allclose(nl[part][name], value, atol=1e-4), (part, name)
        assert nl[part]["held_diff"] < 1e-9  # the weights held: a linear map, met exactly
    return nl


def test_the_nonlinearity_panel_untrained_against_nn_transformer(client: TestClient) -> None:
    from engine.encdec import EncDecConfig, init_params
    from engine.encdec_train import task_of

    v = client.get("/cross.json?head=1").json()
    c = EncDecConfig()
    task = task_of(c)
    p = init_params(c, len(task.vocab), task.n_src, task.n_tgt)
    nl = check_nonlinear(v, p, v["source"][: v["n_real"]], v["writes"][:-1])
    assert nl["head"] == 1 and nl["step"] == 0 and 0 < nl["scale"]["diff"] < 0.1  # near-even weights: nearly linear
    soup = BeautifulSoup(client.get("/cross?lang=zh").text, "html.parser")
    panel = soup.select_one("#cross-nonlinear")
    assert panel is not None and "非线性" in panel.text and len(panel.select("table")) == 4
    shown = float(panel.select_one("#nl-scale .nl-diff")["data-diff"])
    assert abs(shown - client.get("/cross.json").json()["nonlinear"]["scale"]["diff"]) < 1e-9


def test_the_nonlinearity_panel_of_a_trained_run(client: TestClient) -> None:
    import io
    import zipfile

    from safetensors.torch import load

    body = TINY | {"steps": 150, "lr": 0.01}
    run_id = client.post("/api/v1/train", json=body).json()["id"]
    assert events_until_end(client, run_id)[-1][1]["status"] == "done"
    v = client.get(f"/cross.json?run={run_id}").json()
    with zipfile.ZipFile(io.BytesIO(client.get(f"/api/v1/train/{run_id}/export").content)) as z:
        (name,) = [n for n in z.namelist() if n.endswith("model.safetensors")]
        p = load(z.read(name))
    nl = check_nonlinear(v, p, v["source"][: v["n_real"]], v["writes"][:-1])
    untrained = client.get("/cross.json").json()["nonlinear"]
    assert nl["step"] == 150 and nl["scale"]["diff"] > 3 * untrained["scale"]["diff"]  # sharp weights: far from linear
    assert BeautifulSoup(client.get(f"/cross?run={run_id}").text, "html.parser").select_one("#cross-nonlinear")


def test_no_nonlinearity_panel_while_a_run_trains(client: TestClient) -> None:
    started = client.post("/api/v1/train", json=TINY | {"steps": 3000, "eval_every": 500}).json()
    run_id = started["id"]
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # polled until its first snapshot is there
            v = client.get(f"/cross.json?run={run_id}").json()
            if v["snaps"] and v["run_status"] == "running":
                break
            time.sleep(0.05)
        assert v["run_status"] == "running" and v["nonlinear"] is None
    finally:
        client.post(f"/api/v1/train/{run_id}/stop", json={"stop_token": started["stop_token"]})
    events_until_end(client, run_id)


def test_the_stop_button_tells_another_browser_why_it_stopped_nothing(client: TestClient) -> None:
    """/cross's Stop is on every viewer's page; another browser's click (no stop token) was a 403 htmx swapped
    nowhere. It posts to the page's stop now, which answers the reason in the page's language into the slot beside
    the button (kept across the live block's redraws) and stops nothing; the starter's token stops the run."""
    started = client.post("/api/v1/train", json=TINY | {"steps": 3000, "eval_every": 500}).json()
    run_id = started["id"]
    try:
        wait_until(lambda: client.get(f"/api/v1/train/{run_id}").json()["status"] == "running", 120, "the run")
        for lang, reason in (("en", "Only the browser that started this run can stop it"),
                             ("zh", "只有启动这次训练的浏览器才能停止它")):  # fmt: skip
            soup = BeautifulSoup(client.get(f"/cross?run={run_id}&lang={lang}").text, "html.parser")
            form = soup.select_one("#train-live form.train-stop")
            assert form["action"] == f"/api/v1/train/{run_id}/stop"
            assert form["hx-post"] == f"/api/v1/train/{run_id}/stop/page?lang={lang}"
            slot = soup.select_one(form["hx-target"])
            assert slot is not None and slot.has_attr("hx-preserve") and slot.text == ""
            said = client.post(form["hx-post"], data={}, headers={"HX-Request": "true"})
            assert said.status_code == 200 and said.text == reason
        assert client.get(f"/api/v1/train/{run_id}").json()["status"] == "running"
        r = client.post(f"/api/v1/train/{run_id}/stop/page?lang=en", data={"stop_token": started["stop_token"]})
        assert r.status_code == 200 and r.text == ""
    finally:
        client.post(f"/api/v1/train/{run_id}/stop", json={"stop_token": started["stop_token"]})
    assert events_until_end(client, run_id)[-1][1]["status"] == "cancelled"
