"""Builds a small random GPT-2 in exactly the Hugging Face layout: config.json, model.safetensors (Conv1D weights
stored (in, out)) and a byte-level BPE tokenizer.json trained here, so no hub is ever needed."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

CORPUS = [
    "The cat sat on the mat. The dog sat on the log.",
    "A small model still has real attention heads.",
    "猫坐在垫子上。狗坐在木头上。",
    "Attention is a weighted average of value vectors.",
] * 20


def build(
    path: Path, n_layer: int = 2, n_embd: int = 24, n_head: int = 3, n_positions: int = 40, seed: int = 0
) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<|endoftext|>"]
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.save(str(path / "tokenizer.json"))
    vocab = tok.get_vocab_size()

    g = torch.Generator().manual_seed(seed)

    def rnd(*shape: int, std: float = 0.3) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * std

    d = n_embd
    t = {"wte.weight": rnd(vocab, d, std=1.0), "wpe.weight": rnd(n_positions, d, std=0.5)}
    for i in range(n_layer):
        p = f"h.{i}."
        t |= {
            p + "ln_1.weight": 1 + rnd(d, std=0.1), p + "ln_1.bias": rnd(d, std=0.1),
            p + "attn.c_attn.weight": rnd(d, 3 * d), p + "attn.c_attn.bias": rnd(3 * d, std=0.1),
            p + "attn.c_proj.weight": rnd(d, d), p + "attn.c_proj.bias": rnd(d, std=0.1),
            p + "ln_2.weight": 1 + rnd(d, std=0.1), p + "ln_2.bias": rnd(d, std=0.1),
            p + "mlp.c_fc.weight": rnd(d, 4 * d), p + "mlp.c_fc.bias": rnd(4 * d, std=0.1),
            p + "mlp.c_proj.weight": rnd(4 * d, d), p + "mlp.c_proj.bias": rnd(d, std=0.1),
        }  # fmt: skip
    t |= {"ln_f.weight": torch.ones(d), "ln_f.bias": torch.zeros(d)}
    save_file({k: v.contiguous() for k, v in t.items()}, str(path / "model.safetensors"), metadata={"format": "pt"})
    config = {
        "model_type": "gpt2",
        "architectures": ["GPT2Model"],
        "n_layer": n_layer,
        "n_embd": n_embd,
        "n_head": n_head,
        "n_positions": n_positions,
        "n_ctx": n_positions,
        "vocab_size": vocab,
        "layer_norm_epsilon": 1e-5,
        "activation_function": "gelu_new",
        "scale_attn_weights": True,
        "bos_token_id": 0,
        "eos_token_id": 0,
    }
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return path
