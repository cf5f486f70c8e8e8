"""Tiny random models of every architecture the lab reads, built here with transformers (`XConfig(...)`,
`save_pretrained`) and a byte-level BPE tokenizer trained with the `tokenizers` package; and a llama GGUF written
by the `gguf` package from the same weights. Nothing is downloaded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

CORPUS = [
    "The cat sat on the mat. The dog sat on the log.",
    "A small model still has real attention heads.",
    "猫坐在垫子上。狗坐在木头上。",
    "Attention is a weighted average of value vectors.",
] * 20

SIZES = {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4}


def tokenizer(path: Path) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<|endoftext|>"]
    )
    tok.train_from_iterator(CORPUS, trainer)
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    return tok


def config(arch: str, vocab: int, **extra: Any) -> Any:
    import transformers as tf

    common = {"vocab_size": vocab, "eos_token_id": 0, "bos_token_id": 0, "pad_token_id": 0}
    if arch == "gpt2":
        return tf.GPT2Config(n_layer=3, n_embd=32, n_head=4, n_positions=64, **common, **extra)
    if arch == "bert":
        return tf.BertConfig(**SIZES, max_position_embeddings=64, **common, **extra)
    rope = {"max_position_embeddings": 256, "num_key_value_heads": 2}
    if arch == "llama":
        return tf.LlamaConfig(**SIZES, **rope, tie_word_embeddings=False, **common, **extra)
    if arch == "mistral":
        return tf.MistralConfig(**SIZES, **rope, sliding_window=5, tie_word_embeddings=False, **common, **extra)
    if arch == "qwen2":
        return tf.Qwen2Config(**SIZES, **rope, tie_word_embeddings=True, **common, **extra)
    if arch == "gemma":
        return tf.GemmaConfig(**SIZES, **rope, head_dim=8, **common, **extra)
    raise ValueError(arch)


def randomise(model: Any, seed: int) -> None:
    """Weights large enough that attention is far from uniform (transformers initialises with std 0.02)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if "norm" in name.lower() or "ln_" in name:
                p.add_(0.1 * noise)  # around 1 (Gemma's around 0: it multiplies by 1 + weight)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(0.25 * noise)


def build(arch: str, path: Path, seed: int = 0, dtype: torch.dtype | None = None, **extra: Any) -> tuple[Path, Any]:
    """A random `arch` model saved in `path` (config.json, model.safetensors, tokenizer.json); returns the path and
    the transformers model (eager attention, float32, eval) as the reference."""
    import transformers as tf

    tok = tokenizer(path)
    shard = extra.pop("max_shard_size", None)
    cfg = config(arch, tok.get_vocab_size(), **extra)
    cfg._attn_implementation = "eager"
    cls = tf.BertModel if arch == "bert" else tf.AutoModelForCausalLM
    model = cls.from_config(cfg) if cls is tf.AutoModelForCausalLM else cls(cfg)
    randomise(model, seed)
    model.eval()
    saved = model.to(dtype) if dtype is not None else model
    saved.save_pretrained(str(path), **({"max_shard_size": shard} if shard else {}))
    if dtype is not None:  # the reference computes in float32 from the same (rounded) weights, as the lab does
        model = cls.from_pretrained(str(path), dtype=torch.float32, attn_implementation="eager").eval()
    return path, model


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's storage of W_Q and W_K: in each head, output rows i and i + d_k/2 become rows 2i and 2i + 1,
    so that RoPE can rotate adjacent pairs."""
    out_dim, in_dim = w.shape
    dk = out_dim // heads
    return w.reshape(heads, 2, dk // 2, in_dim).swapaxes(1, 2).reshape(out_dim, in_dim)


def write_gguf(hf_dir: Path, model: Any, file: Path, qtype: str = "F32") -> Path:
    """The llama `model`'s weights (and `hf_dir`'s tokenizer) as a llama GGUF file, written by the `gguf` package."""
    import gguf

    cfg = model.config
    w = gguf.GGUFWriter(str(file), "llama")
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_rope_dimension_count(cfg.hidden_size // heads)
    w.add_vocab_size(cfg.vocab_size)
    spec = json.loads((hf_dir / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv_: kv_[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types([3 if t == "<|endoftext|>" else 1 for t in tokens])
    w.add_eos_token_id(cfg.eos_token_id)
    w.add_add_bos_token(False)
    names = {
        "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
        "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
    }  # fmt: skip
    kind = getattr(gguf.GGMLQuantizationType, qtype)
    for name, p in model.state_dict().items():
        a = p.detach().float().numpy()
        if name == "model.embed_tokens.weight":
            out = "token_embd.weight"
        elif name == "model.norm.weight":
            out = "output_norm.weight"
        elif name == "lm_head.weight":
            out = "output.weight"
        else:
            _, _, i, *rest = name.split(".")
            part = ".".join(rest[:-1])
            out = f"blk.{i}.{names[part]}.{rest[-1]}"
            if part == "self_attn.q_proj":
                a = _permute(a, heads)
            elif part == "self_attn.k_proj":
                a = _permute(a, kv)
        a = np.ascontiguousarray(a, dtype=np.float32)
        if kind != gguf.GGMLQuantizationType.F32 and a.ndim == 2 and a.shape[-1] % 32 == 0:
            w.add_tensor(out, gguf.quants.quantize(a, kind), raw_dtype=kind)
        else:
            w.add_tensor(out, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return file
