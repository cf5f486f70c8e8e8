"""`make mutants`: break the engine on purpose, five named ways, and show that the test suite catches each.

Each mutant is one textual change to a copy of the tracked files; the suite (without the browser, load and
fuzzing tests, which add minutes and catch nothing more here) runs on the copy and must fail. Prints one line per
mutant and exits non-zero if any survives.

    python -m tests.mutants [--only NAME] [--keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MUTANTS: dict[str, tuple[str, str, str]] = {
    # name: (file, the correct text, the bug)
    "scale": ("engine/attention.py", "scaled=raw / scale)", "scaled=raw / (scale * scale))"),
    "mask offset": ("engine/masks.py", "causal = j <= i", "causal = j < i"),
    "row max": (
        "engine/attention.py",
        "w = torch.softmax(s, dim=-1)",
        "w = s.exp() / s.exp().sum(dim=-1, keepdim=True)",  # the naive formula: no row maximum subtracted
    ),
    "GQA head mapping": (
        "engine/attention.py",
        "t.repeat_interleave(n_heads // t.shape[0], dim=0)",
        "t.repeat(n_heads // t.shape[0], 1, 1)",
    ),
    "RoPE pairing": (
        "engine/positions.py",
        '    if pairing == "adjacent":\n        x1, x2',
        '    if pairing != "adjacent":\n        x1, x2',
    ),
}

SKIP = ["--ignore=tests/browser", "--ignore=tests/test_load.py", "--ignore=tests/test_workers.py",
        "--ignore=tests/test_schemathesis.py"]  # fmt: skip


def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line]


def run(name: str, keep: bool) -> tuple[bool, float, str]:
    path, good, bad = MUTANTS[name]
    tmp = Path(tempfile.mkdtemp(prefix="mutant-"))
    try:
        for rel in tracked():
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if (ROOT / rel).is_file():
                shutil.copy2(ROOT / rel, dst)
        target = tmp / path
        text = target.read_text(encoding="utf-8")
        if text.count(good) != 1:
            raise SystemExit(f"mutant {name!r}: {good!r} is not in {path} exactly once; update tests/mutants.py")
        target.write_text(text.replace(good, bad), encoding="utf-8")
        env = os.environ | {"PYTHONPATH": str(tmp), "PYTHONDONTWRITEBYTECODE": "1"}
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *SKIP],
                              cwd=tmp, env=env, capture_output=True, text=True)  # fmt: skip
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("FAILED")]
        return proc.returncode != 0, time.perf_counter() - t0, lines[0] if lines else proc.stdout[-300:]
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=sorted(MUTANTS))
    ap.add_argument("--keep", action="store_true", help="keep the mutated copies")
    args = ap.parse_args()
    survivors = []
    for name in [args.only] if args.only else list(MUTANTS):
        caught, seconds, first = run(name, args.keep)
        print(f"{'caught ' if caught else 'SURVIVED'}  {name:<18} {seconds:6.1f} s  {first}", flush=True)
        if not caught:
            survivors.append(name)
    print(f"{len(MUTANTS) - len(survivors)} of {len(MUTANTS)} mutants caught" if not args.only else "")
    return 1 if survivors else 0


if __name__ == "__main__":
    raise SystemExit(main())
