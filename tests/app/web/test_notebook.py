"""The notebook face (#21): `attention_lab.trace` shows the lab's stage Views in Jupyter with no server, and
`attention_lab.Client` returns the same Views from a running lab. Both run in a real headless kernel (nbclient)."""

from __future__ import annotations

import math
import re
import sys

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbclient import NotebookClient

from attention_lab import Client, Stages, trace
from engine import SpecError, compute
from engine.spec import STAGES
from tests.servers import ROOT, served


def run_notebook(*cells: str) -> list[dict[str, object]]:
    """Execute code cells in a fresh python3 kernel; each cell's display data (the last output's `data`)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    kernel = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["kernelspec"] = kernel
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    out = []
    for cell in nb.cells:
        shown = [o for o in cell.outputs if o.get("output_type") in ("execute_result", "display_data")]
        out.append(dict(shown[-1]["data"]) if shown else {})
    return out


def cell_values(html: str, stage: str) -> list[list[float]]:
    panel = BeautifulSoup(html, "html.parser").select_one(f'section[data-stage="{stage}"]')
    assert panel is not None, stage
    table = panel.select_one("table[data-matrix]")
    assert table is not None
    return [[float(td["data-value"]) for td in tr.select("td")] for tr in table.select("tbody tr")]


def check_local_cell(data: dict[str, object]) -> None:
    """A notebook's `trace('猫 坐 在 垫子 上')`: five stages as tabs, the engine's numbers, causal by default."""
    html = str(data["text/html"])
    soup = BeautifulSoup(html, "html.parser")
    assert [s["data-stage"] for s in soup.select("section.nb-panel")] == list(STAGES)
    assert len(soup.select("label.tab")) == 5
    assert "<script" not in html  # tabs are CSS: a notebook saved as HTML keeps them
    weights = cell_values(html, "softmax")
    assert weights[0][0] == 1.0 and weights[0][1:] == [0.0] * 4  # causal by default, as the lab opens
    for row in weights:
        assert math.isclose(sum(row), 1.0, abs_tol=1e-6)
    # The same numbers as the engine's, computed without the notebook.
    expected = compute(trace("猫 坐 在 垫子 上").trace.spec).softmax.weights[0].tolist()
    assert [v for row in weights for v in row] == pytest.approx([v for row in expected for v in row], abs=1e-6)
    assert data["application/json"]["stages"][3]["key"] == "softmax"  # type: ignore[index]


def test_trace_views_are_the_lab_pages_views(client) -> None:  # type: ignore[no-untyped-def]
    local = trace("猫 坐 在 垫子 上", mask="none", seed=3)
    page = client.get(
        "/index.json", params={"tokens": "猫 坐 在 垫子 上", "mask": "none", "seed": 3, "stage": "scores"}
    )
    assert page.status_code == 200
    remote = page.json()
    mine = local["scores"].to_json()
    for name in ("matrices", "formula", "explain", "notice", "checks", "summary", "tokens"):
        assert mine[name] == remote[name], name


def test_bad_input_names_the_field() -> None:
    with pytest.raises(SpecError) as e:
        trace("a b c", n_heads=3)
    assert e.value.field in ("n_heads", "d_model")
    with pytest.raises(KeyError):
        trace("a b")["nonsense"]


def test_trace_and_client_in_a_kernel() -> None:
    with served({"PRETRAINED": "0"}) as (base, _):
        with Client(base) as lab:
            remote = lab.trace("猫 坐 在 垫子 上", seed=5)
            assert isinstance(remote, Stages) and [v.key for v in remote] == list(STAGES)
            local = trace("猫 坐 在 垫子 上", seed=5)
            for a, b in zip(local, remote, strict=True):
                assert [[c.value for c in row] for m in a.matrices or [] for row in m.cells] == [
                    [c.value for c in row] for m in b.matrices or [] for row in m.cells
                ]
                assert a.notice == b.notice
            with pytest.raises(Exception, match="stage"):
                lab.stage("nine")
            full = lab.attention(tokens="a b c", stages=["softmax"])
            assert full["stages"][0]["key"] == "softmax"
        # In one kernel (a kernel takes seconds to start): the local views, then the Client's, which render alike.
        local_cell = "from attention_lab import Client, trace\ntrace('猫 坐 在 垫子 上')"
        client_cell = f"Client({base!r}).trace('猫 坐 在 垫子 上', seed=5)"
        local_data, data = run_notebook(local_cell, client_cell)
        check_local_cell(local_data)
        html = str(data["text/html"])
        assert cell_values(html, "softmax") == cell_values(trace("猫 坐 在 垫子 上", seed=5)._repr_html_(), "softmax")
        assert re.search(r"section class=\"nb-panel\" data-stage=\"projection\"", html)
    assert sys.modules["attention_lab"]  # imported once, used above
