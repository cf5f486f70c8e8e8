"""What a 1B model costs the lab on the CPU: a random model of TinyLlama-1.1B's shape (22 layers, d 2048, 32 heads
sharing 4 K/V heads, d_ff 5632, vocabulary 32,000), written as bfloat16 safetensors, loaded as `--model` would.

    python -m bench.own_model [DIR]     # writes DIR (default /tmp/attention-lab-1b) once, then measures

Prints: start-up (config and headers), first use (weights memory-mapped and widened to float32), resident memory,
a whole trace at the middle layer, a model-view pass, and greedy generation, for a 32-token text.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import torch

SHAPE = {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
         "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048}  # fmt: skip


def write(path: Path) -> None:
    from safetensors.torch import save_file

    from tests.own_models import tokenizer

    path.mkdir(parents=True, exist_ok=True)
    tokenizer(path)
    d, ff, kv, v = SHAPE["hidden_size"], SHAPE["intermediate_size"], 256, SHAPE["vocab_size"]
    g = torch.Generator().manual_seed(0)

    def rnd(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    index: dict[str, str] = {}
    head = {"model.embed_tokens.weight": rnd(v, d), "model.norm.weight": torch.ones(d, dtype=torch.bfloat16),
            "lm_head.weight": rnd(v, d)}  # fmt: skip
    save_file(head, str(path / "model-head.safetensors"))
    index |= dict.fromkeys(head, "model-head.safetensors")
    for i in range(SHAPE["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t = {p + "input_layernorm.weight": torch.ones(d, dtype=torch.bfloat16),
             p + "post_attention_layernorm.weight": torch.ones(d, dtype=torch.bfloat16),
             p + "self_attn.q_proj.weight": rnd(d, d), p + "self_attn.k_proj.weight": rnd(kv, d),
             p + "self_attn.v_proj.weight": rnd(kv, d), p + "self_attn.o_proj.weight": rnd(d, d),
             p + "mlp.gate_proj.weight": rnd(ff, d), p + "mlp.up_proj.weight": rnd(ff, d),
             p + "mlp.down_proj.weight": rnd(d, ff)}  # fmt: skip
        name = f"model-{i:02d}.safetensors"
        save_file(t, str(path / name))
        index |= dict.fromkeys(t, name)
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": index}))
    config = {"model_type": "llama", **SHAPE, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
              "tie_word_embeddings": False, "eos_token_id": 0}  # fmt: skip
    (path / "config.json").write_text(json.dumps(config))


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    from engine import make_spec
    from engine.generate import generate
    from engine.model_view import one_pass_stats
    from engine.models import load
    from engine.tracing import compute

    path = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/attention-lab-1b")
    if not (path / "config.json").is_file():
        write(path)
    print(f"threads {torch.get_num_threads()}, peak RSS before {rss_mb():,.0f} MB")
    t = time.perf_counter()
    model = load(path, "tiny-1b")
    print(f"start-up (config, headers): {time.perf_counter() - t:.2f} s; {model.parameters:,} parameters, "
          f"{model.nbytes / 2**20:,.0f} MB in float32")  # fmt: skip
    t = time.perf_counter()
    model.tensors()
    print(f"first use (read, bf16 -> float32): {time.perf_counter() - t:.1f} s; peak RSS {rss_mb():,.0f} MB")
    text = "The cat sat on the mat, and the dog watched it from the door all afternoon long."
    ids = model.tokenize(text)[:32]
    spec = make_spec(token_ids=ids, preset="tiny-1b", layer=11, models={"tiny-1b": model})
    t = time.perf_counter()
    compute(spec, model)
    print(f"trace of layer 11, {len(ids)} tokens: {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    one_pass_stats(model, tuple(ids))
    print(f"model view (all 22 layers, one pass): {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    g = generate(model, tuple(ids), 16, 21)
    s = time.perf_counter() - t
    print(
        f"generation of {len(g.steps)} tokens: {s:.1f} s ({s / len(g.steps):.2f} s/token); peak RSS {rss_mb():,.0f} MB"
    )


if __name__ == "__main__":
    main()
