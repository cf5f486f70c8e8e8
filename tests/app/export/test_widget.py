"""attention_lab.widget(...): the lab's matrix as an anywidget. Its traits hold the page's numbers; a click in the
cell (the front end's state update, as the comm delivers it) is read back in Python; its ESM is the package's own
file, importing nothing (no CDN)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("anywidget")

from attention_lab import trace, widget
from attention_lab.matrix_widget import ESM

ROOT = Path(__file__).resolve().parents[3]


def matrix(tokens: str, stage: str, name: str, head: int, **fields: Any) -> dict[str, Any]:
    return next(m for m in trace(tokens, head=head, **fields)[stage].to_json()["matrices"] if m["name"] == name)


def test_the_traits_hold_the_stages_matrix_and_a_click_is_read_back() -> None:
    w = widget("cat sat on the mat", preset="gpt2-small", stage="softmax")
    m = matrix("cat sat on the mat", "softmax", "weights", 0, preset="gpt2-small")
    assert (w.rows, w.cols, w.values, w.scale) == (m["rows"], m["cols"], m["values"], "sequential")
    assert w.n_heads == 12 and w.head == 0 and w.selected == [] and w.value is None
    assert w.title == "A · head 0"
    w.set_state({"selected": [3, 1]})  # the front end's click on the cell (query 3, key 1)
    assert w.selected == [3, 1] and w.value == pytest.approx(m["values"][3][1])
    w.set_state({"head": 2})  # a click on head 2's button: Python sends that head's matrix
    assert w.values == matrix("cat sat on the mat", "softmax", "weights", 2, preset="gpt2-small")["values"]
    assert w.selected == [] and w.value is None and w.title == "A · head 2"
    json.dumps(w.get_state(key=["rows", "cols", "values", "head", "selected", "n_heads", "title"]))  # what syncs
    with pytest.raises(Exception, match="head must be in 0…11"):
        w.head = 12
    third = widget("cat sat on the mat", preset="gpt2-small", head=3)
    assert (
        third.head == 3
        and third.values == matrix("cat sat on the mat", "softmax", "weights", 3, preset="gpt2-small")["values"]
    )


def test_a_masked_cell_reads_back_as_minus_infinity_and_chinese_titles() -> None:
    w = widget("猫 坐 在", stage="mask", matrix="masked", mask="causal", lang="zh")
    assert w.rows == ["猫", "坐", "在"] and w.values[0][1] is None and w.scale == "diverging"
    assert w.title == "S′ = S + M · 头 0" and w.head_names == ["头 0"]
    w.set_state({"selected": [0, 2]})
    assert w.value == float("-inf")


def test_the_front_end_is_the_packages_own_file_and_fetches_nothing() -> None:
    import attention_lab

    w = widget("a b", stage="softmax")
    assert callable(attention_lab.widget) and attention_lab.widget("a b").rows == ["a", "b"]  # not its module
    text = ESM.read_text(encoding="utf-8")
    assert ESM.parent == ROOT / "attention_lab" and w._esm == text  # served from the package, as it is on disk
    assert "export default" in text and "render" in text
    assert not re.search(r"^\s*import\b|import\(|https?://|//cdn|fetch\(", text, re.M)  # no module, URL or CDN
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "matrix_widget.js" in pyproject["tool"]["setuptools"]["package-data"]["attention_lab"]
    assert any(d.startswith("anywidget==") for d in pyproject["project"]["optional-dependencies"]["widget"])
