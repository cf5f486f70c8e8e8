"""`make mutants` still applies: each named engine bug finds its one operation in today's code (no suite is run).

When the engine changes so that a mutant's operation is gone or found twice, this fails at once, naming the mutant,
instead of `make mutants` rotting unnoticed (tests/mutants.py says how each mutant is located).
"""

from __future__ import annotations

import ast
import difflib

import pytest

from tests.mutants import MUTANTS, ROOT, TESTS, Mutant, MutantError, locate, mutate


def _function(m: Mutant, source: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    (f,) = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            and n.name == m.function]  # fmt: skip
    return f


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_mutant_changes_one_operation_inside_its_function(name):
    m = MUTANTS[name]
    source = (ROOT / m.path).read_text(encoding="utf-8")
    locate(m, source)  # exactly one node, or MutantError naming the mutant
    changed = mutate(m, source)
    assert changed != source
    ast.parse(changed)
    f = _function(m, source)
    old, new = source.splitlines(), changed.splitlines()
    assert len(old) == len(new)  # one expression rewritten in place: no line added or lost
    touched = [
        i + 1
        for tag, i1, i2, _, _ in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes()
        if tag != "equal"
        for i in range(i1, i2)
    ]
    assert touched and all(f.lineno <= line <= (f.end_lineno or f.lineno) for line in touched), (name, touched)
    # Still the same module around it: every other function is byte for byte as it was.
    assert _function(m, changed).name == m.function


def test_a_mutant_that_no_longer_applies_is_named():
    m = MUTANTS["mask offset"]
    with pytest.raises(MutantError, match=r"mask offset.*0 ×"):
        locate(m, "def allowed(i, j):\n    return j < i\n")
    with pytest.raises(MutantError, match=r"mask offset.*2 ×.*line 2, line 3"):
        locate(m, "def allowed(i, j):\n    a = j <= i\n    return a & (j <= i)\n")
    with pytest.raises(MutantError, match="0 functions named 'allowed'"):
        locate(m, "def permitted(i, j):\n    return j <= i\n")


def test_the_mutants_structure_survives_reformatting():
    """Spelling is not what a mutant looks for: other spacing, other names around it, `/` for `torch.div`."""
    scale = MUTANTS["scale"]
    source = "def scores(p, scale):\n    raw = p.q @ p.k\n    return Scores(raw=raw,\n        scaled = raw/scale)\n"
    assert "(scale * scale)" in mutate(scale, source)
    source = "def scores(p, scale):\n    return torch.div(p.raw, scale, out=buf)\n"
    assert mutate(scale, source) == "def scores(p, scale):\n    return torch.div(p.raw, (scale * scale), out=buf)\n"


def test_the_tests_a_mutant_runs_exist():
    assert TESTS
    missing = [t for t in TESTS if not (ROOT / t).is_file()]
    assert not missing, f"tests/mutants.py TESTS names modules that moved: {missing}"
