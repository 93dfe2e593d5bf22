"""Row-block kernels behind :mod:`forensics.stats`: per-token norms, median ``|x|``, NaN/Inf and massive rows.

Each reads a ``[tokens, hidden]`` tensor (often mmap-backed bf16) in row blocks with float32 accumulation and
never upcasts the whole tensor; only rows that can hold a finding are read a second time. Re-exported by
``forensics.stats``, which is where callers should import them from.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch

NORM_BLOCK_ROWS = 256
MEDIAN_ABS_SAMPLE_COLS = 128  # ≥ this many columns per row (staggered) are sampled to estimate median |x|
MEDIAN_ABS_SAMPLE_SIZE = 32768  # about this many entries in that sample (rows thinned evenly)
MAX_LISTED_DIMS = 8  # feature dims listed per massive token, largest |x| first
NORM_ROUNDING_SLACK = 1e-4  # float32 norms may round below a true max |x|: re-read rows above (1 - slack)·threshold
# torch intra-op threads while reducing row blocks. The block loop is memory-bound: 1 thread does as well as 2
# on an idle machine (ecosystem.md §6.10: 5.4 vs 5.1–6.2 GB/s), and on a busy one each of the many small
# parallel regions waits for a descheduled thread (measured here: 2 threads 20–40× slower than 1 under load).
STATS_THREADS = 1


@contextmanager
def intra_op_threads(n: int | None = -1) -> Iterator[None]:
    """Run the block below with ``n`` torch intra-op threads (-1: ``STATS_THREADS`` as set at call time,
    e.g. ``forensics.stats_blocks.STATS_THREADS = 2``; None: leave torch's setting alone)."""
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
    if h.dtype in (torch.bfloat16, torch.float16, torch.float32):
        for s in range(0, h.shape[0], block):
            out[s:s + block] = torch.linalg.vector_norm(h[s:s + block], dim=-1, dtype=torch.float32)
    elif h.dtype == torch.float64:  # vector_norm refuses to narrow: accumulate in float64, store float32
        for s in range(0, h.shape[0], block):
            out[s:s + block] = torch.linalg.vector_norm(h[s:s + block], dim=-1)
    else:  # float8 and other types vector_norm cannot promote: upcast one row block at a time
        for s in range(0, h.shape[0], block):
            out[s:s + block] = torch.linalg.vector_norm(h[s:s + block].float(), dim=-1)
    return out


def median_abs_sample(h: torch.Tensor) -> float:
    """Median ``|x|`` of a slot from a staggered sample of about ``MEDIAN_ABS_SAMPLE_SIZE`` entries.

    ``stride = H // MEDIAN_ABS_SAMPLE_COLS``; the j-th sampled row reads columns ``j % stride + k·stride``,
    so every feature dim is sampled across rows (hidden states have strong per-dim scales: a fixed column
    subset was biased by up to 8% on the SmolLM2 captures, the staggered sample by ≤ 4%). Rows are
    thinned evenly so the sample stays near ``MEDIAN_ABS_SAMPLE_SIZE``. Exact when
    ``H < 2 · MEDIAN_ABS_SAMPLE_COLS`` and ``T · H ≤ MEDIAN_ABS_SAMPLE_SIZE``. NaN/Inf are left out; the
    lower middle value is taken (as ``torch.median``).
    """
    import torch

    T, H = int(h.shape[0]), int(h.shape[1])
    stride = max(1, H // MEDIAN_ABS_SAMPLE_COLS)
    cols = H // stride
    rows = torch.arange(0, T, max(1, (T * cols) // MEDIAN_ABS_SAMPLE_SIZE))
    idx = (torch.arange(len(rows))[:, None] % stride) + torch.arange(cols)[None, :] * stride
    sample = np.abs(h[rows[:, None], idx].float().numpy().ravel())  # numpy: no thread-pool start-up
    sample = sample[np.isfinite(sample)]
    if not sample.size:
        return float("nan")
    k = (sample.size - 1) // 2
    return float(np.partition(sample, k)[k])


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
    bad = torch.nonzero(~torch.isfinite(norms)).flatten().tolist()
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
            dims = torch.nonzero(row > threshold).flatten()
            dims = dims[torch.argsort(row[dims], descending=True)].tolist()
            out.append({"pos": int(p), "max_abs": m,
                        "ratio_to_median_abs": m / median_abs if median_abs > 0 else None,
                        "dims": [int(d) for d in dims[:MAX_LISTED_DIMS]], "num_dims": len(dims)})
    return out
