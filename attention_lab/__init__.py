"""Attention Lab in a notebook.

    from attention_lab import trace, Client
    trace("猫 坐 在 垫子 上")                       # the five stages as tabs, computed here: no server
    trace("猫 坐 在 垫子 上", mask="none")["softmax"].matrices[0]
    Client("http://127.0.0.1:8000").trace("The cat sat", preset="gpt2-small")   # the same views, from a lab

`trace` takes the API's request fields (`preset`, `mask`, `scale`, `positions`, `seed`, …: see /docs) and answers
with `Stages`: one `LabView` per stage — the View the lab's page renders — shown in Jupyter as the page's panel
(`_repr_html_`) or as its JSON (`_repr_json_`). `Client` reads a running lab's JSON faces and returns the same
Views, so a notebook shows a remote trace exactly as a local one.
"""

from __future__ import annotations

from .stages import Client, Stages, trace

__all__ = ["Client", "Stages", "trace"]
