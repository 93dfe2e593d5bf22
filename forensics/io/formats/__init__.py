"""Format readers, auto-detected from content: every reader produces one `Capture`.

Detection order: the container is sniffed from the first bytes (zip/legacy torch pickle, gzip,
safetensors), then the keys decide the reader (``hidden_states`` list → speculators v1;
``aux_hidden_state`` → SpecForge; ``hidden_state`` + ``target`` → speculators v0; ``hidden_state`` alone
→ EAGLE-1/2; a ``[seq, k, H]``/``[k, seq, H]`` ``hidden_states`` stack in safetensors (optionally with a
leading batch dim of 1) → speculators current, except a single ``[1, seq, H]`` sequence; anything else
with float tensors → generic). File names never decide (a checkpoint named ``.safetensors`` is still read
as a checkpoint). Side files add declared layers: ``capture.json`` (written by ``hsf capture``; ``"r"`` per
slot) and, for speculators v1 only, ``data_config.json`` (``hidden_states.layer_ids``, r = id + 1).
Anything a reader did not foresee still becomes a :class:`ForensicsError` naming the file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from forensics.errors import ForensicsError
from forensics.io.capture import Capture
from forensics.io.formats import eagle, generic, specforge, speculators, speculators_v0, speculators_v1
from forensics.io.formats._io import SafetensorsFile, read_json, sniff, torch_load
from forensics.layers import FINAL_POST

TORCH_READERS = (speculators_v1, specforge, speculators_v0, eagle, generic)  # order matters
CAPTURE_SUFFIXES = (".pt", ".pth", ".ckpt", ".ckpt.gz", ".pt.gz", ".safetensors", ".bin")
SIDE_FILES = {"token_freq.pt", "model.safetensors", "training_args.bin", "optimizer.pt", "scheduler.pt"}
SIDE_DIRS = {"tokenizer", ".git", "__pycache__", ".ipynb_checkpoints"}

__all__ = ["load", "iter_files", "detect_format", "FORMATS"]
FORMATS = [m.NAME for m in TORCH_READERS] + [speculators.NAME]


def detect_format(path: str) -> str:
    """The format name a file would be read as (reads only what detection needs)."""
    return load(path).format


def load(path: str | os.PathLike) -> Capture:
    """Read one capture file, whatever its format.

    Example:
        >>> cap = load("sample_data/speculators_v1/data_0.pt")      # doctest: +SKIP
        >>> [s.name for s in cap.slots]                             # doctest: +SKIP
        ['hidden_states[0]', 'hidden_states[1]', 'hidden_states[2]', 'hidden_states[3]']
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ForensicsError("is a directory; pass a file, or use iter_files()/scan for a dataset", path=path)
    if not os.path.exists(path):
        raise ForensicsError("no such file", path=path)
    kind = sniff(path)
    if kind == "safetensors":
        sf = SafetensorsFile(path)
        reader = speculators if speculators.match_safetensors(sf) else generic
        cap = _guarded(reader.NAME, path, reader.read_safetensors, sf, path)
    elif kind in ("zip", "gzip", "pickle"):
        obj = torch_load(path, kind)
        torch_reader = next((r for r in TORCH_READERS if r.match(obj)), None)
        if torch_reader is None:
            what = f"dict with keys {sorted(map(str, obj))[:12]}" if isinstance(obj, dict) else type(obj).__name__
            raise ForensicsError(f"no reader recognises this content ({what}); expected one of the formats "
                                 f"{', '.join(FORMATS)}", path=path)
        cap = _guarded(torch_reader.NAME, path, torch_reader.read, obj, path)
    else:
        raise ForensicsError(
            "not a torch checkpoint, safetensors file or gzip stream (the first bytes match no supported "
            "container; a text file?)", path=path)
    _apply_sidecars(cap)
    return cap


def _guarded(fmt: str, path: str, fn, *args) -> Capture:
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


def _apply_sidecars(cap: Capture) -> None:
    from forensics.layers import parse_r

    # data_config.json is written by speculators' legacy generator next to its data_{i}.pt files only
    # (speculators DataGenerationConfig); it says nothing about other formats.
    cfg = _sidecar(cap.path, "data_config.json", cap.provenance.notes) if cap.format == speculators_v1.NAME else None
    hs_cfg = cfg.get("hidden_states") if cfg else None
    ids = hs_cfg.get("layer_ids") if isinstance(hs_cfg, dict) else None
    if isinstance(ids, list):
        cap.declared_layers = ids
        cap.declared_convention = "speculators-legacy"
        if len(ids) == len(cap.slots) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            # the legacy generator captures *after* block id (custom_worker._patched_forward), so r = id + 1;
            # speculators' tests/datagen/test_vllm_hidden_states.py @ dd6deac9: id 2 == HF hidden_states[3]
            for s, i in zip(cap.slots, ids, strict=True):
                s.declared_r = i + 1
            cap.provenance.notes.append(f"layer ids {ids} from data_config.json (speculators legacy generator: "
                                        "r = id + 1)")
        else:
            cap.provenance.notes.append(f"data_config.json declares layer ids {ids} but the file has "
                                        f"{len(cap.slots)} slots: ids not applied to slots")
    meta = _sidecar(cap.path, "capture.json", cap.provenance.notes)
    if meta:
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
    if cap.format == "specforge" and cap.slots[-1].declared_r is None:
        cap.slots[-1].claimed = FINAL_POST


def is_capture_name(name: str) -> bool:
    """Whether a dataset listing takes a file of this name as a capture (suffix, and not a known side file)."""
    return name.endswith(CAPTURE_SUFFIXES) and name not in SIDE_FILES


def iter_files(path: str | os.PathLike) -> Iterator[str]:
    """Capture files under a path (a file yields itself), sorted naturally (data_2 before data_10).

    A FIFO, a device or a socket is never listed (opening one could block forever) and is refused when given
    by name; a name that cannot be stat-ed (a dangling link) is listed, so its reader names the problem.
    """
    path = os.fspath(path)
    if os.path.isfile(path):
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


def _regular_or_broken(root: str, name: str) -> bool:
    """False for a FIFO, a device, a socket or a folder (followed through links): never opened."""
    import stat

    try:
        return stat.S_ISREG(os.stat(os.path.join(root, name)).st_mode)
    except OSError:
        return True
