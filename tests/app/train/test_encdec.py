"""/api/v1/train with "arch": "encoder-decoder": a tiny seeded run on `reverse` started, followed over SSE to its end,
its snapshots holding the held-out pair's cross-attention; its export loads into torch's nn.Transformer with the same
logits; fields of the other model refused by name; stopped; the GPT's runs untouched by it."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
import torch
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient
from safetensors.torch import load

from app.main import create_app
from app.settings import Settings
from engine.encdec import forward, make_config
from engine.encdec_tasks import PAD
from engine.encdec_train import task_of

TINY = {"arch": "encoder-decoder", "task": "reverse", "steps": 40, "length": 5, "symbols": 6, "batch": 16,
        "eval_every": 10, "n_snapshots": 3}  # fmt: skip


@pytest.fixture(scope="module")
def client():
    app = create_app(Settings(pretrained=False, train_max_queued=2, train_max_steps=3000))
    with TestClient(app) as c:
        yield c


def events_until_end(client: TestClient, run_id: str) -> list[tuple[str, dict]]:
    out, kind = [], None
    with client.stream("GET", f"/api/v1/train/{run_id}/events") as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                out.append((kind, json.loads(line[6:])))
    return out


@pytest.mark.filterwarnings("ignore:enable_nested_tensor")
def test_a_run_trains_streams_and_holds_the_cross_attention(client: TestClient) -> None:
    r = client.post("/api/v1/train", json=TINY)
    assert r.status_code == 202, r.text
    run_id = r.json()["id"]
    assert r.json()["page_url"] == f"/cross?run={run_id}"
    seen = events_until_end(client, run_id)
    kinds = [k for k, _ in seen]
    assert kinds[0] == "state" and kinds[-1] == "end" and seen[-1][1]["status"] == "done"
    assert "snapshot" in kinds and all("weights" not in d for k, d in seen if k == "snapshot")  # the log stays light
    state = client.get(f"/api/v1/train/{run_id}").json()
    assert state["config"]["arch"] == "encoder-decoder" and state["config"]["d_model"] == 32  # its own defaults
    assert state["status"] == "done" and state["step"] == 40 and len(state["loss"]) == 40
    assert [s["step"] for s in state["snapshots"]] == [0, 6, 40]
    n = len(state["probe"])
    assert state["target"] == state["probe"][::-1] and state["labels"][:3] == ["<pad>", "<bos>", "<eos>"]
    for s in state["snapshots"]:  # per layer (H, N_dec, N_enc): the probe's n symbols and <eos>, over 5 source slots
        cross = torch.tensor(s["cross"])
        assert cross.shape == (1, 2, n + 1, 5) and float(cross[..., n:].abs().max()) == 0.0  # its padding: 0
        assert torch.allclose(cross.sum(-1), torch.ones(1, 2, n + 1), atol=1e-3)
        assert 0 <= s["accuracy"] <= 1 and len(s["alignment"][0]) == 2
    listed = {x["id"]: x for x in client.get("/api/v1/train").json()["runs"]}
    assert listed[run_id]["arch"] == "encoder-decoder" and listed[run_id]["causal"] is None
    # the export: nn.Transformer's state dict and the run's config; loaded there, the same logits as the engine's
    z = zipfile.ZipFile(io.BytesIO(client.get(f"/api/v1/train/{run_id}/export").content))
    files = {n.split("/")[-1]: z.read(n) for n in z.namelist()}
    assert set(files) == {"config.json", "model.safetensors"}
    config, p = json.loads(files["config.json"]), load(files["model.safetensors"])
    assert config["architecture"] == "torch.nn.Transformer" and config["vocab"] == state["labels"]
    net = torch.nn.Transformer(**config["nn_transformer"])
    net.load_state_dict({k.removeprefix("transformer."): v for k, v in p.items() if k.startswith("transformer.")})
    net.eval()
    c = make_config(**config["attention_lab_train"])
    src, tgt = task_of(c).batch(torch.Generator().manual_seed(3), 4)
    y_in = tgt[:, :-1]
    with torch.no_grad():
        x = p["src_embed.weight"][src] + p["src_pos.weight"][: src.shape[1]]
        y = p["tgt_embed.weight"][y_in] + p["tgt_pos.weight"][: y_in.shape[1]]
        h = net(x, y, tgt_mask=net.generate_square_subsequent_mask(y_in.shape[1]), src_key_padding_mask=src == PAD,
                memory_key_padding_mask=src == PAD, tgt_is_causal=True)  # fmt: skip
        assert torch.allclose(forward(c, p, src, y_in), h @ p["lm_head.weight"].T, atol=1e-4)
    assert client.get(f"/train?run={run_id}").status_code == 422  # /train shows the GPT's runs: it says where to look


def test_a_finished_run_is_a_preset_of_the_server(client: TestClient) -> None:
    """Served by name as /train's GPT runs are: in the runs' list and state, in /api/v1/presets, on /cross and its
    JSON twin (the nonlinearity panel on the weights loaded back from the export: the run's own, exactly)."""
    run_id = client.post("/api/v1/train", json=TINY).json()["id"]
    assert events_until_end(client, run_id)[-1][1]["status"] == "done"
    name = f"train-{run_id}"
    assert client.get(f"/api/v1/train/{run_id}").json()["preset"] == name
    assert {x["id"]: x["preset"] for x in client.get("/api/v1/train").json()["runs"]}[run_id] == name
    listed = client.get("/api/v1/presets").json()
    assert name not in listed["presets"]  # no model of the lab's stages: the encoder–decoder's page is /cross
    assert listed["encoder_decoder"][name] | {"page": ""} == {
        "arch": "encoder-decoder", "task": "reverse", "direction": None, "d_model": 32, "n_heads": 2, "d_k": 16,
        "n_layer": 1, "vocab": 9, "steps": 40, "page": ""}  # fmt: skip
    by_name, by_run = client.get(f"/cross.json?preset={name}").json(), client.get(f"/cross.json?run={run_id}").json()
    assert by_name["preset"] == name and by_name["run"] == run_id and by_run["preset"] is None
    assert by_name["nonlinear"] == by_run["nonlinear"]  # the export loaded back: the same weights, the same numbers
    page = client.get(f"/cross?preset={name}&lang=zh")
    assert page.status_code == 200 and f'data-preset="{name}"' in page.text and "预设" in page.text
    assert f'href="/cross?preset={name}&amp;lang=en"' in client.get("/cross?lang=en").text  # each run's preset link
    for bad in ("train-nope", "gpt2", "train-"):
        r = client.get(f"/cross.json?preset={bad}")
        assert r.status_code == 422 and "preset" in r.text, (bad, r.text)


def test_the_models_list_names_the_encoder_decoder_presets_apart(client: TestClient) -> None:
    """/api/v1/models and /models, where the lab's models are listed, list a finished run's preset too, apart from the
    models every page takes and saying it serves /cross alone (#47, a second walk)."""
    run_id = client.post("/api/v1/train", json=TINY | {"seed": 2}).json()["id"]
    assert events_until_end(client, run_id)[-1][1]["status"] == "done"
    name = f"train-{run_id}"
    listed = client.get("/api/v1/models").json()
    assert name not in [m["name"] for m in listed["models"]]
    mine = {m["name"]: m for m in listed["encoder_decoder"]}[name]
    assert mine["serves"] == ["/cross"] and mine["page"] == f"/cross?preset={name}" and mine["d_k"] == 16
    for lang, words in (("en", "served to /cross alone"), ("zh", "只用于 /cross")):
        soup = BeautifulSoup(client.get(f"/models?lang={lang}").text, "html.parser")
        row = soup.select_one(f'#encoder-decoder tr[data-encdec="{name}"]')
        assert words in soup.select_one("#encoder-decoder h3").text and row is not None
        assert row.select_one("a")["href"] == f"/cross?preset={name}&lang={lang}"
        assert not soup.select(f'table.models tr[data-model="{name}"]')  # not among the models every page takes


@pytest.mark.parametrize(("body", "field"), [({"task": "repeat"}, "task"), ({"causal": False}, "causal"),
                                             ({"length": 40}, "length"), ({"direction": "fr"}, "direction"),
                                             ({"steps": 4000}, "steps"), ({"arch": "rnn"}, "arch")])  # fmt: skip
def test_a_bad_body_is_422_naming_the_field(client: TestClient, body: dict, field: str) -> None:
    r = client.post("/api/v1/train", json=TINY | body)
    assert r.status_code == 422
    assert any(field in d["loc"] for d in r.json()["detail"]), r.json()


@pytest.mark.parametrize(("body", "field"), [({"task": "reverse"}, "task"), ({"length": 5}, "length")])
def test_the_gpt_refuses_the_encoder_decoders_fields(client: TestClient, body: dict, field: str) -> None:
    r = client.post("/api/v1/train", json={"steps": 5} | body)
    assert r.status_code == 422 and any(field in d["loc"] for d in r.json()["detail"]), r.json()


def test_a_run_stops(client: TestClient) -> None:
    started = client.post("/api/v1/train", json=TINY | {"steps": 3000, "eval_every": 500}).json()
    run_id = started["id"]
    assert client.post(f"/api/v1/train/{run_id}/stop", json={"stop_token": started["stop_token"]}).status_code == 200
    assert events_until_end(client, run_id)[-1][1]["status"] == "cancelled"


def test_numbers_runs_in_its_own_words(client: TestClient) -> None:
    body = {"arch": "encoder-decoder", "task": "numbers", "steps": 2, "n_snapshots": 2, "direction": "zh-en"}
    run_id = client.post("/api/v1/train", json=body).json()["id"]
    assert events_until_end(client, run_id)[-1][1]["status"] == "done"
    state = client.get(f"/api/v1/train/{run_id}").json()
    assert "百" in state["probe"] and "hundred" in state["target"] and state["snapshots"][-1]["alignment"] is None


def test_a_run_through_the_queue_is_seen_by_every_web_worker() -> None:
    from tests.redis_server import available, redis_server

    from .test_queue import queue_worker, two_web_workers

    if not available():
        pytest.skip("redis-server is not installed")
    with redis_server() as url, queue_worker(url), two_web_workers(url) as (a, b):
        r = a.post("/api/v1/train", json=TINY)
        assert r.status_code == 202, r.text
        run_id = r.json()["id"]
        assert events_until_end(b, run_id)[-1][1]["status"] == "done"
        state = b.get(f"/api/v1/train/{run_id}").json()
        assert state["status"] == "done" and state["preset"] == f"train-{run_id}" and state["exportable"]
        assert torch.tensor(state["snapshots"][-1]["cross"]).shape == (1, 2, len(state["probe"]) + 1, 5)
        z = zipfile.ZipFile(io.BytesIO(a.get(f"/api/v1/train/{run_id}/export").content))
        assert {n.split("/")[-1] for n in z.namelist()} == {"config.json", "model.safetensors"}
        # a preset on both web workers: listed, and /cross (and its twin) shows it by name, its export's weights
        name = f"train-{run_id}"
        for c in (a, b):
            listed = c.get("/api/v1/presets").json()["encoder_decoder"]
            assert listed[name]["arch"] == "encoder-decoder" and listed[name]["page"] == f"/cross?preset={name}"
            v = c.get(f"/cross.json?preset={name}")
            assert v.status_code == 200, v.text
            assert v.json()["preset"] == name and v.json()["run"] == run_id and v.json()["nonlinear"]["step"] == 40


def test_a_dropped_run_takes_its_preset_with_it() -> None:
    """TRAIN_MAX_KEPT = 1: the next run drops the first, and its preset leaves /api/v1/presets and /cross (a 422
    naming `preset`), as a GPT run's does."""
    with TestClient(create_app(Settings(pretrained=False, train_max_kept=1))) as c:
        first = c.post("/api/v1/train", json=TINY).json()["id"]
        assert events_until_end(c, first)[-1][1]["status"] == "done"
        assert f"train-{first}" in c.get("/api/v1/presets").json()["encoder_decoder"]
        second = c.post("/api/v1/train", json=TINY | {"seed": 1}).json()["id"]
        assert events_until_end(c, second)[-1][1]["status"] == "done"
        listed = c.get("/api/v1/presets").json()["encoder_decoder"]
        assert list(listed) == [f"train-{second}"]
        r = c.get(f"/cross.json?preset=train-{first}")
        assert r.status_code == 422 and "preset" in r.text
        assert c.get(f"/cross.json?preset=train-{second}").json()["run"] == second
