"""Readable labels for token ids: byte-level BPE pieces as the characters they spell (猫₁ 猫₂ 猫₃)."""

from __future__ import annotations

from typing import Any


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


def _characters(data: bytes) -> list[tuple[int, int, str | None]]:
    """The text's characters left to right: (start, end, the character), or None for a byte that begins none."""
    chars: list[tuple[int, int, str | None]] = []
    i = 0
    while i < len(data):
        size = _utf8_length(data[i])
        try:
            chars.append((i, i + size, data[i : i + size].decode("utf-8")))
            i += size
        except UnicodeDecodeError:
            chars.append((i, i + 1, None))
            i += 1
    return chars


def piece_runs(pieces: list[bytes]) -> list[tuple[int, int, str]]:
    """The pieces in runs that no character crosses, each with the text it spells: (first piece, past the last,
    text). A character split over pieces (猫₁ 猫₂ 猫₃) is one run, 猫; a piece that holds whole characters is a run
    of its own; a byte that ends no character stays ⟨hex⟩. For a text as a reader reads it (a generation), where
    the labels name each piece (a position)."""
    data = b"".join(pieces)
    starts, at = [], 0
    for piece in pieces:
        starts.append(at)
        at += len(piece)
    chars = _characters(data)
    inside: set[int] = set()  # byte offsets inside a character (a run may not end there)
    for start, end, _ in chars:
        inside.update(range(start + 1, end))
    runs: list[tuple[int, int, str]] = []
    first = 0
    for k in range(1, len(pieces) + 1):
        if k == len(pieces) or starts[k] not in inside:
            a, b = starts[first], starts[k] if k < len(pieces) else len(data)
            text = "".join(c if c is not None else f"⟨{data[i]:02x}⟩" for i, _, c in chars if a <= i < b)
            runs.append((first, k, text))
            first = k
    return runs


def piece_labels(pieces: list[bytes]) -> list[str]:
    """Labels for consecutive byte pieces of one text. A character split across pieces (byte-level BPE cuts 猫,
    three UTF-8 bytes, into up to three tokens) is shown in each piece with its part number: 猫₁ 猫₂ 猫₃; whole
    characters as themselves; bytes that form no character as ⟨hex⟩."""
    data = b"".join(pieces)
    bounds, at = [], 0
    for piece in pieces:
        bounds.append((at, at + len(piece)))
        at += len(piece)
    chars = _characters(data)
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
    out = []
    for i, text in zip(ids, piece_labels(_pieces(tok, ids)), strict=True):
        out.append(_visible(text, i))
    return out


def _visible(text: str, i: int) -> str:
    return text if text.strip() else text.replace(" ", "␣").replace("\n", "↵") or f"#{i}"


def _pieces(tok: Any, ids: list[int]) -> list[bytes]:
    """Each id's bytes: a byte-level BPE piece as its bytes, any other token as its text."""
    pieces: list[bytes] = []
    for i in ids:
        raw = tok.id_to_token(i) or ""
        data = [_BYTE_OF.get(c) for c in raw]
        if raw and None not in data:
            pieces.append(bytes(data))  # type: ignore[arg-type]
        else:  # a special token, or a tokenizer without byte-level pieces
            pieces.append((tok.decode([i]) or raw or f"#{i}").encode("utf-8"))
    return pieces


def readable_runs(tok: Any, ids: list[int]) -> list[tuple[int, int, str]]:
    """The ids as a reader reads them (`piece_runs`): a character split over pieces once, 猫 for 猫₁ 猫₂ 猫₃; a run
    of one piece labelled as `readable_labels` labels it (␣ or ↵ for whitespace alone)."""
    pieces = _pieces(tok, ids)
    labels = piece_labels(pieces)
    return [(a, b, _visible(labels[a] if b - a == 1 else text, ids[a])) for a, b, text in piece_runs(pieces)]
