"""The lab's message catalogue: every string the page shows, in English and Chinese.

Templates call `t("key", **values)`; a missing key is a bug caught by the test that both languages hold the same
keys. The language comes from `?lang=`, else from Accept-Language, else English.
"""

from __future__ import annotations

from collections.abc import Callable

LANGS = ("en", "zh")

MESSAGES: dict[str, dict[str, str]] = {
    "en": {
        "title": "Attention Lab",
        "tagline": "Scaled dot-product attention, one stage at a time. Every number is computed.",
        "lang.name": "English",
        "controls": "Settings",
        "tokens": "Tokens",
        "tokens.hint": "separated by spaces",
        "preset": "Preset",
        "preset.checkpoint": "GPT-2 checkpoint (real weights)",
        "preset.minilm": "MiniLM-L6 (real encoder, d 384)",
        "preset.smollm2": "SmolLM2-135M (real decoder, GQA, RoPE)",
        "text": "Text",
        "text.hint": "the model's own tokenizer splits it",
        "layer": "Layer",
        "preset.toy": "toy (d = 4, 1 head)",
        "preset.gpt2-small": "GPT-2 small (d = 768, 12 heads)",
        "seed": "Seed",
        "d_model": "d_model",
        "n_heads": "Heads",
        "mask": "Mask",
        "mask.none": "none (bidirectional)",
        "mask.causal": "causal",
        "mask.padding": "padding",
        "mask.document": "document (packed)",
        "pad_positions": "Pad positions",
        "segment_ids": "Segment ids",
        "scale": "Scale",
        "scale.sqrt_dk": "÷ √d_k",
        "scale.none": "none (÷ 1)",
        "scale.dk": "÷ d_k",
        "apply": "Compute",
        "present.on": "Presenter mode",
        "present.off": "Leave presenter mode",
        "present.qr": "Scan to open this view",
        "present.qr_too_long": "This view's address is too long for a QR code; open it from this link",
        "more": "More options: positions, GQA, cross-attention, mask parameters",
        "prev": "← Previous",
        "next": "Next →",
        "stage": "Stage",
        "stage.projection": "Projection",
        "stage.scores": "Scores",
        "stage.mask": "Mask",
        "stage.softmax": "Softmax",
        "stage.weighted_sum": "Weighted sum",
        "toggle.mask.on": "Causal mask: on",
        "toggle.mask.off": "Causal mask: off",
        "toggle.scale": "Scale: {scale}",
        "compare": "Compare",
        "compare.mask": "mask on / off",
        "compare.scale": "√d_k / none",
        "compare.close": "Close comparison",
        "compare.title.mask": "Softmax weights without and with the causal mask",
        "compare.title.scale": "Softmax weights scaled by √d_k and unscaled",
        "json": "JSON",
        "json.title": "The same view as JSON",
        "npz": "NumPy .npz",
        "docs": "API docs",
        "head": "Head",
        "shape": "shape",
        "keys": "keys →",
        "queries": "queries ↓",
        "formula": "Formula",
        "what": "What happens",
        "notice": "What to notice",
        "weights.show": "Weights used in this stage",
        "row.stats": "Row statistics",
        "entropy": "entropy (nats)",
        "max_weight": "largest weight",
        "top3": "top-3 keys",
        "row": "query",
        "checks": "Check: max |difference| from torch scaled_dot_product_attention = {diff}; rows sum to 1: {ok}.",
        "yes": "yes",
        "no": "no",
        "keyboard": "Keys: ← → step · m toggles the causal mask · s cycles the scale",
        "loading": "Computing…",
        "error": "The lab could not compute this view.",
        "error.field": "Problem with “{field}”: {message}",
        "error.busy": "The server is busy with other large computations. Try again in {seconds} s.",
        "cell.title": "How this number is computed",
        "cell.hint": "Click any number to see its arithmetic.",
        "cell.close": "close",
        "cell.score": "Score of query “{q}” against key “{k}”",
        "cell.weight": "Weight of key “{k}” for query “{q}”",
        "cell.output": "Output of “{q}”, dimension {c}",
        "cell.projection": "{m} of “{q}”, column {c}",
        "cell.final": "Output projection of “{q}”, column {c}",
        "cell.masked_entry": "This key is masked: its score is −∞ and its weight exactly 0.",
        "cell.masked_row": "Every key of this query is masked: the lab defines its weights as all zeros.",
        "large": "{n} tokens × d_model {d}: too many numbers for cells. Each head is drawn as a heat map.",
        "heads.all": "All heads (click one to zoom)",
        "zoom": "Head {h}, zoomed",
        "hover": "Hover over the map to read a cell.",
        "tile": "Tile inspector: rows {r0}–{r1}, columns {c0}–{c1}",
        "tile.move": "Move the window",
        "tile.up": "↑ up",
        "tile.down": "↓ down",
        "tile.left": "← left",
        "tile.right": "→ right",
        "legend.diverging": "blue < 0 < red",
        "legend.sequential": "0 → 1",
        "legend.neginf": "−∞ (masked)",
        "explain.projection": (
            "Each token's vector x is multiplied by three learned matrices. Q (queries) says what a token looks for, "
            "K (keys) how it can be found, V (values) what it hands over. Head h takes columns h·d_k to (h+1)·d_k − 1."
        ),
        "explain.scores": (
            "Every query is compared with every key by a dot product: entry (i, j) of QKᵀ says how well token i's "
            "question matches token j's key. Dividing by s keeps the numbers in a range where softmax still learns."
        ),
        "explain.mask": (
            "The mask is added to the scores: 0 keeps an entry, −∞ forbids it. Under the causal mask token i may read "
            "only tokens 1…i, so a language model cannot peek at the word it must predict."
        ),
        "explain.softmax": (
            "Each row becomes a probability distribution over keys: exponentiate, then divide by the row's sum. The "
            "row maximum is subtracted first so exp never overflows. A −∞ score becomes a weight of exactly 0."
        ),
        "explain.weighted_sum": (
            "Each token's output is the average of the value vectors, weighted by its softmax row. The heads are laid "
            "side by side (concatenated) and mixed by the output projection W_O."
        ),
        "notice.projection": (
            "The same word has the same x, and so the same q, k and v, wherever it stands: without a mask or positions, "
            "attention alone does not know word order."
        ),
        "notice.scores.none": (
            "Unscaled, the logits reach ±{max:.2f} (std {std:.2f}). Dot products of d_k terms grow like √d_k, and large "
            "logits push softmax towards one-hot weights whose gradients vanish."
        ),
        "notice.scores.sqrt_dk": (
            "Raw scores have std {raw_std:.2f}; after dividing by √d_k = {s:.2f} their std is {std:.2f}. A dot product "
            "of d_k terms spreads like √d_k, so this divisor keeps the logits' spread the same however wide the heads are "
            "(unit variance when q and k have unit-variance entries)."
        ),
        "notice.scores.dk": (
            "Dividing by d_k = {s:.0f} shrinks the logits to std {std:.2f}: for wide heads this flattens softmax toward "
            "uniform weights."
        ),
        "notice.mask.none": "No entry is masked: every token reads every token, in both directions, as in BERT.",
        "notice.mask.causal": (
            "{count} of {total} entries are −∞: the strict upper triangle. The diagonal stays, since a token may read "
            "itself."
        ),
        "notice.mask.padding": "The columns of the pad positions {pads} are −∞: no query ever reads a pad token.",
        "notice.mask.document": (
            "Blocks along the diagonal: a token reads only earlier tokens of its own document ({count} of {total} "
            "entries masked)."
        ),
        "notice.softmax.causal": (
            "Row 1 is exactly 1.00: the first token “{first}” can see only itself, so all of its weight lands on itself. "
            "Each later row spreads its weight over the tokens before it."
        ),
        "notice.softmax.other": (
            "Every row sums to 1. The most concentrated row is “{token}” with a largest weight of {max:.2f}; the "
            "flattest has entropy {entropy:.2f} nats (uniform over {n} keys would be {uniform:.2f})."
        ),
        "notice.weighted_sum": (
            "Row i of the output is Σ_j a_ij v_j: a mix of value vectors. Under the causal mask the first row simply "
            "copies v_1."
        ),
        "notice.weighted_sum.none": (
            "Row i of the output is Σ_j a_ij v_j: a mix of value vectors. Shuffle the tokens and, with no mask, these "
            "rows shuffle the same way."
        ),
        "nav.lab": "Lab",
        "nav.params": "Parameter counts",
        "params.title": "Counting parameters",
        "params.intro": (
            "Each block holds W_Q, W_K, W_V, W_O (4d²) and an FFN of two d × 4d matrices (8d²): 12d² per block, so "
            "about 12·L·d² without the embeddings. Pick a model or type your own numbers and see the exact count, "
            "term by term, and where the shortcut misses."
        ),
        "params.model": "Model",
        "params.custom": "custom (the fields below)",
        "params.n_layer": "Layers L",
        "params.vocab": "Vocabulary",
        "params.n_ctx": "Learned positions",
        "params.ffn": "FFN",
        "params.d_ff": "d_ff (0 = 4d)",
        "params.tied": "lm_head shares the token embedding",
        "params.bias": "biases",
        "params.n_kv_heads": "K/V heads (0 = all)",
        "params.norm": "Norm",
        "params.yes": "yes",
        "params.no": "no",
        "params.part": "Part",
        "params.count": "Parameters",
        "params.how": "How",
        "params.token_emb": "token embedding",
        "params.pos_emb": "position embedding",
        "params.attention": "attention, per block",
        "params.ffn_block": "FFN, per block",
        "params.norms": "norms, per block",
        "params.block": "one block",
        "params.blocks": "all blocks",
        "params.final_norm": "final norm",
        "params.lm_head": "lm_head",
        "params.total": "total",
        "params.estimate": "12·L·d²",
        "params.ratio": "total ÷ 12·L·d² = {ratio:.3f}; without embeddings {ratio_ne:.3f}",
        "params.tied_note": "shared with the token embedding",
        "params.misses": "Where 12·L·d² misses",
        "params.miss.embeddings": "The embeddings ({emb}) are {pct:.1f}% of the total and are not in the estimate.",
        "params.miss.ffn": "d_ff = {ff} instead of 4d: the FFN holds {ffn} per block, not 8d² = {eight}.",
        "params.miss.gqa": "K and V use {kv} of {h} heads (GQA): attention holds {att} per block, not 4d² = {four}.",
        "params.miss.small": "Biases and norms add {extra} per block ({pct:.2f}% of a block).",
        "params.miss.kv": "KV cache: {bytes} bytes per token in fp16 (2 · L · n_kv_heads · d_k · 2 bytes).",
        "nav.block": "Whole block",
        "block.title": "A whole decoder block",
        "block.intro": (
            "Attention is one sub-layer of a block. Follow x through the norm, the five attention stages, the residual "
            "addition, the second norm and the feed-forward network, to the block's output."
        ),
        "block.norm": "Norm",
        "block.ffn": "FFN",
        "block.d_ff": "d_ff",
        "block.placement": "Norm placement",
        "placement.pre": "Pre-LN (GPT-2)",
        "placement.post": "Post-LN (2017)",
        "norm.layernorm": "LayerNorm",
        "norm.rmsnorm": "RMSNorm",
        "ffn.gelu": "GELU (d → d_ff → d)",
        "ffn.swiglu": "SwiGLU (gate, up, down)",
        "block.attention": "Attention",
        "bstage.ln1": "Norm 1",
        "bstage.residual1": "+ Residual",
        "bstage.ln2": "Norm 2",
        "bstage.ffn_hidden": "FFN hidden",
        "bstage.ffn_out": "FFN out",
        "bstage.output": "Output",
        "bexplain.ln1.pre": "Each token's vector is normalised on its own before attention reads it.",
        "bexplain.ln1.post": "Post-LN normalises after the residual addition: r = LN₁(x + Attn(x)).",
        "bexplain.residual1.pre": "The attention output is added back to x: the residual path carries x around the sub-layer.",
        "bexplain.residual1.post": "The attention output is added back to x, before the first norm.",
        "bexplain.ln2.pre": "A second norm prepares the residual stream for the feed-forward network.",
        "bexplain.ln2.post": "After the FFN's residual addition the second norm gives the block's output.",
        "bexplain.ffn_hidden": "Each token separately goes up to d_ff dimensions through a non-linearity.",
        "bexplain.ffn_out": "The down projection brings each token back to d_model.",
        "bexplain.output.pre": "The FFN output is added to the residual stream: y = r + FFN(LN₂(r)).",
        "bexplain.output.post": "In Post-LN the output is the second norm: y = LN₂(r + FFN(r)).",
        "bnotice.layernorm": (
            "Every row now has mean {mean:.2f} and standard deviation {std:.2f}; before the norm the rows' standard "
            "deviations ran from {lo:.2f} to {hi:.2f}."
        ),
        "bnotice.rmsnorm": (
            "Every row now has root-mean-square {rms:.2f}. Unlike LayerNorm the mean is kept: row means run from "
            "{lo:.2f} to {hi:.2f}."
        ),
        "bnotice.residual1": (
            "The sub-layer's output (largest |value| {a:.2f}) is added to its input (largest |value| {x:.2f}); "
            "the shape stays (N, d)."
        ),
        "bnotice.gelu": (
            "d_ff = {ff}. GELU lets positive values through almost unchanged and squeezes negative ones towards 0: "
            "{pct:.0f}% of the hidden values are negative, none below {low:.2f}."
        ),
        "bnotice.swiglu": (
            "d_ff = {ff}. SiLU(x W_gate) gates x W_up element by element: where the gate is near 0 the up "
            "projection is switched off ({pct:.0f}% of gates below 0.1 in absolute value)."
        ),
        "bnotice.ffn_out": "The FFN mixes dimensions, never tokens: row i depends on row i of its input alone.",
        "bnotice.output": "The block's output has the input's shape {shape}: blocks stack. Largest |value| {m:.2f}.",
        "block.check": (
            "Check: max |difference| from the same block computed with torch's own norm, "
            "scaled_dot_product_attention and activation = {diff}."
        ),
        "block.large": "{n} tokens × d_model {d}: each tensor is drawn as a heat map; rows are tokens, columns dimensions.",
        "positions": "Positions",
        "positions.none": "none",
        "positions.sinusoidal": "sinusoidal (added)",
        "positions.learned": "learned (added)",
        "positions.rope": "RoPE (rotates q, k)",
        "rope_pairing": "RoPE pairs",
        "pairing.adjacent": "adjacent (2i, 2i+1)",
        "pairing.half": "halves (i, i + d_k/2)",
        "n_kv_heads": "K/V heads",
        "kv_tokens": "Source tokens (cross-attention)",
        "window": "Window",
        "prefix": "Prefix",
        "mask.sliding_window": "sliding window",
        "mask.prefix_lm": "prefix-LM",
        "mask.custom": "custom (click cells)",
        "compare.leak": "document boundaries off / on",
        "compare.title.leak": "Packed documents: boundaries ignored (causal only) and blocked",
        "notice.mask.sliding_window": "{count} of {total} entries are −∞: each token reads only itself and the {window} − 1 tokens before it.",
        "notice.mask.prefix_lm": "The first {prefix} tokens read each other in both directions; the rest read causally ({count} of {total} masked).",
        "notice.mask.custom": "You set this mask by hand: {count} of {total} entries are −∞. Click a cell of M to flip it.",
        "notice.mask.loss": "An attention mask is not a loss mask: the loss mask only decides which predictions are scored.",
        "notice.projection.rope": "RoPE rotates each pair of q and k dimensions by m·θ_i (base {base:g}, pairs {pairing}); v is not rotated and positions are not added to x.",
        "notice.projection.absolute": "x = E + P: the same word now has a different x at each position, so shuffling the tokens no longer just shuffles the outputs.",
        "notice.projection.gqa": "{kv} K/V heads serve {h} query heads: each K and V is shared by a group of {g}, and the KV cache shrinks by {g}×.",
        "notice.projection.cross": "Cross-attention: Q comes from the {n} target tokens, K and V from the {m} source tokens.",
        "mask.edit": "Click a cell of M to flip it; the mask becomes custom.",
        "nav.decode": "KV cache",
        "decode.title": "The KV cache",
        "decode.intro": "Generation reads the prompt once (prefill), then adds one token at a time. Each new token needs only its own query against the keys and values already cached.",
        "decode.prefill": "Prefill",
        "decode.prefill_tab": "prefill ({n})",
        "decode.prefill_title": "Prefill: {n} tokens at once",
        "decode.prefill_text": "The prompt's {n} tokens are projected together; their keys and values fill the cache.",
        "decode.step_title": "Step {i}: “{token}” at position {pos}",
        "decode.step_text": "Project only the new token, append its k and v to the cache, and attend with a single query row. No mask is needed: the future is not in the cache yet.",
        "decode.equal": "this output row equals the same row of the full causal computation (max |difference| {diff}).",
        "decode.size": "The cache now holds {len} tokens × {per} bytes = {total} bytes for this layer (2 · {kv} K/V heads · d_k {dk} · 4 bytes per token). GPT-2 small in fp16 stores {gpt2} bytes per token across its 12 layers.",
        "decode.cache": "The cache after this step (this head's K/V head)",
        "nav.demos": "Demonstrations",
        "demo.title": "Demonstrations, computed live",
        "demo.intro": "Four facts from the chapter, each computed now from numbers you can change.",
        "demo.perm_title": "Without positions, attention does not know word order",
        "demo.perm": "Permutation",
        "demo.perm_text": "Shuffled tokens: {shuffled}. Is the output of the shuffled sentence the original output shuffled the same way?",
        "demo.case": "Setting",
        "demo.equivariant": "Outputs shuffle the same way",
        "demo.case.plain": "no positions, no mask",
        "demo.case.sinusoidal": "sinusoidal positions",
        "demo.case.causal": "causal mask",
        "demo.perm_notice": "Plain attention is permutation-equivariant: reordering the input only reorders the output. Positions, or the causal mask's direction, break that symmetry.",
        "demo.rope_title": "RoPE depends only on the distance between positions",
        "demo.unrotated": "no rotation",
        "demo.rope_notice": "Rotating q by m and k by n scores the same as rotating k alone by n − m; the same pair five positions apart scores the same anywhere in the sequence.",
        "demo.scale_title": "Why divide by √d_k",
        "demo.scale_text": "For q and k with independent N(0, 1) entries, Var(q·k) = d_k ({samples} samples per d_k). Below, softmax over {n} keys with the scores divided by 1, √d_k or d_k.",
        "demo.sampled": "sampled",
        "demo.var_title": "Var(q·k) grows like d_k",
        "demo.max_title": "Largest softmax weight over {n} keys",
        "demo.entropy_title": "Softmax entropy over {n} keys",
        "demo.uniform": "uniform",
        "demo.scale_notice": "Unscaled, wide heads push softmax to one-hot (largest weight → 1, entropy → 0) where gradients vanish; ÷ d_k flattens it toward uniform; ÷ √d_k keeps it the same at every width.",
        "demo.softmax_title": "Why softmax subtracts the row maximum",
        "demo.logits": "Scores",
        "demo.naive": "exp(x) / Σ exp(x)",
        "demo.stable": "exp(x − max) / Σ exp(x − max)",
        "demo.softmax_notice": "{dtype} cannot hold numbers above {max}: exp overflows to ∞ and ∞/∞ is NaN. Subtracting the maximum changes nothing mathematically, and keeps every exponent ≤ 0.",
        "nav.lessons": "Lessons",
        "lessons.title": "Guided lessons",
        "lessons.intro": "Each lesson is a short series of lab views. Open each one, answer the question, then reveal the answer.",
        "lessons.count": "{n} steps",
        "lessons.open": "Open in the lab",
        "lessons.question": "Question:",
        "lessons.reveal": "Show the answer",
        "lessons.next": "Next lesson: {title}",
        "footer": "Computed with PyTorch on {device}. The JSON API returns every number shown here.",
    },
    "zh": {
        "title": "注意力实验室",
        "tagline": "缩放点积注意力，一步一个阶段；页面上每个数都是真算出来的。",
        "lang.name": "中文",
        "controls": "设置",
        "tokens": "词元",
        "tokens.hint": "用空格分隔",
        "preset": "预设",
        "preset.checkpoint": "GPT-2 检查点（真实权重）",
        "preset.minilm": "MiniLM-L6（真实编码器，d 384）",
        "preset.smollm2": "SmolLM2-135M（真实解码器，GQA、RoPE）",
        "text": "文本",
        "text.hint": "由模型自己的分词器切分",
        "layer": "层",
        "preset.toy": "玩具（d = 4，1 个头）",
        "preset.gpt2-small": "GPT-2 small（d = 768，12 个头）",
        "seed": "随机种子",
        "d_model": "d_model",
        "n_heads": "头数",
        "mask": "掩码",
        "mask.none": "无（双向）",
        "mask.causal": "因果",
        "mask.padding": "填充",
        "mask.document": "文档（打包）",
        "pad_positions": "填充位置",
        "segment_ids": "文档编号",
        "scale": "缩放",
        "scale.sqrt_dk": "÷ √d_k",
        "scale.none": "不缩放（÷ 1）",
        "scale.dk": "÷ d_k",
        "apply": "计算",
        "present.on": "演示模式",
        "present.off": "退出演示模式",
        "present.qr": "扫码打开同一视图",
        "present.qr_too_long": "这个视图的地址太长，放不进二维码；请用下面的链接打开",
        "more": "更多选项：位置编码、GQA、交叉注意力、掩码参数",
        "prev": "← 上一步",
        "next": "下一步 →",
        "stage": "阶段",
        "stage.projection": "投影",
        "stage.scores": "打分",
        "stage.mask": "掩码",
        "stage.softmax": "Softmax",
        "stage.weighted_sum": "加权求和",
        "toggle.mask.on": "因果掩码：开",
        "toggle.mask.off": "因果掩码：关",
        "toggle.scale": "缩放：{scale}",
        "compare": "对比",
        "compare.mask": "掩码 开 / 关",
        "compare.scale": "√d_k / 不缩放",
        "compare.close": "关闭对比",
        "compare.title.mask": "不加与加上因果掩码时的 softmax 权重",
        "compare.title.scale": "除以 √d_k 与不缩放时的 softmax 权重",
        "json": "JSON",
        "json.title": "同一视图的 JSON",
        "npz": "NumPy .npz",
        "docs": "API 文档",
        "head": "头",
        "shape": "形状",
        "keys": "键 →",
        "queries": "查询 ↓",
        "formula": "公式",
        "what": "这一步做了什么",
        "notice": "值得注意",
        "weights.show": "本阶段用到的权重矩阵",
        "row.stats": "逐行统计",
        "entropy": "熵（nats）",
        "max_weight": "最大权重",
        "top3": "权重最大的 3 个键",
        "row": "查询",
        "checks": "校验：与 torch scaled_dot_product_attention 的最大绝对差 = {diff}；每行和为 1：{ok}。",
        "yes": "是",
        "no": "否",
        "keyboard": "快捷键：← → 切换阶段 · m 开关因果掩码 · s 切换缩放",
        "loading": "计算中…",
        "error": "实验室无法计算这个视图。",
        "error.field": "“{field}” 有误：{message}",
        "error.busy": "服务器正忙于其他大型计算，请 {seconds} 秒后再试。",
        "cell.title": "这个数是怎么算出来的",
        "cell.hint": "点击任意数字，查看它的算式。",
        "cell.close": "关闭",
        "cell.score": "查询“{q}”对键“{k}”的分数",
        "cell.weight": "查询“{q}”分给键“{k}”的权重",
        "cell.output": "“{q}”的输出，第 {c} 维",
        "cell.projection": "“{q}”的 {m}，第 {c} 列",
        "cell.final": "“{q}”经输出投影后的第 {c} 列",
        "cell.masked_entry": "这个键被遮住了：分数为 −∞，权重恰好为 0。",
        "cell.masked_row": "这个查询的所有键都被遮住了：实验室规定它的权重全部为 0。",
        "large": "{n} 个词元 × d_model {d}：数字太多，无法逐格显示；每个头画成一张热力图。",
        "heads.all": "所有头（点击放大）",
        "zoom": "第 {h} 个头（放大）",
        "hover": "把鼠标移到图上即可读出该格的数值。",
        "tile": "局部检查器：第 {r0}–{r1} 行，第 {c0}–{c1} 列",
        "tile.move": "移动窗口",
        "tile.up": "↑ 上",
        "tile.down": "↓ 下",
        "tile.left": "← 左",
        "tile.right": "→ 右",
        "legend.diverging": "蓝 < 0 < 红",
        "legend.sequential": "0 → 1",
        "legend.neginf": "−∞（被遮住）",
        "explain.projection": (
            "每个词元的向量 x 分别乘以三个可学习的矩阵：Q（查询）表示它在找什么，K（键）表示它能被怎样找到，"
            "V（值）表示被找到后交出什么内容。第 h 个头取第 h·d_k 到 (h+1)·d_k − 1 列。"
        ),
        "explain.scores": (
            "每个查询与每个键做点积：QKᵀ 的第 (i, j) 项衡量词元 i 的查询与词元 j 的键有多匹配。"
            "再除以 s，让数值落在 softmax 仍能正常学习的范围内。"
        ),
        "explain.mask": (
            "把掩码加到分数上：0 表示保留，−∞ 表示禁止。因果掩码下词元 i 只能读取第 1…i 个词元，"
            "语言模型因此无法偷看它要预测的下一个词。"
        ),
        "explain.softmax": (
            "每一行变成键上的概率分布：先取指数，再除以该行之和。计算前先减去行最大值，exp 就不会溢出。"
            "分数为 −∞ 的位置权重恰好为 0。"
        ),
        "explain.weighted_sum": (
            "每个词元的输出是各个值向量按它那一行 softmax 权重求得的加权平均。各个头的结果并排拼接，"
            "再经过输出投影 W_O 混合。"
        ),
        "notice.projection": (
            "同一个词无论出现在哪里，x 都相同，q、k、v 也就相同：没有掩码和位置信息时，注意力本身并不知道词序。"
        ),
        "notice.scores.none": (
            "不缩放时分数可达 ±{max:.2f}（标准差 {std:.2f}）。d_k 项之和的点积大约按 √d_k 增长，"
            "过大的分数会把 softmax 推向独热分布，梯度随之消失。"
        ),
        "notice.scores.sqrt_dk": (
            "原始分数的标准差为 {raw_std:.2f}；除以 √d_k = {s:.2f} 之后为 {std:.2f}。d_k 项之和的点积按 √d_k 扩散，"
            "所以这个除数让分数的离散程度与头的宽度无关（q、k 各分量方差为 1 时，结果方差为 1）。"
        ),
        "notice.scores.dk": "除以 d_k = {s:.0f} 把分数压到标准差 {std:.2f}：头越宽，softmax 越接近均匀分布。",
        "notice.mask.none": "没有任何位置被遮住：每个词元都能双向读取所有词元，和 BERT 一样。",
        "notice.mask.causal": "{total} 项中有 {count} 项为 −∞，正是严格上三角；对角线保留，因为词元可以读取自己。",
        "notice.mask.padding": "填充位置 {pads} 所在的列全为 −∞：任何查询都不会读取填充词元。",
        "notice.mask.document": "对角线上的分块：词元只能读取同一文档中更早的词元（{total} 项中遮住 {count} 项）。",
        "notice.softmax.causal": (
            "第 1 行恰好是 1.00：第一个词元“{first}”只能看见自己，全部权重都落在自己身上。"
            "之后的每一行把权重分给它之前的词元。"
        ),
        "notice.softmax.other": (
            "每行之和都是 1。最集中的一行是“{token}”，最大权重 {max:.2f}；最平坦的一行熵为 {entropy:.2f} nats"
            "（{n} 个键上均匀分布时为 {uniform:.2f}）。"
        ),
        "notice.weighted_sum": "输出第 i 行是 Σ_j a_ij v_j，即值向量的加权混合。因果掩码下第一行正好复制 v_1。",
        "notice.weighted_sum.none": (
            "输出第 i 行是 Σ_j a_ij v_j，即值向量的加权混合。没有掩码时，打乱词元顺序，这些行也按同样方式打乱。"
        ),
        "nav.lab": "实验室",
        "nav.params": "参数量",
        "params.title": "数一数参数",
        "params.intro": (
            "每个块有 W_Q、W_K、W_V、W_O（4d²），以及由两个 d × 4d 矩阵组成的 FFN（8d²）：每块 12d²，"
            "不计嵌入约为 12·L·d²。选一个模型或填入你自己的数字，逐项看精确的参数量，以及速算公式差在哪里。"
        ),
        "params.model": "模型",
        "params.custom": "自定义（使用下面的字段）",
        "params.n_layer": "层数 L",
        "params.vocab": "词表大小",
        "params.n_ctx": "可学习位置数",
        "params.ffn": "FFN",
        "params.d_ff": "d_ff（0 = 4d）",
        "params.tied": "lm_head 与词嵌入共享权重",
        "params.bias": "偏置",
        "params.n_kv_heads": "K/V 头数（0 = 全部）",
        "params.norm": "归一化",
        "params.yes": "是",
        "params.no": "否",
        "params.part": "部分",
        "params.count": "参数量",
        "params.how": "算法",
        "params.token_emb": "词嵌入",
        "params.pos_emb": "位置嵌入",
        "params.attention": "注意力（每块）",
        "params.ffn_block": "FFN（每块）",
        "params.norms": "归一化（每块）",
        "params.block": "一个块",
        "params.blocks": "全部块",
        "params.final_norm": "最终归一化",
        "params.lm_head": "lm_head",
        "params.total": "合计",
        "params.estimate": "12·L·d²",
        "params.ratio": "合计 ÷ 12·L·d² = {ratio:.3f}；不计嵌入为 {ratio_ne:.3f}",
        "params.tied_note": "与词嵌入共享",
        "params.misses": "12·L·d² 差在哪里",
        "params.miss.embeddings": "嵌入（{emb}）占合计的 {pct:.1f}%，不在速算公式里。",
        "params.miss.ffn": "d_ff = {ff} 而不是 4d：FFN 每块 {ffn}，而不是 8d² = {eight}。",
        "params.miss.gqa": "K 和 V 只用 {h} 个头中的 {kv} 个（GQA）：注意力每块 {att}，而不是 4d² = {four}。",
        "params.miss.small": "偏置和归一化每块再加 {extra}（占一个块的 {pct:.2f}%）。",
        "params.miss.kv": "KV cache：fp16 下每个词元 {bytes} 字节（2 · L · n_kv_heads · d_k · 2 字节）。",
        "nav.block": "完整的块",
        "block.title": "一个完整的解码器块",
        "block.intro": (
            "注意力只是块中的一个子层。跟着 x 走一遍：归一化、注意力的五个阶段、残差相加、第二次归一化、"
            "前馈网络，直到块的输出。"
        ),
        "block.norm": "归一化",
        "block.ffn": "FFN",
        "block.d_ff": "d_ff",
        "block.placement": "归一化位置",
        "placement.pre": "Pre-LN（GPT-2）",
        "placement.post": "Post-LN（2017）",
        "norm.layernorm": "LayerNorm",
        "norm.rmsnorm": "RMSNorm",
        "ffn.gelu": "GELU（d → d_ff → d）",
        "ffn.swiglu": "SwiGLU（门控、升维、降维）",
        "block.attention": "注意力",
        "bstage.ln1": "归一化 1",
        "bstage.residual1": "+ 残差",
        "bstage.ln2": "归一化 2",
        "bstage.ffn_hidden": "FFN 隐藏层",
        "bstage.ffn_out": "FFN 输出",
        "bstage.output": "输出",
        "bexplain.ln1.pre": "每个词元的向量在进入注意力之前各自归一化。",
        "bexplain.ln1.post": "Post-LN 在残差相加之后归一化：r = LN₁(x + Attn(x))。",
        "bexplain.residual1.pre": "注意力的输出加回 x：残差通路让 x 绕过子层直接传下去。",
        "bexplain.residual1.post": "注意力的输出加回 x，随后才做第一次归一化。",
        "bexplain.ln2.pre": "第二次归一化为前馈网络准备好残差流。",
        "bexplain.ln2.post": "FFN 的残差相加之后，第二次归一化给出块的输出。",
        "bexplain.ffn_hidden": "每个词元各自经过非线性，升到 d_ff 维。",
        "bexplain.ffn_out": "降维投影把每个词元变回 d_model 维。",
        "bexplain.output.pre": "FFN 的输出加到残差流上：y = r + FFN(LN₂(r))。",
        "bexplain.output.post": "Post-LN 的输出就是第二次归一化：y = LN₂(r + FFN(r))。",
        "bnotice.layernorm": "现在每一行的均值为 {mean:.2f}、标准差为 {std:.2f}；归一化之前各行标准差在 {lo:.2f} 到 {hi:.2f} 之间。",
        "bnotice.rmsnorm": "现在每一行的均方根为 {rms:.2f}。与 LayerNorm 不同，均值没有被减去：各行均值在 {lo:.2f} 到 {hi:.2f} 之间。",
        "bnotice.residual1": "子层输出（最大绝对值 {a:.2f}）加到它的输入（最大绝对值 {x:.2f}）上；形状仍是 (N, d)。",
        "bnotice.gelu": (
            "d_ff = {ff}。GELU 让正值几乎原样通过，把负值压向 0：隐藏值中有 {pct:.0f}% 为负，最小不低于 {low:.2f}。"
        ),
        "bnotice.swiglu": (
            "d_ff = {ff}。SiLU(x W_gate) 逐元素地给 x W_up 加门：门接近 0 的位置，升维投影就被关掉"
            "（{pct:.0f}% 的门绝对值小于 0.1）。"
        ),
        "bnotice.ffn_out": "FFN 只在维度之间混合，从不跨词元：第 i 行只取决于输入的第 i 行。",
        "bnotice.output": "块的输出与输入形状相同 {shape}：块可以一层层叠起来。最大绝对值 {m:.2f}。",
        "block.check": "校验：与用 torch 自带的归一化、scaled_dot_product_attention 和激活函数算出的同一个块相比，最大绝对差 = {diff}。",
        "block.large": "{n} 个词元 × d_model {d}：每个张量画成一张热力图，行是词元，列是维度。",
        "positions": "位置编码",
        "positions.none": "无",
        "positions.sinusoidal": "正弦（相加）",
        "positions.learned": "可学习（相加）",
        "positions.rope": "RoPE（旋转 q、k）",
        "rope_pairing": "RoPE 配对",
        "pairing.adjacent": "相邻维 (2i, 2i+1)",
        "pairing.half": "前后两半 (i, i + d_k/2)",
        "n_kv_heads": "K/V 头数",
        "kv_tokens": "源词元（交叉注意力）",
        "window": "窗口",
        "prefix": "前缀长度",
        "mask.sliding_window": "滑动窗口",
        "mask.prefix_lm": "前缀 LM",
        "mask.custom": "自定义（点击格子）",
        "compare.leak": "文档边界 关 / 开",
        "compare.title.leak": "打包的文档：忽略边界（只有因果）与阻断边界",
        "notice.mask.sliding_window": "{total} 项中有 {count} 项为 −∞：每个词元只读取自己和它之前的 {window} − 1 个词元。",
        "notice.mask.prefix_lm": "前 {prefix} 个词元彼此双向可见，其余词元因果可见（{total} 项中遮住 {count} 项）。",
        "notice.mask.custom": "这个掩码是你手动设置的：{total} 项中有 {count} 项为 −∞。点击 M 的格子即可翻转。",
        "notice.mask.loss": "注意力掩码不是损失掩码：损失掩码只决定哪些位置的预测计入损失。",
        "notice.projection.rope": "RoPE 把 q、k 的每一对维度旋转 m·θ_i（底数 {base:g}，配对方式：{pairing}）；v 不旋转，x 也不加位置向量。",
        "notice.projection.absolute": "x = E + P：同一个词在不同位置的 x 不同了，所以打乱词序不再只是把输出同样打乱。",
        "notice.projection.gqa": "{kv} 个 K/V 头服务 {h} 个查询头：每组 {g} 个查询头共享一个 K 和 V，KV cache 缩小为 1/{g}。",
        "notice.projection.cross": "交叉注意力：Q 来自 {n} 个目标词元，K 和 V 来自 {m} 个源词元。",
        "mask.edit": "点击 M 的格子即可翻转它；掩码随之变为自定义。",
        "nav.decode": "KV cache",
        "decode.title": "KV cache",
        "decode.intro": "生成时先把提示词一次读完（prefill），再一次添加一个词元。每个新词元只需用自己的查询去读已缓存的键和值。",
        "decode.prefill": "预填充长度",
        "decode.prefill_tab": "预填充（{n}）",
        "decode.prefill_title": "预填充：一次处理 {n} 个词元",
        "decode.prefill_text": "提示词的 {n} 个词元一起投影，它们的键和值填入缓存。",
        "decode.step_title": "第 {i} 步：位置 {pos} 上的“{token}”",
        "decode.step_text": "只投影新词元，把它的 k、v 追加到缓存，再用一行查询做注意力。不需要掩码：未来的词元还不在缓存里。",
        "decode.equal": "这一行输出与完整因果计算的同一行相等（最大绝对差 {diff}）。",
        "decode.size": "缓存现在有 {len} 个词元 × {per} 字节 = 本层 {total} 字节（每个词元 2 · {kv} 个 K/V 头 · d_k {dk} · 4 字节）。GPT-2 small 用 fp16 时，12 层合计每个词元 {gpt2} 字节。",
        "decode.cache": "这一步之后的缓存（当前头对应的 K/V 头）",
        "nav.demos": "演示",
        "demo.title": "现场计算的演示",
        "demo.intro": "本章的四个结论，每一个都用你可以修改的数字现场算出来。",
        "demo.perm_title": "没有位置信息，注意力不知道词序",
        "demo.perm": "排列",
        "demo.perm_text": "打乱后的词元：{shuffled}。打乱后句子的输出，是否正好是原输出按同样方式打乱？",
        "demo.case": "设置",
        "demo.equivariant": "输出按同样方式打乱",
        "demo.case.plain": "无位置编码、无掩码",
        "demo.case.sinusoidal": "正弦位置编码",
        "demo.case.causal": "因果掩码",
        "demo.perm_notice": "纯注意力是置换等变的：重排输入只会同样地重排输出。位置编码或因果掩码的方向性会打破这种对称。",
        "demo.rope_title": "RoPE 只取决于位置之间的距离",
        "demo.unrotated": "不旋转",
        "demo.rope_notice": "把 q 旋转 m、k 旋转 n，与只把 k 旋转 n − m 得分相同；相隔 5 个位置的同一对向量，在序列任何地方得分都一样。",
        "demo.scale_title": "为什么除以 √d_k",
        "demo.scale_text": "q、k 各分量独立服从 N(0, 1) 时，Var(q·k) = d_k（每个 d_k 采样 {samples} 次）。下图是对 {n} 个键做 softmax，分数分别除以 1、√d_k、d_k。",
        "demo.sampled": "采样值",
        "demo.var_title": "Var(q·k) 随 d_k 增长",
        "demo.max_title": "{n} 个键上 softmax 的最大权重",
        "demo.entropy_title": "{n} 个键上 softmax 的熵",
        "demo.uniform": "均匀分布",
        "demo.scale_notice": "不缩放时，头越宽 softmax 越接近独热（最大权重 → 1，熵 → 0），梯度随之消失；除以 d_k 会把它压向均匀；除以 √d_k 让它在任何宽度下都保持一致。",
        "demo.softmax_title": "为什么 softmax 要先减去行最大值",
        "demo.logits": "分数",
        "demo.naive": "exp(x) / Σ exp(x)",
        "demo.stable": "exp(x − max) / Σ exp(x − max)",
        "demo.softmax_notice": "{dtype} 表示不了大于 {max} 的数：exp 溢出成 ∞，∞/∞ 得到 NaN。减去最大值在数学上不改变结果，却让每个指数都 ≤ 0。",
        "nav.lessons": "课程",
        "lessons.title": "引导式课程",
        "lessons.intro": "每节课是几个实验室视图组成的短序列。逐个打开，先回答问题，再展开答案。",
        "lessons.count": "{n} 步",
        "lessons.open": "在实验室中打开",
        "lessons.question": "问题：",
        "lessons.reveal": "显示答案",
        "lessons.next": "下一课：{title}",
        "footer": "由 PyTorch 在 {device} 上计算。JSON API 返回这里显示的每一个数。",
    },
}


def negotiate(query_lang: str | None, accept_language: str | None) -> str:
    """`?lang=` wins; otherwise the first supported language in Accept-Language by quality; else English."""
    if query_lang in LANGS:
        return query_lang
    best, best_q = "en", -1.0
    for part in (accept_language or "").split(","):
        tag, _, params = part.strip().partition(";")
        q = 1.0
        if params.strip().startswith("q="):
            try:
                q = float(params.strip()[2:])
            except ValueError:
                q = 0.0
        lang = tag.split("-")[0].lower()
        if lang in LANGS and q > best_q:
            best, best_q = lang, q
    return best


def translator(lang: str) -> Callable[..., str]:
    table = MESSAGES[lang]

    def t(key: str, **values: object) -> str:
        text = table[key]
        return text.format(**values) if values else text

    return t
