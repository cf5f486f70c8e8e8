"""`attention_lab.widget(...)`: one stage's matrix as a live notebook widget (anywidget; `pip install
attention-lab[widget]`). The heat map is drawn in the cell by `matrix_widget.js`, shipped in this package (no CDN); a click
on a cell is read back in Python as the `selected` trait ([query, key]) with its number in `value`, a click on a
head's button as `head` (Python then sends that head's matrix). The numbers are the page's: the same trace and
View the lab's page shows (`trace`).

    w = attention_lab.widget("The cat sat on the mat", preset="gpt2-small", stage="softmax")
    w                     # the matrix in the cell; click a cell, then:
    w.selected, w.value   # [3, 1], 0.27
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anywidget
import traitlets

ESM = Path(__file__).with_name("matrix_widget.js")


class AttentionWidget(anywidget.AnyWidget):
    _esm = ESM
    title = traitlets.Unicode("").tag(sync=True)
    rows = traitlets.List(traitlets.Unicode()).tag(sync=True)  # the queries' tokens
    cols = traitlets.List(traitlets.Unicode()).tag(sync=True)  # the keys' tokens (or dimensions)
    values: traitlets.List[list[float | None]] = traitlets.List().tag(sync=True)  # one list per row, None where −∞
    scale = traitlets.Unicode("sequential").tag(sync=True)  # sequential (0 → 1) or diverging (at 0)
    n_heads = traitlets.Int(1).tag(sync=True)
    head_names = traitlets.List(traitlets.Unicode()).tag(sync=True)  # its buttons' words: "head 0", "头 0"
    head = traitlets.Int(0).tag(sync=True)  # a click on a head's button sets it
    selected = traitlets.List(traitlets.Int(), default_value=[]).tag(sync=True)  # a click on a cell: [query, key]
    value = traitlets.Float(None, allow_none=True).tag(sync=True)  # the selected cell's number

    def __init__(self, computed: Any, stage: str, name: str | None, lang: str, **kwargs: Any) -> None:
        self._computed, self._stage, self._name, self._lang = computed, stage, name, lang
        super().__init__(**kwargs)
        self._show()

    def _show(self) -> None:
        from app.attention.view import LabQuery, LabView, stage_fields
        from app.templating import translator

        fields = stage_fields(self._computed, self._stage, self.head, LabQuery.of({}, "/"), translator(self._lang))
        mats = LabView(**fields).to_json()["matrices"]
        m = next((m for m in mats if m["name"] == self._name), mats[-1])
        self.n_heads = int(self._computed.spec.n_heads)
        self.set_trait("selected", [])
        self.value = None
        t = translator(self._lang)
        self.head_names = [t("export.fig.head", head=h) for h in range(int(self._computed.spec.n_heads))]
        head = self.head_names[self.head]
        self.title, self.rows, self.cols = f"{m['label']} · {head}", m["rows"], m["cols"]
        self.scale, self.values = m.get("scale") or "diverging", m["values"]

    @traitlets.validate("head")
    def _valid_head(self, proposal: dict[str, Any]) -> int:
        n = int(self._computed.spec.n_heads)
        if not 0 <= proposal["value"] < n:
            raise traitlets.TraitError(f"head must be in 0…{n - 1}")
        return int(proposal["value"])

    @traitlets.observe("head")
    def _head(self, change: dict[str, Any]) -> None:
        self._show()

    @traitlets.observe("selected")
    def _selected(self, change: dict[str, Any]) -> None:
        if len(change["new"]) == 2:
            i, j = change["new"]
            v = self.values[i][j]
            self.value = float("-inf") if v is None else float(v)


def widget(tokens: str | list[str] | None = None, *, stage: str = "softmax", matrix: str | None = None,
           head: int = 0, lang: str = "en", **fields: Any) -> AttentionWidget:  # fmt: skip
    """The lab's matrix of `stage` (its last matrix, or the one named `matrix`: `weights`, `masked`, `q`…) for
    `tokens` and the API's request fields (`preset`, `mask`, `scale`, …), computed here as `trace` does."""
    from .stages import trace

    computed = trace(tokens, head=head, lang=lang, **fields).trace
    return AttentionWidget(computed, stage, matrix, lang, head=head)
