"""Safe, lazy low-level reading shared by the format readers.

Every ``torch.load`` here uses ``weights_only=True`` (a pickle that would run code is refused before
anything runs) and ``mmap=True`` when the file is a zip-format checkpoint on disk. Files are only ever
opened read-only.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import struct
from typing import Any

from forensics.errors import ForensicsError

ZIP_MAGIC = b"PK\x03\x04"
GZIP_MAGIC = b"\x1f\x8b"
# Legacy (pre-1.6) torch.save files start with a pickled magic number: protocol 2 opcode.
PICKLE_PROTO = b"\x80"
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024


def sniff(path: str) -> str:
    """The container kind of a file from its first bytes: ``zip``, ``gzip``, ``safetensors``,
    ``pickle`` or ``unknown``."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise ForensicsError(f"cannot open: {e.strerror}", path=path, ) from None
    if len(head) == 0:
        raise ForensicsError("empty file (0 bytes)", path=path)
    if head.startswith(ZIP_MAGIC):
        return "zip"
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if len(head) >= 9:
        (n,) = struct.unpack("<Q", head[:8])
        if 2 <= n <= MAX_SAFETENSORS_HEADER and head[8:9] == b"{":
            return "safetensors"
    if head.startswith(PICKLE_PROTO):
        return "pickle"
    return "unknown"


def _load_error(path: str, e: BaseException) -> ForensicsError:
    """Turn a torch.load failure into a named error: refused pickle, truncated file, or other corruption."""
    import pickle
    import struct as _struct
    import zipfile

    text = str(e).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # torch wraps what its weights-only unpickler rejects as "Weights only load failed ... <reason> ..."
    reason = next((ln for ln in lines if "GLOBAL" in ln or "Unsupported" in ln or "blocked" in ln
                   or "not an allowed" in ln.lower()), None)
    if reason is not None:
        return ForensicsError(
            f"refused: the pickle references code that torch.load(weights_only=True) will not run ({reason[:200]}); "
            "nothing was executed", path=path)
    msg = next((ln for ln in lines if not ln.startswith("Weights only load failed")), lines[0] if lines else "")
    msg = msg or type(e).__name__
    low = text.lower()
    if isinstance(e, (EOFError, _struct.error, zipfile.BadZipFile)) or any(
            w in low for w in ("truncated", "unexpected eof", "central directory", "ran out of input",
                               "zip archive")):
        return ForensicsError(f"truncated or corrupt torch checkpoint ({type(e).__name__}: {msg[:200]})", path=path)
    if isinstance(e, pickle.UnpicklingError):
        return ForensicsError(f"corrupt or unsupported pickle stream ({msg[:200]})", path=path)
    return ForensicsError(f"cannot read as a torch checkpoint: {type(e).__name__}: {msg[:200]}", path=path)


def torch_load(path: str, kind: str | None = None) -> Any:
    """``torch.load`` with ``weights_only=True``; mmap for zip files, in-memory for ``.gz``."""
    import torch

    kind = kind or sniff(path)
    try:
        if kind in ("zip", "pickle") and path.endswith(".safetensors"):
            # torch.load dispatches a *path* ending in .safetensors to safetensors by name (torch 2.13
            # serialization.py); content decides here, so read this misnamed checkpoint through a file object
            with open(path, "rb") as f:
                return torch.load(f, map_location="cpu", weights_only=True)
        if kind == "zip":
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        if kind == "gzip":
            try:
                with gzip.open(path, "rb") as f:
                    data = f.read()
            except (OSError, EOFError) as e:
                raise ForensicsError(f"corrupt gzip stream ({e})", path=path) from None
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        if kind == "pickle":
            return torch.load(path, map_location="cpu", weights_only=True)
    except ForensicsError:
        raise
    except Exception as e:  # noqa: BLE001 - every failure becomes a named, clear error
        raise _load_error(path, e) from None
    raise ForensicsError(
        "not a torch checkpoint, safetensors file or gzip stream (first bytes do not match any "
        "supported container)", path=path)


def safetensors_header(path: str) -> dict:
    """The parsed JSON header of a safetensors file, validated against the file size."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise ForensicsError("corrupt safetensors file: shorter than its 8-byte header length", path=path)
        (n,) = struct.unpack("<Q", raw)
        if n > MAX_SAFETENSORS_HEADER or 8 + n > size:
            raise ForensicsError(f"corrupt safetensors header: declares {n} header bytes, file has {size}", path=path)
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ForensicsError(f"corrupt safetensors header: not valid JSON ({e})", path=path) from None
    if not isinstance(header, dict):
        raise ForensicsError("corrupt safetensors header: not a JSON object", path=path)
    data_len = size - 8 - n
    for k, v in header.items():
        if k == "__metadata__":
            continue
        off = v.get("data_offsets") if isinstance(v, dict) else None
        if not off or len(off) != 2 or off[1] > data_len or off[0] > off[1]:
            raise ForensicsError(
                f"corrupt safetensors header: tensor {k!r} offsets {off} exceed the {data_len} data bytes "
                "(truncated file?)", path=path)
    return header


class SafetensorsFile:
    """A lazily opened safetensors file: ``keys()``, ``shape(k)``, ``dtype(k)``, ``get(k)``, ``metadata``."""

    def __init__(self, path: str):
        self.path = path
        self.header = safetensors_header(path)
        self.metadata = self.header.get("__metadata__") or {}
        self._handle: Any = None

    def keys(self) -> list[str]:
        return [k for k in self.header if k != "__metadata__"]

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self.header[key]["shape"])

    def dtype_name(self, key: str) -> str:
        return self.header[key]["dtype"]

    def get(self, key: str):
        from safetensors import safe_open

        try:
            if self._handle is None:
                self._handle = safe_open(self.path, framework="pt")
            return self._handle.get_tensor(key)
        except Exception as e:  # noqa: BLE001 - safetensors raises its own SafetensorError on a corrupt file
            raise ForensicsError(f"cannot read tensor {key!r}: {e}", path=self.path) from None


SAFETENSORS_DTYPES = {
    "BF16": "torch.bfloat16", "F16": "torch.float16", "F32": "torch.float32", "F64": "torch.float64",
    "I64": "torch.int64", "I32": "torch.int32", "I16": "torch.int16", "I8": "torch.int8",
    "U8": "torch.uint8", "BOOL": "torch.bool", "F8_E4M3": "torch.float8_e4m3fn", "F8_E5M2": "torch.float8_e5m2",
}
FLOAT_DTYPES = ("torch.bfloat16", "torch.float16", "torch.float32", "torch.float64")


def read_json(path: str) -> dict | None:
    """A JSON side file, or None when absent/unreadable (side files never make a capture unreadable)."""
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        return d if isinstance(d, dict) else None
    except (OSError, ValueError):
        return None
