"""Per-token norm statistics of captured slots: chunked, float32-accumulated, robust.

Norms are computed in row blocks (``NORM_BLOCK_ROWS``) with ``vector_norm(..., dtype=float32)``, so a
whole tensor is never upcast (a whole-tensor ``.float()`` costs 3–4× on this data path: page faults on
fresh anonymous memory). Summaries are robust (median, quantiles, MAD, token-0
and sink-excluded variants) because one sink token can carry almost all of σ (Kimi-K2.5 L3: σ 92 against a mean of 37).
Massive activations follow Sun et al. 2024: ``|x| > 100`` and ``≥ 1000 ×`` the median ``|x|``.
The row-block kernels live in :mod:`forensics.analysis.kernels` and are re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, overload

import numpy as np

from forensics.analysis.kernels import (
    MAX_LISTED_DIMS,
    MEDIAN_ABS_SAMPLE_COLS,
    MEDIAN_ABS_SAMPLE_SIZE,
    NORM_BLOCK_ROWS,
    NORM_ROUNDING_SLACK,
    STATS_THREADS,
    BlockTap,
    _token_norms,
    intra_op_threads,
    massive_activations,
    median_abs_sample,
    nonfinite_rows,
    norms_and_median_abs,
    robust_summary,
    token_norms,
)
from forensics.display import render
from forensics.errors import ForensicsError
from forensics.io.capture import Capture, Slot, short_dtype
from forensics.io.formats import as_captures
from forensics.io.validate import check_capture
from forensics.jsonable import json_safe

MASSIVE_ABS_THRESHOLD = 100.0  # Sun et al. 2024 §2.2; refine_massive_activations MASSIVE_ACTIVATION_ABS_THRESHOLD
MASSIVE_REL_THRESHOLD = 1000.0  # ... MASSIVE_ACTIVATION_REL_THRESHOLD
SINK_RATIO = 5.0  # a token whose norm is ≥ 5× the slot's median token norm is flagged as a sink
MAX_LISTED_POSITIONS = 32  # positions listed per finding (counts are always complete)


@dataclass
class NormSummary:
    """Robust summary of a set of per-token norms (float64 arithmetic)."""

    n: int
    mean: float
    std: float
    median: float
    p01: float
    p05: float
    p25: float
    p75: float
    p95: float
    p99: float
    mad: float
    min: float
    min_pos: int
    max: float
    max_pos: int

    @classmethod
    def of(cls, norms: np.ndarray, positions: np.ndarray | None = None) -> NormSummary:
        x = np.asarray(norms, dtype=np.float64)
        pos = np.arange(x.size) if positions is None else np.asarray(positions)
        keep = np.isfinite(x)
        x, pos = x[keep], pos[keep]
        if x.size == 0:
            nan = float("nan")
            return cls(0, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, -1, nan, -1)
        return cls(**robust_summary(x, pos))  # percentiles, median, MAD, mean, std, min/max from one sort

    def to_dict(self) -> dict:
        return {k: json_safe(v) for k, v in self.__dict__.items()}

    def __repr__(self) -> str:
        return render(self, "text")


def norm_summaries(norms: np.ndarray, keeps: Sequence[np.ndarray | None]) -> list[NormSummary]:
    """``NormSummary.of(norms[keep], positions[keep])`` for each ``keep`` mask (None: every token), bit for bit,
    from one sort of ``norms``: a subset's stable order is the whole order with the others left out."""
    x = np.asarray(norms, dtype=np.float64)
    finite = np.isfinite(x)
    at = np.flatnonzero(finite)
    order = at[np.argsort(x[at], kind="stable")]  # finite positions, by value (ties: by position)
    out = []
    for keep in keeps:
        keep = finite if keep is None else finite & keep
        pos = np.flatnonzero(keep)
        if not pos.size:
            out.append(NormSummary.of(np.zeros(0)))
            continue
        rank = np.cumsum(keep) - 1  # position → index in the subset
        out.append(NormSummary(**robust_summary(x[pos], pos, rank[order[keep[order]]])))
    return out


@dataclass
class SlotStats:
    """Statistics of one slot. ``norms`` (float32 numpy, one per token) is kept for plots/fingerprints."""

    index: int
    name: str
    key: str
    shape: tuple[int, int]
    dtype: str
    norms: np.ndarray = field(repr=False)
    norm: NormSummary
    norm_excl_first: NormSummary
    norm_excl_sinks: NormSummary
    first: float
    last: float
    sinks: list[int]
    sink_ratios: list[float]
    nan: int
    inf: int
    nan_positions: list[int]
    inf_positions: list[int]
    median_abs: float
    massive_threshold: float
    massive_tokens: list[dict]  # {pos, max_abs, ratio_to_median_abs, dims: [...]}
    rms_mean: float  # mean over tokens of rms(x) = ‖x‖/√H
    claimed: str | None = None
    declared_r: Any = None
    num_sinks: int = 0  # all sinks (``sinks`` lists at most MAX_LISTED_POSITIONS)
    num_massive_tokens: int = 0  # all massive tokens (``massive_tokens`` lists at most MAX_LISTED_POSITIONS)

    @property
    def first_ratio(self) -> float:
        """Token-0 norm over the median norm of the other tokens."""
        med = self.norm_excl_first.median
        return float(self.first / med) if med and math.isfinite(med) and med > 0 else float("nan")

    @property
    def massive_dims(self) -> list[int]:
        return sorted({d for t in self.massive_tokens for d in t["dims"]})

    def one_line(self) -> str:
        return render(self, "line")

    __repr__ = one_line

    def flags(self) -> list[str]:
        """Short findings for tables: sinks, massive activations, NaN/Inf (empty when nothing stands out)."""
        out = []
        if self.sinks:
            out.append(f"sinks {_short_list(self.sinks)} ≥{SINK_RATIO:g}×")
        if self.massive_tokens:
            out.append(f"massive {self.num_massive_tokens} tok dims {_short_list(self.massive_dims, 4)}")
        if self.nan or self.inf:
            out.append(f"NaN {self.nan} / Inf {self.inf}!")
        return out

    def _repr_html_(self) -> str:
        return render(self, "html")

    def to_dict(self) -> dict:
        norm = self.norm.to_dict()
        norm.update(first=json_safe(self.first), last=json_safe(self.last),
                    mean_excl_first=json_safe(self.norm_excl_first.mean),
                    std_excl_first=json_safe(self.norm_excl_first.std),
                    median_excl_first=json_safe(self.norm_excl_first.median), first_ratio=json_safe(self.first_ratio))
        return {
            "index": self.index, "name": self.name, "key": self.key, "shape": list(self.shape),
            "dtype": self.dtype, "claimed": self.claimed,
            "declared_r": self.declared_r,
            "norm": norm,
            "norm_excl_first": self.norm_excl_first.to_dict(),
            "norm_excl_sinks": self.norm_excl_sinks.to_dict(),
            "rms_mean": json_safe(self.rms_mean),
            "sinks": {"ratio_threshold": SINK_RATIO, "count": self.num_sinks, "positions": self.sinks,
                      "ratios": [round(r, 3) for r in self.sink_ratios]},
            "nonfinite": {"nan": self.nan, "inf": self.inf, "nan_positions": self.nan_positions,
                          "inf_positions": self.inf_positions},
            "massive": {"abs_threshold": MASSIVE_ABS_THRESHOLD, "rel_threshold": MASSIVE_REL_THRESHOLD,
                        "median_abs": json_safe(self.median_abs), "threshold": json_safe(self.massive_threshold),
                        "count": self.num_massive_tokens, "tokens": self.massive_tokens, "dims": self.massive_dims},
            "summary": self.one_line(),
        }


def _g(x: float) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "nan"
    ax = abs(x)
    if ax != 0 and (ax >= 1e5 or ax < 1e-3):
        return f"{x:.3g}"
    return f"{x:.4g}" if ax >= 100 else f"{x:.3g}"


def _short_list(xs: list, k: int = 6) -> str:
    return "[" + ", ".join(str(x) for x in xs[:k]) + (", …" if len(xs) > k else "") + "]"


FLOAT32_MAX = float(np.finfo(np.float32).max)


def exact_norms(h: Any, norms: Any) -> Any:
    """``norms`` with the rows float32 accumulation gets wrong recomputed exactly: rows of finite values whose
    norm came out non-finite (squares above float32's 3.4e38: every value 1e37 in a 16-wide row) or zero
    (squares of denormals below 1e-45). Those rows only are re-read, scaled by their largest ``|x|`` and
    summed in float64; the result is float64 when a true norm exceeds float32's range, else float32."""
    import torch

    n = norms.numpy()
    suspect = np.nonzero(~np.isfinite(n) | (n == 0))[0]
    if suspect.size == 0:
        return norms
    rows = torch.as_tensor(suspect)
    x = h[rows].to(torch.float64)
    finite = torch.isfinite(x).all(dim=-1)
    scale = x.abs().amax(dim=-1)
    ok = finite & (scale > 0)
    if not bool(ok.any()):
        return norms
    fixed = scale[ok] * torch.linalg.vector_norm(x[ok] / scale[ok, None], dim=-1)
    out = norms.to(torch.float64) if bool((fixed > FLOAT32_MAX).any()) else norms.clone()
    out[rows[ok]] = fixed.to(out.dtype)
    return out


def slot_stats(slot: Slot, block: int = NORM_BLOCK_ROWS, taps: Sequence[BlockTap] = ()) -> SlotStats:
    """All statistics of one slot: one chunked norm pass, plus re-reads of only the rows that need it.

    Per-token norms come from :func:`token_norms` (row blocks, float32 accumulation); median ``|x|`` from
    a strided column sample; NaN/Inf and massive-activation rows are found from the norms and only those
    rows are read again, so the cost stays that of the norm pass. ``taps`` see every row block of that pass
    (:func:`~forensics.analysis.kernels.norms_and_median_abs`).
    """
    h = slot.tensor()
    T, H = int(h.shape[0]), int(h.shape[1])
    with intra_op_threads():
        norms_t, median_abs = norms_and_median_abs(h, block, taps)  # one pass: norms, median-|x| sample, taps
        norms_t = exact_norms(h, norms_t)
        nan, inf = nonfinite_rows(h, norms_t, block)
        threshold = max(MASSIVE_ABS_THRESHOLD, MASSIVE_REL_THRESHOLD * median_abs) \
            if math.isfinite(median_abs) else MASSIVE_ABS_THRESHOLD
        massive = massive_activations(h, norms_t, threshold, median_abs, block)
    n = norms_t.numpy()
    finite = np.isfinite(n)
    med = float(np.median(n[finite])) if finite.any() else float("nan")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = n / med if med and med > 0 else np.full_like(n, np.nan)
    sinks = [int(i) for i in np.nonzero(finite & (ratios >= SINK_RATIO))[0]]
    keep_first = np.ones(T, dtype=bool)
    keep_first[:1] = False
    nan_pos, inf_pos = sorted(nan), sorted(inf)
    if sinks == [0] and T > 1:  # the usual sink, token 0 alone: the same tokens as ``norm_excl_first``
        norm, norm_excl_first = norm_summaries(n, [None, keep_first])
        norm_excl_sinks = replace(norm_excl_first)
    elif sinks:
        keep_sinks = np.ones(T, dtype=bool)
        keep_sinks[sinks] = False
        norm, norm_excl_first, norm_excl_sinks = norm_summaries(n, [None, keep_first, keep_sinks])
        if not keep_sinks.any():
            norm_excl_sinks = replace(norm)
    else:  # nothing excluded: the same numbers as ``norm`` (saves a third of the summary work)
        norm, norm_excl_first = norm_summaries(n, [None, keep_first])
        norm_excl_sinks = replace(norm)
    return SlotStats(
        index=slot.index, name=slot.name, key=slot.key, shape=(T, H), dtype=short_dtype(slot.dtype), norms=n,
        norm=norm,
        norm_excl_first=norm_excl_first,  # n=0 (None in JSON) for one token
        norm_excl_sinks=norm_excl_sinks,
        first=float(n[0]), last=float(n[-1]), sinks=sinks[:MAX_LISTED_POSITIONS],
        sink_ratios=[float(ratios[i]) for i in sinks[:MAX_LISTED_POSITIONS]],
        nan=sum(nan.values()), inf=sum(inf.values()),
        nan_positions=nan_pos[:MAX_LISTED_POSITIONS], inf_positions=inf_pos[:MAX_LISTED_POSITIONS],
        median_abs=median_abs, massive_threshold=threshold, massive_tokens=massive[:MAX_LISTED_POSITIONS],
        rms_mean=float(np.mean(n[finite]) / math.sqrt(H)) if finite.any() else float("nan"),
        claimed=slot.claimed, declared_r=slot.declared_r,
        num_sinks=len(sinks), num_massive_tokens=len(massive),
    )


@dataclass
class CaptureStats:
    """Statistics of every slot of one capture: ``repr`` one line per slot, ``_repr_html_``, ``to_dict``."""

    capture: Capture = field(repr=False)
    slots: list[SlotStats]

    @property
    def path(self) -> str:
        return self.capture.name

    def __repr__(self) -> str:
        return render(self, "text")

    def to_dict(self) -> dict:
        c = self.capture
        return {"path": c.name, "format": c.format, "num_tokens": c.num_tokens, "hidden_size": c.hidden_size,
                "layout": c.provenance.layout, "declared_layers": c.declared_layers,
                "declared_convention": c.declared_convention, "declared_r": c.declared_r,
                "notes": list(c.provenance.notes), "error": None,
                "slots": [s.to_dict() for s in self.slots]}

    def table(self) -> str:
        """A plain-text table of the slots (what ``hsf inspect`` prints), headed by file, format and layout."""
        return render(self, "table")

    def _repr_html_(self) -> str:
        return render(self, "html")


@overload
def summarize(capture: Capture, input_ids: None = None, attention_mask: None = None, *,
              taps: Callable[[int], Sequence[BlockTap]] | None = None) -> CaptureStats: ...


@overload
def summarize(capture: Any, input_ids: Any = None, attention_mask: Any = None, *,
              taps: Callable[[int], Sequence[BlockTap]] | None = None) -> CaptureStats | list[CaptureStats]: ...


def summarize(capture: Any, input_ids: Any = None, attention_mask: Any = None, *,
              taps: Callable[[int], Sequence[BlockTap]] | None = None) -> CaptureStats | list[CaptureStats]:
    """Statistics of every slot of a capture, of the file at a path, or of hidden states in memory (any layout
    ``forensics.io.layout`` accepts; ``input_ids`` decide a stack's axes). An input that holds several samples (a
    ``[B, T]`` batch, with its ``attention_mask``; a TensorRT-LLM record list) gives one result per sample.

    ``taps``: slot index → further consumers of the bytes the norm pass reads (a checksum, say), called on
    every row block of that slot as it is read (:func:`~forensics.analysis.kernels.norms_and_median_abs`), so
    they cost no second read of the file.

    Example:
        >>> st = summarize("sample_data/speculators_v1/data_0.pt")   # doctest: +SKIP
        >>> st.slots[1].first_ratio > 5                              # doctest: +SKIP
        True
    """
    if not isinstance(capture, Capture) or input_ids is not None or attention_mask is not None:
        caps = as_captures(capture, input_ids=input_ids, attention_mask=attention_mask)
        if len(caps) > 1:
            return [_summarize(c, taps) for c in caps]
        capture = caps[0]
    return _summarize(capture, taps)


def _summarize(capture: Capture, taps: Callable[[int], Sequence[BlockTap]] | None = None) -> CaptureStats:
    check_capture(capture)  # dtypes, shapes and ids checked at the boundary: one line, never deep inside
    capture.check_unchanged()
    slots = []
    for s in capture.slots:
        try:
            slots.append(slot_stats(s, taps=taps(s.index) if taps is not None else ()))
        except ForensicsError:
            raise
        except Exception as e:  # noqa: BLE001 - a tensor we cannot reduce is bad input, not a crash
            raise ForensicsError(f"cannot compute statistics of {list(s.shape)} {short_dtype(s.dtype)}: "
                                 f"{type(e).__name__}: {str(e)[:200]}", path=capture.path, slot=s.name) from None
    capture.check_unchanged()  # truncated under its map (any thread) or rewritten in place: no statistics of it
    return CaptureStats(capture=capture, slots=slots)

# the module's own names, and those it re-exports (callers import them from here)
__all__ = ["MASSIVE_ABS_THRESHOLD", "MASSIVE_REL_THRESHOLD", "SINK_RATIO", "MAX_LISTED_POSITIONS", "NormSummary",
           "SlotStats", "FLOAT32_MAX", "norm_summaries", "exact_norms", "slot_stats", "CaptureStats", "summarize",
           "MAX_LISTED_DIMS", "MEDIAN_ABS_SAMPLE_COLS", "MEDIAN_ABS_SAMPLE_SIZE", "NORM_BLOCK_ROWS",
           "NORM_ROUNDING_SLACK", "STATS_THREADS", "BlockTap", "_token_norms", "intra_op_threads",
           "massive_activations", "median_abs_sample", "nonfinite_rows", "norms_and_median_abs", "robust_summary",
           "token_norms"]
