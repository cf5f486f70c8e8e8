"""Stages as data: each stage key registers its presentation once — formula, what it does, what to notice in these
numbers, its matrices — and every page that shows the stage (the lab, the block page around its attention) asks
the registry instead of keeping an if-chain of its own.

A presentation's functions take the trace the stage belongs to: an attention Trace for the five attention stages
(a block's own attention trace when shown inside a block), a BlockTrace for the stages around it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .cells import MatrixView


@dataclass(frozen=True)
class Presentation:
    formula: Callable[[Any], str]  # trace -> MathML
    explain: Callable[[Any], str]  # trace -> the catalogue key of "what happens"
    notice: Callable[[Any, Any], str]  # trace, translator -> "what to notice" in these numbers
    matrices: Callable[[Any, int], list[MatrixView]]  # trace, head -> the matrices shown cell by cell


REGISTRY: dict[str, Presentation] = {}


def register(key: str, presentation: Presentation) -> None:
    if key in REGISTRY:
        raise ValueError(f"stage {key!r} is presented twice")
    REGISTRY[key] = presentation


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
