"""Row-block kernels behind :mod:`forensics.analysis.stats`: per-token norms, median ``|x|``, NaN/Inf and massive rows.

Each reads a ``[tokens, hidden]`` tensor (often mmap-backed bf16) in row blocks with float32 accumulation and
never upcasts the whole tensor; only rows that can hold a finding are read a second time. Re-exported by
``forensics.analysis.stats``, which is where callers should import them from.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from forensics.analysis import fastnorms

if TYPE_CHECKING:  # pragma: no cover
    import torch

# 32 rows of a 7168-wide slot: the bf16 block (0.46 MB) and its float32 copy (0.92 MB) both stay in a 2 MB L2 while
# the taps read the block again. Measured 2026-12-05 on this machine's Xeon (L2 2 MB/core), freshly mmap-loaded
# Kimi-shaped bf16 [1281, 7168] files, 1 thread, CPU time, shared machine (noisy): the statistics-only scan row
# 32.0–33.8 ms/file with 32 rows vs 33.5–34.5 with 64, the norm pass alone 16.3–17.0 vs 17.9–18.6. (On an earlier
# machine, 2026-11-30: 256 rows 3.3 ms/slot, 128 2.6, 64 2.4, 32 2.6 on already-mapped tensors.)
NORM_BLOCK_ROWS = 32
# The fused bf16 kernel (the scan's, fastnorms) makes no float32 copy: a 64-row block (0.92 MB of bf16) stays in L2
# for the taps as well, in half the loop's iterations. Measured 2026-12-06 (in one process, interleaved, 8 Kimi-shaped
# files x 8 rounds, fused scope): a statistics-only scan row 19.7 -> 19.0 ms with 64 rows (128: 19.1), a fingerprinted
# one 37.7 -> 36.9 ms. The norms are the same: the kernel reduces each row on its own.
FUSED_BLOCK_ROWS = 64
MEDIAN_ABS_SAMPLE_COLS = 128  # ≥ this many columns per row (staggered) are sampled to estimate median |x|
MEDIAN_ABS_SAMPLE_SIZE = 32768  # about this many entries in that sample (rows thinned evenly)
MAX_LISTED_DIMS = 8  # feature dims listed per massive token, largest |x| first
NORM_ROUNDING_SLACK = 1e-4  # float32 norms may round below a true max |x|: re-read rows above (1 - slack)·threshold
# torch intra-op threads while reducing row blocks. The block loop is memory-bound: 1 thread does as well as 2
# on an idle machine (measured: 5.4 vs 5.1–6.2 GB/s), and on a busy one each of the many small
# parallel regions waits for a descheduled thread (measured here: 2 threads 20–40× slower than 1 under load).
STATS_THREADS = 1


@contextmanager
def intra_op_threads(n: int | None = -1) -> Iterator[None]:
    """Run the block below with ``n`` torch intra-op threads (-1: ``STATS_THREADS`` as set at call time,
    e.g. ``forensics.analysis.kernels.STATS_THREADS = 2``; None: leave torch's setting alone)."""
    import torch

    n = STATS_THREADS if n == -1 else n
    old = torch.get_num_threads()
    if n is None or n == old:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def token_norms(h: torch.Tensor, block: int = NORM_BLOCK_ROWS) -> torch.Tensor:
    """Per-token L2 norms ``[tokens]`` in float32, computed in row blocks (never upcasting all of ``h``).

    Example:
        >>> import torch
        >>> token_norms(torch.tensor([[3.0, 4.0], [0.0, 1.0]]))
        tensor([5., 1.])
    """

    with intra_op_threads():
        return _token_norms(h, block)


def _token_norms(h: torch.Tensor, block: int) -> torch.Tensor:
    import torch

    out = torch.empty(h.shape[0], dtype=torch.float32)
    bits = _bits_view(h) if fastnorms.active() and h.dtype == torch.bfloat16 else None  # only inside the scan's scope
    if bits is not None and _fused(h, bits):
        fastnorms.bf16_norms(bits.view(np.uint16), out.numpy())
    elif h.dtype in (torch.bfloat16, torch.float16, torch.float32):
        buf = _upcast_buffer(h, block)
        for s in range(0, h.shape[0], block):
            _block_norms(h[s:s + block], buf, out[s:s + block])
    elif h.dtype == torch.float64:  # vector_norm refuses to narrow: accumulate in float64, store float32
        for s in range(0, h.shape[0], block):
            out[s:s + block] = torch.linalg.vector_norm(h[s:s + block], dim=-1)
    else:  # float8 and other types vector_norm cannot promote: upcast one row block at a time
        for s in range(0, h.shape[0], block):
            out[s:s + block] = torch.linalg.vector_norm(h[s:s + block].float(), dim=-1)
    return out


_buffers = threading.local()
KEEP_BUFFER_BYTES = 8 << 20  # a thread keeps its float32 block buffer up to this size (0.9 MB for Kimi's blocks)


def _upcast_buffer(h: torch.Tensor, block: int) -> torch.Tensor | None:
    """A float32 ``[min(block, T), H]`` buffer for the row blocks of a 2-byte float ``h`` (None for float32: reduced as
    stored), reused by every slot and file of this thread: a fresh one per block cost an allocation and, where
    malloc maps it anew, its page faults."""
    import torch

    if h.dtype not in (torch.bfloat16, torch.float16):
        return None
    rows, H = min(block, int(h.shape[0])), int(h.shape[1])
    n = rows * H
    buf = getattr(_buffers, "f32", None)
    if buf is None or buf.numel() < n:
        buf = torch.empty(n, dtype=torch.float32)
        if 4 * n <= KEEP_BUFFER_BYTES:  # kept for the next slot; a larger one (huge blocks or rows) is not
            _buffers.f32 = buf
    return buf[:n].view(rows, H)


def _fused(h: torch.Tensor, bits: np.ndarray | None) -> bool:
    """Whether ``h``'s norms go through :mod:`forensics.analysis.fastnorms` (bf16 with C-contiguous rows, inside
    its ``scope``: the dataset scan)."""
    import torch

    return (fastnorms.active() and h.dtype == torch.bfloat16 and bits is not None and bits.ndim == 2
            and bool(bits.flags.c_contiguous) and h.shape[0] > 0)


def _block_norms(x: torch.Tensor, buf: torch.Tensor | None, out: torch.Tensor) -> None:
    """``out[:] = vector_norm(x, dim=-1, dtype=float32)``, bit for bit, for a float32 or 2-byte float block ``x``.

    On CPU, ``linalg.vector_norm(x, dtype=float32)`` of a bf16/fp16 ``x`` converts the whole block to a new
    float32 tensor and reduces that (ATen ``make_reduction`` casts the input to the result type before the
    reduction kernel runs); converting into the reused ``buf`` instead gives the same float32 values (the
    conversion is exact) to the same kernel, without an allocation per block (10.7 vs 13.5 ms per Kimi-shaped
    file, measured 2026-12-05, 1 thread).
    """
    import torch

    if buf is None:
        torch.linalg.vector_norm(x, dim=-1, dtype=torch.float32, out=out)
        return
    b = buf[:x.shape[0]]
    b.copy_(x)
    torch.linalg.vector_norm(b, dim=-1, out=out)


@lru_cache(maxsize=64)  # one plan per slot shape: building it cost ~0.3 ms per Kimi-sized slot (cProfile)
def _median_abs_plan(T: int, H: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows and per-row columns of the staggered median-|x| sample (see :func:`median_abs_sample`);
    cached per shape, so the arrays are read-only."""
    stride = max(1, H // MEDIAN_ABS_SAMPLE_COLS)
    cols = H // stride
    rows = np.arange(0, T, max(1, (T * cols) // MEDIAN_ABS_SAMPLE_SIZE))
    idx = (np.arange(len(rows))[:, None] % stride) + np.arange(cols)[None, :] * stride
    rows.flags.writeable = idx.flags.writeable = False
    return rows, idx


# Raw-bit views for the sample gather (numpy fancy indexing on the stored bits: no dtype conversion, any width)
_BITS_DTYPES = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}
# First non-finite |x| bit pattern of the 2-byte float types (exponent all ones): bf16 0x7f80, fp16 0x7c00
_NONFINITE_BITS = {"torch.bfloat16": 0x7F80, "torch.float16": 0x7C00}


def _bits_view(h: torch.Tensor) -> np.ndarray | None:
    """``h``'s stored bits as a numpy integer array sharing its memory (None where torch cannot view it)."""
    import torch

    try:
        return h.view(getattr(torch, _BITS_DTYPES[h.element_size()])).numpy()
    except (KeyError, RuntimeError, TypeError):
        return None


def _median_abs_of_bits(bits: np.ndarray, dtype: torch.dtype) -> float:
    """Lower-middle finite ``|x|`` of sampled raw values (the ``torch.median`` convention).

    2-byte floats: ``|x|`` is the bit pattern with the sign cleared, and for non-negative floats bit order is
    value order, so the order statistic of the finite patterns (``np.partition`` of the uint16 patterns) is the
    exact one (the same value, since bf16/fp16 → float32 is exact): 34 µs per 33k-entry sample, against 164 µs
    for a ``bincount`` over every finite pattern and its ``cumsum`` (measured 2026-12-05).
    Other types: upcast the sample to float32 and partition, as before.
    """
    import torch

    bits = bits.ravel()
    limit = _NONFINITE_BITS.get(str(dtype))
    if limit is not None:
        mag = bits.view(np.uint16) & np.uint16(0x7FFF)
        mag = mag[mag < limit]  # patterns ≥ limit are Inf/NaN: left out
        if not mag.size:
            return float("nan")
        k = (mag.size - 1) // 2
        pattern = int(np.partition(mag, k)[k])
        if limit == _NONFINITE_BITS["torch.bfloat16"]:  # a bf16 is the upper half of the float32 of its value
            return float(np.array([pattern << 16], dtype=np.uint32).view(np.float32)[0])
        return float(np.array([pattern], dtype=np.uint16).view(np.float16)[0])
    sample = np.abs(torch.from_numpy(np.ascontiguousarray(bits)).view(dtype).float().numpy())
    return _lower_median(sample)


def _lower_median(sample: np.ndarray) -> float:
    sample = sample[np.isfinite(sample)]
    if not sample.size:
        return float("nan")
    k = (sample.size - 1) // 2
    return float(np.partition(sample, k)[k])


BlockTap = Callable[[int, "torch.Tensor"], None]  # (first row, the row block [rows, H] as stored) → None


def norms_and_median_abs(h: torch.Tensor, block: int = NORM_BLOCK_ROWS,
                         taps: Sequence[BlockTap] = ()) -> tuple[torch.Tensor, float]:
    """One pass over ``h``: per-token norms (exactly :func:`_token_norms`) and :func:`median_abs_sample`.

    The median-|x| sample is gathered from each row block right after its norms, while the block is still in
    cache (a separate strided gather over the mmap-backed tensor cost ~0.8 ms per Kimi-sized slot, the fused
    one ~0.1 ms; measured 2026-11-30). Same sample, same value as :func:`median_abs_sample`.

    ``taps``: further consumers of the same bytes (a checksum of every row, for instance), each called as
    ``tap(first_row, block)`` on every row block in order, right after its norms, with the block as stored
    (a view of ``h``: read it, never write it). Every row reaches every tap exactly once.
    """
    import torch

    T, H = int(h.shape[0]), int(h.shape[1])
    bits = _bits_view(h)
    if bits is None or h.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        norms = _token_norms(h, block)
        for s in range(0, T, block) if taps else ():
            for tap in taps:
                tap(s, h[s:s + block])
        return norms, median_abs_sample(h)
    fused = _fused(h, bits)
    block = max(block, FUSED_BLOCK_ROWS) if fused else block
    rows, idx = _median_abs_plan(T, H)
    plan = _median_abs_block_plan(T, H, block)
    flat = bool(bits.flags.c_contiguous)
    sample = np.empty(idx.size, dtype=bits.dtype)
    out = torch.empty(T, dtype=torch.float32)
    buf = None if fused else _upcast_buffer(h, block)
    ubits = bits.view(np.uint16) if fused else bits
    out_np = out.numpy()
    for s, (j0, j1, at) in zip(range(0, T, block), plan, strict=True):
        x = h[s:s + block]
        if fused:
            fastnorms.bf16_norms(ubits[s:s + block], out_np[s:s + block])
        elif buf is None:
            torch.linalg.vector_norm(x, dim=-1, dtype=torch.float32, out=out[s:s + block])
        else:  # as _block_norms, inline (this loop runs ~160 times per Kimi-shaped file)
            b = buf if s + block <= T else buf[:T - s]
            b.copy_(x)
            torch.linalg.vector_norm(b, dim=-1, out=out[s:s + block])
        for tap in taps:
            tap(s, x)
        if j1 > j0:
            part = sample[j0 * idx.shape[1]:j1 * idx.shape[1]]
            if flat:  # one flat gather of the block's sampled entries (cheaper than 2-D fancy indexing)
                np.take(bits[s:s + block].reshape(-1), at, out=part, mode="clip")
            else:
                part[:] = bits[rows[j0:j1, None], idx[j0:j1]].ravel()
    if not sample.size:
        return out, float("nan")
    return out, _median_abs_of_bits(sample, h.dtype)


@lru_cache(maxsize=16)
def _median_abs_block_plan(T: int, H: int, block: int) -> tuple[tuple[int, int, np.ndarray], ...]:
    """Per row block of :func:`norms_and_median_abs`: the sampled rows ``j0:j1`` of :func:`_median_abs_plan` it
    holds and their entries' flat offsets from the block's first entry (in the sample's order: row by row)."""
    rows, idx = _median_abs_plan(T, H)
    plan = []
    for s in range(0, T, block):
        j0, j1 = (int(j) for j in np.searchsorted(rows, [s, min(s + block, T)]))
        at = ((rows[j0:j1, None] - s) * H + idx[j0:j1]).ravel().astype(np.intp)
        at.flags.writeable = False
        plan.append((j0, j1, at))
    return tuple(plan)


def median_abs_sample(h: torch.Tensor) -> float:
    """Median ``|x|`` of a slot from a staggered sample of about ``MEDIAN_ABS_SAMPLE_SIZE`` entries.

    ``stride = H // MEDIAN_ABS_SAMPLE_COLS``; the j-th sampled row reads columns ``j % stride + k·stride``,
    so every feature dim is sampled across rows (hidden states have strong per-dim scales: a fixed column
    subset was biased by up to 8% on the SmolLM2 captures, the staggered sample by ≤ 4%). Rows are
    thinned evenly so the sample stays near ``MEDIAN_ABS_SAMPLE_SIZE``. Exact when
    ``H < 2 · MEDIAN_ABS_SAMPLE_COLS`` and ``T · H ≤ MEDIAN_ABS_SAMPLE_SIZE``. NaN/Inf are left out; the
    lower middle value is taken (as ``torch.median``). :func:`norms_and_median_abs` computes the same value
    during the norm pass.
    """
    import torch

    T, H = int(h.shape[0]), int(h.shape[1])
    rows, idx = _median_abs_plan(T, H)
    bits = _bits_view(h)
    if bits is not None:
        return _median_abs_of_bits(bits[rows[:, None], idx], h.dtype)
    sample = h[torch.from_numpy(rows)[:, None], torch.from_numpy(idx)].float()
    return _lower_median(np.abs(sample.numpy().ravel()))  # numpy: no thread-pool start-up


def _row_blocks(h: torch.Tensor, rows: list[int], block: int):
    """Yield ``(row positions, rows as float32)`` for the given rows, ``block`` rows at a time."""
    import torch

    for s in range(0, len(rows), block):
        idx = rows[s:s + block]
        yield idx, h[torch.tensor(idx, dtype=torch.long)].float()


def nonfinite_rows(h: torch.Tensor, norms: torch.Tensor, block: int = NORM_BLOCK_ROWS) -> tuple[dict, dict]:
    """NaN and Inf counts per token position (only rows whose norm is not finite are re-read)."""
    import torch

    nan, inf = {}, {}
    bad = np.flatnonzero(~np.isfinite(norms.numpy())).tolist()  # numpy: ~10× less overhead on ~1000 norms
    for idx, rows in _row_blocks(h, bad, block):
        n_nan, n_inf = torch.isnan(rows).sum(-1).tolist(), torch.isinf(rows).sum(-1).tolist()
        for p, a, b in zip(idx, n_nan, n_inf, strict=True):
            if a:
                nan[p] = int(a)
            if b:
                inf[p] = int(b)
    return nan, inf


def massive_activations(h: torch.Tensor, norms: torch.Tensor, threshold: float, median_abs: float,
                        block: int = NORM_BLOCK_ROWS) -> list[dict]:
    """Tokens holding an entry with ``|x| > threshold`` (Sun et al. 2024), with their feature dims.

    Exact without a full pass: ``|x_i| ≤ ‖x‖₂``, so only rows whose norm exceeds the threshold (or is not
    finite) can hold a massive entry, and only those rows are re-read.
    """
    import torch

    cand = torch.nonzero(~(norms <= threshold * (1 - NORM_ROUNDING_SLACK))).flatten().tolist()
    out = []
    for idx, rows in _row_blocks(h, cand, block):
        a = rows.abs_()
        a[~torch.isfinite(a)] = 0.0  # NaN/Inf are reported as non-finite, not as massive
        amax = a.amax(-1)
        for j, p in enumerate(idx):
            m = float(amax[j])
            if m <= threshold:
                continue
            row = a[j]
            hot = torch.nonzero(row > threshold).flatten()
            dims = hot[torch.argsort(row[hot], descending=True)].tolist()
            out.append({"pos": int(p), "max_abs": m,
                        "ratio_to_median_abs": m / median_abs if median_abs > 0 else None,
                        "dims": [int(d) for d in dims[:MAX_LISTED_DIMS]], "num_dims": len(dims)})
    return out


SUMMARY_PERCENTILES = (1, 5, 25, 50, 75, 95, 99)
_SUMMARY_Q = np.asarray(SUMMARY_PERCENTILES) / 100  # formed as numpy.percentile forms its quantiles


def robust_summary(x: np.ndarray, pos: np.ndarray, order: np.ndarray | None = None) -> dict:
    """``{n, mean, std, median, p01, p05, p25, p75, p95, p99, mad, min, min_pos, max, max_pos}`` of the finite
    float64 values ``x`` (non-empty) at positions ``pos``.

    Bit for bit what ``numpy.percentile`` (its default "linear" method, same virtual index and the same
    two-sided interpolation), ``numpy.median``, ``mean``, ``std`` and first-occurrence ``argmin``/``argmax``
    give, from one sort instead of one partition per statistic: 0.43 vs 1.05 ms on 1281 norms (measured
    2026-12-01, loaded machine), i.e. ~2–3 ms per Kimi-sized file. ``order``: ``np.argsort(x, kind="stable")``
    when the caller has it already (:func:`~forensics.analysis.stats.norm_summaries` sorts once for several
    subsets).

    Example:
        >>> robust_summary(np.array([3.0, 1.0, 2.0]), np.arange(3))["median"]
        2.0
    """
    n = int(x.size)
    if order is None:
        order = np.argsort(x, kind="stable")
    s = x[order]
    vi = (n - 1) * _SUMMARY_Q
    lo = np.floor(vi).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    g = vi - lo
    a, b = s[lo], s[hi]
    d = b - a
    q = np.where(g >= 0.5, b - d * (1 - g), a + d * g)  # numpy's _lerp
    med = float(q[3])
    dev = np.abs(x - med)
    k = n // 2
    if n % 2:
        mad = float(np.partition(dev, k)[k])
    else:
        part = np.partition(dev, [k - 1, k])
        mad = float(np.mean(part[k - 1:k + 1]))
    return {"n": n, "mean": float(x.mean()), "std": float(x.std()), "median": med, "p01": float(q[0]),
            "p05": float(q[1]), "p25": float(q[2]), "p75": float(q[4]), "p95": float(q[5]), "p99": float(q[6]),
            "mad": mad, "min": float(s[0]), "min_pos": int(pos[order[0]]), "max": float(s[-1]),
            "max_pos": int(pos[int(x.argmax())])}
