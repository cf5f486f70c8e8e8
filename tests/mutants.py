"""`make mutants`: break the engine on purpose, five named ways, and show that the tests catch each.

A mutant is found by the code's structure, not by its spelling: a function of an engine module and one operation
inside it (in `scores`, the division by `scale`; in `allowed`, the comparison `j <= i`; …). The located node must
be the only one of its kind in that function; its source is then replaced by the changed node (`ast.unparse`),
the rest of the file byte for byte as it was. Reformatting the engine, renaming a local or moving a function keeps
every mutant applying; a change that takes away what a mutant breaks makes `locate` fail, and tests/engine/test_mutants.py
(a fraction of a second, in `make test`) says which mutant and why.

Each mutant runs on a copy of the working tree (the files git tracks or would track) against the test modules
that are about the engine (`TESTS`), with `-x`: the first failure kills it. Prints one line per mutant, with the
first failing test and the time, and exits non-zero if any survives.

    python -m tests.mutants [--only NAME] [--keep] [--all-tests]
"""

from __future__ import annotations

import argparse
import ast
import copy
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class MutantError(Exception):
    """A mutant no longer applies: the operation it changes is missing, or found more than once."""


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # the module, relative to the repository root
    function: str  # the function (at any depth of the module) that holds the operation
    operation: str  # the operation, in words (for messages)
    bug: str  # what the change does, in words
    find: Callable[[ast.AST], bool]  # is this node the operation?
    # The located node → (the expression whose source is replaced: it or a part of it, its replacement)
    change: Callable[[ast.AST], tuple[ast.expr, ast.expr]]


def _name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _callee(node: ast.AST) -> list[str]:
    """`torch.ops.aten._softmax.out(…)` → ['torch', 'ops', 'aten', '_softmax', 'out']; [] for a non-call."""
    if not isinstance(node, ast.Call):
        return []
    parts, f = [], node.func
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    if isinstance(f, ast.Name):
        parts.append(f.id)
    return parts[::-1]


# --- the operations -------------------------------------------------------------------------------------------


def _divisor(node: ast.AST) -> ast.expr | None:
    """What `node` divides by, when it is a division: the right operand of `/`, or the divisor of a `div` call
    (`torch.div(raw, scale, out=…)`, `raw.div(scale)`)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return node.right
    parts = _callee(node)
    if parts and parts[-1] in ("div", "true_divide", "divide") and isinstance(node, ast.Call):
        args = node.args[1:] if parts[:1] == ["torch"] else node.args  # torch.div(a, b) or a.div(b)
        return args[0] if args else None
    return None


def _divides_by_scale(node: ast.AST) -> bool:
    d = _divisor(node)
    return d is not None and _name(d, "scale")


def _scale_squared(node: ast.AST) -> tuple[ast.expr, ast.expr]:
    """The division by `scale` becomes a division by `scale * scale`: QKᵀ / s²."""
    d = _divisor(node)
    assert d is not None
    return d, ast.BinOp(ast.Name("scale"), ast.Mult(), ast.Name("scale"))


def _compare(left: str, op: type[ast.cmpop], right: str) -> Callable[[ast.AST], bool]:
    def find(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], op)
            and _name(node.left, left)
            and _name(node.comparators[0], right)
        )

    return find


def _strict(node: ast.AST) -> tuple[ast.expr, ast.expr]:
    """`j <= i` becomes `j < i`: the diagonal masked, a token no longer sees itself."""
    assert isinstance(node, ast.Compare)
    return node, ast.Compare(copy.deepcopy(node.left), [ast.Lt()], copy.deepcopy(node.comparators))


def _softmax_call(node: ast.AST) -> bool:
    """The call that computes the softmax (`torch.softmax(s, …)`, `torch.ops.aten._softmax.out(s, …)`, …)."""
    parts = _callee(node)
    return any(p.lstrip("_") in ("softmax", "softmax_out") for p in parts) and bool(getattr(node, "args", None))


def _naive_softmax(node: ast.AST) -> tuple[ast.expr, ast.expr]:
    """softmax(s) becomes exp(s) / Σ exp(s), with no row maximum subtracted: large scores overflow to inf / inf."""
    assert isinstance(node, ast.Call)
    s = copy.deepcopy(node.args[0])
    exp = ast.Call(ast.Attribute(s, "exp"), [], [])
    total = ast.Call(
        ast.Attribute(ast.Call(ast.Attribute(s, "exp"), [], []), "sum"),
        [],
        [ast.keyword("dim", ast.UnaryOp(ast.USub(), ast.Constant(1))), ast.keyword("keepdim", ast.Constant(True))],
    )
    return node, ast.BinOp(exp, ast.Div(), total)


def _repeat_interleave(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "repeat_interleave"


def _tiled(node: ast.AST) -> tuple[ast.expr, ast.expr]:
    """`t.repeat_interleave(g, dim=0)` (head h reads K/V head h // g) becomes `t.repeat(g, 1, 1)` (head h reads
    K/V head h % H_kv): the grouped-query mapping of query heads to K/V heads scrambled."""
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    one = ast.Constant(1)
    t, g = copy.deepcopy(node.func.value), copy.deepcopy(node.args[0])
    return node, ast.Call(ast.Attribute(t, "repeat"), [g, one, one], [])


def _adjacent_split(node: ast.AST) -> bool:
    """The `if pairing == "adjacent":` whose branch splits t into x1, x2 (not the one that puts the halves back)."""
    if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and _name(node.test.left, "pairing")):
        return False
    return any(
        isinstance(stmt, ast.Assign)
        and any(
            isinstance(t, ast.Tuple) and [getattr(e, "id", None) for e in t.elts] == ["x1", "x2"] for t in stmt.targets
        )
        for stmt in node.body
    )


def _other_pairing(node: ast.AST) -> tuple[ast.expr, ast.expr]:
    """Only the split takes the other pairing (adjacent ↔ split halves); the rotated halves are put back as before."""
    assert isinstance(node, ast.If)
    return node.test, ast.UnaryOp(ast.Not(), copy.deepcopy(node.test))


MUTANTS: dict[str, Mutant] = {
    m.name: m
    for m in (
        Mutant(
            "scale",
            "engine/attention.py",
            "scores",
            "the division by `scale`",
            "QKᵀ divided by s²",
            _divides_by_scale,
            _scale_squared,
        ),
        Mutant(
            "mask offset",
            "engine/masks.py",
            "allowed",
            "the comparison `j <= i`",
            "the diagonal masked",
            _compare("j", ast.LtE, "i"),
            _strict,
        ),
        Mutant(
            "row max",
            "engine/attention.py",
            "softmax_rows",
            "the softmax call",
            "the naive formula, no row maximum subtracted",
            _softmax_call,
            _naive_softmax,
        ),
        Mutant(
            "GQA head mapping",
            "engine/attention.py",
            "per_head",
            "the call of `repeat_interleave`",
            "repeat instead of repeat_interleave",
            _repeat_interleave,
            _tiled,
        ),
        Mutant(
            "RoPE pairing",
            "engine/positions.py",
            "rotate",
            "the `if pairing …` that splits t into x1, x2",
            "the split's pairing swapped",
            _adjacent_split,
            _other_pairing,
        ),
    )
}

# The test modules a mutant runs: those about the engine's numbers. The whole suite (the app's pages, the API, the
# fuzzing) catches nothing more here and takes minutes; `--all-tests` runs it (less the browser, load and fuzzing
# tests) all the same.
TESTS = [
    "tests/engine/test_positions_masks.py",
    "tests/engine/test_precision.py",
    "tests/engine/test_toy.py",
    "tests/engine/test_reference.py",
    "tests/engine/test_properties.py",
]
SKIP = ["--ignore=tests/browser", "--ignore=tests/app/lab/test_load.py", "--ignore=tests/app/lab/test_workers.py",
        "--ignore=tests/app/test_schemathesis.py"]  # fmt: skip


# --- locating and applying ------------------------------------------------------------------------------------


def locate(m: Mutant, source: str) -> ast.AST:
    """The one node of `m`'s operation in `m.function` of `source`; MutantError when there is none, or more than one
    (of the function or of the operation)."""
    tree = ast.parse(source)
    funcs = [
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == m.function
    ]
    if len(funcs) != 1:
        raise MutantError(f"mutant {m.name!r}: {len(funcs)} functions named {m.function!r} in {m.path} (expected one)")
    hits = [n for n in ast.walk(funcs[0]) if m.find(n)]
    if len(hits) != 1:
        where = ", ".join(f"line {getattr(n, 'lineno', '?')}" for n in hits)
        raise MutantError(
            f"mutant {m.name!r}: {len(hits)} × {m.operation} in {m.function}() of {m.path}{f' ({where})' if where else ''}"
            "; expected exactly one: update tests/mutants.py"
        )
    return hits[0]


def mutate(m: Mutant, source: str) -> str:
    """`source` with `m`'s operation replaced by its changed form (in parentheses); every other byte as it was."""
    old, new = m.change(locate(m, source))
    assert old.end_lineno is not None and old.end_col_offset is not None
    starts = [0]  # each line's offset in bytes: ast's columns count UTF-8 bytes
    for line in source.encode("utf-8").splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    raw = source.encode("utf-8")
    a = starts[old.lineno - 1] + old.col_offset
    b = starts[old.end_lineno - 1] + old.end_col_offset
    out = (raw[:a] + f"({ast.unparse(new)})".encode() + raw[b:]).decode("utf-8")
    ast.parse(out)  # still Python
    return out


def files() -> list[str]:
    """The working tree's files that git tracks or would track (not ignored), as they are now."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return [line for line in dict.fromkeys(out.splitlines()) if line and (ROOT / line).is_file()]


def run(m: Mutant | None, keep: bool, all_tests: bool) -> tuple[bool, float, str]:
    """Whether the tests fail on a copy with `m` applied (None: the copy as it is), their time and first failure."""
    tmp = Path(tempfile.mkdtemp(prefix="mutant-"))
    try:
        for rel in files():
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dst)
        if m is not None:
            target = tmp / m.path
            target.write_text(mutate(m, target.read_text(encoding="utf-8")), encoding="utf-8")
        env = os.environ | {"PYTHONPATH": str(tmp), "PYTHONDONTWRITEBYTECODE": "1"}
        env.pop("CI", None)  # a test that skips on a copy is not the mutant's business
        chosen = SKIP if all_tests else TESTS
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                               "-p", "no:randomly", "--durations=0", "--durations-min=1000", *chosen],
                              cwd=tmp, env=env, capture_output=True, text=True)  # fmt: skip
        seconds = time.perf_counter() - t0
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("FAILED")]
        caught = proc.returncode == 1 and bool(lines)  # a failing test, not an error of collection or usage
        return caught, seconds, lines[0] if lines else (proc.stdout[-300:] + proc.stderr[-300:]).strip()
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=sorted(MUTANTS))
    ap.add_argument("--keep", action="store_true", help="keep the mutated copies")
    ap.add_argument("--all-tests", action="store_true", help="run the suite (less browser, load, fuzzing) per mutant")
    args = ap.parse_args()
    try:  # every mutant applies, before any runs
        for m in MUTANTS.values():
            locate(m, (ROOT / m.path).read_text(encoding="utf-8"))
    except MutantError as e:
        print(e)
        return 2
    chosen = [MUTANTS[args.only]] if args.only else list(MUTANTS.values())
    t0 = time.perf_counter()
    # The control: without a mutant the same tests pass, so a failure below is the mutant's doing.
    failed, seconds, first = run(None, args.keep, args.all_tests)
    print(
        f"{'FAILED ' if failed else 'passed '}  {'(no mutant)':<18} {seconds:6.1f} s  {first if failed else ''}",
        flush=True,
    )
    if failed or "passed" not in first:
        print("the tests do not pass on the unmutated copy: no mutant can be judged")
        return 2
    survivors = []
    for m in chosen:
        caught, seconds, first = run(m, args.keep, args.all_tests)
        print(f"{'caught ' if caught else 'SURVIVED'}  {m.name:<18} {seconds:6.1f} s  {m.bug}: {first}", flush=True)
        if not caught:
            survivors.append(m.name)
    print(f"{len(chosen) - len(survivors)} of {len(chosen)} mutants caught in {time.perf_counter() - t0:.0f} s")
    return 1 if survivors else 0


if __name__ == "__main__":
    raise SystemExit(main())
