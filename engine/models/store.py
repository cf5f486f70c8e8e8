"""Where a model's tensors are: one loader per file format, each read at start-up as far as its header (names,
dtypes, shapes, where the bytes are) and checked against the file; a tensor is copied out of the file into memory
the process owns (never memory-mapped: a file rewritten under the server cannot take it down) and becomes float32.

- safetensors (`model.safetensors`, or shards listed by `model.safetensors.index.json`, each a file inside the
  folder): the 8-byte header length, the JSON header (an object, nesting bounded), then the raw bytes, which the
  tensors must tile exactly. float16 and bfloat16 are widened to float32 (the lab computes in float32 on the CPU).
- GGUF: the key-value metadata and tensor infos parsed here (a plain reader of the format, faster than reading
  every field through numpy), the data dequantised by the `gguf` package in whatever types it implements.

A header that contradicts its file (a tensor past the end: a truncated download; offsets that overlap or leave a
gap; a count or length past the bytes left), or a dtype the lab cannot read, is a ModelError naming the file and
the tensor or field, at start-up.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .config import ModelError
from .files import Stamp, inside, open_regular, parse_json, read_into, read_json

MAX_HEADER_BYTES = 100 * 2**20  # a safetensors header (a 70B model's is ~100 KB)

SAFETENSORS_DTYPES = {"F32": (np.float32, 4), "F16": (np.float16, 2), "BF16": (np.uint16, 2)}  # weights
ITEM_BYTES = {"F64": 8, "I64": 8, "U64": 8, "I32": 4, "U32": 4, "I16": 2, "U16": 2, "I8": 1, "U8": 1, "BOOL": 1,
              "F8_E4M3": 1, "F8_E5M2": 1} | {k: v[1] for k, v in SAFETENSORS_DTYPES.items()}  # fmt: skip
READABLE = ", ".join(SAFETENSORS_DTYPES)


@dataclass(frozen=True)
class Entry:
    file: Path
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute byte offset in the file
    nbytes: int

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


class Store:
    """Tensor names → entries; `get(name)` gives a float32 tensor in the file's own layout."""

    entries: dict[str, Entry]
    path: Path

    def names(self) -> list[str]:
        return list(self.entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.entries[name].shape

    @property
    def parameters(self) -> int:
        return sum(e.numel for e in self.entries.values())

    def get(self, name: str) -> torch.Tensor:
        raise NotImplementedError

    def read(self, names: list[str]) -> dict[str, torch.Tensor]:
        """Several tensors at once (one open of each file)."""
        return {n: self.get(n) for n in names}

    def check_dtype(self, name: str) -> None:
        """A ModelError if the tensor's dtype cannot be read as float32."""


class Safetensors(Store):
    def __init__(self, directory: Path) -> None:
        self.path = directory
        single, index = directory / "model.safetensors", directory / "model.safetensors.index.json"
        if single.exists() or single.is_symlink():
            files = [inside(directory, single.name)]
        elif index.exists() or index.is_symlink():
            data = read_json(inside(directory, index.name))
            weight_map = data.get("weight_map") if isinstance(data, dict) else None
            if not isinstance(weight_map, dict) or not weight_map:
                raise ModelError(f"{index}: weight_map: must be an object of tensor names to file names")
            names = dict.fromkeys(weight_map.values())
            for f in names:
                if not isinstance(f, str):
                    raise ModelError(f"{index}: weight_map: {_short(f)} is not a file name")
            files = [inside(directory, f, index) for f in names]
        else:
            raise ModelError(f"{single}: file not found (nor model.safetensors.index.json)")
        self.entries = {}
        self.stamps: dict[Path, Stamp] = {}
        for f in files:
            header, self.stamps[f] = _safetensors_header(f)
            for name in header:
                if name in self.entries:
                    raise ModelError(f"{f}: {name}: also in {self.entries[name].file.name}")
            self.entries.update(header)

    def check_dtype(self, name: str) -> None:
        e = self.entries[name]
        if e.dtype not in SAFETENSORS_DTYPES:
            raise ModelError(f"{e.file}: {name}: dtype {e.dtype} is not supported; supported: {READABLE}")

    def get(self, name: str) -> torch.Tensor:
        return self.read([name])[name]

    def read(self, names: list[str]) -> dict[str, torch.Tensor]:
        """The tensors, each read from its file into memory the process owns (float32)."""
        by_file: dict[Path, list[str]] = {}
        for name in names:
            by_file.setdefault(self.entries[name].file, []).append(name)
        out = {}
        for file, group in by_file.items():
            entries = [self.entries[n] for n in group]
            for name, e, raw in zip(group, entries, read_into(self.stamps[file], [(e.start, e.nbytes) for e in entries]),
                                    strict=True):  # fmt: skip
                np_dtype, _ = SAFETENSORS_DTYPES[e.dtype]
                a = raw.view(np_dtype)
                if e.dtype == "F16":
                    a = a.astype(np.float32)
                elif e.dtype == "BF16":  # bfloat16 is float32's upper half: shift it back into place
                    a = (a.astype(np.uint32) << 16).view(np.float32)
                out[name] = torch.from_numpy(a.reshape(e.shape))
        return out


def _safetensors_header(path: Path) -> tuple[dict[str, Entry], Stamp]:
    """The header of a safetensors file, checked against the file: every tensor's dtype, shape and offsets
    consistent, the tensors tiling the data without a gap or an overlap up to the file's last byte."""
    fd = open_regular(path)
    try:
        st = os.fstat(fd)
        size = st.st_size
        head = os.pread(fd, 8, 0)
        if len(head) < 8:
            raise ModelError(f"{path}: truncated: {size} bytes, not even a header")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8 or n > MAX_HEADER_BYTES:
            raise ModelError(f"{path}: truncated or not safetensors: a {n}-byte header in a {size}-byte file")
        text = os.pread(fd, n, 8)
    finally:
        os.close(fd)
    if len(text) < n:
        raise ModelError(f"{path}: truncated: the header runs past the end of the file")
    header = parse_json(text, f"{path}: header")
    if not isinstance(header, dict):
        raise ModelError(f"{path}: header: must be a JSON object of tensors, got {type(header).__name__}")
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        where = f"{path}: {name[:80]}"
        if not isinstance(info, dict):
            raise ModelError(f"{where}: malformed header entry (not an object)")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(dtype, str):
            raise ModelError(f"{where}: dtype: must be a string, got {_short(dtype)}")
        if not isinstance(shape, list) or len(shape) > 8 or not all(_whole(s) for s in shape):
            raise ModelError(f"{where}: shape: must be a list of integers ≥ 0, got {_short(shape)}")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(_whole(o) for o in offsets):
            raise ModelError(f"{where}: data_offsets: must be two integers ≥ 0, got {_short(offsets)}")
        a, b = offsets
        if b < a:
            raise ModelError(f"{where}: data_offsets: {a} to {b} runs backwards")
        entry = Entry(path, dtype, tuple(shape), base + a, b - a)  # a weight's dtype is checked by its model
        if dtype in ITEM_BYTES and entry.nbytes != entry.numel * ITEM_BYTES[dtype]:
            raise ModelError(f"{where}: shape {list(shape)} does not match its {entry.nbytes} bytes")
        if base + b > size:
            raise ModelError(f"{path}: truncated: {name} ends at byte {base + b}, the file has {size}")
        out[name] = entry
    at = base
    for name, e in sorted(out.items(), key=lambda kv: (kv[1].start, kv[1].nbytes)):
        if e.start != at:
            problem = "overlaps the tensor before it" if e.start < at else f"leaves bytes {at} to {e.start} unused"
            raise ModelError(f"{path}: {name}: data_offsets: {problem} (the tensors must tile the data)")
        at += e.nbytes
    if at != size:
        raise ModelError(f"{path}: the tensors end at byte {at}, the file has {size} (truncated or padded)")
    return out, Stamp.of(path, st)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# -- GGUF -------------------------------------------------------------------------------------------------------

GGUF_MAGIC = b"GGUF"
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_NUMPY = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32, 7: np.bool_,
          10: np.uint64, 11: np.int64, 12: np.float64}  # fmt: skip
MAX_GGUF_HEADER = 512 * 2**20  # metadata and tensor infos (a 256k vocabulary with its merges is ~20 MB)
MAX_ARRAY_DEPTH = 4  # an array of arrays of ... (the format allows it; no model needs more than two)
MAX_DIMS = 4  # ggml's GGML_MAX_DIMS
DEQUANT_ELEMENTS = 2**22  # weights dequantised per call of gguf (16 MiB of float32 out, a few times that passing)
MAX_ALIGNMENT = 2**16


class _More(Exception):
    """The header runs past the bytes read so far (but not past the file): read more and parse again."""


class _Cursor:
    """Reads the header from bytes read from the file (`struct.unpack_from`: no slices copied); a string array
    is walked at start-up but decoded only when asked for (a vocabulary is 50,000-odd strings). Every count and
    length is checked against the bytes left before it is used."""

    def __init__(self, buf: bytes, path: Path, file_size: int) -> None:
        self.buf, self.at, self.path, self.size, self.file_size = buf, 0, path, len(buf), file_size

    def need(self, n: int) -> None:
        if n < 0 or self.at + n > self.size:
            if n >= 0 and self.at + n <= self.file_size and self.size < self.file_size:
                raise _More
            raise ModelError(f"{self.path}: truncated: the header runs past the end of the file")

    def scalar(self, fmt: str) -> Any:
        n = struct.calcsize(fmt)
        self.need(n)
        (value,) = struct.unpack_from(fmt, self.buf, self.at)
        self.at += n
        return value

    def skip_string(self) -> None:
        n = self.scalar("<Q")
        self.need(n)
        self.at += n

    def string(self) -> str:
        start = self.at + 8
        self.skip_string()
        return self.buf[start : self.at].decode("utf-8", errors="replace")

    def value(self, kind: int, key: str, depth: int = 0) -> Any:
        if kind == 8:
            return self.string()
        if kind == 9:
            if depth >= MAX_ARRAY_DEPTH:
                raise ModelError(f"{self.path}: {key}: arrays nested deeper than {MAX_ARRAY_DEPTH} levels")
            item, count = self.scalar("<I"), self.scalar("<Q")
            if item == 8:
                self.need(8 * count)  # every string is at least its 8-byte length
                first, at, unpack, buf, end = self.at, self.at, struct.unpack_from, self.buf, self.size
                for _ in range(count):
                    if at + 8 > end:
                        at += 8
                        break
                    at += 8 + unpack("<Q", buf, at)[0]
                    if at > end:
                        break
                self.need(at - self.at)  # past the bytes read: more, or truncated
                self.at = at
                return Strings(self.buf, first, count)
            if item in _NUMPY:
                dt = np.dtype(_NUMPY[item])
                self.need(count * dt.itemsize)
                out = np.frombuffer(self.buf, dtype=dt, count=count, offset=self.at).tolist()
                self.at += count * dt.itemsize
                return out
            if item != 9:
                raise ModelError(f"{self.path}: {key}: unknown array item type {item}")
            self.need(12 * count)  # every array is at least its type and count
            return [self.value(item, key, depth + 1) for _ in range(count)]
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind])
        raise ModelError(f"{self.path}: {key}: unknown value type {kind}")


class Strings:
    """A GGUF array of strings, decoded on first use."""

    def __init__(self, buf: bytes, at: int, count: int) -> None:
        self.buf, self.at, self.count = buf, at, count
        self._items: list[str] | None = None

    def __len__(self) -> int:
        return self.count

    def items(self) -> list[str]:
        if self._items is None:
            out, at = [], self.at
            for _ in range(self.count):
                (n,) = struct.unpack_from("<Q", self.buf, at)
                out.append(self.buf[at + 8 : at + 8 + n].decode("utf-8", errors="replace"))
                at += 8 + n
            self._items = out
        return self._items


class GGUF(Store):
    """A GGUF file: `fields` (its metadata), tensors by their GGUF names. The header is read into memory (as much
    of the file's start as it takes, up to MAX_GGUF_HEADER) and checked: counts and lengths against the bytes
    left, the alignment a power of two, each tensor's dims, type, alignment and extent inside the file."""

    def __init__(self, path: Path) -> None:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
        from gguf.quants import _type_traits

        self.path = path
        fd = open_regular(path)
        try:
            st = os.fstat(fd)
            self.stamp = Stamp.of(path, st)
            want = min(st.st_size, 16 * 2**20)
            while True:
                buf = os.pread(fd, want, 0)
                try:
                    c, infos = self._header(buf, st.st_size)
                    break
                except _More:
                    if want >= min(st.st_size, MAX_GGUF_HEADER):
                        raise ModelError(f"{path}: header: over {MAX_GGUF_HEADER:,} bytes") from None
                    want = min(st.st_size, MAX_GGUF_HEADER, want * 4)
        finally:
            os.close(fd)
        if len(buf) > c.at:  # keep the header only (the string arrays point into it), not the tensor bytes read
            head = buf[: c.at]
            for value in self.fields.values():
                if isinstance(value, Strings):
                    value.buf = head
        size = st.st_size
        align = self.fields.get("general.alignment", 32)
        if (
            isinstance(align, bool)
            or not isinstance(align, int)
            or not 1 <= align <= MAX_ALIGNMENT
            or align & (align - 1)
        ):
            raise ModelError(f"{path}: general.alignment: must be a power of two from 1 to {MAX_ALIGNMENT:,}, "
                             f"got {_short(align)}")  # fmt: skip
        data = (c.at + align - 1) // align * align
        readable = {GGMLQuantizationType.F32, GGMLQuantizationType.F16, *_type_traits}
        self.entries, self.types = {}, {}
        for name, dims, kind, offset in infos:
            where = f"{path}: {name[:80]}"
            if name in self.entries:
                raise ModelError(f"{where}: named twice")
            try:
                qtype = GGMLQuantizationType(kind)
            except ValueError:
                raise ModelError(f"{where}: unknown tensor type {kind}") from None
            if qtype not in readable:
                names = ", ".join(sorted(t.name for t in readable))
                raise ModelError(f"{where}: type {qtype.name} is not supported; supported: {names}")
            block, type_size = GGML_QUANT_SIZES[qtype]
            if any(d < 1 for d in dims) or (dims and dims[0] % block):
                raise ModelError(
                    f"{where}: dims {dims} (each at least 1, the first a multiple of {block} for {qtype.name})"
                )
            numel = math.prod(dims)  # Python integers: [2**32, 2**32] is 2**64 elements, not 0
            entry = Entry(path, qtype.name, tuple(reversed(dims)), data + offset, numel // block * type_size)
            if offset % align:
                raise ModelError(f"{where}: offset {offset} is not a multiple of general.alignment {align}")
            if entry.start + entry.nbytes > size:
                raise ModelError(f"{path}: truncated: {name} ends at byte {entry.start + entry.nbytes}, "
                                 f"the file has {size}")  # fmt: skip
            self.entries[name], self.types[name] = entry, qtype

    def _header(self, buf: bytes, file_size: int) -> tuple[_Cursor, list[tuple[str, list[int], int, int]]]:
        """The metadata (into `fields`) and the tensor infos (name, dims, type, offset); a cursor past them."""
        path = self.path
        c = _Cursor(buf, path, file_size)
        if file_size < 4 or buf[:4] != GGUF_MAGIC:
            raise ModelError(f"{path}: not a GGUF file (no GGUF magic)")
        c.at = 4
        version = c.scalar("<I")
        if version not in (2, 3):
            raise ModelError(f"{path}: GGUF version {version} is not supported; supported: 2, 3")
        n_tensors, n_kv = c.scalar("<Q"), c.scalar("<Q")
        if n_tensors > file_size // 24 or n_kv > file_size // 12:  # a tensor info or a key takes more bytes
            raise ModelError(f"{path}: header: {n_tensors:,} tensors and {n_kv:,} keys cannot fit in "
                             f"{file_size:,} bytes")  # fmt: skip
        self.fields: dict[str, Any] = {}
        for _ in range(n_kv):
            key = c.string()
            self.fields[key] = c.value(c.scalar("<I"), key[:80])
        infos = []
        for _ in range(n_tensors):
            name = c.string()
            n_dims = c.scalar("<I")
            if n_dims > MAX_DIMS:
                raise ModelError(f"{path}: {name[:80]}: {n_dims} dimensions; ggml has at most {MAX_DIMS}")
            dims = [c.scalar("<Q") for _ in range(n_dims)]
            infos.append((name, dims, c.scalar("<I"), c.scalar("<Q")))
        return c, infos

    def get(self, name: str) -> torch.Tensor:
        return self.read([name])[name]

    def read(self, names: list[str]) -> dict[str, torch.Tensor]:
        """The tensors, read from the file into memory the process owns and dequantised to float32."""
        from gguf.quants import dequantize

        entries = [self.entries[n] for n in names]
        out = {}
        for name, e, raw in zip(names, entries, read_into(self.stamp, [(e.start, e.nbytes) for e in entries]),
                                strict=True):  # fmt: skip
            cols = e.shape[-1] if e.shape else 1
            rows = e.numel // cols if cols else 0
            raw = raw.reshape(rows, -1)
            a = np.empty((rows, cols), dtype=np.float32)  # owned and writable
            # gguf dequantises a quantised array 16 rows per call (SmolLM2's weights: 12,000 calls, 3.7 s); handed
            # DEQUANT_ELEMENTS at a time as one row, each call is one vectorised pass over its blocks (1.6 s), the
            # same numbers, its temporaries bounded by the chunk.
            step = max(1, DEQUANT_ELEMENTS // max(1, cols))
            for i in range(0, rows, step):
                part = raw[i : i + step]
                a[i : i + step] = dequantize(part.reshape(1, -1), self.types[name]).reshape(len(part), cols)
            out[name] = torch.from_numpy(a.reshape(e.shape))
        return out

    def field(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)
