"""Safe, lazy low-level reading shared by the format readers.

Every ``torch.load`` here uses ``weights_only=True`` (a pickle that would run code is refused before
anything runs) and ``mmap=True`` when the file is a zip-format checkpoint on disk; ``.npy`` arrays are mapped
too. A mapped file that another process truncates while it is read is one "changed size while being read"
error, not a SIGBUS (:mod:`forensics.io.sigbus`, installed before the first mapping). Files are only ever
opened read-only.
"""

from __future__ import annotations

import gzip
import os
import pickle
import stat
import struct
import struct as _struct
import tempfile
import zipfile
import zlib
from typing import Any

import numpy as np

from forensics.errors import ForensicsError
from forensics.io.limits import read_bounded
from forensics.io.safetensors import (
    DTYPE_BYTES,
    FP8_DTYPES,
    MAX_PARSED_HEADER_BYTES,
    MAX_SAFETENSORS_HEADER,
    SafetensorsFile,
    open_regular,
    parse_json,
    read_header,
    upcast_fp8,
)
from forensics.io.safetensors import TORCH_DTYPES as SAFETENSORS_DTYPES
from forensics.io.sigbus import install as install_sigbus_guard
from forensics.io.tempfiles import clean_stale, temp_path

ZIP_MAGIC = b"PK\x03\x04"
GZIP_MAGIC = b"\x1f\x8b"
NPY_MAGIC = b"\x93NUMPY"
# Legacy (pre-1.6) torch.save files start with a pickled magic number: protocol 2 opcode.
PICKLE_PROTO = b"\x80"
MAX_JSON_BYTES = 16 * 1024 * 1024  # sidecars and configs: real ones are < 100 KB (a Kimi-K2 config.json: 4 KB)
# gzip is streamed to a temporary file and refused past this ratio of the compressed size (plus a floor for
# tiny files). Hidden states barely compress (bf16 SmolLM2 captures: 1.1×, fp32: 1.08×, gzip -6); a stream of
# zeros compresses ~1000×, so 16× refuses decompression bombs long before they fill a disk or memory.
GZIP_MAX_RATIO = 16
GZIP_MIN_LIMIT_BYTES = 64 * 1024 * 1024
GZIP_CHUNK_BYTES = 1 << 20


def sniff(path: str) -> str:
    """The container kind of a file from its first bytes: ``zip``, ``gzip``, ``safetensors``,
    ``pickle`` or ``unknown``."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block the open below forever
            raise ForensicsError("not a regular file (a FIFO, a device or a socket); refusing to read it", path=path)
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
    if head.startswith(NPY_MAGIC):
        return "npy"
    if head.lstrip()[:1] in (b"{", b"["):
        return "json"
    return "unknown"


def _load_error(path: str, e: BaseException) -> ForensicsError:
    """Turn a torch.load failure into a named error: refused pickle, truncated file, or other corruption."""
    text = str(e).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # torch wraps what its weights-only unpickler rejects as "Weights only load failed ... <reason> ..."
    # ("Unsupported global: GLOBAL posix.system"); "Unsupported operand N" is an invalid opcode, i.e. not a
    # pickle at all (a stream of zeros), and is not called code
    reason = next((ln for ln in lines if "GLOBAL" in ln or "global" in ln.split(":")[0].lower()
                   or "blocked" in ln or "not an allowed" in ln.lower()), None)
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
    if isinstance(e, pickle.UnpicklingError) or "unsupported operand" in low:
        return ForensicsError(f"not a torch checkpoint: corrupt or unsupported pickle stream ({msg[:200]})",
                              path=path)
    if "not resizable" in low:  # a mapped zip record that is compressed: torch.save stores records uncompressed
        return ForensicsError("not a torch checkpoint as torch.save writes it: its zip records are compressed "
                              "(refused, not inflated: a small file can expand past memory)", path=path)
    if isinstance(e, RecursionError):
        return ForensicsError("not readable: the pickle nests objects too deeply", path=path)
    return ForensicsError(f"cannot read as a torch checkpoint: {type(e).__name__}: {msg[:200]}", path=path)


def os_path(path: str) -> str:
    """A path that C libraries (torch, safetensors) can open: the path itself, or for a name that is not
    valid UTF-8 (PEP 383 surrogates) the ``/proc/self/fd`` alias of a descriptor opened from its bytes.

    The descriptor stays open for the process's life only while the caller needs it: callers open, read or
    map, and the mapping survives ``close``. Used only for such names (rare), so descriptors are not leaked
    in bulk."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        fd = os.open(os.fsencode(path), os.O_RDONLY)
        _OPEN_ALIASES.append(fd)
        if len(_OPEN_ALIASES) > 64:  # keep a bounded number of aliases open
            os.close(_OPEN_ALIASES.pop(0))
        return f"/proc/self/fd/{fd}"


_OPEN_ALIASES: list[int] = []


def gunzip_to_temp(path: str) -> str:
    """Decompress a gzip file into an unlinked-on-close temporary file and return its path, refusing (and
    deleting) output beyond ``GZIP_MAX_RATIO`` times the compressed size (at least ``GZIP_MIN_LIMIT_BYTES``)."""
    limit = max(GZIP_MIN_LIMIT_BYTES, GZIP_MAX_RATIO * os.path.getsize(path))
    target = os.path.join(tempfile.gettempdir(), "hsf-gunzip")
    clean_stale(target)  # what a killed run left (up to GZIP_MAX_RATIO × a compressed file)
    tmp = temp_path(target)
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    written = 0
    try:
        with os.fdopen(fd, "wb") as out, gzip.open(os_path(path), "rb") as g:
            while True:
                chunk = g.read(GZIP_CHUNK_BYTES)
                if not chunk:
                    break
                written += len(chunk)
                if written > limit:
                    raise ForensicsError(
                        f"not a torch checkpoint: the gzip stream expands past {limit} bytes ({GZIP_MAX_RATIO}× "
                        "its compressed size); refused as a decompression bomb", path=path)
                out.write(chunk)
    except ForensicsError:
        os.unlink(tmp)
        raise
    except (OSError, EOFError, zlib.error) as e:
        os.unlink(tmp)
        raise ForensicsError(f"corrupt gzip stream ({e})", path=path) from None
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def torch_load(path: str, kind: str | None = None) -> Any:
    """``torch.load`` with ``weights_only=True``; mmap for zip files (a ``.gz`` is streamed to a temporary
    file first, within ``GZIP_MAX_RATIO``, then mapped)."""
    import torch

    kind = kind or sniff(path)
    tmp = None
    try:
        src = os_path(path)
        if kind == "gzip":
            tmp = src = gunzip_to_temp(path)
            with open(tmp, "rb") as f:
                kind = "zip" if f.read(4) == ZIP_MAGIC else "pickle"
        if kind in ("zip", "pickle") and src.endswith(".safetensors"):
            # torch.load dispatches a *path* ending in .safetensors to safetensors by name (torch 2.13
            # serialization.py); content decides here. A zip is still mapped, through its descriptor's
            # /proc/self/fd name: read through a file object, a deflate-compressed record (torch.save never
            # writes one) was inflated into memory, 1 MB on disk to 3.7 GB resident
            if kind == "zip" and os.path.isdir("/proc/self/fd"):
                fd = os.open(src, os.O_RDONLY)
                try:
                    install_sigbus_guard()
                    return torch.load(f"/proc/self/fd/{fd}", map_location="cpu", weights_only=True, mmap=True)
                finally:
                    os.close(fd)
            with open(src, "rb") as f:
                return torch.load(f, map_location="cpu", weights_only=True)
        if kind == "zip":
            install_sigbus_guard()  # a file truncated while its mapping is read: an error, not a SIGBUS
            return torch.load(src, map_location="cpu", weights_only=True, mmap=True)
        if kind == "pickle":
            return torch.load(src, map_location="cpu", weights_only=True)
    except ForensicsError:
        raise
    except Exception as e:  # noqa: BLE001 - every failure becomes a named, clear error
        raise _load_error(path, e) from None
    finally:
        if tmp is not None:
            os.unlink(tmp)  # the mapping (if any) keeps the data until the tensors are freed
    raise ForensicsError(
        "not a torch checkpoint, safetensors file or gzip stream (first bytes do not match any "
        "supported container)", path=path)


def safetensors_header(path: str) -> dict:
    """The parsed, validated JSON header of a safetensors file (:func:`forensics.io.safetensors.read_header`)."""
    return read_header(path)


FLOAT_DTYPES = ("torch.bfloat16", "torch.float16", "torch.float32", "torch.float64", *FP8_DTYPES)


def load_json(path: str, what: str = "JSON file") -> Any:
    """A JSON file parsed, at most ``MAX_JSON_BYTES``; any failure is a one-line ForensicsError naming it. Only
    a regular file is read (a FIFO named like a config would block the first read forever)."""
    return parse_json(read_bounded(path, MAX_JSON_BYTES, what, "not a config"), path, what)


def read_json(path: str) -> dict | None:
    """A JSON side file, or None when absent/unreadable (side files never make a capture unreadable)."""
    try:
        d = load_json(path, "side file")
    except ForensicsError:
        return None
    return d if isinstance(d, dict) else None


MAX_JSON_ROWS_BYTES = 64 * 1024 * 1024  # SGLang JSON rows: ~10 bytes a number; 64 MB ≈ 6M values, ~0.5 GB parsed


def is_npz(path: str) -> bool:
    """A zip whose members are all ``.npy`` arrays (``numpy.savez``), not a torch checkpoint (``*/data.pkl``)."""
    try:
        with zipfile.ZipFile(os_path(path)) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return False
    return bool(names) and all(n.endswith(".npy") for n in names)


def numpy_load(path: str, kind: str) -> Any:
    """A ``.npy`` array (memory-mapped) or a ``.npz`` archive as a dict of arrays, never unpickling anything
    (``allow_pickle=False``); a compressed member past ``GZIP_MAX_RATIO`` is refused as a bomb."""
    try:
        if kind == "npy":
            install_sigbus_guard()
            return np.load(os_path(path), allow_pickle=False, mmap_mode="r")
        limit = max(GZIP_MIN_LIMIT_BYTES, GZIP_MAX_RATIO * os.path.getsize(path))
        with zipfile.ZipFile(os_path(path)) as z:
            total = sum(i.file_size for i in z.infolist())
        if total > limit:
            raise ForensicsError(f"the .npz archive expands to {total} bytes, past {limit} ({GZIP_MAX_RATIO}× its "
                                 "size): refused as a decompression bomb", path=path)
        with np.load(os_path(path), allow_pickle=False) as z:
            return {k[:-4] if k.endswith(".npy") else k: z[k] for k in z.files}
    except ForensicsError:
        raise
    except Exception as e:  # noqa: BLE001 - numpy raises ValueError/OSError/zipfile errors on a corrupt file
        what = "pickled objects (refused: allow_pickle=False)" if "pickle" in str(e).lower() else \
            f"{type(e).__name__}: {str(e)[:200]}"
        raise ForensicsError(f"cannot read as a numpy file: {what}", path=path) from None


def load_json_rows(path: str) -> Any:
    """A JSON document of hidden-state rows (SGLang), at most ``MAX_JSON_ROWS_BYTES``."""
    if os.path.getsize(path) > MAX_JSON_ROWS_BYTES:
        raise ForensicsError(f"JSON file larger than {MAX_JSON_ROWS_BYTES} bytes; save large captures as .pt or "
                             ".safetensors", path=path)

    with os.fdopen(open_regular(path), "rb") as f:
        return parse_json(f.read(MAX_JSON_ROWS_BYTES + 1), path, "JSON file")

# the module's own names, and those it re-exports (callers import them from here)
__all__ = ["ZIP_MAGIC", "GZIP_MAGIC", "NPY_MAGIC", "PICKLE_PROTO", "MAX_JSON_BYTES", "GZIP_MAX_RATIO",
           "GZIP_MIN_LIMIT_BYTES", "GZIP_CHUNK_BYTES", "sniff", "os_path", "gunzip_to_temp", "torch_load",
           "safetensors_header", "FLOAT_DTYPES", "load_json", "read_json", "MAX_JSON_ROWS_BYTES", "is_npz",
           "numpy_load", "load_json_rows", "DTYPE_BYTES", "FP8_DTYPES", "MAX_PARSED_HEADER_BYTES",
           "MAX_SAFETENSORS_HEADER", "SafetensorsFile", "open_regular", "parse_json", "read_header", "upcast_fp8",
           "SAFETENSORS_DTYPES"]
