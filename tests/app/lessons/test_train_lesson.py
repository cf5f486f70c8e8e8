"""The lesson "Train your own GPT": its steps follow the class's run (`run=latest`, `compare=latest-unmasked`), and
every poll's key agrees with the numbers that run shows. The run is the lesson's own: the page's form with its
defaults and the mask-off twin ticked, as the first step asks, carrying the lesson through the redirect (400 steps
instead of 1000: the phase change comes at about step 250)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from app.train.api import TrainIn
from app.web.lessons import BY_SLUG

from ..train.test_api import events_until_end

SLUG = "train-your-own"
CHECKED = {(SLUG, k) for k in range(1, len(BY_SLUG[SLUG].steps) + 1)}  # test_lessons.py counts these as checked


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    app = create_app(Settings(pretrained=False, train_max_running=2))  # the honest run and its twin at once
    with TestClient(app) as c:
        form = {"task": "repeat", "steps": "400", "causal": "1", "cheat": "1", "lang": "en", "lesson": SLUG,
                "lesson_step": "1"}  # fmt: skip
        r = c.post("/train", data=form, headers={"Sec-Fetch-Site": "same-origin"}, follow_redirects=False)
        assert r.status_code == 303, r.text
        where = r.headers["location"]
        assert f"lesson={SLUG}" in where and "lesson_step=1" in where  # the lesson stays beside the runs
        for key in ("run=", "compare="):
            assert events_until_end(c, where.split(key)[1].split("&")[0])[-1][1]["status"] == "done"
        yield c


def key(k: int) -> str:
    step = BY_SLUG[SLUG].steps[k - 1]
    assert step.poll is not None
    return str(step.poll.for_lang(step.text("en")[1], "en")["answer"])


def twin(client: TestClient, k: int) -> dict[str, Any]:
    url = BY_SLUG[SLUG].steps[k - 1].url
    r = client.get(url.replace("/train", "/train.json", 1))
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_the_untrained_model_starts_at_ln_vocab(client: TestClient) -> None:  # step 1
    assert TrainIn().vocab == 64 and TrainIn().task == "repeat"
    run_id = twin(client, 2)["shown"]["id"]
    state = client.get(f"/api/v1/train/{run_id}").json()
    assert state["eval_steps"][0] == 0 and abs(state["eval_loss"][0] - math.log(64)) < 0.1
    assert key(1) == "About 4.2 nats (ln 64)"


def test_only_the_second_copy_is_learned(client: TestClient) -> None:  # step 2
    shown = twin(client, 2)["shown"]
    assert shown["settings"]["causal"] and shown["status"] == "done" and shown["phase_change"] is not None
    assert shown["first"] > math.log(64) - 0.1 and shown["second"] < 0.5 * math.log(64)
    assert key(2) == "The second copy's"


def test_the_induction_head_is_in_layer_1(client: TestClient) -> None:  # step 3
    heads = twin(client, 3)["shown"]["heads"]
    best = max(heads, key=lambda h: h["induction"])
    assert best["layer"] == 1 and best["induction"] > 0.5
    assert max(h["induction"] for h in heads if h["layer"] == 0) < 0.2
    assert key(3) == "Layer 1 (the second)"


def test_the_cheat_trains_lower(client: TestClient) -> None:  # step 4
    v = twin(client, 4)
    honest, cheat = v["shown"], v["compared"]
    assert honest["settings"]["causal"] and not cheat["settings"]["causal"]
    assert honest["settings"] | {"causal": False} == cheat["settings"]  # the same seed and settings
    assert cheat["train_loss"] < 0.5 * honest["train_loss"] and v["cheat"]
    assert key(4) == "The run without the mask"


def test_the_cheat_is_worse_under_the_causal_mask(client: TestClient) -> None:  # step 5
    v = twin(client, 5)
    honest, cheat = v["shown"], v["compared"]
    assert cheat["eval_loss"] > honest["eval_loss"]
    assert cheat["eval_own"] < honest["eval_loss"]  # its own mask-off held-out loss is low: it reads the answer
    assert key(5) == "Higher"


def test_latest_names_no_run_on_a_fresh_server() -> None:
    """Before the class trains, the lesson's later steps show the form and no run, not an error."""
    with TestClient(create_app(Settings(pretrained=False))) as c:
        r = c.get(f"/train?run=latest&compare=latest-unmasked&lesson={SLUG}&lesson_step=4")
        assert r.status_code == 200 and 'data-status="' not in r.text
        assert c.get("/train.json?run=latest").json()["shown"] is None
