"""Where stamps live and how they are written: a safetensors file's header, or ``stamps.jsonl`` beside torch files.

- safetensors files: one string entry ``hsf.stamp`` (compact JSON) in the header's ``__metadata__``; the tensor
  bytes are copied unchanged (the data offsets are relative to the data section, so only the header changes).
  The file is rewritten atomically (a temporary file, ``fsync``, ``os.replace``, ``fsync`` of the folder) under
  an exclusive ``flock`` on it; a symbolic link, a file with other hard links, a read-only file and a read-only
  folder or filesystem are refused before anything is written (rewriting would replace the link with a copy,
  split the hard links, or defeat the read-only bit, since a rename needs only the folder's write bit).
- torch files (``.pt``, ``.ckpt``, ``.ckpt.gz``): ``stamps.jsonl`` in the folder of the ``capture.json`` the
  readers apply (else the file's own folder): one compact line ``{"path": REL, "stamp": {...}}`` per stamped
  file, ``REL`` relative to that folder; a later line for the same path replaces an earlier one. Stampers
  append under an exclusive ``flock`` (concurrent ``hsf stamp`` runs lose no update, and nothing is read,
  modified and written back); the file is compacted (rewritten under the lock) once more than half of its
  lines are superseded. Readers index it once (path → offset) and parse one line per file checked, so it
  scales to 10⁶ files. Stamps written by earlier versions into ``capture.json``'s ``stamps`` section are still
  read (a ``stamps.jsonl`` entry wins); ``capture.json`` is never written here.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from forensics.errors import ForensicsError
from forensics.io.formats._io import load_json, parse_json, safetensors_header
from forensics.io.output import atomic_output
from forensics.io.sigbus import install as install_sigbus_guard
from forensics.io.stamps import STAMP_KEY, check_stamp

STAMPS_FILE = "stamps.jsonl"
LEGACY_SIDECAR = "capture.json"
LEGACY_SECTION = "stamps"
MAX_STAMP_LINE = 1 << 20  # bytes; a longer line is not a stamp this tool wrote (it is skipped)
# A stamps.jsonl is read whole once per process to index it (each scan worker too): its size bounds that time.
# One stamp line is ~0.5-3 KB, so this holds a few million files' stamps; a file with holes (sparse: it claims
# far more bytes than it stores) is never one this tool wrote, and costs nothing to make 1 TB long.
MAX_STAMPS_BYTES = 8 << 30
SPARSE_MIN_BYTES = 64 << 20  # a file this large that stores under half of its length is sparse
COMPACT_MIN_LINES = 1024  # stamps.jsonl is compacted when it has this many lines and over half are superseded
WRITE_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EXDEV,
                errno.EBUSY, errno.ETXTBSY)

_ST_WIDTH = {"BF16": 2, "F16": 2, "I16": 2, "F32": 4, "I32": 4, "F64": 8, "I64": 8, "U8": 1, "I8": 1, "BOOL": 1,
             "F8_E4M3": 1, "F8_E5M2": 1}


def is_safetensors(path: str) -> bool:
    with open(path, "rb") as f:
        head = f.read(9)
    if len(head) < 9:
        return False
    (n,) = struct.unpack("<Q", head[:8])
    return 2 <= n <= 100 * 1024 * 1024 and head[8:9] == b"{"


def raw_slot_arrays(path: str, cap) -> list | None:
    """The slots of a safetensors capture as integer views of one read-only memory map (no copy), in slot order,
    for the two safetensors layouts the readers produce: a speculators ``hidden_states`` stack (``[seq, k, H]``,
    ``[1, seq, k, H]`` or the vLLM connector's ``[k, seq, H]``) and one tensor per slot (generic). None for any
    other layout (the caller then reads ``slot.tensor()``). Reading a stack slot by slot through
    ``safe_open(...).get_tensor`` would copy the whole stack once per slot."""
    if not is_safetensors(path) or cap.provenance.record is not None:  # one sample of a batch: its own rows
        return None
    header = safetensors_header(path)
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        size = os.fstat(f.fileno()).st_size
    install_sigbus_guard()  # truncated by another process while mapped: an error row, not a SIGBUS
    try:
        mm = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    except (ValueError, OSError):  # no data section (a truncated file): the reader's error names it
        return None

    def view(key: str):
        h = header[key]
        w = _ST_WIDTH.get(h["dtype"])
        if w is None:
            return None
        a, b = h["data_offsets"]
        if not (0 <= a <= b <= size - 8 - n):
            return None
        return mm[a:b].view(f"<i{w}" if w > 1 else "<i1").reshape(h["shape"])

    out = _layout_views(cap, header, view)
    if out is None or any(a.shape != tuple(s.shape) for a, s in zip(out, cap.slots, strict=True)):
        return None
    return out


def _layout_views(cap, header: dict, view) -> list | None:
    """The slots' integer views, in slot order, for the capture's layout: one ``hidden_states`` stack split along
    its slot axis (speculators), or one tensor per slot (generic); None for another layout or a tensor ``view``
    refuses (unknown dtype, offsets outside the data section)."""
    keys = {s.key for s in cap.slots}
    if cap.format == "speculators" and keys == {"hidden_states"}:
        arr = view("hidden_states")
        if arr is None:
            return None
        if arr.ndim == 4:
            arr = arr[0]
        transposed = "transposed" in (cap.provenance.layout or "")
        return [arr[i] if transposed else arr[:, i] for i in range(len(cap.slots))]
    if all(s.key in header and s.name == s.key for s in cap.slots):
        out = []
        for s in cap.slots:
            arr = view(s.key)
            if arr is None:
                return None
            out.append(arr[0] if arr.ndim == 3 else arr)
        return out
    return None


# ---- reading -------------------------------------------------------------------------------------------------


def _folders(path: str) -> tuple[str, str]:
    d = os.path.dirname(os.path.abspath(path))
    return d, os.path.dirname(d)


def stamps_folder(path: str) -> str:
    """Where a torch file's stamp goes: the folder of an existing ``stamps.jsonl`` that applies to it (its own
    folder, then the parent), else of the ``capture.json`` the readers apply, else the file's own folder."""
    folders = _folders(path)
    for name in (STAMPS_FILE, LEGACY_SIDECAR):
        for folder in folders:
            if os.path.isfile(os.path.join(folder, name)):
                return folder
    return folders[0]


_INDEX: dict[tuple, dict[str, tuple[int, int]]] = {}  # (path, ino, mtime_ns, size) -> {rel: (offset, length)}


def _index(side: str) -> dict[str, tuple[int, int]]:
    """``{relative path: (offset, length)}`` of the last line for each path in a stamps.jsonl (cached per
    version of the file). Lines that are not ``{"path": str, ...}`` JSON (a torn last line) are skipped."""
    st = os.stat(side)
    key = (side, st.st_ino, st.st_mtime_ns, st.st_size)
    stored = getattr(st, "st_blocks", None)
    if st.st_size > MAX_STAMPS_BYTES or (stored is not None and st.st_size > SPARSE_MIN_BYTES
                                         and stored * 512 < st.st_size // 2):
        what = (f"more than the {MAX_STAMPS_BYTES / (1 << 30):g} GiB a stamps file holds"
                if st.st_size > MAX_STAMPS_BYTES else "a sparse file (holes), which hsf stamp never writes")
        raise ForensicsError(f"{STAMPS_FILE} of {st.st_size} bytes is {what}; not read", path=side)
    if key not in _INDEX:
        if len(_INDEX) >= 4:
            _INDEX.pop(next(iter(_INDEX)))
        idx: dict[str, tuple[int, int]] = {}
        with open(side, "rb") as f:
            off = 0
            while True:
                line = f.readline(MAX_STAMP_LINE + 1)
                if not line:
                    break
                n = len(line)
                if n > MAX_STAMP_LINE:  # a line too long to be ours: skip to its end
                    while line and not line.endswith(b"\n"):
                        line = f.readline(MAX_STAMP_LINE + 1)
                        n += len(line)
                elif line.endswith(b"\n"):
                    rel = _line_path(line)
                    if rel is not None:
                        idx[rel] = (off, n)
                off += n
        _INDEX[key] = idx
    return _INDEX[key]


def _line_path(line: bytes) -> str | None:
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return doc.get("path") if isinstance(doc, dict) and isinstance(doc.get("path"), str) else None


def _read_line(side: str, path: str, off: int, n: int) -> dict:
    with open(side, "rb") as f:
        f.seek(off)
        raw = f.read(n)
    doc = parse_json(raw.decode("utf-8", "replace"), path, f"malformed stamp in {STAMPS_FILE}")
    return check_stamp(doc.get("stamp") if isinstance(doc, dict) else None, path, STAMPS_FILE)


def _legacy(path: str) -> dict | None:
    """A version-1 stamp in the ``stamps`` section of the capture.json the readers apply (read only)."""
    for folder in _folders(path):
        side = os.path.join(folder, LEGACY_SIDECAR)
        if os.path.isfile(side):
            doc = _read_sidecar(side)
            section = doc.get(LEGACY_SECTION) if isinstance(doc, dict) else None
            if not isinstance(section, dict):
                return None
            raw = section.get(os.path.relpath(os.path.abspath(path), folder))
            return None if raw is None else check_stamp(raw, path, "capture.json")
    return None


_SIDECARS: dict[tuple, Any] = {}  # (path, mtime_ns, size) -> parsed capture.json; the last few only


def _read_sidecar(side: str) -> Any:
    try:
        st = os.stat(side)
        key = (side, st.st_mtime_ns, st.st_size)
        if key not in _SIDECARS:
            if len(_SIDECARS) >= 8:
                _SIDECARS.pop(next(iter(_SIDECARS)))
            _SIDECARS[key] = load_json(side, "capture.json")  # bounded size and depth
        return _SIDECARS[key]
    except (OSError, ForensicsError):
        return None


def read_stamp(path: str) -> dict | None:
    """The stamp recorded for a capture file, or None. A malformed stamp (any field of the wrong type) is a
    one-line ForensicsError naming the file."""
    path = os.fspath(path)
    if is_safetensors(path):
        meta = safetensors_header(path).get("__metadata__")
        if meta is None:
            return None
        if not isinstance(meta, dict):
            raise ForensicsError("malformed safetensors __metadata__ (not an object)", path=path)
        raw = meta.get(STAMP_KEY)
        if raw is None:
            return None
        if not isinstance(raw, str):
            raise ForensicsError(f"malformed {STAMP_KEY} metadata (not a JSON string)", path=path)
        return check_stamp(parse_json(raw, path, f"malformed {STAMP_KEY} metadata"), path, f"{STAMP_KEY} metadata")
    for folder in _folders(path):
        side = os.path.join(folder, STAMPS_FILE)
        if os.path.isfile(side):
            try:
                hit = _index(side).get(os.path.relpath(os.path.abspath(path), folder))
            except OSError as e:
                raise ForensicsError(f"cannot read {STAMPS_FILE}: {e.strerror}", path=path) from None
            if hit is not None:
                return _read_line(side, path, *hit)
    return _legacy(path)


# ---- writing -------------------------------------------------------------------------------------------------


def check_writable(folder: str, path: str) -> None:
    """Refuse, before writing anything, a read-only filesystem or a folder we cannot write."""
    try:
        ro = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        ro = False
    if ro:
        raise ForensicsError("cannot stamp: the filesystem is read-only (stamping writes a new file beside this "
                             "one and renames it over it); copy the data to a writable place", path=path)
    if not os.access(folder, os.W_OK):
        raise ForensicsError("cannot stamp: the folder is not writable (stamping writes a new file beside this "
                             "one and renames it over it)", path=path)


def check_rewritable(path: str) -> None:
    """Refuse a file that stamping must not rewrite: a link, a file with other hard links, a read-only file."""
    if os.path.islink(path):
        raise ForensicsError(f"cannot stamp: a symbolic link (to {os.path.realpath(path)}); rewriting would replace "
                             "the link with a copy: stamp the target instead", path=path)
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise ForensicsError("cannot stamp: not a regular file", path=path)
    if st.st_nlink > 1:
        raise ForensicsError(f"cannot stamp: the file has {st.st_nlink} hard links; rewriting would split them "
                             "(copy it first, or stamp one of them on its own)", path=path)
    if not st.st_mode & 0o222 or not os.access(path, os.W_OK):
        raise ForensicsError(f"cannot stamp: the file is read-only (mode {stat.S_IMODE(st.st_mode):04o}); "
                             "stamping rewrites it", path=path)


def atomic_write(dest: str, write: Callable[[Any], None]) -> None:
    """Write ``dest`` through a temporary file in its folder (:func:`forensics.io.output.atomic_output`:
    write, fsync, rename, fsync the folder). On any failure ``dest`` is untouched."""
    folder = os.path.dirname(os.path.abspath(dest))
    check_writable(folder, dest)
    try:
        with atomic_output(dest, "wb") as f:
            write(f)
    except OSError as e:
        if e.errno in WRITE_ERRNOS:
            raise ForensicsError(f"cannot stamp: {e.strerror}; nothing was changed", path=dest) from None
        raise


COPY_CHUNK = 8 << 20  # bytes per read when copying the tensor data into the new file


def write_safetensors_stamp(path: str, stamp: dict) -> None:
    """Put ``stamp`` into the file's ``__metadata__`` (other entries kept); the tensor bytes are copied as is.
    Under an exclusive ``flock`` on the file, so two stampers of one file take turns."""
    check_rewritable(path)
    with open(path, "rb") as src:
        fcntl.flock(src.fileno(), fcntl.LOCK_EX)
        header = safetensors_header(path)
        (n,) = struct.unpack("<Q", src.read(8))
        meta = header.get("__metadata__") or {}
        meta = {**(meta if isinstance(meta, dict) else {}), STAMP_KEY: json.dumps(stamp, separators=(",", ":"),
                                                                                sort_keys=True)}
        new = {"__metadata__": meta, **{k: v for k, v in header.items() if k != "__metadata__"}}
        blob = json.dumps(new, separators=(",", ":")).encode("utf-8")
        blob += b" " * (-len(blob) % 8)  # the safetensors writer pads the header to 8 bytes with spaces

        def write(out) -> None:
            out.write(struct.pack("<Q", len(blob)))
            out.write(blob)
            src.seek(8 + n)
            while chunk := src.read(COPY_CHUNK):
                out.write(chunk)

        atomic_write(path, write)


def _locked_stamps_file(side: str):
    """``stamps.jsonl`` opened for appending under an exclusive flock (waits for another stamper); reopened if
    a compaction replaced it while we waited."""
    while True:
        if os.path.islink(side):
            raise ForensicsError("cannot stamp: stamps.jsonl is a symbolic link", path=side)
        try:
            fd = os.open(side, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                         | getattr(os, "O_NONBLOCK", 0), 0o666)
        except OSError as e:
            raise ForensicsError(f"cannot stamp: {e.strerror}; nothing was changed", path=side) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise ForensicsError("cannot stamp: stamps.jsonl is not a regular file", path=side)
        os.set_blocking(fd, True)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            same = os.stat(side).st_ino == st.st_ino
        except OSError:
            same = False
        if same:
            return fd
        os.close(fd)


def append_stamps(folder: str, stamps: dict[str, dict]) -> str:
    """Append ``{relative path: stamp}`` to ``folder/stamps.jsonl`` in one write, under its lock; all or nothing
    (a failed write is cut back off). Returns the file's path."""
    side = os.path.join(folder, STAMPS_FILE)
    if not stamps:
        return side
    check_writable(folder, side)
    data = b"".join(json.dumps({"path": rel, "stamp": rec}, separators=(",", ":"), sort_keys=True,
                               allow_nan=False).encode("utf-8", "surrogateescape") + b"\n"
                    for rel, rec in stamps.items())
    fd = _locked_stamps_file(side)
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        if start > 0:  # a torn last line (a stamper killed mid-write) must not swallow our first line
            with open(side, "rb") as f:
                f.seek(start - 1)
                if f.read(1) != b"\n":
                    data = b"\n" + data
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError as e:
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass
            raise ForensicsError(f"cannot stamp: {e.strerror}; nothing was changed", path=side) from None
        _maybe_compact(side)
    finally:
        os.close(fd)  # releases the lock
    return side


def _maybe_compact(side: str) -> None:
    """Rewrite ``stamps.jsonl`` with one line per path once most of its lines are superseded (caller holds the
    lock; the rewrite is atomic, so a reader sees the old or the new file)."""
    idx = _index(side)
    with open(side, "rb") as f:
        lines = sum(1 for _ in f)
    if lines < COMPACT_MIN_LINES or lines <= 2 * len(idx):
        return

    def write(out) -> None:
        with open(side, "rb") as f:
            for off, n in sorted(idx.values()):
                f.seek(off)
                out.write(f.read(n))

    atomic_write(side, write)
