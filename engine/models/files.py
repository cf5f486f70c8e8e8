"""What a model folder may hand the lab: regular files inside it, read in bounded size and nesting.

Every file of a model is opened here. A name resolves inside the folder the operator named (a symlink may point
elsewhere inside it, never out of it; an index entry is a relative name, never `..` or an absolute path); the file is
opened without blocking (a FIFO never hangs the start-up) and must be a regular file (no /dev/zero, no socket);
JSON is read up to a stated size and nesting depth. Weights are copied into memory the process owns (`read_into`):
nothing of a model stays memory-mapped, so a file overwritten or truncated in place under a running server can
never take it down (SIGBUS); `Stamp` notices that it changed.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .config import ModelError

MAX_JSON_DEPTH = 64  # config.json, a safetensors header, the shard index (transformers' own go 3-4 deep)
MAX_CONFIG_BYTES = 16 * 2**20
MAX_TOKENIZER_BYTES = 256 * 2**20
_BRACKETS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def inside(root: Path, name: str, where: Path | None = None) -> Path:
    """`root / name`, refused unless it resolves inside `root` (itself resolved): no absolute name, no `..`
    climbing out, no symlink leading out. `where` is the file that named it, for the message."""
    said = f" (named in {where.name})" if where is not None else ""
    if not name or Path(name).is_absolute() or "\\" in name or "\x00" in name:
        raise ModelError(f"{where or root}: {name!r}: not a file name inside the model folder{said}")
    base = root.resolve()
    path = base / name
    real = path.resolve()
    if real != base and base not in real.parents:
        raise ModelError(f"{path}: leads outside the model folder {base}{said}; only files inside it are read")
    return path


def open_regular(path: Path) -> int:
    """A file descriptor of `path`, which must be a regular file; opened without blocking, so a FIFO or a device
    is refused at once instead of hanging or streaming forever."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ModelError(f"{path}: file not found") from None
    except OSError as e:
        raise ModelError(f"{path}: not readable ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file (a device, FIFO or socket)"
            raise ModelError(f"{path}: {kind}; a model folder holds regular files only")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def is_regular(path: Path) -> bool:
    """Whether `path` exists as a regular file (after symlinks), asked without opening it."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def read_bytes(path: Path, limit: int) -> bytes:
    """The whole of a regular file of at most `limit` bytes."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise ModelError(f"{path}: {size:,} bytes, over the {limit:,} this file may have")
        chunks, got = [], 0
        while got <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:
            raise ModelError(f"{path}: over the {limit:,} bytes this file may have")
        return b"".join(chunks)
    finally:
        os.close(fd)


def check_depth(data: bytes, where: str, max_depth: int = MAX_JSON_DEPTH) -> None:
    """A ModelError if JSON text nests arrays or objects deeper than `max_depth` (strings skipped)."""
    depth = 0
    for m in _BRACKETS.finditer(data):
        c = m.group()
        if c in (b"[", b"{"):
            depth += 1
            if depth > max_depth:
                raise ModelError(f"{where}: nested deeper than {max_depth} levels")
        elif c in (b"]", b"}"):
            depth -= 1


def parse_json(data: bytes, where: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON text, nesting bounded (NaN and Infinity read as floats: the field that holds one refuses it, by name)."""
    check_depth(data, where, max_depth)
    try:
        return json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ModelError(f"{where}: not readable JSON ({e})") from None


def read_json(path: Path, limit: int = MAX_CONFIG_BYTES) -> Any:
    return parse_json(read_bytes(path, limit), str(path))


@dataclass(frozen=True)
class Stamp:
    """What a file was when the lab read it: a later `changed()` says whether it was replaced or rewritten."""

    path: Path
    size: int
    mtime_ns: int
    inode: int

    @classmethod
    def of(cls, path: Path, st: os.stat_result | None = None) -> Stamp:
        st = st or os.stat(path)
        return cls(path, st.st_size, st.st_mtime_ns, st.st_ino)

    def changed(self) -> str | None:
        """None if the file is as it was read, or what differs now."""
        try:
            st = os.stat(self.path)
        except OSError as e:
            return f"{self.path}: gone since it was read ({e.strerror or e})"
        if (st.st_size, st.st_mtime_ns, st.st_ino) == (self.size, self.mtime_ns, self.inode):
            return None
        return (f"{self.path}: changed on disk since it was read ({self.size:,} → {st.st_size:,} bytes); "
                "the server keeps serving the weights it read (restart it to serve the new file)")  # fmt: skip


def read_into(stamp: Stamp, ranges: list[tuple[int, int]]) -> list[np.ndarray]:
    """Byte ranges (start, length) of a file copied into fresh arrays the process owns; the file must still be the
    one its header was read from (a short read or a changed size is a ModelError, never a SIGBUS)."""
    fd = open_regular(stamp.path)
    try:
        st = os.fstat(fd)
        if st.st_size != stamp.size or st.st_ino != stamp.inode:
            raise ModelError(f"{stamp.path}: changed on disk since its header was read "
                             f"({stamp.size:,} → {st.st_size:,} bytes)")  # fmt: skip
        out = []
        with os.fdopen(os.dup(fd), "rb", buffering=0) as fh:
            for start, n in ranges:
                buf = np.empty(n, dtype=np.uint8)
                fh.seek(start)
                view, got = memoryview(buf.data), 0
                while got < n:
                    k = fh.readinto(view[got:])
                    if not k:
                        raise ModelError(f"{stamp.path}: changed on disk: ends before byte {start + n:,}")
                    got += k
                out.append(buf)
        return out
    finally:
        os.close(fd)
