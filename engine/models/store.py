"""Where a model's tensors are: one loader per file format, each read at start-up as far as its header (names,
dtypes, shapes, where the bytes are) and memory-mapped; a tensor becomes float32 when it is first asked for.

- safetensors (`model.safetensors`, or shards listed by `model.safetensors.index.json`): the 8-byte header length,
  the JSON header, then the raw bytes. float32 tensors are used in place (copy-on-write mappings of the file);
  float16 and bfloat16 are widened to float32 (the lab computes in float32 on the CPU).
- GGUF: the key-value metadata and tensor infos parsed here (a plain reader of the format, faster than reading
  every field through numpy), the data dequantised by the `gguf` package in whatever types it implements.

A header that contradicts its file (a tensor past the end: a truncated download), or a dtype the lab cannot read,
is a ModelError naming the file and the tensor, at start-up.
"""

from __future__ import annotations

import json
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .config import ModelError

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

    def check_dtype(self, name: str) -> None:
        """A ModelError if the tensor's dtype cannot be read as float32."""


class Safetensors(Store):
    def __init__(self, directory: Path) -> None:
        self.path = directory
        single, index = directory / "model.safetensors", directory / "model.safetensors.index.json"
        if single.is_file():
            files = [single]
        elif index.is_file():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
                files = [directory / f for f in dict.fromkeys(weight_map.values())]
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                raise ModelError(f"{index}: weight_map: not readable ({e})") from None
            for f in files:
                if not f.is_file():
                    raise ModelError(f"{f}: file not found (listed in {index.name})")
        else:
            raise ModelError(f"{single}: file not found (nor model.safetensors.index.json)")
        self.entries = {}
        for f in files:
            self.entries.update(_safetensors_header(f))
        self._maps: dict[Path, np.memmap] = {}

    def check_dtype(self, name: str) -> None:
        e = self.entries[name]
        if e.dtype not in SAFETENSORS_DTYPES:
            raise ModelError(f"{e.file}: {name}: dtype {e.dtype} is not supported; supported: {READABLE}")

    def get(self, name: str) -> torch.Tensor:
        e = self.entries[name]
        if e.file not in self._maps:  # copy-on-write: torch may hold the array without a copy, never write back
            self._maps[e.file] = np.memmap(e.file, dtype=np.uint8, mode="c")
        raw = self._maps[e.file][e.start : e.start + e.nbytes]
        np_dtype, _ = SAFETENSORS_DTYPES[e.dtype]
        a = raw.view(np_dtype)
        if e.dtype == "F16":
            a = a.astype(np.float32)
        elif e.dtype == "BF16":  # bfloat16 is float32's upper half: shift it back into place
            a = (a.astype(np.uint32) << 16).view(np.float32)
        return torch.from_numpy(a.reshape(e.shape))


def _safetensors_header(path: Path) -> dict[str, Entry]:
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise ModelError(f"{path}: truncated: {size} bytes, not even a header")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8 or n > 100 * 2**20:
            raise ModelError(f"{path}: truncated or not safetensors: a {n}-byte header in a {size}-byte file")
        try:
            header = json.loads(fh.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ModelError(f"{path}: header: not JSON ({e})") from None
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (a, b) = info["dtype"], tuple(int(s) for s in info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise ModelError(f"{path}: {name}: malformed header entry") from None
        entry = Entry(path, dtype, shape, base + int(a), int(b) - int(a))  # a weight's dtype is checked by its model
        if entry.nbytes < 0 or (dtype in ITEM_BYTES and entry.nbytes != entry.numel * ITEM_BYTES[dtype]):
            raise ModelError(f"{path}: {name}: shape {list(shape)} does not match its {entry.nbytes} bytes")
        if base + int(b) > size:
            raise ModelError(f"{path}: truncated: {name} ends at byte {base + int(b)}, the file has {size}")
        out[name] = entry
    return out


# -- GGUF -------------------------------------------------------------------------------------------------------

GGUF_MAGIC = b"GGUF"
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_NUMPY = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32, 7: np.bool_,
          10: np.uint64, 11: np.int64, 12: np.float64}  # fmt: skip


class _Cursor:
    """Reads the header in place (`struct.unpack_from` on the mapping: no slices copied); a string array is
    walked at start-up but decoded only when asked for (a vocabulary is 50,000-odd strings)."""

    def __init__(self, buf: Any, path: Path) -> None:
        self.buf, self.at, self.path, self.size = buf, 0, path, len(buf)

    def need(self, n: int) -> None:
        if self.at + n > self.size:
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
        return bytes(self.buf[start : self.at]).decode("utf-8", errors="replace")

    def value(self, kind: int) -> Any:
        if kind == 8:
            return self.string()
        if kind == 9:
            item, count = self.scalar("<I"), self.scalar("<Q")
            if item == 8:
                first, at, unpack, buf = self.at, self.at, struct.unpack_from, self.buf
                for _ in range(count):
                    at += 8 + unpack("<Q", buf, at)[0]
                self.at = at
                self.need(0)
                return Strings(self.buf, first, count)
            if item in _NUMPY:
                dt = np.dtype(_NUMPY[item])
                self.need(count * dt.itemsize)
                out = np.frombuffer(self.buf, dtype=dt, count=count, offset=self.at).tolist()
                self.at += count * dt.itemsize
                return out
            return [self.value(item) for _ in range(count)]
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind])
        raise ModelError(f"{self.path}: header: unknown value type {kind}")


class Strings:
    """A GGUF array of strings, decoded on first use."""

    def __init__(self, buf: Any, at: int, count: int) -> None:
        self.buf, self.at, self.count = buf, at, count
        self._items: list[str] | None = None

    def __len__(self) -> int:
        return self.count

    def items(self) -> list[str]:
        if self._items is None:
            out, at = [], self.at
            for _ in range(self.count):
                (n,) = struct.unpack_from("<Q", self.buf, at)
                out.append(bytes(self.buf[at + 8 : at + 8 + n]).decode("utf-8", errors="replace"))
                at += 8 + n
            self._items = out
        return self._items


class GGUF(Store):
    """A GGUF file: `fields` (its metadata), tensors by their GGUF names."""

    def __init__(self, path: Path) -> None:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
        from gguf.quants import _type_traits

        self.path = path
        try:
            with path.open("rb") as fh:
                buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            raise ModelError(f"{path}: not readable ({e})") from None
        self._buf = buf
        c = _Cursor(buf, path)
        if len(buf) < 4 or buf[:4] != GGUF_MAGIC:
            raise ModelError(f"{path}: not a GGUF file (no GGUF magic)")
        c.at = 4
        version = c.scalar("<I")
        if version not in (2, 3):
            raise ModelError(f"{path}: GGUF version {version} is not supported; supported: 2, 3")
        n_tensors, n_kv = c.scalar("<Q"), c.scalar("<Q")
        self.fields: dict[str, Any] = {}
        for _ in range(n_kv):
            key = c.string()
            self.fields[key] = c.value(c.scalar("<I"))
        infos = []
        for _ in range(n_tensors):
            name = c.string()
            dims = [c.scalar("<Q") for _ in range(c.scalar("<I"))]
            infos.append((name, dims, c.scalar("<I"), c.scalar("<Q")))
        align = int(self.fields.get("general.alignment", 32))
        data = (c.at + align - 1) // align * align
        readable = {GGMLQuantizationType.F32, GGMLQuantizationType.F16, *_type_traits}
        self.entries, self.types = {}, {}
        for name, dims, kind, offset in infos:
            try:
                qtype = GGMLQuantizationType(kind)
            except ValueError:
                raise ModelError(f"{path}: {name}: unknown tensor type {kind}") from None
            if qtype not in readable:
                names = ", ".join(sorted(t.name for t in readable))
                raise ModelError(f"{path}: {name}: type {qtype.name} is not supported; supported: {names}")
            block, type_size = GGML_QUANT_SIZES[qtype]
            numel = int(np.prod(dims)) if dims else 1
            entry = Entry(path, qtype.name, tuple(reversed(dims)), data + offset, numel // block * type_size)
            if entry.start + entry.nbytes > len(buf):
                raise ModelError(f"{path}: truncated: {name} ends at byte {entry.start + entry.nbytes}, "
                                 f"the file has {len(buf)}")  # fmt: skip
            self.entries[name], self.types[name] = entry, qtype

    def get(self, name: str) -> torch.Tensor:
        from gguf.quants import dequantize

        e, qtype = self.entries[name], self.types[name]
        raw = np.frombuffer(self._buf, dtype=np.uint8, count=e.nbytes, offset=e.start)
        rows = e.numel // e.shape[-1] if e.shape else 1
        a = dequantize(raw.reshape(rows, -1), qtype).astype(np.float32, copy=False)
        return torch.from_numpy(np.array(a, dtype=np.float32).reshape(e.shape))  # owned and writable

    def field(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)
