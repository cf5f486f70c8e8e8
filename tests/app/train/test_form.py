"""/train's form refused: a bad value (out of pydantic's bounds, a d_model the heads do not divide, more steps than
the server allows) answers the page again, not the API's JSON: a 422 in the form's language, the error beside the
field it names, the values as typed kept in the form, and no run started. The API keeps its JSON answer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings

from .test_api import TINY, events_until_end

SAME_SITE = {"Sec-Fetch-Site": "same-origin"}
# What a student types: every field the form shows, away from its default, and one of them wrong.
TYPED = {"task": "text", "n_layer": "2", "n_heads": "2", "d_model": "64", "positions": "learned", "steps": "100",
         "lr": "0.002", "seed": "7", "mlp": "1", "cheat": "1"}  # fmt: skip
# (what is wrong, the field, the words of its error in en and zh)
CASES = {
    "pydantic": ({"steps": "30000"}, "steps", {"en": ("Steps", "less than or equal to 20000"),
                                                "zh": ("步数", "应小于或等于 20000")}),
    "engine": ({"d_model": "33", "n_heads": "4"}, "d_model", {"en": ("d_model", "33 must divide into 4 heads"),
                                                              "zh": ("d_model", "33 必须能平均分给 4 个头")}),
    "server": ({"steps": "4000"}, "steps", {"en": ("Steps", "must be at most 3000 on this server"),
                                            "zh": ("步数", "在本服务器上最多为 3000")}),
}  # fmt: skip


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    app = create_app(Settings(pretrained=False, train_max_steps=3000))
    with TestClient(app) as c:
        yield c


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_value_answers_the_page_with_the_error_beside_its_field(client: TestClient, case: str, lang: str) -> None:
    wrong, field, words = CASES[case]
    form = TYPED | wrong | {"lang": lang}
    before = client.get("/api/v1/train").json()
    r = client.post("/train", data=form, headers=SAME_SITE, follow_redirects=False)
    assert r.status_code == 422 and r.headers["content-type"].startswith("text/html"), r.text[:300]
    page = BeautifulSoup(r.text, "html.parser")
    assert page.html["lang"].startswith(lang)
    said = page.select_one(f".train-form #train-error-{field}")
    assert said is not None, r.text[:2000]
    label, sentence = words[lang]
    assert f"“{label}”" in said.get_text() and sentence in said.get_text()
    assert page.select_one(f".train-form [name={field}]")["aria-invalid"] == "true"
    assert len(page.select(".field-error")) == 1 and not page.select(".error")  # the one error, beside its field
    # The values as typed, kept in the form (the wrong one too, to correct it).
    for name, value in form.items():
        if name in ("task", "positions"):
            assert page.select_one(f".train-form select[name={name}] option[selected]")["value"] == value
        elif name in ("mlp", "cheat"):
            assert page.select_one(f".train-form input[name={name}]").has_attr("checked")
        elif name == "lang":
            assert page.select_one(".train-form input[name=lang]")["value"] == lang
        else:
            assert page.select_one(f".train-form input[name={name}]")["value"] == value
    assert not page.select_one(".train-form input[name=causal]").has_attr("checked")  # unticked, as sent
    assert client.get("/api/v1/train").json() == before  # nothing started


def test_the_api_keeps_its_json_answer(client: TestClient) -> None:
    r = client.post("/api/v1/train", json=TINY | {"steps": 4000})
    assert r.status_code == 422 and r.headers["content-type"].startswith("application/json")
    assert r.json()["detail"] == [{"loc": ["body", "steps"], "msg": "must be at most 3000 on this server "
                                   "(TRAIN_MAX_STEPS)", "type": "value_error"}]  # fmt: skip
    r = client.post("/api/v1/train", json=TINY | {"d_model": 33, "n_heads": 4})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "d_model"]


def test_the_form_asked_for_json_answers_the_apis_422(client: TestClient) -> None:
    """A script posting the form with `Accept: application/json` gets the API's JSON, as every page's JSON face."""
    form = TYPED | {"steps": "4000", "lang": "zh"}
    r = client.post("/train", data=form, headers=SAME_SITE | {"Accept": "application/json"}, follow_redirects=False)
    assert r.status_code == 422 and r.headers["content-type"].startswith("application/json"), r.text[:300]
    assert r.json()["detail"][0]["loc"][-1] == "steps" and "at most 3000 on this server" in r.text


def test_a_good_form_still_starts_a_run(client: TestClient) -> None:
    form = {k: str(v) for k, v in TINY.items()} | {"causal": "1", "lang": "zh"}
    r = client.post("/train", data=form, headers=SAME_SITE, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/train?run=")
    run_id = r.headers["location"].split("run=")[1].split("&")[0]
    assert events_until_end(client, run_id)[-1][1]["status"] == "done"
    assert client.get(f"/api/v1/train/{run_id}").json()["config"]["d_model"] == TINY["d_model"]
