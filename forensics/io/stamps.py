"""Layer identity stamped into the data: the stamp record, its per-slot checksums, and what a valid record is.

A stamp says, per capture file, what each slot is (r, label), which convention and which producer (engine or
trainer, with its version) made it, the target model and its L, the file it was made for, and a compact
fingerprint of the values: per-slot row-norm quantiles, a per-slot checksum, a token-id checksum and a hash of a
few embedding rows. Where it is stored: :mod:`forensics.io.stamp_store`.

The checksum (stamp version 2) is not cryptographic, but it depends on every byte *and its position*. Each row
of a slot, read as signed bytes ``b[0..n)``, is mixed into 8 int32 sums ``m[c] = Σ_k b[k]·w[k, c]`` with fixed
pseudo-random weights ``1 ≤ |w| ≤ 63`` per byte position (splitmix64 of the position); the digest is SHA-256 of
the shape and every row's 8 sums, in row order. The sums are exact integers (``|m| ≤ 128·63·n < 2^31`` for
rows up to 260 KB; a wider row is mixed in segments of that size), so any kernel gives the same digest: an int8
matrix product (``torch._int_mm``: VNNI/AMX at memory speed) or, where it is missing, float64 BLAS.
What it catches, whatever the data:

- any single changed byte (every weight is nonzero);
- two bytes swapped, or changed together (a word or lane swap, a ±1-ulp pair, a pair of sign flips): missed
  only if their weight rows are proportional across all 8 lanes, about 2^-48 for random weights;
- a permutation of chunks of every row (the halves of H swapped by a tensor-parallel gather in the wrong rank
  order), reordered rows, swapped slots, a slot from elsewhere.

Version 1 stamps (the wrapping uint64 sum of each row's 8-byte words) are still read and checked; they miss
every edit that keeps a row's word sum, which the round-3 hardening cases measured at 20/20 for word swaps, the
halves of H swapped, same-lane swaps, paired top-lane sign flips and ±1-ulp pairs. ``hsf verify`` says so.
"""

from __future__ import annotations

import functools
import hashlib
import json
import struct
import warnings
from typing import Any

import numpy as np

from forensics.errors import ForensicsError
from forensics.layers import r_label

STAMP_KEY = "hsf.stamp"
STAMP_VERSION = 2  # 2: position-dependent byte-mix checksum and the file name; 1: row word sums (weaker)
NORM_QUANTILES = (0.01, 0.1, 0.5, 0.9, 0.99)  # row-norm quantiles kept per slot: tails and median
EMBED_ROWS = 4  # distinct tokens whose embedding rows are hashed (enough to tell two models apart)
NORM_BLOCK_ROWS = 4096  # rows per fp32 block when computing norms (bounded memory)
DIGEST_HEX = 16  # hex characters kept of each SHA-256 (64 bits: accidental collisions ~2^-64)
MIX_LANES = 8  # int32 sums per row: a two-byte edit is missed only if both weight rows are proportional
MIX_MAX_WEIGHT = 63  # |w| ≤ 63: a u8·s8 pair sum stays inside int16 (exact even on kernels that saturate there)
MIX_SEED = 0x6873662D73746D70  # "hsf-stmp"
MIX_MAX_ROW_BYTES = (2 ** 31 - 1) // (128 * MIX_MAX_WEIGHT)  # exact int32 sums up to this row size (266 KB)
MIX_BLOCK_ROWS = 256  # rows per float64 block on the fallback path
_INT_VIEW = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}


def _int_array(t) -> Any:
    """A numpy view of a tensor's raw bytes as integers of the same width (no copy; bf16 included). A numpy
    array (``raw_slot_arrays``) is already one."""
    import torch

    if not isinstance(t, torch.Tensor):
        return t
    it = t.element_size()
    return t.view(getattr(torch, _INT_VIEW[it])).numpy()


def _rows(t) -> Any:
    """The slot as a 2-D integer array whose last axis is contiguous (a copy only when it is not)."""
    a = _int_array(t)
    if a.ndim == 1:
        a = a.reshape(-1, 1)
    if a.ndim != 2:
        a = a.reshape(a.shape[0], -1)
    if a.shape[1] > 1 and a.strides[1] != a.itemsize:  # rare; never for our readers
        a = np.ascontiguousarray(a)
    return a


def checksum_v1(t) -> str:
    """Version 1 (read only): SHA-256 of the shape and the wrapping uint64 sums of each row's words."""
    a = _rows(t)
    row_bytes = a.shape[1] * a.itemsize
    width = next(w for w in (8, 4, 2, 1) if w >= a.itemsize and row_bytes % w == 0)
    u = a.view(f"<u{width}")
    rows = u.sum(axis=1, dtype=np.uint64)
    h = hashlib.sha256(struct.pack("<QQ", *a.shape))
    h.update(rows.tobytes())
    return h.hexdigest()[:DIGEST_HEX]


@functools.lru_cache(maxsize=8)
def mix_weights(row_bytes: int) -> Any:
    """The ``[row_bytes, MIX_LANES]`` int8 weights: ``±(1 + z mod 63)`` with ``z`` = splitmix64 of the position
    (the same on every machine and numpy version; never zero)."""
    with np.errstate(over="ignore"):
        z = np.arange(row_bytes * MIX_LANES, dtype=np.uint64) + np.uint64(MIX_SEED)
        z = z * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    mag = (z % np.uint64(MIX_MAX_WEIGHT)).astype(np.int16) + 1
    sign = ((z >> np.uint64(32)) & np.uint64(1)).astype(np.int16)
    w = np.where(sign == 1, -mag, mag).astype(np.int8).reshape(row_bytes, MIX_LANES)
    w.setflags(write=False)
    return w


def row_mix(t) -> Any:
    """``[rows, MIX_LANES]`` int32: each row's bytes (signed) times :func:`mix_weights`, summed exactly."""
    a = _rows(t)
    b = a.view(np.int8) if a.shape[1] else np.zeros((a.shape[0], 0), np.int8)
    n = b.shape[1]
    if b.shape[0] == 0 or n == 0:
        return np.zeros((b.shape[0], MIX_LANES), np.int32)
    w = mix_weights(n)
    if n > MIX_MAX_ROW_BYTES:  # a very wide row: exact sums per segment, each with its positions' weights
        return np.concatenate([row_mix_segment(b[:, i:i + MIX_MAX_ROW_BYTES], w[i:i + MIX_MAX_ROW_BYTES],
                                               (n, i, min(n, i + MIX_MAX_ROW_BYTES)))
                               for i in range(0, n, MIX_MAX_ROW_BYTES)], axis=1)
    return row_mix_segment(b, w, (n, 0, n))


@functools.lru_cache(maxsize=8)
def _mix_weights_tensor(row_bytes: int, first: int, last: int) -> Any:
    """``mix_weights(row_bytes)[first:last]`` as a torch tensor (a writable copy, made once: ``from_numpy`` of the
    read-only weights warned on every product, and the warning filter set up around it cost more than the
    product itself, ~0.4 ms a block; measured 2026-12-05)."""
    import torch

    return torch.from_numpy(np.array(mix_weights(row_bytes)[first:last]))


def row_mix_segment(b, w, key: tuple[int, int, int] | None = None) -> Any:
    """``b @ w`` for int8 ``b`` (rows × n, n ≤ ``MIX_MAX_ROW_BYTES``) and weights ``w``, as exact int32.
    ``key``: ``(row_bytes, first, last)`` when ``w`` is ``mix_weights(row_bytes)[first:last]`` (its tensor is
    then made once)."""
    try:
        import torch

        threads = torch.get_num_threads()
        try:  # one thread: the product is bound by memory, and extra threads only contend (measured 2-4x
            # slower than one thread on a loaded 2-core machine, and no faster on an idle one)
            if threads != 1:
                torch.set_num_threads(1)
            wt = _mix_weights_tensor(*key) if key is not None else None
            if wt is not None and b.flags.writeable:  # nothing read-only: nothing for torch to warn about
                return torch._int_mm(torch.from_numpy(b), wt).numpy()
            with warnings.catch_warnings():  # a read-only memory map: torch warns, and only reads it
                warnings.simplefilter("ignore")
                return torch._int_mm(torch.from_numpy(b), wt if wt is not None else torch.from_numpy(w)).numpy()
        finally:
            if threads != 1:
                torch.set_num_threads(threads)
    except (ImportError, AttributeError, RuntimeError, NotImplementedError, TypeError):
        return row_mix_reference(b, w)


def row_mix_reference(b, w) -> Any:
    """The same sums through float64 BLAS (exact: every partial sum is an integer below 2^53)."""
    wf = w.astype(np.float64)
    out = np.empty((b.shape[0], MIX_LANES), np.int32)
    for i in range(0, b.shape[0], MIX_BLOCK_ROWS):
        out[i:i + MIX_BLOCK_ROWS] = (b[i:i + MIX_BLOCK_ROWS].astype(np.float64) @ wf).astype(np.int32)
    return out


def checksum(t) -> str:
    """Checksum (stamp version 2) of a ``[tokens, hidden]`` tensor's bytes: SHA-256 of its shape and every row's
    position-dependent byte mix (:func:`row_mix`), in row order.

    Example:
        >>> import torch
        >>> x = torch.arange(8, dtype=torch.float32).reshape(2, 4)
        >>> checksum(x) == checksum(x.clone()), checksum(x) == checksum(x[:, [2, 3, 0, 1]])
        (True, False)
    """
    a = _rows(t)
    h = hashlib.sha256(struct.pack("<QQ", *a.shape) + b"mix8")
    m = row_mix(a)
    h.update(m.data if m.dtype == "<i4" and m.flags.c_contiguous else m.astype("<i4").tobytes())  # no copy
    return h.hexdigest()[:DIGEST_HEX]


MIX_BATCH_ROWS = 256  # rows per int8 product when fed in blocks: 64-row products cost ~1.5x per byte (small M)


class BlockChecksum:
    """:func:`checksum` of a ``[rows, cols]`` slot fed in row blocks, in order (``add(start, block)``), as another
    pass reads them (the statistics' norm pass): the same digest, without reading the slot a second time. Blocks
    are gathered into ``MIX_BATCH_ROWS``-row products (still in cache). ``digest()`` is None unless every row
    arrived exactly once, in order.

    Example:
        >>> import torch
        >>> x = torch.arange(24, dtype=torch.float32).reshape(6, 4)
        >>> b = BlockChecksum(x.shape)
        >>> for s in range(0, 6, 4):
        ...     b.add(s, x[s:s + 4])
        >>> b.digest() == checksum(x)
        True
    """

    def __init__(self, shape) -> None:
        self.rows, self.cols = int(shape[0]), int(shape[1])
        self.next = 0
        self.parts: list = []
        self.pending: list = []
        self.pending_rows = 0
        self.broken = False

    def add(self, start: int, block) -> None:
        if self.broken or start != self.next:
            self.broken = True
            return
        a = _rows(block)
        if a.shape[1] != self.cols:
            self.broken = True
            return
        self.pending.append(a)
        self.pending_rows += a.shape[0]
        self.next = start + a.shape[0]
        if self.pending_rows >= MIX_BATCH_ROWS or self.next == self.rows:
            self._flush()

    def _flush(self) -> None:
        if self.pending:
            a = self.pending[0] if len(self.pending) == 1 else np.concatenate(self.pending)
            self.parts.append(row_mix(a))
        self.pending, self.pending_rows = [], 0

    def digest(self) -> str | None:
        self._flush()
        if self.broken or self.next != self.rows:
            return None
        h = hashlib.sha256(struct.pack("<QQ", self.rows, self.cols) + b"mix8")
        m = np.concatenate(self.parts) if self.parts else np.zeros((0, MIX_LANES), np.int32)
        h.update(m.astype("<i4").tobytes())
        return h.hexdigest()[:DIGEST_HEX]


def checksum_for(version: int):
    """The checksum function a stamp of ``version`` was made with."""
    return checksum_v1 if version == 1 else checksum


def norm_quantiles(t) -> list[float]:
    """Quantiles ``NORM_QUANTILES`` of the slot's per-row L2 norms (fp32 blocks, float64 quantiles), 6 digits."""
    import torch

    norms = torch.cat([torch.linalg.vector_norm(t[i:i + NORM_BLOCK_ROWS].float(), dim=1)
                       for i in range(0, t.shape[0], NORM_BLOCK_ROWS)])
    q = np.quantile(norms.double().numpy(), NORM_QUANTILES)
    return [float(f"{x:.6g}") for x in q]


def token_checksum(ids) -> str | None:
    import torch

    if ids is None:
        return None
    return hashlib.sha256(ids.to(torch.int64).contiguous().numpy().tobytes()).hexdigest()[:DIGEST_HEX]


def embed_rows(t, ids) -> dict | None:
    """Hash of the embedding rows of the first ``EMBED_ROWS`` distinct tokens (what model made the data)."""
    import torch

    if ids is None:
        return None
    seen: dict[int, int] = {}
    for pos, tok in enumerate(ids.tolist()):
        if tok not in seen:
            seen[tok] = pos
        if len(seen) == EMBED_ROWS:
            break
    h = hashlib.sha256()
    for tok, pos in seen.items():
        h.update(struct.pack("<q", tok))
        h.update(t[pos].contiguous().view(torch.uint8).numpy().tobytes())
    return {"token_ids": list(seen), "sha256": h.hexdigest()[:DIGEST_HEX]}


def slot_record(t, name: str, r: Any, label: str | None, dtype: str) -> dict:
    return {"name": name, "r": r, "label": label, "dtype": dtype, "shape": [int(t.shape[0]), int(t.shape[1])],
            "norm_q": norm_quantiles(t), "checksum": checksum(t)}


def build_record(slots: list[dict], ids, embed: dict | None, *, fmt: str, producer: str | None,
                 convention: str | None, layer_ids: list | None, model: str | None, num_layers: int | None,
                 tool_version: str, file: str | None = None) -> dict:
    """The stamp of one file (JSON-safe; every value a string, number, list or null). ``file``: the file's path
    relative to the stamped folder (``verify`` checks it is where the file now is: a copy does not verify)."""
    return {"version": STAMP_VERSION, "tool": f"hsf {tool_version}", "format": fmt, "file": file,
            "producer": producer, "convention": convention, "layer_ids": layer_ids,
            "target": {"model": model, "num_layers": num_layers}, "quantiles": list(NORM_QUANTILES),
            "tokens": {"n": None if ids is None else int(ids.numel()), "checksum": token_checksum(ids)},
            "embed_rows": embed, "slots": slots}


def record_for_states(states: list, rs: list, ids, *, fmt: str, producer: str, convention: str | None,
                      layer_ids: list | None, model: str | None, num_layers: int | None, tool_version: str,
                      file: str | None = None) -> dict:
    """The stamp of a sample about to be written from its ``[tokens, hidden]`` states (as stored: same dtype),
    for writers that know every slot's r (``hsf capture``)."""
    slots = [slot_record(t, f"slot {j}", r, r_label(r), str(t.dtype)) for j, (t, r) in enumerate(zip(states, rs,
                                                                                                      strict=True))]
    embed = next((embed_rows(t, ids) for t, r in zip(states, rs, strict=True) if r == 0), None)
    return build_record(slots, ids, embed, fmt=fmt, producer=producer, convention=convention, layer_ids=layer_ids,
                        model=model, num_layers=num_layers, tool_version=tool_version, file=file)


def metadata_entry(stamp: dict) -> dict[str, str]:
    """The ``__metadata__`` entry a safetensors writer adds for ``stamp`` (string values only)."""
    return {STAMP_KEY: json.dumps(stamp, separators=(",", ":"), sort_keys=True)}


# ---- what a valid record is --------------------------------------------------------------------------------

_SCALAR = (str, int, float, bool, type(None))


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _opt(x: Any, *types) -> bool:
    return x is None or isinstance(x, types)


def stamp_problem(doc: Any) -> str | None:  # noqa: C901 - complexity 17, to be paid down
    """What is wrong with a stamp record, or None when every field has the type ``verify`` and the views read.

    Example:
        >>> stamp_problem({"version": 2, "slots": "four"})
        "'slots' is not a list"
    """
    if not isinstance(doc, dict):
        return "not an object"
    v = doc.get("version", 1)
    if not _is_int(v) or v not in (1, STAMP_VERSION):
        return f"unknown version {v!r}"[:120]
    slots = doc.get("slots")
    if not isinstance(slots, list):
        return "'slots' is not a list"
    for i, s in enumerate(slots):
        if not isinstance(s, dict):
            return f"slot {i} is not an object"
        shape = s.get("shape")
        if not (isinstance(shape, list) and len(shape) == 2 and all(_is_int(x) and x >= 0 for x in shape)):
            return f"slot {i}: 'shape' is not two non-negative integers"
        if not isinstance(s.get("checksum"), str):
            return f"slot {i}: 'checksum' is not a string"
        q = s.get("norm_q")
        if not (isinstance(q, list) and len(q) == len(NORM_QUANTILES) and all(_is_num(x) for x in q)):
            return f"slot {i}: 'norm_q' is not {len(NORM_QUANTILES)} numbers"
        if not (_opt(s.get("label"), str) and _opt(s.get("name"), str) and _opt(s.get("dtype"), str)
                and isinstance(s.get("r"), _SCALAR)):
            return f"slot {i}: 'name', 'label', 'dtype' or 'r' has the wrong type"
    tok = doc.get("tokens")
    if not (tok is None or (isinstance(tok, dict) and _opt(tok.get("checksum"), str)
                            and (tok.get("n") is None or _is_int(tok.get("n"))))):
        return "'tokens' is not {n, checksum}"
    tgt = doc.get("target")
    if not (tgt is None or (isinstance(tgt, dict) and isinstance(tgt.get("model"), _SCALAR)
                            and (tgt.get("num_layers") is None or _is_int(tgt.get("num_layers"))))):
        return "'target' is not {model, num_layers}"
    for key in ("producer", "convention", "file", "format", "tool"):
        if not _opt(doc.get(key), str):
            return f"'{key}' is not a string"
    samples = doc.get("samples")
    if not (samples is None or (isinstance(samples, list) and all(isinstance(x, str) for x in samples))):
        return "'samples' is not a list of digests"
    if not _opt(doc.get("layer_ids"), list) or not _opt(doc.get("embed_rows"), dict):
        return "'layer_ids' or 'embed_rows' has the wrong type"
    if v == STAMP_VERSION and not isinstance(doc.get("file"), str):
        return "'file' is missing"
    return None


def check_stamp(doc: Any, path: str, where: str) -> dict:
    """``doc`` when it is a valid stamp record, else a one-line ForensicsError naming the file."""
    why = stamp_problem(doc)
    if why is not None:
        raise ForensicsError(f"malformed stamp in {where}: {why}", path=path)
    return doc
