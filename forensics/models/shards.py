"""Safetensors shards without loading them: named tensors and row slices, bytes read, RSS.

The shard listing and headers come from the one safetensors reader (:mod:`forensics.io.safetensors`: paths
confined to the folder, headers validated); ``ShardReader`` reads whole tensors or row slices by file reads and
counts the bytes per shard in a :class:`StreamStats`.
"""

from __future__ import annotations

import os
import resource
import sys
from dataclasses import dataclass, field
from typing import Any

from forensics.io.safetensors import (
    DTYPE_BYTES,
    TensorInfo,
    read_header,
    read_rows,
    read_tensor,
    shard_files,
    shard_index,
)


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
    """Reads named tensors (or row slices) from the shards by file reads (never mapped), counting bytes."""

    def __init__(self, index: dict[str, TensorInfo], stats: StreamStats):
        self.index, self.stats = index, stats

    def close(self) -> None:
        """Nothing stays open between reads (kept for callers that close after each block)."""

    def tensor(self, name: str, dtype: Any) -> Any:
        info = self.index[name]
        t = read_tensor(info)
        self.stats.read(info.file, info.nbytes)
        return t.to(dtype)

    def rows(self, name: str, start: int, stop: int, dtype: Any) -> Any:
        info = self.index[name]
        t = read_rows(info, start, stop)
        self.stats.read(info.file, info.row_bytes * (stop - start))
        return t.to(dtype)


def peak_rss() -> int:
    """This process's peak resident set size in bytes (``getrusage``; KiB on Linux, bytes on macOS)."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r if sys.platform == "darwin" else r * 1024)


def current_rss() -> int:
    """This process's resident set size now (``/proc/self/statm``), or the peak where that is unavailable."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return peak_rss()

# the module's own names, and those it re-exports (callers import them from here)
__all__ = ["StreamStats", "ShardReader", "peak_rss", "current_rss", "DTYPE_BYTES", "TensorInfo", "read_header",
           "read_rows", "read_tensor", "shard_files", "shard_index"]
