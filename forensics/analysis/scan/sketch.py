"""Mergeable, bounded-memory summaries of per-token norms for dataset scans.

Two pieces, both mergeable in any order with an identical result (so a resumed or distributed scan
summarises exactly like an uninterrupted local one):

- :class:`ExactSum`: Shewchuk's exact floating-point summation (the algorithm behind ``math.fsum``), kept
  as partials so sums can be merged. :class:`Moments` builds count/mean/variance on it: because a norm is a
  float32, its square is exact in float64, so the dataset ``Σx`` and ``Σx²`` are exact over the per-file
  sums and the variance is formed once in rational arithmetic (no cancellation, unlike a naive ``Σx²``;
  no merge-order dependence, unlike a Welford/Chan merge).
- :class:`LogHistogram`: fixed log-spaced bins (``BINS_PER_DECADE`` per decade over
  ``[SKETCH_MIN, SKETCH_MAX)``) plus exact zero/under/over counts and exact min/max. Quantiles follow
  numpy's default ("linear") definition with each order statistic replaced by the geometric centre of its
  bin, so every quantile in ``[SKETCH_MIN, SKETCH_MAX)`` is within ``SKETCH_REL_ERROR`` (relative) of
  ``numpy.quantile`` in float64. Memory: ``NUM_BINS`` int64 counters per slot (32 KB), whatever the
  number of tokens.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction

import numpy as np

BINS_PER_DECADE = 200
SKETCH_MIN = 1e-8  # norms below this go to the exact-count "under" bucket
SKETCH_MAX = 1e12  # norms at or above this go to the "over" bucket
NUM_BINS = int(round(math.log10(SKETCH_MAX / SKETCH_MIN) * BINS_PER_DECADE))
SKETCH_REL_ERROR = 10 ** (1 / (2 * BINS_PER_DECADE)) - 1  # ≈ 0.58 %: half a bin on the log scale


class ExactSum:
    """An exactly rounded running sum of floats (Shewchuk partials); ``merge`` is order-independent.

    Example:
        >>> s = ExactSum(); s.add(1e16); s.add(1.0); s.add(-1e16); s.value()
        1.0
    """

    __slots__ = ("partials",)

    def __init__(self, values: Iterable[float] = ()):
        self.partials: list[float] = []
        for v in values:
            self.add(v)

    def add(self, x: float) -> None:
        x = float(x)
        if not math.isfinite(x):
            raise ValueError(f"ExactSum takes finite values only, got {x}")
        i = 0
        for y in self.partials:
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            lo = y - (hi - x)
            if lo:
                self.partials[i] = lo
                i += 1
            x = hi
        self.partials[i:] = [x]

    def merge(self, other: ExactSum) -> None:
        for p in other.partials:
            self.add(p)

    def value(self) -> float:
        return math.fsum(self.partials)

    def fraction(self) -> Fraction:
        return sum((Fraction(p) for p in self.partials), Fraction(0))


class Moments:
    """Count, exact ``Σx`` and ``Σx²`` of finite values; mean and population variance (ddof=0)."""

    __slots__ = ("n", "s1", "s2")

    def __init__(self) -> None:
        self.n = 0
        self.s1 = ExactSum()
        self.s2 = ExactSum()

    @staticmethod
    def file_sums(x: np.ndarray) -> tuple[int, float, float]:
        """``(n, fsum(x), fsum(x²))`` of the finite values of one file's float32 norms (x² exact in f64)."""
        x = np.asarray(x, dtype=np.float64)
        x = x[np.isfinite(x)]
        return int(x.size), math.fsum(x.tolist()), math.fsum((x * x).tolist())

    def add_sums(self, n: int, s1: float, s2: float) -> None:
        self.n += int(n)
        self.s1.add(s1)
        self.s2.add(s2)

    def mean(self) -> float:
        return float(self.s1.fraction() / self.n) if self.n else float("nan")

    def var(self) -> float:
        if not self.n:
            return float("nan")
        s1 = self.s1.fraction()
        return float(max(Fraction(0), (self.s2.fraction() - s1 * s1 / self.n) / self.n))

    def std(self) -> float:
        v = self.var()
        return math.sqrt(v) if math.isfinite(v) else v


def bin_index(x: np.ndarray) -> np.ndarray:
    """Bin of each value in ``[SKETCH_MIN, SKETCH_MAX)`` (values outside must be filtered first)."""
    i = np.floor(np.log10(np.asarray(x, dtype=np.float64) / SKETCH_MIN) * BINS_PER_DECADE).astype(np.int64)
    return np.clip(i, 0, NUM_BINS - 1)


def bin_center(i: np.ndarray | int) -> np.ndarray | float:
    """Geometric centre of bin ``i``."""
    return SKETCH_MIN * 10.0 ** ((np.asarray(i, dtype=np.float64) + 0.5) / BINS_PER_DECADE)


class LogHistogram:
    """Fixed log-spaced histogram of non-negative values: mergeable quantiles in bounded memory.

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).lognormal(3, 1, 10_000)
        >>> h = LogHistogram(); h.add(x)
        >>> bool(abs(h.quantile(0.5) / np.quantile(x, 0.5) - 1) <= SKETCH_REL_ERROR)
        True
    """

    __slots__ = ("counts", "zero", "under", "over", "nonfinite", "min", "max")

    def __init__(self) -> None:
        self.counts = np.zeros(NUM_BINS, dtype=np.int64)
        self.zero = self.under = self.over = self.nonfinite = 0
        self.min, self.max = math.inf, -math.inf

    @property
    def n(self) -> int:
        """Number of finite values held."""
        return int(self.counts.sum()) + self.zero + self.under + self.over

    def add(self, values: np.ndarray) -> None:
        x = np.asarray(values, dtype=np.float64).ravel()
        fin = np.isfinite(x)
        self.nonfinite += int(x.size - fin.sum())
        x = x[fin]
        if (x < 0).any():
            raise ValueError("LogHistogram holds non-negative values (norms) only")
        if not x.size:
            return
        self.min, self.max = min(self.min, float(x.min())), max(self.max, float(x.max()))
        self.zero += int((x == 0).sum())
        self.under += int(((x > 0) & (x < SKETCH_MIN)).sum())
        self.over += int((x >= SKETCH_MAX).sum())
        inside = x[(x >= SKETCH_MIN) & (x < SKETCH_MAX)]
        if inside.size:
            self.counts += np.bincount(bin_index(inside), minlength=NUM_BINS)

    def merge(self, other: LogHistogram) -> None:
        self.counts += other.counts
        self.zero += other.zero
        self.under += other.under
        self.over += other.over
        self.nonfinite += other.nonfinite
        self.min, self.max = min(self.min, other.min), max(self.max, other.max)

    def to_dict(self) -> dict:
        """Compact JSON form: the run of bins from the first to the last non-empty one."""
        nz = np.nonzero(self.counts)[0]
        i0, i1 = (int(nz[0]), int(nz[-1]) + 1) if nz.size else (0, 0)
        return {"i0": i0, "counts": self.counts[i0:i1].tolist(), "zero": self.zero, "under": self.under,
                "over": self.over, "nonfinite": self.nonfinite,
                "min": self.min if math.isfinite(self.min) else None,
                "max": self.max if math.isfinite(self.max) else None,
                "bins_per_decade": BINS_PER_DECADE, "sketch_min": SKETCH_MIN}

    @classmethod
    def from_dict(cls, d: dict) -> LogHistogram:
        settings = (d.get("bins_per_decade", BINS_PER_DECADE), d.get("sketch_min", SKETCH_MIN))
        if settings != (BINS_PER_DECADE, SKETCH_MIN):
            raise ValueError("sketch written with different bin settings; rescan without --resume")
        h = cls()
        c = d.get("counts") or []
        h.counts[d["i0"]:d["i0"] + len(c)] = c
        h.zero, h.under, h.over, h.nonfinite = (int(d.get(k) or 0) for k in ("zero", "under", "over", "nonfinite"))
        h.min = math.inf if d.get("min") is None else float(d["min"])
        h.max = -math.inf if d.get("max") is None else float(d["max"])
        return h

    def _order_stat(self, k: int, cum: np.ndarray) -> float:
        """Estimate of the k-th smallest value (0-based) via its bin."""
        if k < self.zero:
            return 0.0
        k -= self.zero
        if k < self.under:
            return min(max(SKETCH_MIN / 2, self.min), SKETCH_MIN)  # no bound here: documented
        k -= self.under
        inside = int(cum[-1]) if cum.size else 0
        if k < inside:
            return float(bin_center(int(np.searchsorted(cum, k, side="right"))))
        return self.max  # the "over" bucket: only the max is known

    def quantile(self, q: float | Iterable[float]) -> float | list[float]:
        """numpy-"linear" quantile(s) of the finite values; NaN when empty. Clamped to the exact min/max."""
        qs = [float(q)] if isinstance(q, int | float) else [float(x) for x in q]
        n = self.n
        if n == 0:
            out = [float("nan")] * len(qs)
            return out[0] if isinstance(q, int | float) else out
        cum = np.cumsum(self.counts)
        out = []
        for qi in qs:
            pos = float(qi) * (n - 1)
            lo, hi = int(math.floor(pos)), int(math.ceil(pos))
            a = self._order_stat(lo, cum)
            b = a if hi == lo else self._order_stat(hi, cum)
            v = a + (b - a) * (pos - lo)
            out.append(float(min(max(v, self.min), self.max)))
        return out[0] if np.isscalar(q) else out
