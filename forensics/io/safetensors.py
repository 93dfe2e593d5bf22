"""The one safetensors reader: header, tensors and row slices by plain file reads, and a model folder's shards.

A safetensors file is an 8-byte little-endian header length, a JSON header (tensor name → ``dtype``, ``shape``,
``data_offsets`` relative to the end of the header) and the data (huggingface/safetensors README). Here:

* :func:`read_header` parses and validates the header in one place: one dtype table (:data:`DTYPE_BYTES`), one
  header cap, every entry type-checked and bounds-checked against the file size, so a malformed or truncated
  file is one :class:`ForensicsError` naming it.
* Tensors and row slices are read with ``readinto`` at the tensor's offset into a buffer the tensor then owns
  (one copy from the page cache, where ``safe_open(...).get_tensor`` maps the file), never through a memory map: a file
  truncated while it is read gives "changed size while being read", not a SIGBUS.
* :func:`shard_files` lists a model folder's shards (``model.safetensors.index.json``'s ``weight_map``, else the
  folder's ``*.safetensors``) with every path resolved and confined to the folder; the one exception allowed on
  purpose is a Hugging Face cache snapshot, whose files link to ``../../blobs/<hash>`` of the same repository.
* Only regular files are opened (``O_NONBLOCK`` + ``fstat``): a FIFO or a device named like a shard is refused
  instead of blocking, and a model folder holding one named like any model file (a config, a tokenizer file) is
  refused before its first file is opened (:func:`refuse_special_files`).
"""

from __future__ import annotations

import json
import math
import os
import stat
import struct
import weakref
from dataclasses import dataclass
from typing import Any

from forensics.errors import ForensicsError, escape

# bytes per element of each safetensors dtype (safetensors ``Dtype::size``)
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
               "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}
# the torch dtype (by name) of each safetensors dtype that torch reads
TORCH_DTYPES = {
    "BF16": "torch.bfloat16", "F16": "torch.float16", "F32": "torch.float32", "F64": "torch.float64",
    "I64": "torch.int64", "I32": "torch.int32", "I16": "torch.int16", "I8": "torch.int8",
    "U8": "torch.uint8", "BOOL": "torch.bool", "F8_E4M3": "torch.float8_e4m3fn", "F8_E5M2": "torch.float8_e5m2",
}
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024  # the safetensors library's own header limit (N_MAX in lib.rs)
# A header we parse is smaller: a capture's header lists a few tensors (sample_data: < 1 KB), a model shard's a
# few thousand (a DeepSeek-V3 shard of 163: ~250 KB); a 100 MB JSON header would become ~1 GB of Python objects.
MAX_PARSED_HEADER_BYTES = 16 * 1024 * 1024
INDEX_NAME = "model.safetensors.index.json"
MAX_INDEX_BYTES = 16 * 1024 * 1024  # a DeepSeek-V3 index (91k tensors): 8.9 MB
READ_CHUNK_BYTES = 1 << 30  # one readinto call reads at most this much (Linux returns at most ~2 GiB per read)


def open_regular(path: str) -> int:
    """A read-only descriptor of ``path``, refused in one line unless it is a regular file (a FIFO would block
    the first read, a device never ends). The caller closes it."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise ForensicsError(f"cannot open: {e.strerror}", path=path) from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as e:
        os.close(fd)
        raise ForensicsError(f"cannot open: {e.strerror}", path=path) from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ForensicsError("is a directory, not a file; not read" if stat.S_ISDIR(mode) else
                             "not a regular file (a FIFO, device or socket); not read", path=path)
    return fd


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def parse_json(data: bytes | str, path: str, what: str) -> Any:
    """JSON text parsed, or a one-line ForensicsError: invalid, too deeply nested, or too large."""
    try:
        return json.loads(data)
    except (UnicodeDecodeError, ValueError) as e:
        raise ForensicsError(f"{what}: not valid JSON ({e})", path=path) from None
    except RecursionError:
        raise ForensicsError(f"{what}: JSON nested too deeply to parse", path=path) from None
    except MemoryError:
        raise ForensicsError(f"{what}: too large to parse", path=path) from None


def _read_at(fd: int, offset: int, n: int, path: str, size: int, view: memoryview | None = None) -> memoryview:
    """``n`` bytes at ``offset`` into ``view`` (or a fresh buffer); a short read means the file shrank under us."""
    view = memoryview(bytearray(n)) if view is None else view
    got = 0
    while got < n:
        try:
            part = view[got:got + READ_CHUNK_BYTES]
            k = os.preadv(fd, [part], offset + got) if hasattr(os, "preadv") else _pread_into(fd, part, offset + got)
        except OSError as e:
            raise ForensicsError(f"cannot read: {e.strerror}", path=path) from None
        if k <= 0:
            raise ForensicsError(f"changed size while being read (was {size} bytes, now "
                                 f"{_size_now(fd)}); not read", path=path)
        got += k
    return view


def _pread_into(fd: int, view: memoryview, offset: int) -> int:
    data = os.pread(fd, len(view), offset)
    view[:len(data)] = data
    return len(data)


def _size_now(fd: int) -> int | str:
    try:
        return os.fstat(fd).st_size
    except OSError:
        return "?"


def _validate(header: Any, path: str, data_len: int) -> dict:
    if not isinstance(header, dict):
        raise ForensicsError("corrupt safetensors header: not a JSON object", path=path)
    meta = header.get("__metadata__")
    if meta is not None and not isinstance(meta, dict):
        raise ForensicsError(f"corrupt safetensors header: __metadata__ is {type(meta).__name__}, not an object",
                             path=path)
    for k, v in header.items():
        if k == "__metadata__":
            continue
        bad = f"corrupt safetensors header: tensor {escape(repr(k))[:80]}"
        if not isinstance(v, dict):
            raise ForensicsError(f"{bad} is {type(v).__name__}, not an object", path=path)
        dtype, shape, off = v.get("dtype"), v.get("shape"), v.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
            raise ForensicsError(f"{bad} has dtype {escape(repr(dtype))[:40]}; expected one of "
                                 f"{', '.join(DTYPE_BYTES)}", path=path)
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise ForensicsError(f"{bad} has shape {escape(repr(shape))[:80]}; expected a list of "
                                 "non-negative integers", path=path)
        if not isinstance(off, list) or len(off) != 2 or not all(_is_int(o) for o in off) \
                or not 0 <= off[0] <= off[1] or off[1] > data_len:
            raise ForensicsError(
                f"{bad} offsets {escape(repr(off))[:80]} exceed the {data_len} data bytes (truncated file?)",
                path=path)
        need = math.prod(shape) * DTYPE_BYTES[dtype]
        if off[1] - off[0] != need:
            raise ForensicsError(f"{bad} shape {escape(repr(shape))[:80]} {dtype} needs {need} bytes but its "
                                 f"offsets span {off[1] - off[0]}", path=path)
    _check_layout(header, path, data_len)
    return header


def _check_layout(header: dict, path: str, data_len: int) -> None:
    """The rules the safetensors library itself enforces on load (``SafeTensors::deserialize``): tensors tile the
    data with no overlap, hole or trailing byte, and ``__metadata__`` maps strings to strings. A file breaking
    them is one no trainer loads, so it is refused here too (two tensors over the same bytes read as a
    'duplicate' slot, where the library says 'invalid offset')."""
    meta = header.get("__metadata__")
    if meta is not None and not all(isinstance(v, str) for v in meta.values()):
        raise ForensicsError("corrupt safetensors header: __metadata__ values must be strings (the safetensors "
                             "library refuses this file)", path=path)
    end = 0
    for a, b, k in sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items()
                          if k != "__metadata__"):
        if a != end:
            what = "overlaps the tensor before it" if a < end else f"leaves a hole of {a - end} bytes before it"
            raise ForensicsError(f"corrupt safetensors header: tensor {escape(repr(k))[:80]} at data bytes {a}–{b} "
                                 f"{what} (the safetensors library refuses this file: invalid offset)", path=path)
        end = b
    if end != data_len:
        raise ForensicsError(f"corrupt safetensors header: the tensors end at data byte {end} but the file holds "
                             f"{data_len} (trailing bytes; the safetensors library refuses this file)", path=path)


def read_header(path: str, max_bytes: int = MAX_PARSED_HEADER_BYTES) -> dict:
    """The parsed JSON header of a safetensors file, every entry validated against the file's size: ``dtype`` a
    name of :data:`DTYPE_BYTES`, ``shape`` a list of non-negative ints, ``data_offsets`` two ints inside the data
    spanning exactly the bytes the shape needs; ``__metadata__`` an object when present.

    Example:
        >>> sorted(read_header("sample_data/speculators/hidden_states/hs_0.safetensors"))  # doctest: +SKIP
        ['__metadata__', 'hidden_states', 'loss_mask', 'token_ids']
    """
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        raw = os.pread(fd, 8, 0)
        if len(raw) < 8:
            raise ForensicsError("corrupt safetensors file: shorter than its 8-byte header length", path=path)
        (n,) = struct.unpack("<Q", raw)
        if n > MAX_SAFETENSORS_HEADER or 8 + n > size:
            raise ForensicsError(f"corrupt safetensors header: declares {n} header bytes, file has {size} "
                                 "(truncated file?)", path=path)
        if n > max_bytes:
            raise ForensicsError(f"safetensors header of {n} bytes is larger than this reader accepts "
                                 f"(limit {max_bytes})", path=path)
        data = bytes(_read_at(fd, 8, n, path, size))
    except OSError as e:
        raise ForensicsError(f"cannot read the safetensors header: {e.strerror}", path=path) from None
    finally:
        os.close(fd)
    return _validate(parse_json(data, path, "corrupt safetensors header"), path, size - 8 - n)


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a safetensors file, from its header: the file, dtype, shape, byte size and absolute offset
    of its data, and the size the file had when the header was read (a read checks it again)."""

    file: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    offset: int = 0
    file_size: int = -1
    file_id: tuple[int, int] = (-1, -1)  # (st_dev, st_ino) when the header was read

    @property
    def row_bytes(self) -> int:
        """Bytes of one index of the first dimension (the whole tensor for a scalar)."""
        return self.nbytes // self.shape[0] if self.shape and self.shape[0] else self.nbytes


def read_bytes(info: TensorInfo, start: int = 0, stop: int | None = None) -> Any:
    """Bytes ``[start, stop)`` of a tensor's data (relative to the tensor) as a uint8 CPU tensor, read by file
    reads into memory the tensor owns."""
    stop = info.nbytes if stop is None else stop
    if not 0 <= start <= stop <= info.nbytes:
        raise ForensicsError(f"byte range {start}:{stop} outside a {info.nbytes}-byte tensor", path=info.file)
    fd = open_regular(info.file)
    try:
        st = os.fstat(fd)
        if info.file_id != (-1, -1) and (st.st_dev, st.st_ino) != info.file_id:
            raise FileReplaced("was replaced by another file since its header was read", path=info.file)
        if info.file_size >= 0 and st.st_size != info.file_size:
            raise ForensicsError(f"changed size while being read (was {info.file_size} bytes, now {st.st_size}); "
                                 "not read", path=info.file)
        import torch

        buf = torch.empty(stop - start, dtype=torch.uint8)  # not zero-filled: 2-4x faster than a bytearray
        _read_at(fd, info.offset + start, stop - start, info.file, st.st_size, buf.numpy().data)
        return buf
    finally:
        os.close(fd)


class FileReplaced(ForensicsError):
    """The path now names another file (an atomic rewrite, e.g. ``hsf stamp``) than the one whose header was read."""


def _as_tensor(u8: Any, dtype: str, shape: tuple[int, ...], path: str) -> Any:
    import torch

    name = TORCH_DTYPES.get(dtype)
    if name is None:
        raise ForensicsError(f"tensor dtype {dtype} is not one torch reads", path=path)
    tdt = getattr(torch, name.split(".")[1])
    if int(u8.numel()) == 0:
        return torch.empty(shape, dtype=tdt)
    return u8.view(tdt).reshape(shape)


def read_tensor(info: TensorInfo) -> Any:
    """The whole tensor (a CPU tensor that owns its memory)."""
    return _as_tensor(read_bytes(info), info.dtype, info.shape, info.file)


def read_rows(info: TensorInfo, start: int, stop: int) -> Any:
    """Rows ``[start, stop)`` of the first dimension; ``0 <= start <= stop <= rows`` (negative indices refused)."""
    rows = info.shape[0] if info.shape else 0
    if not (_is_int(start) and _is_int(stop) and 0 <= start <= stop <= rows):
        raise ForensicsError(f"rows {start}:{stop} outside a tensor of {rows} rows", path=info.file)
    rb = info.row_bytes
    return _as_tensor(read_bytes(info, start * rb, stop * rb), info.dtype, (stop - start, *info.shape[1:]),
                      info.file)


class SafetensorsFile:
    """A safetensors file opened lazily: ``keys()``, ``shape(k)``, ``dtype_name(k)``, ``get(k)``, ``rows(k, a, b)``,
    ``metadata``; the header validated once, every tensor read by file reads (never mapped).

    Example:
        >>> sf = SafetensorsFile("sample_data/speculators/hidden_states/hs_0.safetensors")  # doctest: +SKIP
        >>> sf.shape("hidden_states"), sf.dtype_name("hidden_states")                      # doctest: +SKIP
        ((64, 4, 576), 'BF16')
    """

    def __init__(self, path: str):
        self.path = path
        self.header = read_header(path)
        self.metadata = self.header.get("__metadata__") or {}
        self.infos = infos_from_header(path, self.header)
        self._alive: dict[str, tuple[weakref.ref, Any, tuple[int, ...]]] = {}

    def keys(self) -> list[str]:
        return [k for k in self.header if k != "__metadata__"]

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self.header[key]["shape"])

    def dtype_name(self, key: str) -> str:
        return str(self.header[key]["dtype"])

    def get(self, key: str) -> Any:
        """Tensor ``key`` (fp8 up-cast to bf16, as every reader of states does). While a tensor read before is
        still alive (a slot's view into a stacked ``hidden_states``), the same tensor is returned, not read again:
        k slots of one stack cost one read and one copy in memory, as the memory map they replace did."""
        alive = self._alive.get(key)
        root = alive[0]() if alive is not None else None
        if alive is not None and root is not None:
            return root.view(alive[1]).reshape(alive[2])
        t = upcast_fp8(self._again(lambda: read_tensor(self.infos[key]), key))
        root = t if t._base is None else t._base  # what every view of t keeps alive
        self._alive[key] = (weakref.ref(root), t.dtype, tuple(t.shape))
        return t

    def rows(self, key: str, start: int, stop: int) -> Any:
        return upcast_fp8(self._again(lambda: read_rows(self.infos[key], start, stop), key))

    def _again(self, read: Any, key: str) -> Any:
        """``read()``; when the path was atomically replaced since the header was read, the new file's header is
        read and the tensor taken from it by name, if it is still there with the same dtype and shape."""
        try:
            return read()
        except FileReplaced:
            old = self.infos[key]
            header = read_header(self.path)
            infos = infos_from_header(self.path, header)
            new = infos.get(key)
            if new is None or (new.dtype, new.shape) != (old.dtype, old.shape):
                raise ForensicsError(f"was replaced while open, and tensor {escape(repr(key))[:80]} changed",
                                     path=self.path) from None
            self.header, self.infos = header, infos
            self.metadata = header.get("__metadata__") or {}
            return read()


def infos_from_header(path: str, header: dict) -> dict[str, TensorInfo]:
    """:class:`TensorInfo` of every tensor of an already validated ``header`` of ``path``."""
    fd = open_regular(path)
    try:
        st = os.fstat(fd)
        (n,) = struct.unpack("<Q", os.pread(fd, 8, 0))
    finally:
        os.close(fd)
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        a, b = d["data_offsets"]
        out[name] = TensorInfo(path, str(d["dtype"]), tuple(d["shape"]), b - a, 8 + n + a, st.st_size,
                               (st.st_dev, st.st_ino))
    return out


FP8_DTYPES = ("torch.float8_e4m3fn", "torch.float8_e5m2")


def upcast_fp8(t: Any) -> Any:
    """``t`` as bf16 when it is an fp8 tensor (statistics kernels and numpy have no fp8), else ``t``: exact, since
    e4m3 and e5m2 values are all representable in bf16 (8 exponent bits, 7 mantissa bits)."""
    import torch

    if isinstance(t, torch.Tensor) and str(t.dtype) in FP8_DTYPES:
        return t.to(torch.bfloat16)
    return t


# --- a model folder's shards ------------------------------------------------------------------------------------

def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def hf_cache_blobs(folder: str) -> str | None:
    """The ``blobs/`` folder of the Hugging Face cache repository that ``folder`` is a snapshot of
    (``…/models--org--name/snapshots/<revision>``), or None."""
    root = os.path.realpath(folder)
    parent = os.path.dirname(root)
    if os.path.basename(parent) != "snapshots":
        return None
    blobs = os.path.join(os.path.dirname(parent), "blobs")
    return blobs if os.path.isdir(blobs) else None


def confined(folder: str, name: Any, what: str = "shard") -> str:
    """``folder/name`` when ``name`` is a relative path that stays inside ``folder`` once every link is resolved
    (or, for a Hugging Face cache snapshot, resolves into that repository's ``blobs/``); else a one-line error."""
    where = os.path.join(folder, INDEX_NAME)
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ForensicsError(f"{what} name {escape(repr(name))[:80]} is not a file name", path=where)
    parts = name.replace("\\", "/").split("/")
    if os.path.isabs(name) or ".." in parts:
        raise ForensicsError(f"{what} path {escape(repr(name))[:120]} leaves the model folder; refused", path=where)
    p = os.path.join(folder, name)
    real, root = os.path.realpath(p), os.path.realpath(folder)
    if _inside(real, root):
        return p
    blobs = hf_cache_blobs(folder)
    if blobs is not None and _inside(real, os.path.realpath(blobs)):
        return p  # a cache snapshot's link into its own blobs/, allowed on purpose
    raise ForensicsError(f"{what} {escape(repr(name))[:120]} links outside the model folder (to "
                         f"{escape(real)[:160]}); refused", path=p)


# what a model folder's reader may open: configs, weights, tokenizer files (FIFOs, devices and sockets with such a
# name are refused before anything is opened; transformers would treat some as missing, and an open() blocks)
MODEL_FILE_SUFFIXES = (".json", ".safetensors", ".bin", ".pt", ".pth", ".gguf", ".model", ".txt", ".jinja",
                       ".tiktoken", ".msgpack", ".h5", ".py")


def refuse_special_files(folder: str) -> None:
    """A one-line error when ``folder`` holds a FIFO, a device or a socket (or a link to one) named like a file a
    model or tokenizer load opens. ``stat`` never blocks, so this runs before the first ``open``.

    Example:
        >>> import os, tempfile
        >>> d = tempfile.mkdtemp(); os.mkfifo(os.path.join(d, "config.json"))
        >>> refuse_special_files(d)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        forensics.errors.ForensicsError: .../config.json: a FIFO, not a regular file, in the model folder; ...
    """
    try:
        names = os.listdir(folder)
    except OSError as e:
        raise ForensicsError(f"cannot list the model folder: {e.strerror}", path=folder) from None
    for name in sorted(names):
        if not name.endswith(MODEL_FILE_SUFFIXES):
            continue
        p = os.path.join(folder, name)
        try:
            mode = os.stat(p).st_mode
        except OSError:
            continue  # a dangling link or a loop: the reader that needs it names it
        if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
            continue
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file")
        raise ForensicsError(f"{kind}, not a regular file, in the model folder; refused before anything is opened "
                             "(reading it could block forever)", path=p)


def shard_files(folder: str) -> list[str]:
    """The safetensors shards of an HF folder: the ``weight_map`` files of ``model.safetensors.index.json``, else
    every ``*.safetensors`` of the folder; each confined to the folder (:func:`confined`) and a regular file. A
    folder holding a FIFO or a device named like a model file is refused first (:func:`refuse_special_files`)."""
    refuse_special_files(folder)
    idx = os.path.join(folder, INDEX_NAME)
    if os.path.lexists(idx):
        fd = open_regular(idx)
        try:
            data = os.read(fd, MAX_INDEX_BYTES + 1)
        except OSError as e:
            raise ForensicsError(f"cannot read the shard index: {e.strerror}", path=idx) from None
        finally:
            os.close(fd)
        if len(data) > MAX_INDEX_BYTES:
            raise ForensicsError(f"shard index is larger than {MAX_INDEX_BYTES} bytes", path=idx)
        doc = parse_json(data, idx, "shard index")
        wm = doc.get("weight_map") if isinstance(doc, dict) else None
        if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
            raise ForensicsError("unreadable shard index: expected {\"weight_map\": {tensor: file name}}", path=idx)
        names = sorted(set(wm.values()))
    else:
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
        except OSError as e:
            raise ForensicsError(f"cannot list the model folder: {e.strerror}", path=folder) from None
    out = []
    for name in names:
        p = confined(folder, name)
        if not os.path.lexists(p):
            raise ForensicsError("shard named by the index is missing", path=p)
        os.close(open_regular(p))  # a FIFO, device or dangling link: one line, before any read
        out.append(p)
    return out


def shard_index(folder: str) -> dict[str, TensorInfo]:
    """Every tensor of an HF safetensors folder → :class:`TensorInfo` (shard headers only; no data read)."""
    files = shard_files(folder)
    if not files:
        raise ForensicsError(f"no safetensors shards ({INDEX_NAME} or *.safetensors)", path=folder)
    out: dict[str, TensorInfo] = {}
    for p in files:
        out.update(infos_from_header(p, read_header(p)))
    return out
