"""The engine's one error type: a request that cannot be traced, naming the input at fault.

It has a module of its own so that every checker (engine/spec.py, the mask kinds' own checks in engine/masks.py)
can raise it without importing another checker; `engine.spec.SpecError` is the same class.
"""

from __future__ import annotations


class SpecError(ValueError):
    """A request that cannot be traced; `field` names the input at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
