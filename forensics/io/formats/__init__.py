"""Format readers, auto-detected from content: every reader produces one `Capture`.

Detection order: the container is sniffed from the first bytes (zip/legacy torch pickle, gzip,
safetensors, numpy ``.npy``/``.npz``, JSON), then the keys decide the reader (a list of records with
``input_ids`` + ``hidden_state`` → TensorRT-LLM SaveState; ``aux_hidden_states`` + a ``hidden_states`` tensor →
Model-Optimizer; exactly ``{input_ids, hidden_states: list, loss_mask}`` → speculators v1;
``aux_hidden_state`` → SpecForge; ``hidden_state`` + ``target`` → speculators v0; ``hidden_state`` alone
→ EAGLE-1/2; a ``[seq, k, H]``/``[k, seq, H]`` ``hidden_states`` stack in safetensors (optionally with a
leading batch dim of 1) → speculators current inside a speculators dataset, else the vLLM connector, except a
single ``[1, seq, H]`` sequence; JSON with ``meta_info.hidden_states`` → SGLang; anything else with float tensors
→ generic, through the layout resolver ``forensics.io.layout``). File names never decide the container (a
checkpoint named ``.safetensors`` is still read as a checkpoint); only speculators' dataset layout
(``hidden_states/hs_{i}.safetensors``, or its Arrow dataset beside the folder) tells its stack files from a bare
vLLM connector file, which holds the same tensors. Side files add declared layers: ``capture.json`` (written by
``hsf capture``; ``"r"`` per slot) and, for speculators v1 only, ``data_config.json``
(``hidden_states.layer_ids``, r = id + 1).
Anything a reader did not foresee still becomes a :class:`ForensicsError` naming the file.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any

from forensics.errors import ForensicsError, escape
from forensics.io import validate
from forensics.io.capture import RECORD_SEP, Capture
from forensics.io.formats import (
    eagle,
    generic,
    modelopt,
    sglang,
    specforge,
    speculators,
    speculators_v0,
    speculators_v1,
    trtllm,
    vllm_connector,
)
from forensics.io.formats._io import (
    SafetensorsFile,
    is_npz,
    load_json_rows,
    numpy_load,
    read_json,
    sniff,
    torch_load,
)
from forensics.io.formats.base import CaptureFormat, Request, Writer
from forensics.io.layout import ID_KEYS, ids_1d, to_torch
from forensics.io.limits import MAX_ID_DIGITS, MAX_IDS_TEXT_BYTES, read_bounded
from forensics.io.sigbus import watch
from forensics.io.tempfiles import clean_stale, temp_path
from forensics.layers import parse_r

# The registry, in the order formats are tried: within one container the first format whose ``match`` accepts the
# content reads it (so the specific come before the general, and ``generic`` is last).
REGISTRY: tuple[CaptureFormat, ...] = (
    trtllm.FORMAT, modelopt.FORMAT, speculators_v1.FORMAT, vllm_connector.FORMAT, speculators.FORMAT,
    specforge.FORMAT, speculators_v0.FORMAT, eagle.FORMAT, sglang.FORMAT, generic.FORMAT,
)
CAPTURE_SUFFIXES = (".pt", ".pth", ".ckpt", ".ckpt.gz", ".pt.gz", ".safetensors", ".bin", ".npy", ".npz")
SIDE_FILES = {"token_freq.pt", "model.safetensors", "training_args.bin", "optimizer.pt", "scheduler.pt"}
SIDE_DIRS = {"tokenizer", ".git", "__pycache__", ".ipynb_checkpoints"}

__all__ = ["load", "load_all", "iter_files", "detect_format", "FORMATS", "as_capture", "as_captures", "REGISTRY",
           "CaptureFormat", "Writer", "format_named", "writer", "WRITERS", "WRITTEN_SIDE_FILES",
           "format_of_trainer"]
FORMATS = [f.name for f in REGISTRY]
WRITERS = tuple(f.writer.name for f in REGISTRY if f.writer is not None)  # ``hsf capture --format`` choices
WRITTEN_SIDE_FILES = tuple(n for f in REGISTRY if f.writer is not None for n in f.writer.side_names)

# How a sniffed container kind is opened: (container, opener). The content is opened once and offered to the
# formats of that container.
_OPENERS = {
    "zip": ("torch", lambda p: torch_load(p, "zip")),
    "gzip": ("torch", lambda p: torch_load(p, "gzip")),
    "pickle": ("torch", lambda p: torch_load(p, "pickle")),
    "safetensors": ("safetensors", SafetensorsFile),
    "npy": ("numpy", lambda p: numpy_load(p, "npy")),
    "npz": ("numpy", lambda p: numpy_load(p, "npz")),
    "json": ("json", load_json_rows),
}
_UNKNOWN_CONTAINER = ("not a torch checkpoint, safetensors, numpy or JSON file (the first bytes match no supported "
                      "container; a text file?)")


def format_named(name: str) -> CaptureFormat:
    """The registered format called ``name`` (KeyError for another name)."""
    for f in REGISTRY:
        if f.name == name:
            return f
    raise KeyError(name)


def writer(name: str) -> Writer:
    """The writer ``hsf capture --format name`` uses; a ForensicsError for a name no format writes."""
    found = next((f.writer for f in REGISTRY if f.writer is not None and f.writer.name == name), None)
    if found is None:
        raise ForensicsError(f"unknown format {name!r} (choose from {', '.join(WRITERS)})")
    return found


def format_of_trainer(*spellings: str | None) -> str | None:
    """The format whose ``trainer`` (declared in the format's own module: the one record of which trainer's data a
    format is) is any of ``spellings``, a trainer's names; None when no registered format is that trainer's.
    ``forensics.models.conventions`` asks it with a system's name and aliases (``System.data_format``)."""
    return next((f.name for f in REGISTRY if f.trainer is not None and f.trainer in spellings), None)


def detect_format(path: str) -> str:
    """The format name a file would be read as (reads only what detection needs)."""
    return load(path).format


def split_record(path: str) -> tuple[str, int | None]:
    """``file.pt#3`` → ``("file.pt", 3)`` when ``file.pt#3`` itself does not exist."""
    if os.path.exists(path) or RECORD_SEP not in path:
        return path, None
    base, _, tail = path.rpartition(RECORD_SEP)
    return (base, int(tail)) if validate.ascii_digits(tail) and os.path.exists(base) else (path, None)


def open_container(path: str) -> tuple[str, object]:
    """Sniff the container from the first bytes, once, and open it: ``(container, content)``."""
    kind = sniff(path)
    if kind == "zip" and is_npz(path):
        kind = "npz"
    if kind not in _OPENERS:
        raise ForensicsError(_UNKNOWN_CONTAINER, path=path)
    container, opener = _OPENERS[kind]
    return container, opener(path)


def first_match(container: str, content) -> CaptureFormat | None:
    """The first registered format of ``container`` whose ``match`` accepts ``content``."""
    return next((f for f in REGISTRY if container in f.containers and f.match(content)), None)


def load(path: str | os.PathLike, input_ids=None, record: int | None = None) -> Capture:
    """Read one capture file, whatever its format.

    Args:
        path: the file (``FILE#i`` picks sample ``i`` of a many-sample file: a TensorRT-LLM record list, an
            SGLang JSON list, a ``[B, T]`` batch).
        input_ids: token ids from outside the file (a tensor, array or list) for a capture saved without them;
            they decide a stack's axes and let exact mode run. Ids stored in the file must agree.
        record: the sample of a many-sample file (default 0; :func:`load_all` reads every one).

    Example:
        >>> cap = load("sample_data/speculators_v1/data_0.pt")      # doctest: +SKIP
        >>> [s.name for s in cap.slots]                             # doctest: +SKIP
        ['hidden_states[0]', 'hidden_states[1]', 'hidden_states[2]', 'hidden_states[3]']
    """
    path, rec = split_record(os.fspath(path))
    return _read(path, input_ids, rec if record is None else record)[0]


def load_all(path: str | os.PathLike, input_ids=None) -> list[Capture]:
    """Every sample of a file, the file read once: one capture per TensorRT-LLM record, SGLang JSON object or
    row of a ``[B, T]`` batch (each named ``FILE#i``: :attr:`Capture.name`), ``[capture]`` for a one-sample
    file; ``FILE#i`` gives ``[sample i]``.

    Example:
        >>> [c.name for c in load_all("sample_data/speculators_v1/data_0.pt")]   # doctest: +SKIP
        ['.../sample_data/speculators_v1/data_0.pt']
    """
    path, rec = split_record(os.fspath(path))
    return _read(path, input_ids, rec)


def _read(path: str, input_ids, record: int | None) -> list[Capture]:
    """The samples of ``path``, the file opened once: every one when ``record`` is None, else ``[sample record]``."""
    _check_file(path)
    ids = _outside_ids(input_ids, path)

    watched = watch(path)  # before the first read: a change from here on is caught by cap.check_unchanged()
    container, content = open_container(path)
    fmt = first_match(container, content)
    if fmt is None:
        raise _no_format(container, content, path)
    if ids is not None and ids.dim() == 2 and fmt is not generic.FORMAT:
        raise ForensicsError(f"[{ids.shape[0]}, {ids.shape[1]}] token ids (a batch) given for a {fmt.name} file, "
                             "which holds its own samples", path=path)
    req = Request(path, record or 0, ids)
    if record is None and fmt.samples is not None:
        caps = _guarded(fmt.name, path, fmt.samples, content, req)
    else:
        caps = [_guarded(fmt.name, path, fmt.read, content, req)]
    if not caps:  # a reader that split the file into no sample: nothing was checked, which must not read as a pass
        raise ForensicsError(f"holds no sample (a {fmt.name} file with an empty batch or record list)", path=path)
    if record and caps[0].provenance.record is None:
        raise ForensicsError(f"record {record} asked for, but a {caps[0].format} file holds one sample", path=path)
    for cap in caps:
        if ids is not None and ids.dim() == 1:
            _apply_outside_ids(cap, ids)
        _apply_sidecars(cap, fmt)
        cap.provenance.watch = watched
        cap.check_unchanged()
    if len(caps) > 1 and caps[0].provenance._sha256 is None:
        first = caps[0].provenance  # the samples of one file hash the file once between them
        for c in caps[1:]:
            c.provenance.sha256 = first.sha256  # type: ignore[method-assign]
    return caps


def _check_file(path: str) -> None:
    if os.path.isdir(path):
        raise ForensicsError("is a directory; pass a file, or use iter_files()/scan for a dataset", path=path)
    if not os.path.exists(path):
        raise ForensicsError("no such file", path=path)


def _no_format(container: str, content, path: str) -> ForensicsError:
    """The error for content no registered format of its container accepts."""
    if container == "json":
        return ForensicsError("a JSON file without hidden-state rows (expected SGLang responses with "
                              "meta_info.hidden_states)", path=path)
    what = f"dict with keys {sorted(map(str, content))[:12]}" if isinstance(content, dict) else type(content).__name__
    return ForensicsError(f"no reader recognises this content ({what}); expected one of the formats "
                          f"{', '.join(FORMATS)}", path=path)


def _outside_ids(ids, path: str):
    """Ids given from outside the file as a 1-D int64 tensor (None stays None)."""
    if ids is None:
        return None
    import torch

    t = to_torch(ids)
    if isinstance(t, torch.Tensor) and t.dim() == 2 and t.shape[0] > 1:
        if t.is_floating_point() or t.dtype == torch.bool:  # a [B, T] batch of ids: split by the layout resolver
            raise ForensicsError(f"token ids must be integers, found {t.dtype}", path=path)
        return t.long()
    t = ids_1d(t, path, "input_ids")
    if t.is_floating_point() or t.dtype == torch.bool:
        raise ForensicsError(f"token ids must be integers, found {t.dtype}", path=path)
    return t.long()


def _apply_outside_ids(cap: Capture, ids) -> None:
    """Ids given from outside: taken when the file has none (length checked), compared when it has some."""
    if ids is None:
        return
    if cap.input_ids is None:
        if int(ids.numel()) != cap.num_tokens:
            raise ForensicsError(f"length mismatch: the token ids given have {int(ids.numel())} tokens but the "
                                 f"hidden states have {cap.num_tokens}", path=cap.path)
        cap.input_ids = ids
        cap.provenance.notes.append("token ids given from outside the file")
    elif int(cap.input_ids.numel()) != int(ids.numel()) or not bool((cap.input_ids.long() == ids).all()):
        raise ForensicsError("the token ids given differ from the input_ids stored in the file", path=cap.path)


def _digest(tensors: list) -> str:
    """sha256 of tensors' bytes in order (an in-memory capture's stand-in for a file hash)."""
    import torch

    h = hashlib.sha256()
    for t in tensors:
        h.update(str((tuple(t.shape), t.dtype)).encode())
        h.update(t.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def write_capture(cap: Capture, folder: str | None = None) -> str:
    """Write a capture (one in memory) as a plain safetensors file ``<folder>/capture.safetensors`` (slots
    ``slot_<i>``, ``input_ids``) and return its path; ``folder`` defaults to a temporary folder named by the
    capture's content, so the same tensors are written once. The file reads back as ``generic``."""
    folder = folder or os.path.join(tempfile.gettempdir(), f"hsf-capture-{cap.provenance.sha256()[:16]}")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "capture.safetensors")
    if os.path.isfile(path):
        return path
    from safetensors.torch import save

    tensors = {f"slot_{s.index}": s.tensor().contiguous() for s in cap.slots}
    if cap.input_ids is not None:
        tensors["input_ids"] = cap.input_ids.contiguous()

    clean_stale(path)
    tmp = temp_path(path)
    try:
        with open(tmp, "wb") as f:  # whole or not at all: renamed into place once written
            f.write(save(tensors, metadata={"tool": "forensics.report (a capture given in memory)"}))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def records(path: str | os.PathLike) -> int:
    """How many samples a file holds (TensorRT-LLM record lists, SGLang JSON lists, ``[B, T]`` batches; 1 for
    every other file)."""
    cap = load(path)
    return int(cap.meta.get("records", 1))


def as_capture(obj, input_ids=None, name: str = "<in memory>", attention_mask=None) -> Capture:
    """A ``Capture`` of what a notebook has: a path, a ``Capture``, or tensors in memory in any layout
    (``forensics.io.layout``: transformers' ``output.hidden_states`` tuple, a stack, a list, a dict).
    A batch (``[B, T]`` ids, B > 1) holds B captures: :func:`as_captures` gives them; here it is an error.

    Example:
        >>> import torch
        >>> cap = as_capture([torch.randn(6, 8), torch.randn(6, 8)], input_ids=torch.arange(6))
        >>> cap.format, len(cap.slots), cap.num_tokens
        ('in-memory', 2, 6)
    """
    if isinstance(obj, (str, os.PathLike)) and attention_mask is None:
        return load(obj, input_ids=input_ids)
    caps = as_captures(obj, input_ids=input_ids, name=name, attention_mask=attention_mask)
    if len(caps) > 1:
        raise ForensicsError(f"holds a batch of {len(caps)} samples; take them one by one with "
                             "forensics.as_captures(...) (or pick one: FILE#i)", path=caps[0].path)
    return caps[0]


def as_captures(obj, input_ids=None, name: str = "<in memory>", attention_mask=None) -> list[Capture]:
    """Every sample of what a notebook has (a path: :func:`load_all`; a ``Capture``; tensors in memory): one
    capture, or B for a batch (``[B, T]`` ``input_ids`` with ``[k, B, T, H]``, a tuple of ``[B, T, H]``...), each
    cut to its real rows by ``attention_mask`` and named ``<in memory>#b``.

    Example:
        >>> import torch
        >>> hs = tuple(torch.randn(2, 5, 8) for _ in range(3))             # transformers' tuple, B = 2
        >>> ids = torch.tensor([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]])
        >>> caps = as_captures(hs, input_ids=ids, attention_mask=ids != 0)
        >>> [(c.name, c.num_tokens) for c in caps]
        [('<in memory>#0', 3), ('<in memory>#1', 5)]
    """
    if isinstance(obj, Capture):
        if input_ids is not None:
            _apply_outside_ids(obj, _outside_ids(input_ids, obj.path))
        return [obj]
    if isinstance(obj, (str, os.PathLike)):
        if attention_mask is not None:
            raise ForensicsError("attention_mask= goes with tensors in memory; a file carries its own mask",
                                 path=os.fspath(obj))
        return load_all(obj, input_ids=input_ids)

    hs = getattr(obj, "hidden_states", None)  # a transformers ModelOutput (a dict subclass): its hidden_states
    if isinstance(hs, (list, tuple)) and type(obj) is not dict:
        obj = hs
    if not (isinstance(obj, (dict, list, tuple)) or hasattr(obj, "shape")):
        raise ForensicsError(f"expected a file path, a Capture, or hidden states in memory (a tensor, a list or "
                             f"tuple of tensors, a dict of tensors, a numpy array), got {type(obj).__name__}",
                             path=name)
    ids = _outside_ids(input_ids, name)
    caps = generic.read_samples(obj, name, ids, to_torch(attention_mask), fmt="in-memory", size=0)
    for cap in caps:
        slots = [s.tensor() for s in cap.slots]
        cap.provenance._sha256 = _digest(slots + [t for t in (cap.input_ids,) if t is not None])
    return caps


def _guarded(fmt: str, path: str, fn, *args) -> Any:
    """Run a reader; anything it did not foresee still becomes a ForensicsError naming the file."""
    try:
        return fn(*args)
    except ForensicsError:
        raise
    except Exception as e:  # noqa: BLE001 - bad input never gives a traceback
        raise ForensicsError(f"unreadable as {fmt}: {type(e).__name__}: {str(e)[:200]}", path=path) from None


_SIDECAR_CACHE: dict[tuple, dict | None] = {}  # (path, mtime_ns, size) -> parsed; one folder's files share it
_SIDECAR_CACHE_MAX = 8


def _sidecar(path: str, name: str, notes: list[str] | None = None) -> dict | None:
    """The side file ``name`` in the file's folder or its parent, parsed once per (path, mtime, size): a dataset's
    files share one capture.json, which ``hsf stamp`` grows by one entry per torch file."""
    d = os.path.dirname(os.path.abspath(path))
    for folder in (d, os.path.dirname(d)):
        side = os.path.join(folder, name)
        if os.path.isfile(side):
            st = os.stat(side)
            key = (side, st.st_mtime_ns, st.st_size)
            if key not in _SIDECAR_CACHE:
                if len(_SIDECAR_CACHE) >= _SIDECAR_CACHE_MAX:
                    _SIDECAR_CACHE.pop(next(iter(_SIDECAR_CACHE)))
                _SIDECAR_CACHE[key] = read_json(side)
            doc = _SIDECAR_CACHE[key]
            if doc is None and notes is not None:  # a side file never makes a capture unreadable: say so, go on
                notes.append(f"{name} ignored: not a readable JSON object (invalid, too deep or too large)")
            return dict(doc) if doc is not None else None
    return None


MAX_SIDECAR_TEXT = 1024  # a capture.json string as kept (real ones: a model name, a path: < 300 characters)


def _apply_sidecars(cap: Capture, fmt: CaptureFormat) -> None:
    if fmt.side_file is not None:  # a format's own side file (speculators-v1: data_config.json)
        name, apply = fmt.side_file
        doc = _sidecar(cap.path, name, cap.provenance.notes)
        if doc:
            apply(cap, doc)
    meta = _sidecar(cap.path, "capture.json", cap.provenance.notes)
    if meta:
        for k, v in list(meta.items()):  # a model name or tool of 10^6 characters is shown cut, with a count
            if isinstance(v, str) and len(v) > MAX_SIDECAR_TEXT:
                meta[k] = f"{v[:MAX_SIDECAR_TEXT]}…(+{len(v) - MAX_SIDECAR_TEXT:,} chars)"
        cap.meta = meta
        rs = meta.get("r")
        if isinstance(rs, list) and len(rs) == len(cap.slots):
            try:
                parsed = [parse_r(r) for r in rs]
            except ValueError:
                parsed = None
            if parsed:
                for s, r in zip(cap.slots, parsed, strict=True):
                    s.declared_r = r
                cap.provenance.notes.append("slot r values from capture.json")
        elif isinstance(rs, list):
            cap.provenance.notes.append(f"capture.json declares r {rs} for {len(rs)} slots but the file has "
                                        f"{len(cap.slots)}: r not applied to slots")
        if meta.get("layer_ids") is not None and cap.declared_layers is None:
            cap.declared_layers = meta.get("layer_ids")
            cap.declared_convention = meta.get("convention")


def is_capture_name(name: str) -> bool:
    """Whether a dataset listing takes a file of this name as a capture (suffix, and not a known side file)."""
    return name.endswith(CAPTURE_SUFFIXES) and name not in SIDE_FILES


def iter_files(path: str | os.PathLike) -> Iterator[str]:
    """Capture files under a path (a file yields itself), sorted naturally (data_2 before data_10).

    A FIFO, a device or a socket is never listed (opening one could block forever) and is refused when given
    by name; a name that cannot be stat-ed (a dangling link) is listed, so its reader names the problem.
    """
    path = os.fspath(path)
    if os.path.isfile(path) or split_record(path)[1] is not None:
        yield path
        return
    if not os.path.isdir(path):
        if os.path.exists(path):
            raise ForensicsError("not a regular file (a FIFO, a device or a socket); refusing to read it", path=path)
        raise ForensicsError("no such file or directory", path=path)
    found: list[str] = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in SIDE_DIRS)
        found.extend(os.path.join(root, f) for f in files if is_capture_name(f) and _regular_or_broken(root, f))
    yield from sorted(found, key=generic.natural_key)


def expand_paths(paths: Iterable[str | os.PathLike]) -> tuple[list[str], list[ForensicsError]]:
    """Every capture file under ``paths`` (:func:`iter_files`, in the order given), and one error per path that
    cannot be listed or holds no capture file (its ``path`` names it)."""
    found: list[str] = []
    errors: list[ForensicsError] = []
    for p in paths:
        try:
            files = list(iter_files(p))
        except ForensicsError as e:
            errors.append(e)
            continue
        if not files:
            errors.append(ForensicsError("no capture files found", path=os.fspath(p)))
        found += files
    return found, errors


def _regular_or_broken(root: str, name: str) -> bool:
    """False for a FIFO, a device, a socket or a folder (followed through links): never opened."""
    try:
        return stat.S_ISREG(os.stat(os.path.join(root, name)).st_mode)
    except OSError:
        return True


def read_ids(path: str | os.PathLike):
    """Token ids from a file: a ``.pt`` tensor/list (or a dict with ``input_ids``), a ``.npy`` array, or text of
    integers separated by spaces, commas or newlines (a JSON list too). Returns a 1-D int64 tensor.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "ids.txt"; _ = p.write_text("1, 2, 3")
        >>> read_ids(p).tolist()
        [1, 2, 3]
    """
    import torch

    path = os.fspath(path)
    if not os.path.exists(path):
        raise ForensicsError("no such ids file", path=path)
    kind = sniff(path)  # a FIFO, device or socket is refused here, before its first read
    if kind == "zip" and is_npz(path):
        kind = "npz"
    obj: object
    if kind in ("zip", "gzip", "pickle"):
        obj = torch_load(path, kind)
    elif kind in ("npy", "npz"):
        obj = numpy_load(path, kind)
    else:
        raw = read_bounded(path, MAX_IDS_TEXT_BYTES, "the ids file").decode("utf-8", "replace")
        words = [w for w in re.split(r"[\s,\[\]]+", raw) if w]
        bad = next((w for w in words if not re.fullmatch(r"-?\d+", w)), None)
        if not words or bad is not None:
            raise ForensicsError("not an ids file: expected a .pt/.npy tensor or integers separated by spaces, "
                                 f"commas or newlines (found {escape(bad or '')[:40]!r})", path=path)
        long = next((w for w in words if len(w.lstrip("-")) > MAX_ID_DIGITS), None)
        if long is not None:
            raise ForensicsError(f"not a token id: an integer of {len(long.lstrip('-'))} digits (ids have at most "
                                 f"{MAX_ID_DIGITS})", path=path)
        obj = [int(w) for w in words]
    if isinstance(obj, dict):
        obj = next((obj[k] for k in ID_KEYS if k in obj), None)
        if obj is None:
            raise ForensicsError(f"no token ids in the file (looked for {', '.join(ID_KEYS)})", path=path)
    ids = _outside_ids(obj, path)
    if int(ids.numel()) == 0:
        raise ForensicsError("the ids file holds no ids", path=path)
    if bool((ids < 0).any()):
        raise ForensicsError("token ids must be >= 0", path=path)
    return ids.to(torch.int64)
