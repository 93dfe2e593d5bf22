"""Data-only depth signals between slots: exact duplicate rows, masked angular distance, seriation.

* Duplicate rows: the embedding output is a table lookup, so repeated token ids give bit-identical
  rows; any later layer mixes in context (transformers issue #2461).
* Masked angular distance: per-token ``arccos(cos(a_t, b_t)) / π`` averaged over tokens (Gromov et al.,
  ICLR 2025), after dropping sink tokens and masking massive-activation dims (rogue dims dominate raw
  cosine: "All Bark and No Bite", EMNLP 2021) and mean-centring each slot.
* Seriation: the residual stream accumulates, so the depth order is the Hamiltonian path of least
  total distance (ShortGPT / "Layers as Painters": adjacent layers are closest); the path's direction
  is decided separately (norm growth, sink fading; see ``fingerprint.py``).
* ``normalizes``: slot B equals RMSNorm(slot A) with some per-dim gain γ — then B is post-norm and A is
  the final pre-norm state, without reading γ from a checkpoint.

Cost: the distances and the RMSNorm fit read a fixed, evenly strided sample of rows (:func:`sample_rows`:
every kept row up to ``DISTANCE_SAMPLE_ROWS``), never whole slots, and report the sampling error
(:class:`DistanceSample`); duplicate rows hash a few columns of every row and compare whole rows only
where the hashes agree. A Kimi-sized fingerprint (4 × bf16 [1281, 7168]) went from 0.5–0.75 s to about
twice its statistics (``benchmarks/bench_fingerprint.py``).
"""

from __future__ import annotations

import functools
import itertools
import math
import sys
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from forensics.io.pages import TrailingRelease, release_tensors

if TYPE_CHECKING:  # pragma: no cover
    import torch

# Rows of the distance sample. Measured 2026-12-01 on Kimi-shaped files (kimi_like seeds 0–1, 1280 kept rows):
# 128 rows gave |D_sample − D_all rows| ≤ 8.4e-4 with a standard error of 4–6e-4 and cost 8–10 ms of CPU
# per file (256 rows: 16–30 ms; all rows in float32 blocks: 0.4–0.6 s). The pairwise distances between
# distinct layers there are ≥ 0.1 apart, so the depth chain does not move. 96 since 2026-12-06 (the fingerprint
# 2.6 ms, 6 %, cheaper on a Kimi-shaped file): |D_sample − D_all rows| ≤ 1.2e-3 on 8 Kimi-shaped files (128: ≤
# 1.2e-3), the same verdicts as all rows on them and on sample_data; on the corpus's evaluation half every verdict,
# role, label, depth order and cannot-tell is unchanged (1,968 results: only the order confidence moved, median
# |Δ| 0.004, mean +0.0004), where 64 rows turned one data-only order from decided to cannot tell. A near-tie is
# seriated on all rows either way (settle_chain).
DISTANCE_SAMPLE_ROWS = 96
DISTANCE_BLOCK_ELEMENTS = 1 << 20  # float32 elements of one row block over all slots (4 MB; fewer, larger torch
# calls: at 1 MB blocks the per-call overhead of ~600 small ops was a third of the distance cost on a loaded machine)
NEAR_PARALLEL_COS = 0.9999  # float32 cosines above this are recomputed in float64 (arccos is ill-conditioned
# near 1: a float32 cosine of two near-duplicate slots is only good to ~1e-4 in the distance)
CHAIN_TIE_SIGMAS = 3.0  # a best depth path ahead of the runner-up by at most this many standard errors of the
# cost difference is settled on all rows (a near-tie is a coin flip on a sample)
DISTANCE_CHUNK_ELEMENTS = 1 << 18  # float32 elements of the rows centred and multiplied at a time (1 MB: a core's L2
# holds them; 8–16-row chunks of the Kimi-shaped sample were the fastest, 2026-12-05)
DISTANCE_BUFFER_ELEMENTS = 1 << 23  # up to this many sampled elements (32 MB float32) are gathered once into one
# buffer (Kimi: 96 rows × 4 × 7168 = 2.8 M); beyond, two passes over row blocks keep memory bounded
DUP_KEY_COLS = 16  # consecutive columns hashed per row (one 32-byte run for bf16) before whole rows are compared
EXACT_PATH_MAX_SLOTS = 9  # brute-force the best path up to this many slots; heuristic above
# The heuristic starts a nearest-neighbour path from every slot up to this many slots (a ladder capture of every
# layer of a 30-block model: 32), from this many evenly spaced slots above, so its cost stays O(n²) per 2-opt
# pass instead of O(n³) (200 tiny slots took 132 s before, hardening case N6).
HEURISTIC_ALL_STARTS_MAX = 32
HEURISTIC_STARTS = 8
TWO_OPT_MAX_PASSES = 64  # 2-opt passes at most (each O(n²)); real ladders settle in a handful
NORMALIZES_MIN_ROWS = 8  # fewer rows: no RMSNorm identity test. One γ per dim is fitted from every row, so a
#                          mismatched pair keeps most of its residual even on few rows: tuning half, 13-token
#                          texts (12 rows after token 0): RMSNorm(r = L) residual ≤ 0.0025, any other r ≥ 0.48
NORMALIZES_SCREEN_ROWS = 64  # quick first fit on this many rows; the full fit only when it passes
NORMALIZES_SAMPLE_ROWS = 512  # the confirming fit: an evenly strided sample of this many rows (an exact
# RMSNorm pair fits at bf16 rounding, ~0.004, on any rows; other pairs stay above 0.3 on the SmolLM2 captures)
NORMALIZES_SIGN_ROWS = 16  # the screen's first test: on this many sampled rows, sign(post) = sign(γ)·sign(pre) ⇒ per
#   dim the sign product is constant. SmolLM2 ladder: RMSNorm(L30) vs L30 1.0 of dims constant, any other pair
#   ≤ 0.04; chance alone gives 2^-15 per dim
NORMALIZES_SIGN_MIN = 0.5  # fewer dims with a constant sign product: not RMSNorm(pre), no fit needed
NORMALIZES_MAX_RESIDUAL = 0.02  # ‖B − γ̂ ⊙ A/rms(A)‖ / ‖B‖ at or below this ⇒ B = RMSNorm(A) (bf16 rounding ≈ 0.004)


def sample_rows(T: int, drop_tokens: Sequence[int], n: int) -> np.ndarray:
    """The fixed row sample of the distances and the RMSNorm fit: the rows of ``range(T)`` not in
    ``drop_tokens``, evenly strided down to ``n`` (first and last kept row included) when there are more.

    Example:
        >>> sample_rows(10, [0], 4).tolist()
        [1, 4, 6, 9]
    """
    keep = np.ones(T, dtype=bool)
    drop = [i for i in drop_tokens if 0 <= i < T]
    if drop and len(drop) < T:
        keep[drop] = False
    rows = np.flatnonzero(keep)
    if rows.size > n:
        rows = rows[np.linspace(0, rows.size - 1, n).round().astype(np.int64)]
    return rows


# ------------------------------------------------------------------------------------- duplicate rows
# bit masks of the float types: (sign cleared, exponent all ones); a magnitude ≥ the second is Inf/NaN
_FLOAT_BITS = {"torch.bfloat16": (0x7FFF, 0x7F80), "torch.float16": (0x7FFF, 0x7C00),
               "torch.float32": (0x7FFFFFFF, 0x7F800000),
               "torch.float64": (0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000)}
_INT_OF_SIZE = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}


def _row_bits(h: torch.Tensor) -> np.ndarray:
    """``h``'s stored bits as a ``[T, H]`` numpy integer array (a view when ``h`` is contiguous)."""
    import torch

    return h.contiguous().view(getattr(torch, _INT_OF_SIZE[h.element_size()])).numpy()


def _no_evidence(h: torch.Tensor, bits: np.ndarray, rows: np.ndarray, norms: np.ndarray | None = None) -> np.ndarray:
    """Per given row: all zeros (±0) or holding a NaN/Inf — padding or broken rows, no lookup evidence.

    ``norms``: the slot's row norms (``SlotStats.norms``). A finite, positive norm proves the row is neither (a
    NaN or Inf makes the norm non-finite, all ±0 makes it 0), so only the other rows' values are read."""
    import torch

    rows = np.asarray(rows, dtype=np.int64)
    if norms is not None and rows.size:
        nr = np.asarray(norms)[rows]
        out = np.zeros(rows.size, dtype=bool)
        unsure = ~(np.isfinite(nr) & (nr > 0))
        if unsure.any():
            out[unsure] = _no_evidence(h, bits, rows[unsure])
        return out
    masks = _FLOAT_BITS.get(str(h.dtype))
    if not rows.size:
        return np.zeros(0, dtype=bool)
    if masks is None:
        x = h[torch.from_numpy(rows)]
        return ((x == 0).all(dim=-1) | ~torch.isfinite(x).all(dim=-1)).numpy()
    mag = bits[rows] & np.array(masks[0]).astype(bits.dtype)
    return (mag == 0).all(1) | (mag >= np.array(masks[1]).astype(bits.dtype)).any(1)


def _row_hash(bits: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """A 64-bit FNV-style hash of the sampled columns of each row: equal rows ⇒ equal hashes."""
    sub = bits[rows[:, None], cols].astype(np.int64).view(np.uint64)
    acc = np.zeros(rows.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(sub.shape[1]):
            acc = acc * np.uint64(0x100000001B3) + sub[:, j]
    return acc


def _equal_groups(bits: np.ndarray, rows: np.ndarray, cols: np.ndarray,
                  hashes: np.ndarray | None = None) -> list[np.ndarray]:
    """Groups (of two or more) of ``rows`` whose whole rows are bit-identical: hashed columns first (or the
    given per-row ``hashes``), whole rows compared only within a hash group."""
    if rows.size < 2:
        return []
    key = _row_hash(bits, rows, cols) if hashes is None else hashes[rows]
    _, inv, cnt = np.unique(key, return_inverse=True, return_counts=True)
    multi = cnt[inv] > 1
    if not multi.any():
        return []
    cand, ginv = rows[multi], inv[multi]
    order = np.argsort(ginv, kind="stable")
    cand, ginv = cand[order], ginv[order]
    out: list[np.ndarray] = []
    for group in np.split(cand, np.flatnonzero(np.diff(ginv)) + 1):
        whole = np.ascontiguousarray(bits[group])
        key = whole.view(np.dtype((np.void, whole.dtype.itemsize * whole.shape[1]))).ravel()
        _, inv2, cnt2 = np.unique(key, return_inverse=True, return_counts=True)
        out.extend(group[inv2 == g] for g in np.flatnonzero(cnt2 > 1))
    return out


_ID_REPEATS: list = []  # [(key, a weak reference to the ids tensor, result)]: the last capture's, for its slots
#                        (weak: a tensor of a mapped file keeps the whole file mapped while anything holds it)


def _id_repeats(input_ids: torch.Tensor) -> tuple[np.ndarray, ...]:
    """``np.unique`` of the ids (first index, inverse, counts), the rows whose id repeats ordered by their id's first
    row (a reference row is then compared with all its repeats in turn, while it is in cache), and that first row
    of each. Computed once per ids tensor, not once per slot (the tensor's version counter tells an in-place change)."""
    key = (int(input_ids._version), int(input_ids.data_ptr()), int(input_ids.numel()))  # the tensor: by identity
    if _ID_REPEATS and _ID_REPEATS[0][1]() is input_ids and _ID_REPEATS[0][0] == key:
        return _ID_REPEATS[0][2]
    ids = input_ids.reshape(-1).numpy().astype(np.int64, copy=False)
    _, first, inv, cnt = np.unique(ids, return_index=True, return_inverse=True, return_counts=True)
    rows = np.flatnonzero((cnt > 1)[inv])  # rows whose id repeats ...
    rows = rows[np.argsort(first[inv[rows]], kind="stable")]
    out = (first, inv, cnt, rows, first[inv[rows]])  # ... and the first row of the same id
    for a in out:
        a.flags.writeable = False  # shared by the calls of every slot
    _ID_REPEATS[:] = [(key, weakref.ref(input_ids), out)]
    return out


def _rows_differ(bits: np.ndarray, rows: np.ndarray, refs: np.ndarray) -> np.ndarray:
    """Per pair: row ``rows[i]`` differs from row ``refs[i]`` somewhere (whole rows, bit patterns).

    One ``memcmp`` of the two rows in place per pair (it stops at the first difference): no copy. Taking each
    row's ``bytes`` first (a copy of both) cost 3.5–3.8 ms for 900 Kimi-sized pairs, ``memcmp`` 0.75 (measured
    2026-12-06); numpy's fancy-indexed ``!=`` on two gathered copies 4.3 ms for 785. Where ``memcmp`` cannot be
    called (no C library found, rows not contiguous) the bytes are compared."""
    out = np.zeros(rows.size, dtype=bool)
    cmp = _memcmp()
    nbytes = bits.shape[1] * bits.itemsize if bits.ndim == 2 else 0
    if cmp is not None and nbytes and bits.strides[1] == bits.itemsize and rows.size:
        base, stride = int(bits.ctypes.data), int(bits.strides[0])
        for n, (r, f) in enumerate(zip(rows.tolist(), refs.tolist(), strict=True)):
            out[n] = r != f and cmp(base + r * stride, base + f * stride, nbytes) != 0
        return out
    ref_bytes: dict[int, bytes] = {}  # each reference row's bytes taken once (a repeated id's rows share one)
    for n, (r, f) in enumerate(zip(rows.tolist(), refs.tolist(), strict=True)):
        b = ref_bytes.get(f)
        if b is None:
            b = ref_bytes[f] = bits[f].tobytes()
        out[n] = bits[r].tobytes() != b
    return out


@functools.cache
def _memcmp() -> Any:
    """The C library's ``memcmp`` (ctypes, loaded once), or None where it cannot be loaded."""
    try:
        import ctypes
        import ctypes.util

        lib = ctypes.CDLL(None) if not sys.platform.startswith("win") else ctypes.CDLL(
            ctypes.util.find_library("c") or "msvcrt")
        fn = lib.memcmp
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        fn.restype = ctypes.c_int
    except (OSError, AttributeError, TypeError):
        return None
    return fn


def duplicate_rows(h: torch.Tensor, input_ids: torch.Tensor | None, hashes: np.ndarray | None = None,
                   norms: np.ndarray | None = None) -> dict:
    """Exact-duplicate-row statistics of one ``[T, H]`` slot (bit patterns: -0.0 ≠ 0.0, NaN rows by bits).

    With token ids: ``groups`` = ids that occur more than once, ``identical`` = how many of those groups
    have bit-identical rows, ``clashes`` = rows of different ids that are identical, ``fraction`` =
    identical / groups (None when no id repeats). Without ids: ``rows_with_twin`` = rows that equal some
    other row and ``fraction`` = rows_with_twin / T. All-zero and non-finite rows are no evidence either way.
    Rows are screened by a hash of ``DUP_KEY_COLS`` columns and compared whole only where it agrees, so a
    layer slot costs a few column reads per row; an embedding slot reads its repeated rows once. ``hashes``:
    per-row hashes already computed from the row bits (the row checks' ``RowReport.hashes``: equal rows ⇒ equal
    hashes), then used as that screen instead; the counts are the same either way, since whole rows decide.
    ``norms``: the slot's row norms (``SlotStats.norms``), which spare reading rows to tell padding from evidence.
    """
    if norms is not None and len(norms) != int(h.shape[0]):
        norms = None
    T, H = int(h.shape[0]), int(h.shape[1])
    bits = _row_bits(h)
    c0 = max(0, min(H - DUP_KEY_COLS, H // 2))
    cols = np.arange(c0, min(H, c0 + DUP_KEY_COLS))
    out: dict = {"tokens": T}
    if input_ids is not None and int(input_ids.numel()) == T:
        first, inv, cnt, rows, ref = _id_repeats(input_ids)
        rep = cnt > 1
        identical, read = 0, False
        if rep.any():
            bad = np.zeros(cnt.size, dtype=bool)
            if hashes is not None:  # equal rows ⇒ equal hashes: a differing hash is a differing row
                bad[inv[rows[hashes[rows] != hashes[ref]]]] = True
            else:
                bad[inv[rows[(bits[rows[:, None], cols] != bits[ref[:, None], cols]).any(1)]]] = True
            whole = ~bad[inv[rows]] & (rows != ref)  # hashed columns agree: compare the whole rows
            r_all, f_all = rows[whole], ref[whole]
            bad[inv[r_all[_rows_differ(bits, r_all, f_all)]]] = True
            read = bool(r_all.size)
            same = np.flatnonzero(rep & ~bad)
            identical = int((~_no_evidence(h, bits, first[same], norms)).sum())
        clashes = 0  # rows of *different* ids that are identical would not be a table lookup
        for group in _equal_groups(bits, np.sort(first), cols, hashes):
            if not _no_evidence(h, bits, group[:1], norms)[0]:
                clashes += int(group.size) - 1
        groups = int(rep.sum())
        out.update(groups=groups, identical=identical, clashes=clashes,
                   fraction=(identical / groups) if groups else None)
        if read:  # an embedding slot's repeated rows, compared whole, map most of it: its file pages given back
            release_tensors([h])
        return out
    twins = sum(int(g.size) for g in _equal_groups(bits, np.arange(T), cols, hashes)
                if not _no_evidence(h, bits, g[:1], norms)[0])
    out.update(rows_with_twin=twins, fraction=twins / max(1, T))
    return out


# -------------------------------------------------------------------------------- angular distances
@dataclass
class DistanceSample:
    """Masked angular distances on a row sample, with the sampling error of every entry.

    ``D[i, j]``: mean per-token angular distance in [0, 1] over the ``rows`` sampled tokens (of
    ``population`` kept ones); ``se[i, j]``: its standard error as an estimate of the mean over all kept
    tokens (per-token spread / √rows, with the finite-population correction; 0 when every row is used).
    """

    D: np.ndarray
    se: np.ndarray
    rows: int
    population: int


def _gather32(h: torch.Tensor, rows: torch.Tensor, mask_dims: list[int]) -> torch.Tensor:
    """Selected rows in float32 (``index_select``: whole-row copies), massive dims and NaN/Inf set to 0."""
    import torch

    x = h.index_select(0, rows).to(torch.float32)
    if mask_dims:
        x[:, mask_dims] = 0.0
    return torch.nan_to_num_(x, nan=0.0, posinf=0.0, neginf=0.0)


def _block_gram(xs: list[torch.Tensor], widths: list[int]) -> np.ndarray:
    """Per-row Gram matrices ``[b, k, k]`` (float64 numpy) of the centred rows of one block: a float32
    batched matmul, redone in float64 when some cosine is above ``NEAR_PARALLEL_COS``."""
    import torch

    k = len(xs)
    if len(set(widths)) == 1:
        X = torch.stack(xs, 1)
        G = torch.bmm(X, X.transpose(1, 2)).to(torch.float64).numpy()
        d = np.sqrt(np.maximum(np.einsum("bii->bi", G), 0.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            c = G / (d[:, :, None] * d[:, None, :])
        np.einsum("bii->bi", c)[:] = 0.0
        if np.nanmax(c, initial=0.0) > NEAR_PARALLEL_COS:
            X64 = X.to(torch.float64)
            G = torch.bmm(X64, X64.transpose(1, 2)).numpy()
        return G
    G = np.full((int(xs[0].shape[0]), k, k), np.nan)  # slots of other widths: no distance (NaN)
    for i in range(k):
        for j in range(i, k):
            if widths[i] == widths[j]:
                G[:, i, j] = G[:, j, i] = (xs[i].double() * xs[j].double()).sum(-1).numpy()
    return G


def angular_distance_sample(tensors: Sequence[torch.Tensor], drop_tokens: Sequence[int],
                            mask_dims: Sequence[int], max_rows: int | None = None,
                            finite: bool = False) -> DistanceSample:
    """``k×k`` mean per-token angular distance on the row sample, with its standard error.

    Tokens in ``drop_tokens`` (sinks, non-finite rows) are left out; ``mask_dims`` (massive-activation
    dims) are zeroed in every slot; each slot is mean-centred over the sampled tokens. Two passes over
    row blocks of the sample (column means, then per-token angles from per-token Gram matrices), so the
    working set is one small block, never a copy of a slot. ``finite``: the caller knows every value of every
    tensor is finite (the statistics counted no NaN/Inf), so the NaN/Inf → 0 pass over the sample is skipped
    (it would change nothing).
    """
    import torch

    k = len(tensors)
    T = min(int(t.shape[0]) for t in tensors)
    rows = sample_rows(T, drop_tokens, DISTANCE_SAMPLE_ROWS if max_rows is None else max_rows)
    population = int(sample_rows(T, drop_tokens, T).size)
    n = int(rows.size)
    widths = [int(t.shape[1]) for t in tensors]
    masks = [[d for d in sorted({int(x) for x in mask_dims}) if 0 <= d < w] for w in widths]
    B = max(1, DISTANCE_BLOCK_ELEMENTS // max(1, sum(widths)))
    rows_t = torch.from_numpy(rows)
    if len(set(widths)) == 1 and n * k * widths[0] <= DISTANCE_BUFFER_ELEMENTS:
        return _distances_in_buffer(tensors, rows_t, masks, population, finite)
    means = []
    for t, m in zip(tensors, masks, strict=True):
        acc = torch.zeros(int(t.shape[1]), dtype=torch.float64)
        for s in range(0, n, B):
            acc += _gather32(t, rows_t[s:s + B], m).sum(0, dtype=torch.float64)
        means.append((acc / max(1, n)).to(torch.float32))
    s1, s2 = np.zeros((k, k)), np.zeros((k, k))
    for s in range(0, n, B):
        r = rows_t[s:s + B]
        G = _block_gram([_gather32(t, r, m).sub_(mu) for t, m, mu in zip(tensors, masks, means, strict=True)],
                        widths)
        a = _angles(G)
        s1 += a.sum(0)
        s2 += (a * a).sum(0)
    release_tensors(tensors)  # the file pages the sample mapped (as the one-buffer path does slot by slot)
    return _sample_result(s1, s2, n, population)


def _angles(G: np.ndarray) -> np.ndarray:
    """Per-row angular distances ``[b, k, k]`` in [0, 1] from per-row Gram matrices."""
    d = np.sqrt(np.maximum(np.einsum("bii->bi", G), 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        c = G / np.maximum(d[:, :, None] * d[:, None, :], 1e-300)
    return np.arccos(np.clip(c, -1.0, 1.0)) / math.pi


def _distances_in_buffer(tensors: Sequence[torch.Tensor], rows: torch.Tensor, masks: list[list[int]],
                         population: int, finite: bool = False) -> DistanceSample:
    """The sample gathered once into a float32 ``[rows, k, H]`` buffer: one read of each sampled row, one
    mean, one batched matmul (float64 only for the rows holding a near-parallel pair)."""
    import torch

    n, k, H = int(rows.numel()), len(tensors), int(tensors[0].shape[1])
    X = torch.empty(n, k, H, dtype=torch.float32)
    for i, (t, m) in enumerate(zip(tensors, masks, strict=True)):
        X[:, i].copy_(t.index_select(0, rows))
        release_tensors([t])  # its file pages: a sampled row maps the page-cache folio around it (MBs on ext4)
        if m:
            X[:, i, m] = 0.0
    if not finite:
        torch.nan_to_num_(X, nan=0.0, posinf=0.0, neginf=0.0)
    mu = X.mean(0)  # float32 cascade sums: the mean is good to ~1e-7 relative
    # centred and multiplied a few rows at a time, while they are in cache (one pass over the buffer instead of
    # three: the buffer is larger than a core's L2); each row's Gram is its own product, so the values are those
    # of one batched matmul over all rows
    G32 = torch.empty(n, k, k, dtype=torch.float32)
    c = max(1, DISTANCE_CHUNK_ELEMENTS // max(1, k * H))
    for s in range(0, n, c):
        x = X[s:s + c].sub_(mu)
        torch.bmm(x, x.transpose(1, 2), out=G32[s:s + c])
    G = G32.to(torch.float64).numpy()
    d = np.sqrt(np.maximum(np.einsum("bii->bi", G), 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        c = G / (d[:, :, None] * d[:, None, :])
    np.einsum("bii->bi", c)[:] = 0.0
    near = np.flatnonzero((np.nan_to_num(c, nan=0.0) > NEAR_PARALLEL_COS).any((1, 2)))
    if near.size:
        X64 = X[torch.from_numpy(near)].to(torch.float64)
        G[near] = torch.bmm(X64, X64.transpose(1, 2)).numpy()
    a = _angles(G)
    return _sample_result(a.sum(0), (a * a).sum(0), n, population)


def _sample_result(s1: np.ndarray, s2: np.ndarray, n: int, population: int) -> DistanceSample:
    """Mean angle and its standard error (finite-population corrected) from per-pair sums of a, a²."""
    D = s1 / max(1, n)
    np.fill_diagonal(D, 0.0)
    var = np.maximum(s2 / max(1, n) - D * D, 0.0) * n / max(1, n - 1)
    se = np.sqrt(var / max(1, n) * max(0.0, 1.0 - n / max(1, population)))
    np.fill_diagonal(se, 0.0)
    return DistanceSample(D=D, se=se, rows=n, population=population)


def settle_chain(sample: DistanceSample, tensors: Sequence[torch.Tensor], drop_tokens: Sequence[int],
                 mask_dims: Sequence[int], chain: Sequence[int]) -> DistanceSample:
    """The distances to seriate ``chain`` on: the sample, or all kept rows when the sample cannot tell the
    best path from the runner-up (cost difference ≤ ``CHAIN_TIE_SIGMAS`` standard errors of a difference of
    two path costs, the edges' errors taken as independent).

    On the calibration corpus's 830 files longer than the sample, two near-ties (a duplicated slot: margin 0;
    a 0.0005 margin against a standard error of 0.003) were seriated differently from all rows; with this
    check every verdict equals the all-rows fit, at the all-rows cost only for such files.
    """
    nodes = list(chain)
    if sample.rows >= sample.population or len(nodes) < 3:
        return sample
    path, cost, runner = seriate(sample.D, nodes)
    if not math.isfinite(runner):
        return sample
    var = sum(float(sample.se[path[i], path[i + 1]]) ** 2 for i in range(len(path) - 1))
    if runner - cost > CHAIN_TIE_SIGMAS * math.sqrt(2 * var):
        return sample
    return angular_distance_sample(tensors, drop_tokens, mask_dims, max_rows=sample.population)


def angular_distances(tensors: Sequence[torch.Tensor], drop_tokens: Sequence[int],
                      mask_dims: Sequence[int]) -> tuple[np.ndarray, int]:
    """``(D, tokens used)`` of :func:`angular_distance_sample` (0 = same direction, 1 = opposite)."""
    res = angular_distance_sample(tensors, drop_tokens, mask_dims)
    return res.D, res.rows


def _path_cost(D: np.ndarray, path: Sequence[int]) -> float:
    return float(sum(D[path[i], path[i + 1]] for i in range(len(path) - 1)))


def seriate(D: np.ndarray, nodes: Sequence[int]) -> tuple[list[int], float, float]:
    """Shortest Hamiltonian path through ``nodes`` under ``D``: ``(path, cost, runner_up_cost)``.

    Exact (all orderings) up to ``EXACT_PATH_MAX_SLOTS`` nodes, else nearest-neighbour starts + 2-opt.
    A path and its reverse are the same here; direction is decided by the caller. ``runner_up_cost``
    is the cheapest path that is not this one or its reverse (inf when there is none).
    """
    path, cost, runner, _ = seriate_ties(D, nodes, 0.0)
    return path, cost, runner


def seriate_ties(D: np.ndarray, nodes: Sequence[int], rel: float,
                 ) -> tuple[list[int], float, float, list[tuple[float, list[int]]]]:
    """:func:`seriate` and, from the same enumeration, every path (one of each path and its reverse) costing at
    most ``(1 + rel)`` × the best, cheapest first: ``(path, cost, runner_up_cost, [(cost, path), ...])``. Above
    ``EXACT_PATH_MAX_SLOTS`` nodes the list holds the heuristic's best path only.

    Example:
        >>> D = np.array([[0, 1, 2], [1, 0, 1.01], [2, 1.01, 0]])
        >>> [p for _, p in seriate_ties(D, [0, 1, 2], 0.01)[3]]
        [[0, 1, 2]]
    """
    nodes = list(nodes)
    if len(nodes) <= 2:
        cost = _path_cost(D, nodes)
        return nodes, cost, math.inf, [(cost, nodes)]
    if len(nodes) <= EXACT_PATH_MAX_SLOTS:
        costs = sorted(((_path_cost(D, p), list(p)) for p in itertools.permutations(nodes) if p[0] < p[-1]),
                       key=lambda c: c[0])
        ties = [c for c in costs if c[0] <= costs[0][0] * (1 + rel)]
        return costs[0][1], costs[0][0], (costs[1][0] if len(costs) > 1 else math.inf), ties
    best: tuple[float, list[int]] | None = None
    starts = nodes if len(nodes) <= HEURISTIC_ALL_STARTS_MAX else \
        [nodes[round(i * (len(nodes) - 1) / (HEURISTIC_STARTS - 1))] for i in range(HEURISTIC_STARTS)]
    for start in starts:
        path, rest = [start], set(nodes) - {start}
        while rest:
            nxt = min(rest, key=lambda j: D[path[-1], j])
            path.append(nxt)
            rest.remove(nxt)
        path = _two_opt(D, path)
        c = _path_cost(D, path)
        if best is None or c < best[0] - 1e-12:
            best = (c, path)
    assert best is not None
    cost, path = best
    runner = min((_path_cost(D, path[:i] + path[i:i + 2][::-1] + path[i + 2:]) for i in range(len(path) - 1)),
                 default=math.inf)
    return path, cost, runner, [(cost, path)]


def _two_opt(D: np.ndarray, path: list[int]) -> list[int]:
    """Reverse sub-paths while that shortens the open path (O(1) gain per candidate)."""
    n = len(path)
    improved, passes = True, 0
    while improved and passes < TWO_OPT_MAX_PASSES:
        improved, passes = False, passes + 1
        for i in range(n - 1):
            for j in range(i + 2, n + 1):
                a, b = path[i], path[j - 1]
                old = (D[path[i - 1], a] if i > 0 else 0.0) + (D[b, path[j]] if j < n else 0.0)
                new = (D[path[i - 1], b] if i > 0 else 0.0) + (D[a, path[j]] if j < n else 0.0)
                if new < old - 1e-12:
                    path = path[:i] + path[i:j][::-1] + path[j:]
                    improved = True
    return path


def normalizes(pre: torch.Tensor, post: torch.Tensor, drop_tokens: Sequence[int] = (),
               max_rows: int | None = None) -> dict:
    """Does ``post`` = γ ⊙ pre / rms(pre) for one per-dim γ? Fits γ̂ by least squares per dim.

    Returns ``{"residual": ‖post − γ̂ ⊙ u‖ / ‖post‖, "gamma_rms": rms(γ̂)}`` with ``u = pre / rms(pre)``,
    on the row sample (:func:`sample_rows`, ``NORMALIZES_SAMPLE_ROWS`` rows by default); a residual at
    bf16 rounding level means ``post`` is RMSNorm(``pre``) exactly (RMSNorm definition, transformers
    LlamaRMSNorm). Float64 arithmetic on row blocks of the sample. The file pages the sample mapped are given back
    (512 sampled rows map most of both slots).
    """
    try:
        return _normalizes(pre, post, drop_tokens, max_rows)
    finally:
        release_tensors([pre, post])


def _normalizes(pre: torch.Tensor, post: torch.Tensor, drop_tokens: Sequence[int], max_rows: int | None) -> dict:
    import torch

    T = min(int(pre.shape[0]), int(post.shape[0]))
    rows = sample_rows(T, drop_tokens, NORMALIZES_SAMPLE_ROWS if max_rows is None else max_rows)
    if rows.size < NORMALIZES_MIN_ROWS:
        return {"residual": float("inf"), "gamma_rms": float("nan")}
    rows_t = torch.from_numpy(rows)
    H = int(post.shape[1])
    B = max(1, DISTANCE_BLOCK_ELEMENTS // max(1, 2 * H))
    if max_rows is not None and max_rows <= NORMALIZES_SCREEN_ROWS:
        few = rows_t[torch.linspace(0, rows.size - 1, min(rows.size, NORMALIZES_SIGN_ROWS)).round().long()]
        if sign_agreement(pre, post, few) < NORMALIZES_SIGN_MIN:
            return {"residual": float("inf"), "gamma_rms": float("nan")}
        return _normalizes_screen(pre, post, rows_t, B)

    def f64(x: torch.Tensor) -> torch.Tensor:  # 16-bit floats via float32: exact, and ~3× faster in torch
        return x.to(torch.float64) if x.element_size() >= 4 else x.to(torch.float32).to(torch.float64)

    def blocks():  # float64 row blocks of (u = pre / rms(pre), post): bounded memory on Kimi-sized slots
        behind = [TrailingRelease(pre), TrailingRelease(post)]  # the sampled rows ascend: pages behind given back
        for s in range(0, int(rows.size), B):
            r = rows_t[s:s + B]
            a = f64(pre.index_select(0, r))
            last = int(r[-1])
            behind[0](last, pre[last:last + 1])
            b = f64(post.index_select(0, r))
            behind[1](last, post[last:last + 1])
            yield a / a.pow(2).mean(-1, keepdim=True).sqrt().clamp_min(1e-30), b

    num, den = torch.zeros(H, dtype=torch.float64), torch.zeros(H, dtype=torch.float64)
    for u, b in blocks():  # least-squares γ̂ per dim: Σ b·u / Σ u²
        num += (b * u).sum(0)
        den += u.pow(2).sum(0)
    gamma = num / den.clamp_min(1e-30)
    r2 = b2 = 0.0
    for u, b in blocks():
        r2 += float((b - gamma * u).pow(2).sum())
        b2 += float(b.pow(2).sum())
    resid = math.sqrt(r2) / max(math.sqrt(b2), 1e-30)
    if not math.isfinite(resid):
        resid = float("inf")
    return {"residual": resid, "gamma_rms": float(gamma.pow(2).mean().sqrt())}


def sign_agreement(pre: torch.Tensor, post: torch.Tensor, rows: torch.Tensor) -> float:
    """Fraction of dims whose ``sign(pre)·sign(post)`` is the same on every given row (zeros ignored): 1.0 when
    ``post = γ ⊙ pre / rms(pre)`` (a positive rms keeps each sign, γ_d flips a whole dim), ~2^(1-rows) by chance.

    Example:
        >>> import torch
        >>> a = torch.tensor([[1.0, -2.0, 3.0], [-1.0, 2.0, 1.0]])
        >>> sign_agreement(a, a * torch.tensor([2.0, -1.0, 0.5]), torch.tensor([0, 1]))
        1.0
    """
    import torch

    masks = _FLOAT_BITS.get(str(pre.dtype)) if pre.dtype != torch.float64 else None  # float32-exact types only
    if masks is not None and pre.dtype == post.dtype and pre.shape[1:] == post.shape[1:]:
        # on the stored bits (integer ops: 0.14 vs 0.19 ms on 16 Kimi-sized rows, 2026-12-05): sign(x) is 0
        # for ±0, NaN for NaN (neither counts), else the sign bit, so the product is positive where both are
        # counted and the sign bits agree, negative where they differ
        a = _row_bits(pre.index_select(0, rows))
        release_tensors([pre])  # a sampled row maps the page-cache folio around it (up to MBs): one slot at a time
        b = _row_bits(post.index_select(0, rows))
        mag, exp = (np.array(m).astype(a.dtype) for m in masks)
        ma, mb = a & mag, b & mag
        counted = (ma != 0) & (mb != 0) & (ma <= exp) & (mb <= exp)
        differ = (a ^ b) < 0
        pos, neg = (counted & ~differ).sum(0), (counted & differ).sum(0)
        return float(np.float32(((pos == 0) | (neg == 0)).sum()) / np.float32(pos.size))  # torch's float32 mean
    prod = torch.sign(pre.index_select(0, rows).to(torch.float32)) * torch.sign(post.index_select(0, rows).to(
        torch.float32))
    pos, neg = (prod > 0).sum(0), (prod < 0).sum(0)
    return float(((pos == 0) | (neg == 0)).to(torch.float32).mean())


def _normalizes_screen(pre: torch.Tensor, post: torch.Tensor, rows: torch.Tensor, B: int) -> dict:
    """The screening fit (``max_rows ≤ NORMALIZES_SCREEN_ROWS``): one float32 pass with float64 sums and
    ``Σ(b − γ̂u)² = Σb² − Σ_d (Σ_t b·u)² / Σ_t u²``. Good to ~1e-3 in the residual (float32 products), far
    inside the gap between an exact pair (~0.004) and ``NORMALIZES_MAX_RESIDUAL`` (0.02); a pair that passes
    is confirmed by the float64 two-pass fit."""
    import torch

    H = int(post.shape[1])
    num, den = torch.zeros(H, dtype=torch.float64), torch.zeros(H, dtype=torch.float64)
    b2 = 0.0
    for s in range(0, int(rows.numel()), B):
        r = rows[s:s + B]
        a = pre.index_select(0, r).to(torch.float32)
        release_tensors([pre])  # one slot's folios mapped at a time
        b = post.index_select(0, r).to(torch.float32)
        release_tensors([post])
        u = a.mul_(torch.rsqrt(a.pow(2).mean(-1, keepdim=True).clamp_min(1e-30)))
        num += (b * u).sum(0, dtype=torch.float64)
        den += u.pow_(2).sum(0, dtype=torch.float64)
        b2 += float(b.pow_(2).sum(dtype=torch.float64))
    gamma = num / den.clamp_min(1e-30)
    r2 = max(0.0, b2 - float((num * gamma).sum()))
    resid = math.sqrt(r2) / max(math.sqrt(b2), 1e-30)
    if not math.isfinite(resid):
        resid = float("inf")
    return {"residual": resid, "gamma_rms": float(gamma.pow(2).mean().sqrt())}
