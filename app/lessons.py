"""Guided lessons: short series of lab states, each with a question and an answer the student reveals.

A step is a link into the lab (any page of it) plus text in both languages; the numbers are whatever the lab
computes at that state, so a lesson never goes stale.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    url: str  # a lab URL without `lang`; the page adds the reader's language
    en: tuple[str, str, str]  # what to look at, the question, the answer
    zh: tuple[str, str, str]


@dataclass(frozen=True)
class Lesson:
    slug: str
    title: dict[str, str]
    steps: tuple[Step, ...]


LESSONS: tuple[Lesson, ...] = (
    Lesson(
        "five-stages",
        {"en": "Walk the five stages", "zh": "走完五个阶段"},
        (
            Step(
                "/?stage=1",
                (
                    "Each row of Q is the token's x times W_Q. Click a number of Q to see its sum.",
                    "Which two matrices does q for “垫子” come from?",
                    "Its row of X and the column block of W_Q that belongs to the head: q = x W_Q.",
                ),
                (
                    "Q 的每一行是该词元的 x 乘以 W_Q。点击 Q 中任意数字查看求和过程。",
                    "“垫子”的 q 由哪两个矩阵算出？",
                    "X 中它的那一行，以及 W_Q 中属于该头的列块：q = x W_Q。",
                ),
            ),
            Step(
                "/?stage=2",
                (
                    "Scores compare every query with every key.",
                    "Why is the scores matrix N × N?",
                    "Every one of the N queries is compared with every one of the N keys.",
                ),
                (
                    "打分让每个查询与每个键比较。",
                    "为什么打分矩阵是 N × N？",
                    "N 个查询中的每一个都要和 N 个键中的每一个比较。",
                ),
            ),
            Step(
                "/?stage=4",
                (
                    "Softmax turns each row into weights.",
                    "What does every row of A sum to?",
                    "Exactly 1: each row is a probability distribution over the keys.",
                ),
                ("Softmax 把每一行变成权重。", "A 的每一行加起来是多少？", "恰好是 1：每一行都是键上的概率分布。"),
            ),
            Step(
                "/?stage=5",
                (
                    "The output mixes value vectors.",
                    "Row i of the output is a weighted average of what?",
                    "Of the rows of V, weighted by row i of A.",
                ),
                ("输出是值向量的混合。", "输出的第 i 行是什么的加权平均？", "V 的各行，以 A 的第 i 行为权重。"),
            ),
        ),
    ),
    Lesson(
        "mask-toggle",
        {"en": "Switch the causal mask on and off", "zh": "开关因果掩码"},
        (
            Step(
                "/?stage=3&mask=causal",
                (
                    "The causal mask puts −∞ above the diagonal.",
                    "Which entries are −∞, and why is the diagonal kept?",
                    "The strict upper triangle: token i may not read tokens after it, but it may read itself.",
                ),
                (
                    "因果掩码在对角线上方填入 −∞。",
                    "哪些位置是 −∞？为什么保留对角线？",
                    "严格上三角：词元 i 不能读它之后的词元，但可以读自己。",
                ),
            ),
            Step(
                "/?stage=4&mask=causal",
                (
                    "Now press m (or the mask button) and watch the rows.",
                    "What happens to row 1 when the mask goes off?",
                    "It spreads its weight over all five tokens: attention becomes bidirectional, as in BERT.",
                ),
                (
                    "现在按 m（或掩码按钮），观察各行的变化。",
                    "关掉掩码时第 1 行发生了什么？",
                    "它把权重分给全部五个词元：注意力变成双向的，就像 BERT。",
                ),
            ),
        ),
    ),
    Lesson(
        "row-one",
        {"en": "Why row 1 is exactly 1.00", "zh": "为什么第 1 行恰好是 1.00"},
        (
            Step(
                "/?stage=4&mask=causal&cell=weights.0.0.0",
                (
                    "Look at the arithmetic of row 1.",
                    "How many keys can the first token read under the causal mask?",
                    "One, itself: exp(s − s) / exp(s − s) = 1, and every masked weight is exp(−∞) = 0.",
                ),
                (
                    "看第 1 行的算式。",
                    "因果掩码下第一个词元能读几个键？",
                    "只有一个，就是它自己：exp(s − s) / exp(s − s) = 1，被遮住的权重都是 exp(−∞) = 0。",
                ),
            ),
            Step(
                "/?stage=5&mask=causal&cell=heads.0.0.0",
                (
                    "And the output row.",
                    "What is row 1 of the output?",
                    "Exactly v_1: the first token copies its own value.",
                ),
                ("再看输出行。", "输出的第 1 行是什么？", "恰好是 v_1：第一个词元只复制它自己的值向量。"),
            ),
        ),
    ),
    Lesson(
        "scale",
        {"en": "Why divide by √d_k", "zh": "为什么除以 √d_k"},
        (
            Step(
                "/?preset=gpt2-small&tokens=the+cat+sat+on+the+mat&scale=none&stage=2",
                (
                    "GPT-2 heads are 64 wide. Scores without scaling:",
                    "How large do the logits get compared with ÷ √d_k?",
                    "About √64 = 8 times larger: a dot product of d_k terms has variance d_k.",
                ),
                (
                    "GPT-2 的每个头宽 64。不缩放时的分数：",
                    "与除以 √d_k 相比，分数大了多少？",
                    "约 √64 = 8 倍：d_k 项之和的点积方差为 d_k。",
                ),
            ),
            Step(
                "/?stage=4&compare=scale",
                (
                    "Compare the weights side by side.",
                    "Which scale gives the sharper rows (lower entropy)?",
                    "No scaling: larger logits push softmax towards one-hot.",
                ),
                ("并排比较权重。", "哪种缩放让各行更尖锐（熵更低）？", "不缩放：更大的分数把 softmax 推向独热。"),
            ),
            Step(
                "/demos#scaling",
                (
                    "The charts sweep d_k from 4 to 1024.",
                    "Which curve stays flat as d_k grows?",
                    "÷ √d_k: its largest weight and entropy do not depend on the width.",
                ),
                (
                    "图表中 d_k 从 4 变到 1024。",
                    "哪条曲线随 d_k 增大保持平稳？",
                    "÷ √d_k：它的最大权重和熵与宽度无关。",
                ),
            ),
        ),
    ),
    Lesson(
        "positions",
        {"en": "Attention does not know word order", "zh": "注意力不知道词序"},
        (
            Step(
                "/demos?tokens=猫+坐+在+垫子+上&perm=4,3,2,1,0#permutation",
                (
                    "Reverse the sentence.",
                    "Without positions or a mask, how do the outputs change?",
                    "They are the same rows in reverse order: attention is permutation-equivariant.",
                ),
                (
                    "把句子倒过来。",
                    "没有位置编码也没有掩码时，输出如何变化？",
                    "还是那些行，只是顺序倒过来：注意力是置换等变的。",
                ),
            ),
            Step(
                "/?positions=sinusoidal&stage=1",
                (
                    "Add sinusoidal positions.",
                    "Do “猫” at position 0 and at position 3 still have the same x?",
                    "No: x = E + P, and P differs at every position.",
                ),
                (
                    "加上正弦位置编码。",
                    "位置 0 和位置 3 上的“猫”的 x 还相同吗？",
                    "不相同：x = E + P，而每个位置的 P 都不同。",
                ),
            ),
        ),
    ),
    Lesson(
        "rope",
        {"en": "RoPE: rotations that encode distance", "zh": "RoPE：用旋转编码距离"},
        (
            Step(
                "/?positions=rope&stage=1",
                (
                    "RoPE rotates q and k, not x.",
                    "Which token's q̃ equals its q?",
                    "The first one: position 0 is a rotation by 0.",
                ),
                ("RoPE 旋转 q 和 k，而不是 x。", "哪个词元的 q̃ 与 q 相同？", "第一个：位置 0 的旋转角度为 0。"),
            ),
            Step(
                "/demos?m=2&n=9#rope",
                (
                    "Score q at m and k at n.",
                    "What does ⟨R_m q, R_n k⟩ depend on?",
                    "Only on n − m: the same pair five apart scores the same at offsets 0, 10 and 30.",
                ),
                (
                    "把 q 放在 m、k 放在 n 计算分数。",
                    "⟨R_m q, R_n k⟩ 取决于什么？",
                    "只取决于 n − m：相隔 5 的同一对向量在偏移 0、10、30 处得分相同。",
                ),
            ),
        ),
    ),
    Lesson(
        "padding-vs-causal",
        {"en": "Padding masks and causal masks", "zh": "填充掩码与因果掩码"},
        (
            Step(
                "/?mask=padding&pad_positions=3,4&stage=3",
                (
                    "Pad positions 3 and 4.",
                    "Which entries does the padding mask hide?",
                    "Whole columns: no query reads a pad key, in either direction.",
                ),
                ("把位置 3、4 设为填充。", "填充掩码遮住了哪些位置？", "整列：任何查询都不读填充的键，无论前后。"),
            ),
            Step(
                "/?mask=causal&stage=3",
                (
                    "Now the causal mask.",
                    "How is its shape different?",
                    "A triangle: what is hidden depends on the query's position, not on the key alone.",
                ),
                ("再看因果掩码。", "它的形状有什么不同？", "是三角形：遮住什么取决于查询的位置，而不只取决于键。"),
            ),
            Step(
                "/?mask=document&segment_ids=0,0,1,1,1&stage=4&compare=leak",
                (
                    "Two packed documents.",
                    "Without blocking the boundary, what does token 3 read?",
                    "The first document too: that is a leak the document mask blocks.",
                ),
                (
                    "两篇打包在一起的文档。",
                    "不阻断边界时，第 3 个词元读到了什么？",
                    "也读到了第一篇文档：这就是文档掩码所阻断的泄漏。",
                ),
            ),
        ),
    ),
    Lesson(
        "kv-cache",
        {"en": "The KV cache", "zh": "KV cache"},
        (
            Step(
                "/decode?prefill=2&step=0",
                (
                    "Prefill reads the prompt once.",
                    "What is in the cache after prefill?",
                    "The keys and values of the two prompt tokens.",
                ),
                ("预填充一次读完提示词。", "预填充之后缓存里有什么？", "两个提示词元的键和值。"),
            ),
            Step(
                "/decode?prefill=2&step=2",
                (
                    "A decode step.",
                    "How many query rows does a decode step compute?",
                    "One: the new token's. Its keys and values are appended, nothing else is recomputed.",
                ),
                (
                    "一个解码步骤。",
                    "一个解码步骤要算几行查询？",
                    "一行：新词元的那一行。追加它的键和值，其他都不重算。",
                ),
            ),
            Step(
                "/decode?prefill=2&step=3&preset=gpt2-small&tokens=a+b+c+d+e&n_kv_heads=3",
                (
                    "GPT-2-sized, with 3 K/V heads instead of 12.",
                    "How much smaller is the cache per token?",
                    "Four times: 12 query heads share 3 K/V heads.",
                ),
                (
                    "GPT-2 规模，用 3 个 K/V 头代替 12 个。",
                    "每个词元的缓存小了多少？",
                    "四倍：12 个查询头共享 3 个 K/V 头。",
                ),
            ),
        ),
    ),
)

BY_SLUG = {lesson.slug: lesson for lesson in LESSONS}
