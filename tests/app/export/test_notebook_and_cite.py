"""GET /api/v1/notebook (a validated .ipynb that runs and prints the page's numbers) and GET /api/v1/cite (the
permalink and provenance: the weights' sha256 is the served file's)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app import __version__
from tests.conftest import make_client

ROOT = Path(__file__).resolve().parents[3]
PAGE = "/?tokens=cat+sat+on&stage=4&mask=causal"


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with make_client() as c:
        yield c


def test_the_notebook_is_valid_and_holds_the_settings_code_numbers_and_figure(client: TestClient) -> None:
    import nbformat

    r = client.get("/api/v1/notebook", params={"page": PAGE})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/x-ipynb+json")
    assert ".ipynb" in r.headers["content-disposition"]
    nb = nbformat.reads(r.text, as_version=4)
    nbformat.validate(nb)
    text = "\n".join(c.source for c in nb.cells)
    assert "| mask | `causal` |" in text and "from attention_lab import trace" in text and "torch.softmax" in text
    twin = client.get(PAGE, headers={"Accept": "application/json"}).json()
    first_row = " ".join(f"{v:.6f}" for v in twin["matrices"][0]["values"][1])
    outputs = [o.text for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert outputs and all(first_row in o for o in outputs)
    figure = next(c for c in nb.cells if "attachments" in c)
    assert figure.attachments["figure.png"]["image/png"].startswith("iVBOR")  # a PNG, base64
    assert nb.metadata.attention_lab.provenance.version == __version__


def test_the_notebook_runs_and_prints_the_pages_numbers(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Executed (nbclient, a real kernel): each code cell prints what the notebook says it prints."""
    import nbformat

    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from nbclient import NotebookClient

    nb = nbformat.reads(client.get("/api/v1/notebook", params={"page": PAGE}).text, as_version=4)
    saved = [[o.text for o in c.outputs] for c in nb.cells if c.cell_type == "code"]
    env_path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{env_path}" if env_path else str(ROOT))  # the kernel's
    NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    ran = [["".join(o.get("text", "") for o in c.outputs)] for c in nb.cells if c.cell_type == "code"]

    def numbers(text: str) -> list[float]:
        return [float(w) for w in re.findall(r"-?\d+\.\d+|-inf", text)]

    for before, after in zip(saved, ran, strict=True):
        assert numbers(after[0]) == pytest.approx(numbers(before[0]), abs=1e-4)


def test_citations_of_a_toy_page(client: TestClient) -> None:
    block = client.get("/api/v1/cite", params={"page": PAGE, "format": "json"}).json()
    assert block["version"] == __version__ and block["model"] == "toy" and block["permalink"].endswith(PAGE)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", block["date"])
    bib = client.get("/api/v1/cite", params={"page": PAGE}).text
    assert bib.startswith("@software{attention_lab_") and "version = {" + __version__ + "}" in bib
    csl = json.loads(client.get("/api/v1/cite", params={"page": PAGE, "format": "csl"}).text)
    assert csl[0]["type"] == "software" and csl[0]["URL"] == block["permalink"]
    assert client.get("/api/v1/cite", params={"page": "/nope"}).status_code == 422
    svg = client.get("/api/v1/figure", params={"page": PAGE}).text  # the figure's metadata carries the block
    assert block["permalink"].replace("&", "&amp;") in svg and __version__ in svg


def test_the_weights_hash_is_the_served_files_sha256(client: TestClient, smollm2) -> None:  # type: ignore[no-untyped-def]
    page = "/?preset=smollm2&text=The+cat&stage=4"
    block = client.get("/api/v1/cite", params={"page": page, "format": "json"}).json()
    path = Path(smollm2.path)
    assert [f["name"] for f in block["files"]] == [path.name]
    done = subprocess.run(["sha256sum", str(path)], capture_output=True, text=True)
    expected = done.stdout.split()[0] if done.returncode == 0 else hashlib.sha256(path.read_bytes()).hexdigest()
    assert block["files"][0]["sha256"] == expected
    assert expected in client.get("/api/v1/cite", params={"page": page}).text  # the BibTeX's note
    panel = client.get("/api/v1/cite", params={"page": page, "format": "html"}).text
    assert f"<code data-sha256>{expected}</code>" in panel


def test_citation_cff_names_the_labs_version() -> None:
    text = (ROOT / "CITATION.cff").read_text(encoding="utf-8")
    assert "cff-version: 1.2.0" in text and f'version: "{__version__}"' in text and 'title: "Attention Lab"' in text
