"""One loaded model, whatever its architecture: the same small interface for every family.

    tokenize(text) → ids            embed(ids, start) → x (N, d), the residual stream entering layer 0
    layer_qkv(i, x, pos) → q, k, v  layer i up to its attention (its norm for Pre-LN, RoPE at positions `pos`)
    layer_rest(i, x, heads) → x     layer i after it: the heads (H, N, d_k) through W_O, the residual, the FFN
    final(x), unembed(x) → logits   decoders: the last norm and the output projection

Every page, the traces (engine/attention.py), the block (engine/block.py), generation, the model view and long
contexts read a model through it, so what a later view passes into `layer_rest` (heads knocked out, a sink dropped)
changes one forward for all of them.

Three families, one block each: `GPT2` (learned positions, LayerNorm, GELU, Conv1D weights stored (in, out)),
`Llama` (LLaMA, Mistral, Qwen2, Gemma: RMSNorm, RoPE, GQA, gated FFN; from safetensors or a llama GGUF) and `Bert`
(Post-LN encoder). A family only names its tensors and arranges them into the engine's row-vector `Weights` and
`BlockWeights`; the forward pass is written once, here.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from ..attention import causal_attention, linear
from ..block import BlockWeights, feed_forward, normalise
from ..device import CPU
from ..positions import Angles, angles, rotate
from ..sources import Weights
from .config import Arch, ModelError, ModelInfo
from .files import inside
from .labels import readable_labels, readable_runs
from .store import GGUF, Store
from .tokens import from_gguf, from_json, gguf_has_tokenizer

log = logging.getLogger("attention_lab.models")

Progress = Callable[[int, int], None] | None  # (layers done, layers in all)
Observe = Callable[[int, int, torch.Tensor], None] | None  # (layer, first query row, weights (H, rows, keys))


def rope_factors(arch: Arch) -> tuple[float, ...]:
    """llama3 scaling as a divisor of each pair's frequency: 1 for short wavelengths, `factor` for long ones, and
    a smooth blend between (the same numbers transformers derives from the config)."""
    if not arch.rope_scaling:
        return ()
    factor, low, high, old = arch.rope_scaling
    out = []
    for i in range(0, arch.d_k, 2):
        inv = arch.rope_base ** (-i / arch.d_k)
        wavelen = 2 * math.pi / inv
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            s = (old / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - s) / factor + s))
    return tuple(out)


class Model:
    """A model from local files: its architecture, its tensors (copied out of the files into float32 memory the
    process owns: at start-up by `validate`, or on first use), its tokens."""

    family = ""

    def __init__(self, arch: Arch, store: Store, name: str, path: Path, tokenizer: Path | None = None) -> None:
        self.arch, self.store, self.name, self.path = arch, store, name, path
        self.device = CPU
        self._lock = threading.Lock()
        self._tensors: dict[str, torch.Tensor] | None = None
        self._tokenizer: Any = None
        self._tokenizer_path = tokenizer
        self._before_load: Callable[[int], None] | None = None
        self.warnings: list[str] = []  # what was dropped at start-up (an out-of-vocabulary special token), said once
        self.checked = False  # validate() passed: the weights are in memory and a forward pass was finite
        self.files = {self.normal(n): n for n in store.names() if self.normal(n) is not None}
        self._check()
        self.factors = self._rope_factors()
        self._eos, self._bos, self._add_bos = self._special_tokens()
        a = arch
        self.info = ModelInfo(
            name=name, d_model=a.d_model, n_heads=a.n_heads, n_layer=a.n_layer, n_ctx=a.n_ctx, vocab=a.vocab,
            eps=a.eps, default_mask=("sliding_window" if a.window else "causal") if a.decoder else "none",
            norm=a.norm, ffn=a.ffn, placement=a.placement, gelu=a.gelu, d_ff=a.d_ff,
            positions="rope" if a.positions == "rope" else "none", rope_base=a.rope_base,
            rope_pairing=a.rope_pairing if a.positions == "rope" else "adjacent", n_kv_heads=a.n_kv_heads if a.n_kv_heads != a.n_heads else 0,
            rope_factors=self.factors, window=a.window, architecture=a.architecture,
        )  # fmt: skip

    # -- what a family says ---------------------------------------------------------------------------------
    def normal(self, file_name: str) -> str | None:
        """The family's name for a tensor in the file (None: not used)."""
        raise NotImplementedError

    def expected(self) -> dict[str, tuple[int, ...]]:
        """Every tensor the family reads, by its name, with the shape the config implies (in the file's layout)."""
        raise NotImplementedError

    def attention_weights(self, layer: int) -> Weights:
        raise NotImplementedError

    def block_weights(self, layer: int) -> BlockWeights:
        raise NotImplementedError

    def embed(self, ids: Sequence[int], start: int = 0) -> torch.Tensor:
        raise NotImplementedError

    def _rope_factors(self) -> tuple[float, ...]:
        return rope_factors(self.arch)

    def prepare(self, name: str, t: torch.Tensor) -> torch.Tensor:
        return t

    # -- files ----------------------------------------------------------------------------------------------
    @property
    def weights_file(self) -> Path:
        return self.path if self.path.is_file() else self.path / "model.safetensors"

    def _check(self) -> None:
        """A config that contradicts its weights fails here, at start-up, naming the tensor and both shapes."""
        for name, shape in self.expected().items():
            if name not in self.files:
                raise ModelError(f"{self.weights_file}: {name}: missing (the config describes "
                                 f"{self.arch.n_layer} layers of width {self.arch.d_model})")  # fmt: skip
            self.store.check_dtype(self.files[name])
            got = self.store.shape(self.files[name])
            if got != shape:
                raise ModelError(f"{self.store.entries[self.files[name]].file}: {self.files[name]}: shape "
                                 f"{list(got)}, but the config implies {list(shape)}")  # fmt: skip

    def _special_tokens(self) -> tuple[tuple[int, ...], int | None, bool]:
        """EOS ids, the BOS id and whether tokenizing adds it: each id inside the vocabulary, or dropped with a
        warning naming it (GPT2Config(vocab_size=300) keeps GPT-2's 50256)."""
        a, where = self.arch, self.weights_file if isinstance(self.store, GGUF) else self.path / "config.json"
        if isinstance(self.store, GGUF):
            eos_raw = self.store.field("tokenizer.ggml.eos_token_id")
            bos_raw = self.store.field("tokenizer.ggml.bos_token_id")
            add = self.store.field("tokenizer.ggml.add_bos_token") is True
            names = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.bos_token_id")
            eos_list = [] if eos_raw is None else [eos_raw]
        else:
            eos_list, bos_raw, add = list(a.eos), a.bos, False
            names = ("eos_token_id", "bos_token_id")

        def fits(value: Any) -> bool:
            return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < a.vocab

        eos = tuple(int(e) for e in eos_list if fits(e))
        for e in eos_list:
            if not fits(e):
                self.warnings.append(f"{where}: {names[0]}: {e!r} is not a token id of the {a.vocab:,}-token "
                                     "vocabulary; dropped (generation stops at its length limit)")  # fmt: skip
        bos = bos_raw if fits(bos_raw) else None
        if bos_raw is not None and bos is None:
            self.warnings.append(f"{where}: {names[1]}: {bos_raw!r} is not a token id of the {a.vocab:,}-token "
                                 "vocabulary; dropped (texts begin without it)")  # fmt: skip
        return eos, bos, add and bos is not None

    @property
    def before_load(self) -> Callable[[int], None] | None:
        """Told the weights' bytes before they are read (the server's memory budget: it may wait, or refuse);
        weights already read at start-up (`validate`) are told at once."""
        return self._before_load

    @before_load.setter
    def before_load(self, hold: Callable[[int], None] | None) -> None:
        self._before_load = hold
        if hold is not None and self._tensors is not None:
            hold(self.nbytes)

    @property
    def parameters(self) -> int:
        """The exact number of parameters the model computes with (a tied output projection counted once)."""
        return sum(math.prod(s) for s in self.expected().values())

    @property
    def nbytes(self) -> int:
        """Bytes of the weights in float32, as the lab computes with them."""
        return 4 * self.parameters

    @property
    def loaded(self) -> bool:
        return self._tensors is not None

    def place(self, device: str | torch.device) -> None:
        """Serve from `device`: the weights move there once (now, or when first loaded)."""
        with self._lock:
            self.device = torch.device(device)
            if self._tensors is not None:
                self._tensors = {k: v.to(self.device) for k, v in self._tensors.items()}

    def tensors(self) -> dict[str, torch.Tensor]:
        with self._lock:
            if self._tensors is None:
                if self.before_load is not None:  # the server's memory budget: it may wait, or refuse (503)
                    self.before_load(self.nbytes)
                self._tensors = self._read()
        return self._tensors

    def _read(self) -> dict[str, torch.Tensor]:
        """Every tensor the family reads, copied out of its file (nothing stays mapped), float32, on the device."""
        names = list(self.expected())
        raw = self.store.read([self.files[n] for n in names])
        return {n: self.prepare(n, raw[self.files[n]]).to(self.device) for n in names}

    # -- the check at start-up --------------------------------------------------------------------------------
    def validate(self, text: str = "The cat sat on the mat.", n_tokens: int = 6) -> None:
        """The whole model checked before it is served, a ModelError naming the file and the field otherwise:
        every weight read (into memory the process owns, kept: nothing is read from the files again) and finite;
        the tokenizer readable and its ids (and those it adds) inside the embedding; a forward pass of a few
        tokens through every layer (and the output layer) finite."""
        if self.checked:
            return
        with self._lock:
            if self._tensors is None:
                self._tensors = self._read()
        tensors = self._tensors
        for name, t in tensors.items():
            if not bool(torch.isfinite(t).all()):
                file = self.store.entries[self.files[name]].file
                raise ModelError(f"{file}: {self.files[name]}: holds NaN or infinite values")
        ids = self._check_tokenizer(text)[:n_tokens] or [i % self.arch.vocab for i in range(n_tokens)]
        if self._bos is not None and self.decoder:
            ids = [self._bos, *ids[: n_tokens - 1]]
        ids = ids[: self.arch.n_ctx]
        self._smoke(ids)
        self.checked = True

    def _check_tokenizer(self, text: str) -> list[int]:
        """The tokenizer loaded now (not at a request) and checked against the embedding; `text`'s ids."""
        if not self.has_tokenizer:
            return []
        where = self.weights_file if isinstance(self.store, GGUF) else self._tokenizer_path
        try:
            tok = self.tokenizer()
            ids = self.tokenize(text)
            vocab = tok.get_vocab(with_added_tokens=True)
        except ModelError:
            raise
        except Exception as e:  # the tokenizers package's own errors: one line naming the file
            raise ModelError(
                f"{where}: the tokenizer cannot be built or run ({str(e).splitlines()[0][:200]})"
            ) from None
        top = max(vocab.values(), default=-1)
        if top >= self.arch.vocab:
            token = next(t for t, i in vocab.items() if i == top)
            raise ModelError(f"{where}: token {token[:40]!r} has id {top:,}, but the model's embedding has "
                             f"{self.arch.vocab:,} rows (vocab_size)")  # fmt: skip
        bad = [i for i in ids if not 0 <= i < self.arch.vocab]
        if bad:
            raise ModelError(f"{where}: tokenizing a text gives id {bad[0]:,} (a special token it adds?), outside "
                             f"the embedding's {self.arch.vocab:,} rows")  # fmt: skip
        return ids

    @torch.inference_mode()
    def _smoke(self, ids: list[int]) -> None:
        """A forward pass of `ids` through every layer, each layer's output finite."""
        where = self.weights_file
        x = self.embed(ids)
        if not bool(torch.isfinite(x).all()):
            raise ModelError(f"{where}: the embedding of {len(ids)} tokens is not finite")
        pos = self.rotation(torch.arange(len(ids), device=self.device), x)
        for i in range(self.arch.n_layer):
            q, k, v = self.layer_qkv(i, x, pos)
            x = self.layer_rest(i, x, self.attend(q, k, v))
            if not bool(torch.isfinite(x).all()):
                raise ModelError(f"{where}: layer {i}: a forward pass of {len(ids)} tokens overflows (NaN or "
                                 "infinite values): the weights are not a working model")  # fmt: skip
        if self.decoder and not bool(torch.isfinite(self.unembed(self.final(x))).all()):
            raise ModelError(f"{where}: the output layer's logits of {len(ids)} tokens are not finite")

    def changed_on_disk(self) -> str | None:
        """What changed in a weights file since it was read (None: nothing). The server keeps what it read."""
        stamps = getattr(self.store, "stamps", None) or {self.store.path: getattr(self.store, "stamp", None)}
        for stamp in stamps.values():
            if stamp is not None and (change := stamp.changed()) is not None:
                return change
        return None

    def _get(self, name: str) -> torch.Tensor:
        return self.tensors()[name]

    # -- tokens ---------------------------------------------------------------------------------------------
    @property
    def has_tokenizer(self) -> bool:
        if isinstance(self.store, GGUF):
            return gguf_has_tokenizer(self.store)
        p = self._tokenizer_path
        return p is not None and (p.exists() or p.is_symlink())  # a dangling or outside link: refused at load

    def tokenizer(self) -> Any:
        with self._lock:
            if self._tokenizer is None:
                if isinstance(self.store, GGUF):
                    self._tokenizer = from_gguf(self.store)
                else:
                    assert self._tokenizer_path is not None
                    self._tokenizer = from_json(inside(self.path, self._tokenizer_path.name))
        return self._tokenizer

    def tokenize(self, text: str) -> list[int]:
        if isinstance(self.store, GGUF):
            ids = list(self.tokenizer().encode(text, add_special_tokens=False).ids)
            return [self._bos, *ids] if self._add_bos and self._bos is not None else ids
        return list(self.tokenizer().encode(text).ids)  # with the special tokens its post-processor adds

    def labels(self, ids: list[int]) -> list[str]:
        if not self.has_tokenizer:
            return [f"#{i}" for i in ids]
        return readable_labels(self.tokenizer(), ids)

    def specials_first(self, ids: Sequence[int]) -> int:
        """How many of `ids`' first tokens are special ones (a BOS, BERT's [CLS]) rather than the text's: where the
        text begins, so every answer can say it (`text_start`) whether a BOS was put before the text or not."""
        special = {self._bos} if self._bos is not None else set()
        if self.has_tokenizer:
            added = self.tokenizer().get_added_tokens_decoder()
            special |= {i for i, token in added.items() if getattr(token, "special", False)}
        n = 0
        while n < len(ids) and ids[n] in special:
            n += 1
        return n

    def runs(self, ids: list[int]) -> list[tuple[int, int, str]]:
        """The ids as a reader reads them: (first, past the last, text), a character split over byte pieces once
        (猫, not 猫₁ 猫₂ 猫₃); a token of its own labelled as `labels` labels it."""
        if not self.has_tokenizer:
            return [(k, k + 1, f"#{i}") for k, i in enumerate(ids)]
        return readable_runs(self.tokenizer(), ids)

    @property
    def eos_ids(self) -> tuple[int, ...]:
        """config's eos_token_id, a GGUF's tokenizer.ggml.eos_token_id (those inside the vocabulary)."""
        return self._eos

    @property
    def bos_id(self) -> int | None:
        """The token a training sequence begins with (config's bos_token_id, a GGUF's tokenizer.ggml.bos_token_id),
        when it is inside the vocabulary."""
        return self._bos

    # -- the forward pass, written once ---------------------------------------------------------------------
    @property
    def decoder(self) -> bool:
        return self.arch.decoder

    one_pass_view = property(lambda self: self.decoder)  # the model view reads a decoder's weights in one pass
    generates = property(lambda self: self.decoder)  # a causal language model: /generate offers it

    def attention_x(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """What layer i's W_Q, W_K, W_V read: its first norm of the residual stream (Pre-LN), or the stream."""
        if self.arch.placement == "post":
            return x
        bw = self.block_weights(i)
        return normalise(x, bw.ln1_w, bw.ln1_b, self.arch.norm, self.arch.eps)

    def rotation(self, pos: torch.Tensor, x: torch.Tensor) -> torch.Tensor | Angles:
        """What layer_qkv rotates by at `pos`, for a stream like x: RoPE's cos and sin computed once (pass them to
        every layer), or the positions themselves for a model without RoPE."""
        a = self.arch
        return angles(pos, a.d_k, a.rope_base, self.factors, like=x) if a.positions == "rope" else pos

    def layer_qkv(
        self, i: int, x: torch.Tensor, pos: torch.Tensor | Angles
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Layer i up to its attention: q (H, n, d_k), k and v (H_kv, n, d_k), q and k rotated at `pos` (RoPE;
        positions, or their `rotation`)."""
        a, w, arch = self.attention_x(i, x), self.attention_weights(i), self.arch
        n, dk = x.shape[0], arch.d_k
        q = linear(a, w.w_q, w.b_q).view(n, arch.n_heads, dk).transpose(0, 1)
        k = linear(a, w.w_k, w.b_k).view(n, arch.n_kv_heads, dk).transpose(0, 1)
        v = linear(a, w.w_v, w.b_v).view(n, arch.n_kv_heads, dk).transpose(0, 1)
        if arch.positions == "rope":
            rot = pos if isinstance(pos, Angles) else angles(pos, dk, arch.rope_base, self.factors, like=q)
            q = rotate(q, rot, arch.rope_base, arch.rope_pairing)
            k = rotate(k, rot, arch.rope_base, arch.rope_pairing)
        return q, k, v

    def layer_rest(self, i: int, x: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """Layer i after its attention: the heads (H, n, d_k) side by side through W_O into the residual stream,
        then the feed-forward (norms before each part for Pre-LN, after each residual sum for Post-LN)."""
        w, bw, arch = self.attention_weights(i), self.block_weights(i), self.arch
        out = linear(heads.transpose(0, 1).reshape(x.shape[0], -1), w.w_o, w.b_o)
        if arch.placement == "pre":
            x = x + out
            return x + feed_forward(normalise(x, bw.ln2_w, bw.ln2_b, arch.norm, arch.eps), bw, arch.ffn, arch.gelu)[1]
        x = normalise(x + out, bw.ln1_w, bw.ln1_b, arch.norm, arch.eps)
        return normalise(x + feed_forward(x, bw, arch.ffn, arch.gelu)[1], bw.ln2_w, bw.ln2_b, arch.norm, arch.eps)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               observe: Callable[[int, torch.Tensor], None] | None = None) -> torch.Tensor:  # fmt: skip
        """softmax(q kᵀ/√d_k + mask) v: causal (within the sliding window, if any) for a decoder, a block of
        queries at a time; every key for an encoder."""
        if self.decoder:
            return causal_attention(q, k, v, observe=observe, window=self.arch.window)
        group = q.shape[0] // k.shape[0]
        k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
        w = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(q.shape[-1]), dim=-1)
        if observe is not None:
            observe(0, w)
        return w @ v

    @torch.inference_mode()
    def hidden(
        self, ids: Sequence[int], layer: int, observe: Observe = None, progress: Progress = None
    ) -> torch.Tensor:
        """The residual stream entering `layer` (after layers 0 … layer − 1, run for real); `observe(i, r0, w)` sees
        layer i's attention weights a block of query rows at a time; `progress(done, total)` after each layer."""
        x = self.embed(ids)
        pos = self.rotation(torch.arange(len(ids), device=self.device), x)  # RoPE's angles once for every layer
        for i in range(layer):
            q, k, v = self.layer_qkv(i, x, pos)
            seen = None if observe is None else functools.partial(observe, i)
            x = self.layer_rest(i, x, self.attend(q, k, v, seen))
            if progress is not None:
                progress(i + 1, layer)
        return x

    def attention_input(
        self, ids: Sequence[int], layer: int, progress: Progress = None
    ) -> tuple[torch.Tensor, Weights]:
        """What layer `layer`'s attention reads (the trace's x) and its weights."""
        return self.attention_x(layer, self.hidden(ids, layer, progress=progress)), self.attention_weights(layer)

    def final(self, x: torch.Tensor) -> torch.Tensor:
        raise ModelError(f"{self.name} is an encoder: it has no output layer")

    def unembed(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """The logits of final-normalised streams x (N, d): (N, vocab), written into `out` when given (a reused
        buffer of the weights' dtype: a fresh (N, vocab) tensor costs its page faults every time)."""
        raise ModelError(f"{self.name} is an encoder: it has no output layer")

    def final_norm(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The last norm's gain and shift (None for RMSNorm), as `final` applies them (read-only)."""
        raise ModelError(f"{self.name} is an encoder: it has no output layer")

    def unembedding(self, ids: Sequence[int]) -> torch.Tensor:
        """The output projection's rows for token `ids` (len(ids), d): what `unembed` dots a stream with."""
        raise ModelError(f"{self.name} is an encoder: it has no output layer")

    @torch.inference_mode()
    def logits(self, ids: Sequence[int]) -> torch.Tensor:
        """Every position's next-token logits (N, vocab)."""
        return self.unembed(self.final(self.hidden(ids, self.arch.n_layer)))

    def summary(self) -> dict[str, Any]:
        """What /models shows."""
        a = self.arch
        return {
            "name": self.name, "architecture": a.architecture, "family": self.family, "n_layer": a.n_layer,
            "n_heads": a.n_heads, "n_kv_heads": a.n_kv_heads, "d_model": a.d_model, "d_k": a.d_k, "d_ff": a.d_ff,
            "vocab": a.vocab, "n_ctx": a.n_ctx, "positions": a.positions, "rope_base": a.rope_base if a.positions ==
            "rope" else None, "rope_scaling": "llama3" if a.rope_scaling or self.factors else None,
            "window": a.window or None, "norm": a.norm, "ffn": a.ffn, "placement": a.placement,
            "tied_embeddings": a.tied, "parameters": self.parameters, "bytes": self.nbytes, "loaded": self.loaded,
            "format": "gguf" if isinstance(self.store, GGUF) else "safetensors", "source": self.path.name,
            "tokenizer": self.has_tokenizer, "decoder": self.decoder, "changed_on_disk": self._noticed(),
        }  # fmt: skip

    def _noticed(self) -> bool:
        """Whether a weights file changed since it was read (logged the first time it is seen)."""
        if not self.loaded:
            return False
        change = self.changed_on_disk()
        if change is not None and change != getattr(self, "_told", None):
            self._told = change
            log.warning("attention-lab: %s", change)
        return change is not None


class GPT2(Model):
    """GPT-2: wte + wpe, Pre-LN blocks with LayerNorm, GELU (tanh), biases everywhere; Conv1D weights (in, out)."""

    family = "gpt2"

    def normal(self, file_name: str) -> str | None:
        return file_name.removeprefix("transformer.")

    def expected(self) -> dict[str, tuple[int, ...]]:
        a = self.arch
        d, ff = a.d_model, a.d_ff
        out: dict[str, tuple[int, ...]] = {"wte.weight": (a.vocab, d), "wpe.weight": (a.n_ctx, d)}
        for i in range(a.n_layer):
            p = f"h.{i}."
            out |= {
                p + "ln_1.weight": (d,), p + "ln_1.bias": (d,), p + "attn.c_attn.weight": (d, 3 * d),
                p + "attn.c_attn.bias": (3 * d,), p + "attn.c_proj.weight": (d, d), p + "attn.c_proj.bias": (d,),
                p + "ln_2.weight": (d,), p + "ln_2.bias": (d,), p + "mlp.c_fc.weight": (d, ff),
                p + "mlp.c_fc.bias": (ff,), p + "mlp.c_proj.weight": (ff, d), p + "mlp.c_proj.bias": (d,),
            }  # fmt: skip
        out |= {"ln_f.weight": (d,), "ln_f.bias": (d,)}
        if not a.tied:
            out["lm_head.weight"] = (a.vocab, d)
        return out

    def attention_weights(self, layer: int) -> Weights:
        d, g = self.arch.d_model, self._get
        w, b = g(f"h.{layer}.attn.c_attn.weight"), g(f"h.{layer}.attn.c_attn.bias")  # (d, 3d): Q, K, V side by side
        return Weights(w_q=w[:, :d], w_k=w[:, d : 2 * d], w_v=w[:, 2 * d :], w_o=g(f"h.{layer}.attn.c_proj.weight"),
                       b_q=b[:d], b_k=b[d : 2 * d], b_v=b[2 * d :], b_o=g(f"h.{layer}.attn.c_proj.bias"))  # fmt: skip

    def block_weights(self, layer: int) -> BlockWeights:
        p, g = f"h.{layer}.", self._get
        return BlockWeights(
            ln1_w=g(p + "ln_1.weight"), ln1_b=g(p + "ln_1.bias"), ln2_w=g(p + "ln_2.weight"), ln2_b=g(p + "ln_2.bias"),
            w_up=g(p + "mlp.c_fc.weight"), b_up=g(p + "mlp.c_fc.bias"),
            w_down=g(p + "mlp.c_proj.weight"), b_down=g(p + "mlp.c_proj.bias"),
        )  # fmt: skip

    def embed(self, ids: Sequence[int], start: int = 0) -> torch.Tensor:
        idx = torch.tensor(list(ids), dtype=torch.long, device=self.device)
        return self._get("wte.weight")[idx] + self._get("wpe.weight")[start : start + len(idx)]

    def final(self, x: torch.Tensor) -> torch.Tensor:
        return normalise(x, self._get("ln_f.weight"), self._get("ln_f.bias"), "layernorm", self.arch.eps)

    def unembed(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        return torch.matmul(x, self._get("wte.weight" if self.arch.tied else "lm_head.weight").T, out=out)

    def final_norm(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self._get("ln_f.weight"), self._get("ln_f.bias")

    def unembedding(self, ids: Sequence[int]) -> torch.Tensor:
        idx = torch.tensor(list(ids), dtype=torch.long, device=self.device)
        return self._get("wte.weight" if self.arch.tied else "lm_head.weight")[idx]


# A llama GGUF's names for the tensors, mapped to Hugging Face's (the family reads one naming).
GGUF_NAMES = {
    "token_embd.weight": "embed_tokens.weight", "output_norm.weight": "norm.weight", "output.weight": "lm_head.weight",
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}  # fmt: skip


class Llama(Model):
    """LLaMA and its relatives: token embedding (×√d for Gemma), Pre-LN blocks with RMSNorm (weight + 1 for Gemma),
    RoPE, grouped K/V heads, a gated FFN (SiLU, or GELU for Gemma), q/k/v biases where the file has them (Qwen2).
    nn.Linear weights (out, in), read transposed (a view). From a llama GGUF, W_Q and W_K come permuted so that
    RoPE pairs adjacent dimensions: the same attention, with the adjacent pairing."""

    family = "llama"

    def normal(self, file_name: str) -> str | None:
        if isinstance(self.store, GGUF):
            if file_name in GGUF_NAMES:
                return GGUF_NAMES[file_name]
            parts = file_name.split(".")
            if len(parts) == 4 and parts[0] == "blk" and parts[2] in GGUF_NAMES:
                return f"layers.{parts[1]}.{GGUF_NAMES[parts[2]]}.{parts[3]}"
            return None
        return file_name.removeprefix("model.")

    def expected(self) -> dict[str, tuple[int, ...]]:
        a = self.arch
        d, ff, kv = a.d_model, a.d_ff, a.n_kv_heads * a.d_k
        out: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (a.vocab, d)}
        for i in range(a.n_layer):
            p = f"layers.{i}."
            out |= {
                p + "input_layernorm.weight": (d,), p + "self_attn.q_proj.weight": (d, d),
                p + "self_attn.k_proj.weight": (kv, d), p + "self_attn.v_proj.weight": (kv, d),
                p + "self_attn.o_proj.weight": (d, d), p + "post_attention_layernorm.weight": (d,),
                p + "mlp.gate_proj.weight": (ff, d), p + "mlp.up_proj.weight": (ff, d), p + "mlp.down_proj.weight": (d, ff),
            }  # fmt: skip
            if a.architecture == "qwen2":
                out |= {p + "self_attn.q_proj.bias": (d,), p + "self_attn.k_proj.bias": (kv,),
                        p + "self_attn.v_proj.bias": (kv,)}  # fmt: skip
        out["norm.weight"] = (d,)
        if not a.tied:
            out["lm_head.weight"] = (a.vocab, d)
        return out  # a GGUF's shapes read outermost first (ggml lists them innermost first): the same (out, in)

    def _rope_factors(self) -> tuple[float, ...]:
        if isinstance(self.store, GGUF) and "rope_freqs.weight" in self.store.entries:  # llama3 scaling, precomputed
            half = self.arch.d_k // 2
            shape = self.store.shape("rope_freqs.weight")
            if shape != (half,):  # checked before it is read: it is outside the weights MAX_MODEL_MB counts
                raise ModelError(f"{self.path}: rope_freqs.weight: shape {list(shape)}, but RoPE has {half} "
                                 "frequencies per head (d_k / 2)")  # fmt: skip
            factors = self.store.get("rope_freqs.weight").flatten().tolist()
            if not all(math.isfinite(f) and f > 0 for f in factors):
                raise ModelError(f"{self.path}: rope_freqs.weight: must be finite positive divisors")
            return tuple(float(f) for f in factors)
        return rope_factors(self.arch)

    def prepare(self, name: str, t: torch.Tensor) -> torch.Tensor:
        if self.arch.norm_offset and name.endswith("norm.weight"):  # Gemma's RMSNorm scales by (1 + weight)
            return t + self.arch.norm_offset
        return t

    def attention_weights(self, layer: int) -> Weights:
        p, t = f"layers.{layer}.self_attn.", self.tensors()

        def bias(n: str) -> torch.Tensor | None:
            return t.get(p + n + ".bias")

        return Weights(w_q=t[p + "q_proj.weight"].T, w_k=t[p + "k_proj.weight"].T, w_v=t[p + "v_proj.weight"].T,
                       w_o=t[p + "o_proj.weight"].T, b_q=bias("q_proj"), b_k=bias("k_proj"),
                       b_v=bias("v_proj"))  # fmt: skip

    def block_weights(self, layer: int) -> BlockWeights:
        p, g = f"layers.{layer}.", self._get
        return BlockWeights(
            ln1_w=g(p + "input_layernorm.weight"), ln1_b=None, ln2_w=g(p + "post_attention_layernorm.weight"),
            ln2_b=None, w_gate=g(p + "mlp.gate_proj.weight").T, w_up=g(p + "mlp.up_proj.weight").T,
            w_down=g(p + "mlp.down_proj.weight").T,
        )  # fmt: skip

    def embed(self, ids: Sequence[int], start: int = 0) -> torch.Tensor:
        x = self._get("embed_tokens.weight")[torch.tensor(list(ids), dtype=torch.long, device=self.device)]
        return x * torch.tensor(self.arch.embed_scale, dtype=x.dtype) if self.arch.embed_scale != 1 else x

    def final(self, x: torch.Tensor) -> torch.Tensor:
        return normalise(x, self._get("norm.weight"), None, "rmsnorm", self.arch.eps)

    def unembed(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        return torch.matmul(x, self._get("embed_tokens.weight" if self.arch.tied else "lm_head.weight").T, out=out)

    def final_norm(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self._get("norm.weight"), None

    def unembedding(self, ids: Sequence[int]) -> torch.Tensor:
        idx = torch.tensor(list(ids), dtype=torch.long, device=self.device)
        return self._get("embed_tokens.weight" if self.arch.tied else "lm_head.weight")[idx]


class Bert(Model):
    """BERT: word + position + token-type embeddings and a LayerNorm, then Post-LN blocks (GELU, erf); no mask."""

    family = "bert"

    def normal(self, file_name: str) -> str | None:
        name = file_name.removeprefix("bert.")
        return name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")

    def expected(self) -> dict[str, tuple[int, ...]]:
        a = self.arch
        d, ff = a.d_model, a.d_ff
        e = "embeddings."
        out: dict[str, tuple[int, ...]] = {e + "word_embeddings.weight": (a.vocab, d), e + "position_embeddings.weight": (a.n_ctx, d),
               e + "token_type_embeddings.weight": (int(a.extra["type_vocab_size"]), d),
               e + "LayerNorm.weight": (d,), e + "LayerNorm.bias": (d,)}  # fmt: skip
        for i in range(a.n_layer):
            p = f"encoder.layer.{i}."
            for n in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
                out |= {p + n + ".weight": (d, d), p + n + ".bias": (d,)}
            out |= {
                p + "attention.output.LayerNorm.weight": (d,), p + "attention.output.LayerNorm.bias": (d,),
                p + "intermediate.dense.weight": (ff, d), p + "intermediate.dense.bias": (ff,),
                p + "output.dense.weight": (d, ff), p + "output.dense.bias": (d,),
                p + "output.LayerNorm.weight": (d,), p + "output.LayerNorm.bias": (d,),
            }  # fmt: skip
        return out

    def _linear(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        return self._get(name + ".weight").T, self._get(name + ".bias")  # nn.Linear (out, in) -> (in, out)

    def attention_weights(self, layer: int) -> Weights:
        p = f"encoder.layer.{layer}.attention."
        (wq, bq), (wk, bk), (wv, bv), (wo, bo) = (
            self._linear(p + n) for n in ("self.query", "self.key", "self.value", "output.dense")
        )
        return Weights(w_q=wq, w_k=wk, w_v=wv, w_o=wo, b_q=bq, b_k=bk, b_v=bv, b_o=bo)

    def block_weights(self, layer: int) -> BlockWeights:
        p, g = f"encoder.layer.{layer}.", self._get
        (w1, b1), (w2, b2) = self._linear(p + "intermediate.dense"), self._linear(p + "output.dense")
        return BlockWeights(
            ln1_w=g(p + "attention.output.LayerNorm.weight"), ln1_b=g(p + "attention.output.LayerNorm.bias"),
            ln2_w=g(p + "output.LayerNorm.weight"), ln2_b=g(p + "output.LayerNorm.bias"),
            w_up=w1, b_up=b1, w_down=w2, b_down=b2,
        )  # fmt: skip

    def labels(self, ids: list[int]) -> list[str]:
        if not self.has_tokenizer:
            return [f"#{i}" for i in ids]
        tok = self.tokenizer()  # WordPiece: its own pieces (hello, ##ing, [CLS]) read best
        return [tok.id_to_token(i) or f"#{i}" for i in ids]

    def runs(self, ids: list[int]) -> list[tuple[int, int, str]]:
        return [(k, k + 1, label) for k, label in enumerate(self.labels(ids))]  # WordPiece splits no character

    def embed(self, ids: Sequence[int], start: int = 0) -> torch.Tensor:
        e, g = "embeddings.", self._get
        idx = torch.tensor(list(ids), dtype=torch.long, device=self.device)
        x = g(e + "word_embeddings.weight")[idx] + g(e + "position_embeddings.weight")[start : start + len(idx)]
        x = x + g(e + "token_type_embeddings.weight")[0]
        return normalise(x, g(e + "LayerNorm.weight"), g(e + "LayerNorm.bias"), "layernorm", self.arch.eps)


FAMILIES: dict[str, type[Model]] = {"gpt2": GPT2, "llama": Llama, "bert": Bert}
