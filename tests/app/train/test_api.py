"""/api/v1/train and /train: a tiny run started, followed to its end over SSE, read, exported, stopped; bodies
checked by field; the queue bounded; the page in both languages, alone and side by side (the mask-off cheat)."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.wait import wait_until

TINY = {"n_layer": 1, "n_heads": 2, "d_model": 32, "n_repeat": 4, "vocab": 8, "batch": 8, "steps": 20,
        "eval_every": 5, "n_snapshots": 3}  # fmt: skip


@pytest.fixture(scope="module")
def client():
    app = create_app(Settings(pretrained=False, train_max_queued=2, train_max_steps=3000))
    with TestClient(app) as c:
        yield c


def events_until_end(client: TestClient, run_id: str) -> list[tuple[str, dict]]:
    """Read the run's SSE stream to its `end` (the stream ends there by itself)."""
    out, kind = [], None
    with client.stream("GET", f"/api/v1/train/{run_id}/events") as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                out.append((kind, json.loads(line[6:])))
    return out


def test_a_run_trains_streams_and_exports(client: TestClient) -> None:
    r = client.post("/api/v1/train", json=TINY)
    assert r.status_code == 202, r.text
    run_id = r.json()["id"]
    assert r.json()["status_url"] == f"/api/v1/train/{run_id}"
    seen = events_until_end(client, run_id)
    kinds = [k for k, _ in seen]
    assert kinds[0] == "state" and kinds[-1] == "end" and seen[-1][1]["status"] == "done"
    # A stream opened after the end reads the same end as the one that watched it (a late client saw a `message`
    # the live one lacked, and a test comparing the two under load failed by chance).
    assert seen[-1] == ("end", {"status": "done", "step": 20, "message": ""})
    assert events_until_end(client, run_id)[-1] == seen[-1]
    state = client.get(f"/api/v1/train/{run_id}").json()
    assert state["status"] == "done" and state["step"] == 20 and len(state["loss"]) == 20
    assert state["eval_steps"][0] == 0 and len(state["eval_loss"]) == len(state["eval_steps"])
    assert state["snapshots"][0]["step"] == 0
    assert all(len(s["induction"]) == 1 and len(s["induction"][0]) == 2 for s in state["snapshots"])
    z = client.get(f"/api/v1/train/{run_id}/export")
    assert z.status_code == 200 and z.headers["content-type"] == "application/zip"
    names = {n.split("/")[-1] for n in zipfile.ZipFile(io.BytesIO(z.content)).namelist()}
    assert names == {"config.json", "model.safetensors", "tokenizer.json"}
    page = client.get(f"/train?run={run_id}")
    assert page.status_code == 200
    soup = BeautifulSoup(page.text, "html.parser")
    assert soup.select_one(f"#run-{run_id}")["data-status"] == "done"
    assert soup.select("svg[data-chart='loss']") and len(soup.select(".train-heads img")) == 2
    twin = client.get(f"/train.json?run={run_id}").json()
    assert twin["view"] == "train" and twin["shown"]["status"] == "done"


@pytest.mark.parametrize(("body", "field"), [({"n_layer": 9}, "n_layer"), ({"task": "poem"}, "task"),
                                             ({"steps": 4000}, "steps"), ({"d_model": 36, "n_heads": 4}, "d_model")])  # fmt: skip
def test_a_bad_body_is_422_naming_the_field(client: TestClient, body: dict, field: str) -> None:
    r = client.post("/api/v1/train", json=TINY | body)
    assert r.status_code == 422
    assert any(field in d["loc"] for d in r.json()["detail"]), r.json()


def test_unknown_run_is_404(client: TestClient) -> None:
    assert client.get("/api/v1/train/nope").status_code == 404
    assert client.post("/api/v1/train/nope/stop").status_code == 404


def test_stop_the_queue_and_the_cheat_side_by_side(client: TestClient) -> None:
    long = TINY | {"steps": 3000, "eval_every": 100}
    started = [client.post("/api/v1/train", json=long).json() for _ in range(3)]  # one trains, two wait
    ids = [s["id"] for s in started]
    full = client.post("/api/v1/train", json=long)
    assert full.status_code == 503 and int(full.headers["Retry-After"]) > 0
    for s in started:
        assert client.post(f"/api/v1/train/{s['id']}/stop", json={"stop_token": s["stop_token"]}).status_code == 200
    for run_id in ids:
        assert events_until_end(client, run_id)[-1][1]["status"] == "cancelled"
    form = {k: str(v) for k, v in TINY.items()} | {"causal": "1", "cheat": "1", "lang": "zh"}
    r = client.post("/train", data=form, follow_redirects=False)
    assert r.status_code == 303
    url = r.headers["location"]
    a, b = url.split("run=")[1].split("&")[0], url.split("compare=")[1].split("&")[0]
    for run_id in (a, b):
        assert events_until_end(client, run_id)[-1][1]["status"] == "done"
    page = BeautifulSoup(client.get(url).text, "html.parser")
    assert page.select_one(".train-pair") and page.select_one(".train-cheat")
    assert "去掉掩码" in page.select_one(".train-cheat").text


def trains_on(client: TestClient, run_id: str) -> None:
    """Polls until the run is running with more steps than it had when asked: a refused stop left it training."""
    before = client.get(f"/api/v1/train/{run_id}").json()["step"]
    wait_until(lambda: (s := client.get(f"/api/v1/train/{run_id}").json())["status"] == "running"
               and s["step"] > before, 120, f"run {run_id} training on")  # fmt: skip


def test_only_the_runs_starter_stops_it(client: TestClient) -> None:
    """Anyone who sees a run's id (a class watches it projected) could stop it: now only the stop token its start
    answered does, as the body's stop_token, a form's, or Authorization: Bearer. Without it, or with a wrong one,
    a 403 naming stop_token, and the run trains on; neither the token nor its hash is ever shown again."""
    started = client.post("/api/v1/train", json=TINY | {"steps": 3000, "eval_every": 100})
    assert started.status_code == 202 and "set-cookie" not in started.headers  # a script holds its token itself
    run_id, token = started.json()["id"], started.json()["stop_token"]
    assert len(token) >= 32
    wait_until(lambda: client.get(f"/api/v1/train/{run_id}").json()["step"] > 0, 120, "the run to train")
    stop = f"/api/v1/train/{run_id}/stop"
    for r in (client.post(stop), client.post(stop, json={}), client.post(stop, json={"stop_token": token[::-1]}),
              client.post(stop, data={"stop_token": "nope"}), client.post(stop, content=b"{", headers={
                  "Content-Type": "application/json"}), client.post(stop, headers={"Authorization": "Bearer x"}),
              client.delete(f"/api/v1/train/{run_id}")):  # fmt: skip
        assert r.status_code == 403, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "stop_token"] and "stop_token" in r.json()["message"]
    trains_on(client, run_id)
    for shown in (
        client.get(f"/api/v1/train/{run_id}").text,
        client.get("/api/v1/train").text,
        client.get(f"/train?run={run_id}").text,
        client.get(f"/train.json?run={run_id}").text,
    ):
        assert token not in shown and "stop_hash" not in shown
    r = client.post(stop, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200 and r.json()["stopping"], r.text
    assert events_until_end(client, run_id)[-1][1]["status"] == "cancelled"


def test_the_browser_that_started_a_run_stops_it_and_no_other(client: TestClient) -> None:
    """/train's form leaves each run's stop token in the browser that sent it (an HttpOnly cookie sent only to that
    run's API paths), so its page's Stop (an htmx POST of no fields) stops it; the same Stop from a student's phone,
    which saw the projected run and its id, is a 403 and the run trains on."""
    form = {k: str(v) for k, v in TINY.items()} | {"steps": "3000", "eval_every": "100", "causal": "1",
                                                     "lang": "en"}  # fmt: skip
    r = client.post("/train", data=form, follow_redirects=False)
    assert r.status_code == 303, r.text
    run_id = r.headers["location"].split("run=")[1].split("&")[0]
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"lab_stop_{run_id}=") and f"Path=/api/v1/train/{run_id}" in cookie
    assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower()
    stop = f"/api/v1/train/{run_id}/stop"
    phone = TestClient(client.app)  # another browser: no cookie of the run's
    wait_until(lambda: phone.get(f"/api/v1/train/{run_id}").json()["step"] > 0, 120, "the run to train")
    refused = phone.post(stop, data={}, headers={"HX-Request": "true"})
    assert refused.status_code == 403 and refused.json()["detail"][0]["loc"] == ["body", "stop_token"]
    trains_on(phone, run_id)
    r = client.post(stop, data={}, headers={"HX-Request": "true"})  # the starter's page: its cookie
    assert r.status_code == 200 and r.json()["stopping"], r.text
    assert events_until_end(client, run_id)[-1][1]["status"] == "cancelled"


def test_the_pages_stop_tells_another_browser_why_it_stopped_nothing(client: TestClient) -> None:
    """The page's Stop is on every viewer's page (cached by URL), and another browser's click was the API's 403, which
    htmx swaps nowhere: a button that did nothing. The page's button posts to the page's stop (under the run's API
    path, so the starter's cookie goes with it), which answers another browser the reason in its language, in the
    slot beside the button (kept across redraws: hx-preserve), and stops nothing; the starter's click stops the
    run. The JSON API's 403 is unchanged."""
    form = {k: str(v) for k, v in TINY.items()} | {"steps": "3000", "eval_every": "100", "causal": "1",
                                                     "lang": "en"}  # fmt: skip
    r = client.post("/train", data=form, follow_redirects=False)
    assert r.status_code == 303, r.text
    run_id = r.headers["location"].split("run=")[1].split("&")[0]
    phone = TestClient(client.app)  # another browser: no cookie of the run's
    wait_until(lambda: phone.get(f"/api/v1/train/{run_id}").json()["step"] > 0, 120, "the run to train")
    for lang in ("en", "zh"):
        page = BeautifulSoup(phone.get(f"/train?run={run_id}&lang={lang}").text, "html.parser")
        button = page.select_one(f"#run-{run_id} form.train-stop")
        assert button["action"] == f"/api/v1/train/{run_id}/stop"  # without JavaScript: the API's stop
        slot = page.select_one(f"#train-stop-said-{run_id}")
        assert button["hx-target"] == f"#train-stop-said-{run_id}" and slot.has_attr("hx-preserve")
        assert slot.text == "" and slot["role"] == "status"
        said = phone.post(button["hx-post"], data={}, headers={"HX-Request": "true"})
        assert said.status_code == 200 and said.headers["content-type"].startswith("text/html")
        assert said.text == {"en": "Only the browser that started this run can stop it",
                             "zh": "只有启动这次训练的浏览器才能停止它"}[lang]  # fmt: skip
    refused = phone.post(f"/api/v1/train/{run_id}/stop", data={}, headers={"HX-Request": "true"})
    assert refused.status_code == 403 and refused.json()["detail"][0]["loc"] == ["body", "stop_token"]
    trains_on(phone, run_id)
    assert phone.post("/api/v1/train/nope/stop/page").status_code == 404
    r = client.post(f"/api/v1/train/{run_id}/stop/page?lang=en", data={}, headers={"HX-Request": "true"})
    assert r.status_code == 200 and r.text == "", r.text  # the starter's: stopped, the slot emptied
    assert events_until_end(client, run_id)[-1][1]["status"] == "cancelled"


def test_another_sites_form_starts_no_run(client: TestClient) -> None:
    """The page's form is a POST any site could send with a visitor's browser: only the lab's own pages start runs."""
    before = client.get("/api/v1/train").json()
    for headers, field in (({"Sec-Fetch-Site": "cross-site"}, "sec-fetch-site"),
                           ({"Origin": "https://evil.example"}, "origin")):  # fmt: skip
        r = client.post("/train", data={**{k: str(v) for k, v in TINY.items()}, "lang": "en"}, headers=headers,
                        follow_redirects=False)  # fmt: skip
        assert r.status_code == 403 and r.json()["detail"][0]["loc"] == ["header", field]
    assert client.get("/api/v1/train").json() == before
    many = "&".join(f"f{i}=1" for i in range(500))  # a form of many fields is read up to a bound, never a 500
    r = client.post("/train", content=many, headers={"content-type": "application/x-www-form-urlencoded",
                                                     "Sec-Fetch-Site": "same-origin"}, follow_redirects=False)  # fmt: skip
    assert r.status_code in (303, 422)
