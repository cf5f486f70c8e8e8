"""The encoder–decoder's two tasks, generated from a seed on the fly (nothing downloaded).

`reverse`: a sequence of 3 … `length` symbols in, the same symbols backwards out. Target position i copies source
position n − 1 − i, so a decoder that has learnt the task reads the source along the anti-diagonal.

`numbers`: a number from 1 to `max_number` written in English words in, in Chinese numerals out (or back):
"three hundred and twelve" ↔ 三百一十二. The alignment is not monotonic one-to-one: "twelve" becomes 十二 (two
tokens), "and" becomes nothing, 一百零五's 零 comes from no English word. A seeded tenth of the numbers is held
out of training for the evaluation.

One vocabulary holds both sides: <pad> = 0, <bos> = 1, <eos> = 2, then the symbols (or the words and characters).
A pair is a source row (padded with <pad> to the task's longest source) and a target row <bos> y… <eos> <pad>…."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .device import CPU
from .sources import seed_of

PAD, BOS, EOS = 0, 1, 2
SPECIALS = ("<pad>", "<bos>", "<eos>")
SYMBOLS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
        "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")  # fmt: skip
TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
DIGITS = "零一二三四五六七八九"
MIN_REVERSE = 3  # the shortest sequence to reverse


def english(n: int) -> list[str]:
    """1 … 999 in (British) English words, one token per word: 312 → three hundred and twelve."""
    words: list[str] = []
    if n >= 100:
        words += [ONES[n // 100], "hundred"] + (["and"] if n % 100 else [])
        n %= 100
    if n >= 20:
        words.append(TENS[n // 10])
        n %= 10
        if n:
            words.append(ONES[n])
    elif n:
        words.append(ONES[n])
    return words


def chinese(n: int) -> list[str]:
    """1 … 999 in Chinese numerals, one token per character: 312 → 三百一十二, 105 → 一百零五, 12 → 十二."""
    out: list[str] = []
    hundreds, rest = divmod(n, 100)
    if hundreds:
        out += [DIGITS[hundreds], "百"]
        if 0 < rest < 10:
            out.append("零")
    tens, ones = divmod(rest, 10)
    if tens:
        out += ([DIGITS[tens]] if tens > 1 or hundreds else []) + ["十"]  # 十二 alone, 一百一十二 after hundreds
    if ones:
        out.append(DIGITS[ones])
    return out


@dataclass
class Task:
    """The task of a config: its vocabulary, its longest rows, its batches, its held-out pairs and its probe."""

    name: str  # reverse | numbers
    seed: int
    length: int = 8  # reverse: the longest sequence
    symbols: int = 10  # reverse: kinds of symbol
    max_number: int = 999  # numbers: 1 … max_number
    direction: str = "en-zh"  # numbers: en-zh (English words in, Chinese out) | zh-en
    vocab: list[str] = field(default_factory=list)
    train_numbers: list[int] = field(default_factory=list)
    held_numbers: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.name == "reverse":
            self.vocab = [*SPECIALS, *SYMBOLS[: self.symbols]]
            return
        en = sorted({w for n in range(1, 1000) for w in english(n)}, key=lambda w: (len(w), w))
        self.vocab = [*SPECIALS, *en, *DIGITS[1:], "零", "十", "百"]
        g = torch.Generator().manual_seed(seed_of("encdec-held", self.seed))
        order = (torch.randperm(self.max_number, generator=g, device=CPU) + 1).tolist()
        cut = max(5, self.max_number // 10)
        self.held_numbers, self.train_numbers = sorted(order[:cut]), sorted(order[cut:])

    @property
    def n_src(self) -> int:
        """The longest source row."""
        return self.length if self.name == "reverse" else 5  # seven hundred and seventy seven, 七百七十七

    @property
    def n_tgt(self) -> int:
        """The longest target row, <bos> and <eos> included (the decoder reads n_tgt − 1 of it)."""
        return (self.length if self.name == "reverse" else 5) + 2

    def words(self, n: int) -> tuple[list[str], list[str]]:
        """The number's (source, target) tokens."""
        en, zh = english(n), chinese(n)
        return (en, zh) if self.direction == "en-zh" else (zh, en)

    def encode(self, pairs: list[tuple[list[str], list[str]]]) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, n_src) source ids and (B, n_tgt) target ids, both padded with <pad>."""
        index = {t: i for i, t in enumerate(self.vocab)}
        src = torch.full((len(pairs), self.n_src), PAD, dtype=torch.long, device=CPU)
        tgt = torch.full((len(pairs), self.n_tgt), PAD, dtype=torch.long, device=CPU)
        for b, (s, t) in enumerate(pairs):
            src[b, : len(s)] = torch.tensor([index[w] for w in s])
            tgt[b, : len(t) + 2] = torch.tensor([BOS, *(index[w] for w in t), EOS])
        return src, tgt

    def pairs(self, g: torch.Generator, n: int, held: bool = False) -> list[tuple[list[str], list[str]]]:
        if self.name == "reverse":
            lengths = torch.randint(MIN_REVERSE, self.length + 1, (n,), generator=g, device=CPU).tolist()
            draws = torch.randint(0, self.symbols, (n, self.length), generator=g, device=CPU).tolist()
            seqs = [[SYMBOLS[i] for i in row[:k]] for row, k in zip(draws, lengths, strict=True)]
            return [(s, s[::-1]) for s in seqs]
        pool = self.held_numbers if held else self.train_numbers
        picks = torch.randint(0, len(pool), (n,), generator=g, device=CPU).tolist()
        return [self.words(pool[i]) for i in picks]

    def batch(self, g: torch.Generator, n: int, held: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        return self.encode(self.pairs(g, n, held))

    def held_pairs(self, n: int = 64) -> list[tuple[list[str], list[str]]]:
        """The evaluation's pairs: every held-out number (at most n), or n fresh sequences to reverse."""
        if self.name == "numbers":
            return [self.words(k) for k in self.held_numbers[:n]]
        return self.pairs(torch.Generator().manual_seed(seed_of("encdec-eval", self.seed)), n, held=True)

    def probe(self) -> tuple[list[str], list[str]]:
        """The held-out pair whose cross-attention every snapshot shows: short, and shorter than the longest source
        (so its padding shows): 5 symbols to reverse; a held-out three-digit number with tens (…百…十…)."""
        if self.name == "reverse":
            g = torch.Generator().manual_seed(seed_of("encdec-probe", self.seed))
            k = min(5, self.length - 1) if self.length > MIN_REVERSE else self.length
            s = [SYMBOLS[i] for i in torch.randperm(self.symbols, generator=g, device=CPU)[:k].tolist()]
            return s, s[::-1]
        nice = [n for n in self.held_numbers if n >= 100 and n % 100 >= 11 and n % 10]
        return self.words((nice or self.held_numbers)[0])


def make_task(name: str, seed: int, length: int = 8, symbols: int = 10, max_number: int = 999,
              direction: str = "en-zh") -> Task:  # fmt: skip
    return Task(name, seed, length, symbols, max_number, direction)
