"""Safetensors shards without loading them: headers, named tensors and row slices, bytes read, RSS.

A shard's header (an 8-byte little-endian length, then JSON: name → dtype, shape, data offsets) tells every
tensor's size without reading data (safetensors format, huggingface/safetensors README); ``ShardReader``
reads whole tensors or row slices (``safe_open(...).get_slice(name)[a:b]``) one open shard at a time and
counts the bytes per shard in a :class:`StreamStats`.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import Any

from forensics.errors import ForensicsError
from forensics.io.formats._io import load_json, parse_json

HEADER_MAX_BYTES = 100_000_000  # a safetensors JSON header larger than this is refused (the format caps it too)
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


@dataclass
class TensorInfo:
    """One tensor of a shard, from the shard's header: where it is, its dtype, shape and size."""

    file: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


def read_header(path: str) -> dict[str, TensorInfo]:
    """Tensor name -> :class:`TensorInfo` from a safetensors header (8-byte length + JSON; nothing else read)."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise ForensicsError("not a safetensors file (shorter than its 8-byte header length)", path=path)
            (n,) = struct.unpack("<Q", head)
            if n > HEADER_MAX_BYTES:
                raise ForensicsError(f"safetensors header claims {n} bytes (> {HEADER_MAX_BYTES})", path=path)
            doc = parse_json(f.read(n), path, "safetensors header")  # bounded depth
    except (OSError, ValueError) as e:
        raise ForensicsError(f"cannot read the safetensors header: {e}", path=path) from None
    out = {}
    for name, d in doc.items():
        if name == "__metadata__":
            continue
        a, b = d["data_offsets"]
        out[name] = TensorInfo(path, str(d["dtype"]), tuple(int(s) for s in d["shape"]), int(b) - int(a))
    return out


def shard_index(folder: str) -> dict[str, TensorInfo]:
    """Every tensor of an HF folder: ``model.safetensors.index.json`` + shard headers, or the lone shards."""
    idx = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(idx):
        try:
            files = sorted(set(load_json(idx, "shard index")["weight_map"].values()))
        except (KeyError, AttributeError, TypeError) as e:
            raise ForensicsError(f"unreadable shard index: {e}", path=idx) from None
    else:
        files = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
    if not files:
        raise ForensicsError("no safetensors shards (model.safetensors.index.json or *.safetensors)", path=folder)
    out: dict[str, TensorInfo] = {}
    for name in files:
        p = os.path.join(folder, name)
        if not os.path.isfile(p):
            raise ForensicsError("shard named by the index is missing", path=p)
        out.update(read_header(p))
    return out


@dataclass
class StreamStats:
    """What the stream read and ran: bytes per shard, blocks run, wall time per block."""

    bytes_by_shard: dict[str, int] = field(default_factory=dict)
    block_seconds: list[float] = field(default_factory=list)
    experts_read: dict[int, int] = field(default_factory=dict)  # block k -> routed experts read

    def read(self, file: str, nbytes: int) -> None:
        name = os.path.basename(file)
        self.bytes_by_shard[name] = self.bytes_by_shard.get(name, 0) + int(nbytes)

    @property
    def bytes_read(self) -> int:
        return sum(self.bytes_by_shard.values())

    def to_dict(self) -> dict:
        n = len(self.block_seconds)
        return {"shards_read": sorted(self.bytes_by_shard), "bytes_by_shard": dict(sorted(self.bytes_by_shard.items())),
                "bytes_read": self.bytes_read, "blocks_run": n,
                "seconds_per_block": (sum(self.block_seconds) / n) if n else None,
                "experts_read": {str(k): v for k, v in self.experts_read.items()}}


class ShardReader:
    """Reads named tensors (or row slices) from the shards, one open shard at a time, counting bytes."""

    def __init__(self, index: dict[str, TensorInfo], stats: StreamStats):
        self.index, self.stats = index, stats
        self._open: tuple[str, Any] | None = None

    def _handle(self, file: str) -> Any:
        from safetensors import safe_open

        if self._open is None or self._open[0] != file:
            self.close()
            self._open = (file, safe_open(file, framework="pt"))
        return self._open[1]

    def close(self) -> None:
        self._open = None  # safe_open handles unmap when collected

    def tensor(self, name: str, dtype: Any) -> Any:
        info = self.index[name]
        t = self._handle(info.file).get_tensor(name)
        self.stats.read(info.file, info.nbytes)
        return t.to(dtype)

    def rows(self, name: str, start: int, stop: int, dtype: Any) -> Any:
        info = self.index[name]
        t = self._handle(info.file).get_slice(name)[start:stop]
        self.stats.read(info.file, info.nbytes // max(1, info.shape[0]) * (stop - start))
        return t.to(dtype)


def peak_rss() -> int:
    """This process's peak resident set size in bytes (``getrusage``; KiB on Linux, bytes on macOS)."""
    import resource
    import sys

    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r if sys.platform == "darwin" else r * 1024)


def current_rss() -> int:
    """This process's resident set size now (``/proc/self/statm``), or the peak where that is unavailable."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return peak_rss()
