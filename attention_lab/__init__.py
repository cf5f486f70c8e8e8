"""Attention Lab in a notebook.

    from attention_lab import trace, Client
    trace("猫 坐 在 垫子 上")                       # the five stages as tabs, computed here: no server
    trace("猫 坐 在 垫子 上", mask="none")["softmax"].matrices[0]
    Client("http://127.0.0.1:8000").trace("The cat sat", preset="gpt2-small")   # the same views, from a lab
    widget("The cat sat", preset="gpt2-small")     # the matrix in the cell; a click read back (pip …[widget])

`trace` takes the API's request fields (`preset`, `mask`, `scale`, `positions`, `seed`, …: see /docs) and answers
with `Stages`: one `LabView` per stage — the View the lab's page renders — shown in Jupyter as the page's panel
(`_repr_html_`) or as its JSON (`_repr_json_`). `Client` reads a running lab's JSON faces and returns the same
Views, so a notebook shows a remote trace exactly as a local one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .stages import Client, Stages, trace

if TYPE_CHECKING:
    from .matrix_widget import AttentionWidget

__all__ = ["Client", "Stages", "trace", "widget"]


def widget(tokens: str | list[str] | None = None, **kwargs: Any) -> AttentionWidget:
    """One stage's matrix as a notebook widget (anywidget, the `widget` extra): see attention_lab/matrix_widget.py."""
    from .matrix_widget import widget as make

    return make(tokens, **kwargs)
