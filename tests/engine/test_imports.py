"""The packaged models stand on the model loader, not the other way round: engine/pretrained.py imports
engine/models, and no module of engine/models names engine.pretrained (not even lazily, inside a function; the
server hands `registry` what `pretrained.installed()` found)."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "engine"


def imported(path: Path) -> set[str]:
    """Every module `path` imports, as written (relative ones with their leading dots)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            out |= {"." * node.level + (node.module or "") + "." + a.name for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out


def test_the_model_loader_imports_no_packaged_model() -> None:
    assert any("models" in m for m in imported(ENGINE / "pretrained.py"))
    for path in sorted((ENGINE / "models").rglob("*.py")):
        assert not [m for m in imported(path) if "pretrained" in m], f"{path.name} imports engine.pretrained"
