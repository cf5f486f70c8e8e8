"""A real GPT-2 from a Hugging Face directory (config.json, model.safetensors, tokenizer.json), as a source of x
and weights for the same five stages.

GPT-2 stores its linear layers as Conv1D with weights (in, out): exactly the row-vector convention the engine uses,
so W_Q, W_K, W_V are column blocks of c_attn's (d, 3d) weight with no transpose. A trace of layer L runs the token
and position embeddings and layers 0 … L−1 for real; the attention trace's x is LN1 of the hidden state entering
layer L. Weights load once, on first use; the path comes from the server's configuration, never from a request.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .block import BlockWeights, normalise
from .sources import Weights


@dataclass(frozen=True)
class ModelInfo:
    """What validation needs to know about a model, without loading its weights."""

    name: str
    d_model: int
    n_heads: int
    n_layer: int
    n_ctx: int
    vocab: int
    eps: float
    default_text: str = "The cat sat on the mat."
    default_mask: str = "causal"
    norm: str = "layernorm"
    ffn: str = "gelu"
    placement: str = "pre"
    gelu: str = "tanh"
    d_ff: int = 0  # 0 means 4·d_model
    positions: str = "none"  # rope for LLaMA-style models (GPT-2 and BERT add positions before layer 0)
    rope_base: float = 10000.0
    rope_pairing: str = "adjacent"
    n_kv_heads: int = 0  # GQA; 0 means n_heads


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: every byte as a printable character."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


_BYTE_OF = {c: b for b, c in _bytes_to_unicode().items()}


SUBSCRIPT = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def _utf8_length(lead: int) -> int:
    return (
        1
        if lead < 0x80
        else 2
        if lead >> 5 == 0b110
        else 3
        if lead >> 4 == 0b1110
        else 4
        if lead >> 3 == 0b11110
        else 1
    )


def piece_labels(pieces: list[bytes]) -> list[str]:
    """Labels for consecutive byte pieces of one text. A character split across pieces (byte-level BPE cuts 猫,
    three UTF-8 bytes, into up to three tokens) is shown in each piece with its part number: 猫₁ 猫₂ 猫₃; whole
    characters as themselves; bytes that form no character as ⟨hex⟩."""
    data = b"".join(pieces)
    bounds, at = [], 0
    for piece in pieces:
        bounds.append((at, at + len(piece)))
        at += len(piece)
    chars: list[tuple[int, int, str | None]] = []  # (start, end, text or None for a stray byte)
    i = 0
    while i < len(data):
        size = _utf8_length(data[i])
        try:
            chars.append((i, i + size, data[i : i + size].decode("utf-8")))
            i += size
        except UnicodeDecodeError:
            chars.append((i, i + 1, None))
            i += 1
    labels = []
    first_char = 0  # pieces and characters both run left to right: one pass over each (linear in the text)
    for k, (a, b) in enumerate(bounds):
        while first_char < len(chars) and chars[first_char][1] <= a:
            first_char += 1
        out = []
        j = first_char
        while j < len(chars) and chars[j][0] < b:
            start, end, text = chars[j]
            j += 1
            if end <= a:
                continue
            if text is None:
                out.append(f"⟨{data[start]:02x}⟩")
            elif a <= start and end <= b:
                out.append(text)
            else:  # which part of the character this piece holds, counted over the pieces that share it
                first = k
                while first > 0 and bounds[first - 1][1] > start and bounds[first - 1][0] < end:
                    first -= 1
                out.append(text + str(k - first + 1).translate(SUBSCRIPT))
        labels.append("".join(out))
    return labels


def readable_labels(tok: Any, ids: list[int]) -> list[str]:
    """A label per token id, read as a sequence so that a character split by byte-level BPE is named in each of its
    pieces (猫₁ 猫₂); a visible ␣ or ↵ for a token that is only whitespace."""
    pieces: list[bytes] = []
    for i in ids:
        raw = tok.id_to_token(i) or ""
        data = [_BYTE_OF.get(c) for c in raw]
        if raw and None not in data:
            pieces.append(bytes(data))  # type: ignore[arg-type]
        else:  # a special token, or a tokenizer without byte-level pieces
            pieces.append((tok.decode([i]) or raw or f"#{i}").encode("utf-8"))
    out = []
    for i, text in zip(ids, piece_labels(pieces), strict=True):
        out.append(text if text.strip() else text.replace(" ", "␣").replace("\n", "↵") or f"#{i}")
    return out


class CheckpointError(ValueError):
    pass


class GPT2Checkpoint:
    def __init__(self, path: str | Path, name: str = "checkpoint", device: str = "cpu") -> None:
        self.path = Path(path)
        self.device = device
        config_path = self.path / "config.json"
        if not config_path.is_file():
            raise CheckpointError(f"{self.path} has no config.json: not a Hugging Face GPT-2 directory")
        if not (self.path / "model.safetensors").is_file():
            raise CheckpointError(f"{self.path} has no model.safetensors")
        c = json.loads(config_path.read_text())
        act = c.get("activation_function", "gelu_new")
        if act not in ("gelu_new", "gelu", "gelu_pytorch_tanh"):
            raise CheckpointError(f"unsupported activation_function {act!r}")
        self.info = ModelInfo(
            name=name,
            d_model=int(c.get("n_embd", 768)),
            n_heads=int(c.get("n_head", 12)),
            n_layer=int(c.get("n_layer", 12)),
            n_ctx=int(c.get("n_positions", c.get("n_ctx", 1024))),
            vocab=int(c.get("vocab_size", 50257)),
            eps=float(c.get("layer_norm_epsilon", 1e-5)),
            gelu="exact" if act == "gelu" else "tanh",
        )
        self.scale_attn_weights = bool(c.get("scale_attn_weights", True))
        self._tensors: dict[str, torch.Tensor] | None = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    # -- tokens ---------------------------------------------------------------------------------------------
    @property
    def has_tokenizer(self) -> bool:
        return (self.path / "tokenizer.json").is_file()

    def tokenizer(self) -> Any:
        with self._lock:
            if self._tokenizer is None:
                from tokenizers import Tokenizer

                tok = Tokenizer.from_file(str(self.path / "tokenizer.json"))
                tok.no_padding()
                tok.no_truncation()
                self._tokenizer = tok
        return self._tokenizer

    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer().encode(text, add_special_tokens=False).ids)

    def labels(self, ids: list[int]) -> list[str]:
        if not self.has_tokenizer:
            return [f"#{i}" for i in ids]
        return readable_labels(self.tokenizer(), ids)

    # -- weights --------------------------------------------------------------------------------------------
    def tensors(self) -> dict[str, torch.Tensor]:
        with self._lock:
            if self._tensors is None:
                from safetensors.torch import load_file

                raw = load_file(str(self.path / "model.safetensors"))
                self._tensors = {k.removeprefix("transformer."): v.float().to(self.device) for k, v in raw.items()}
        return self._tensors

    def _get(self, key: str) -> torch.Tensor:
        try:
            return self.tensors()[key]
        except KeyError:
            raise CheckpointError(f"model.safetensors has no tensor {key!r}") from None

    def attention_weights(self, layer: int) -> Weights:
        d = self.info.d_model
        w, b = self._get(f"h.{layer}.attn.c_attn.weight"), self._get(f"h.{layer}.attn.c_attn.bias")  # (d, 3d)
        return Weights(
            w_q=w[:, :d], w_k=w[:, d : 2 * d], w_v=w[:, 2 * d :],
            w_o=self._get(f"h.{layer}.attn.c_proj.weight"),
            b_q=b[:d], b_k=b[d : 2 * d], b_v=b[2 * d :],
            b_o=self._get(f"h.{layer}.attn.c_proj.bias"),
        )  # fmt: skip

    def block_weights(self, layer: int) -> BlockWeights:
        p = f"h.{layer}."
        return BlockWeights(
            ln1_w=self._get(p + "ln_1.weight"), ln1_b=self._get(p + "ln_1.bias"),
            ln2_w=self._get(p + "ln_2.weight"), ln2_b=self._get(p + "ln_2.bias"),
            w_up=self._get(p + "mlp.c_fc.weight"), b_up=self._get(p + "mlp.c_fc.bias"),
            w_down=self._get(p + "mlp.c_proj.weight"), b_down=self._get(p + "mlp.c_proj.bias"),
        )  # fmt: skip

    # -- the forward pass up to a layer ---------------------------------------------------------------------
    @torch.inference_mode()
    def hidden(self, ids: tuple[int, ...], layer: int) -> torch.Tensor:
        """The residual stream entering block `layer`: wte + wpe, then blocks 0 … layer−1 (N, d), in float32."""
        from .block import feed_forward

        idx = torch.tensor(ids, dtype=torch.long, device=self.device)
        x = self._get("wte.weight")[idx] + self._get("wpe.weight")[: len(ids)]
        n, d, h = len(ids), self.info.d_model, self.info.n_heads
        causal = torch.ones(n, n, dtype=torch.bool, device=self.device).tril()
        scale = 1 / math.sqrt(d // h) if self.scale_attn_weights else 1.0
        for i in range(layer):
            bw, aw = self.block_weights(i), self.attention_weights(i)
            a = normalise(x, bw.ln1_w, bw.ln1_b, "layernorm", self.info.eps)
            q, k, v = (F.linear(a, m.T, bias).view(n, h, d // h).transpose(0, 1) for m, bias in
                       ((aw.w_q, aw.b_q), (aw.w_k, aw.b_k), (aw.w_v, aw.b_v)))  # fmt: skip
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=causal, scale=scale)
            x = x + F.linear(y.transpose(0, 1).reshape(n, d), aw.w_o.T, aw.b_o)
            m = normalise(x, bw.ln2_w, bw.ln2_b, "layernorm", self.info.eps)
            x = x + feed_forward(m, bw, "gelu", self.info.gelu)[1]
        return x

    def attention_input(
        self, ids: tuple[int, ...], layer: int, progress: Callable[[int, int], None] | None = None
    ) -> tuple[torch.Tensor, Weights]:
        """What layer `layer`'s attention reads: LN1 of the hidden state, and its weights (`progress`: reported
        once, at the end — GPT-2's layers are short)."""
        bw = self.block_weights(layer)
        x = normalise(self.hidden(ids, layer), bw.ln1_w, bw.ln1_b, "layernorm", self.info.eps)
        if progress is not None:
            progress(layer, layer)
        return x, self.attention_weights(layer)
