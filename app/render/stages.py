"""Stages as data: every stage key has one presentation — formula, what it does, what to notice in these numbers,
its matrices, the colour scale of its main tensor — and every page that shows the stage (the lab, the block page
around its attention, a notebook) asks this table instead of keeping an if-chain of its own.

The table is one explicit merge of the two tables of presentations: the five attention stages
(app/render/attention_stages.py) and the stages around them in a block (app/render/block_stages.py).
"""

from __future__ import annotations

from typing import Any

from .attention_stages import ATTENTION_STAGES
from .block_stages import BLOCK_STAGES
from .cells import MatrixView
from .presentation import Presentation

REGISTRY: dict[str, Presentation] = ATTENTION_STAGES | BLOCK_STAGES
if ATTENTION_STAGES.keys() & BLOCK_STAGES.keys():
    raise ValueError(f"stages presented twice: {sorted(ATTENTION_STAGES.keys() & BLOCK_STAGES.keys())}")


def owner(trace: Any, key: str) -> Any:
    """The trace a stage belongs to: a block's attention stages live in its attention trace."""
    attention = getattr(trace, "attention", None)
    return attention if attention is not None and key in attention.order else trace


def present(trace: Any, key: str, t: Any) -> dict[str, str]:
    """What every page shows above a stage's numbers: its formula, what it does and what to notice."""
    p, target = REGISTRY[key], owner(trace, key)
    return {"formula": p.formula(target), "explain": str(t(p.explain(target))), "notice": p.notice(target, t)}


def matrices(trace: Any, key: str, head: int) -> list[MatrixView]:
    return REGISTRY[key].matrices(owner(trace, key), head)
