"""Chain acceptance statistics of the draft probe: accepted lengths, their interval over sequences, speed-up.

Greedy chain speculative decoding with k draft steps: from each position the draft proposes k tokens, the
first from the target's hidden states and the next ones from its own output; the verifier accepts them in
order while each equals its own argmax. Per starting position the number accepted is the length of the
leading run of hits, so ``acceptance[j]`` (all of steps 0..j accepted) can never exceed ``acceptance[j - 1]``:
per-position acceptance is non-increasing by construction, and the mean acceptance length
``1 + Σ_j acceptance[j]`` lies in ``[1, k + 1]`` (the "+1" is the verifier's own token, as vLLM counts it).

The interval is a t interval of a ratio estimator over *units* (sequences, or fixed blocks of starting
positions when there are too few sequences): positions inside one sequence are correlated, so a binomial
interval over positions would be too narrow. The expected speed-up is Leviathan et al. 2023 (arXiv
2211.17192, Theorem 3.8): ``(1 − α^{γ+1}) / ((1 − α)(γc + 1))``, whose numerator over ``1 − α`` is the
expected number of tokens per verifier call — replaced here by the measured mean acceptance length τ, so
``speed-up = τ / (1 + k·c)`` with ``c`` the draft's cost per token over the target's.

Example:
    >>> acc = accepted_counts([[1, 1, 0], [0, 1, 1], [1, 1, 1]])
    >>> acc
    [2, 0, 3]
    >>> round(speedup(2.0, 3, 0.05), 3)
    1.739
"""

from __future__ import annotations

import math
from collections.abc import Sequence

DRAFT_COST = 0.05  # default draft/target cost per token: one draft layer + a reduced lm_head vs a 20-80 layer target
MIN_UNITS = 8  # fewer sequences than this: the interval's units are blocks of BLOCK_ROWS starting positions
BLOCK_ROWS = 32
# two-sided 95 % quantiles of Student's t by degrees of freedom (any t table); above 30 interpolated in 1/df
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
         20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
         29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}


def t975(df: int) -> float:
    """The 97.5 % quantile of Student's t with ``df`` degrees of freedom (1.96 as df → ∞).

    >>> t975(4), t975(1000) < 1.97
    (2.776, True)
    """
    if df < 1:
        raise ValueError(f"t975 needs df >= 1, got {df}")
    if df in _T975:
        return _T975[df]
    keys = sorted(_T975)
    lo = max(k for k in keys if k < df)
    above = [k for k in keys if k > df]
    v_lo, x_lo = _T975[lo], 1 / lo
    v_hi, x_hi = (_T975[above[0]], 1 / above[0]) if above else (1.95996, 0.0)  # df → ∞: the normal quantile
    x = 1 / df
    return v_hi + (v_lo - v_hi) * (x - x_hi) / (x_lo - x_hi)


def accepted_counts(hits: Sequence[Sequence[int | bool]]) -> list[int]:
    """Per starting position, the number of draft tokens accepted: the leading run of hits (rows of k)."""
    out = []
    for row in hits:
        n = 0
        for h in row:
            if not h:
                break
            n += 1
        out.append(n)
    return out


def ratio_interval(sums: Sequence[float], counts: Sequence[float]) -> tuple[float, tuple[float, float] | None]:
    """Pooled ratio ``Σ sums / Σ counts`` over units and its 95 % t interval (linearised, m − 1 df).

    ``None`` for the interval with fewer than two units. The standard error is the cluster (ratio-estimator)
    one: ``sqrt(Σ (s_i − R n_i)² / (m (m − 1))) / n̄``.
    """
    pairs = [(float(s), float(n)) for s, n in zip(sums, counts, strict=True) if n > 0]
    total = sum(n for _, n in pairs)
    if not pairs or total <= 0:
        return 0.0, None
    R = sum(s for s, _ in pairs) / total
    m = len(pairs)
    if m < 2:
        return R, None
    nbar = total / m
    se = math.sqrt(sum((s - R * n) ** 2 for s, n in pairs) / (m * (m - 1))) / nbar
    half = t975(m - 1) * se
    return R, (R - half, R + half)


def length_interval(accepted: Sequence[float], rows: Sequence[float], k: int
                    ) -> tuple[float, tuple[float, float] | None]:
    """Mean acceptance length ``1 + Σ accepted / Σ rows`` and its interval, clipped to ``[1, k + 1]``."""
    R, ci = ratio_interval(accepted, rows)
    if ci is None:
        return 1 + R, None
    return 1 + R, (max(1.0, 1 + ci[0]), min(float(k + 1), 1 + ci[1]))


def units(per_file: Sequence[Sequence[int]]) -> tuple[list[list[int]], str]:
    """The units of the interval: whole sequences when there are ``MIN_UNITS`` or more, else blocks of
    ``BLOCK_ROWS`` consecutive starting positions (a sequence's last short block joins its previous one).

    ``per_file``: the starting-position indices of each sequence in a flat row numbering. Returns the units'
    index lists and what a unit is.
    """
    if len(per_file) >= MIN_UNITS:
        return [list(p) for p in per_file if len(p)], "sequence"
    out: list[list[int]] = []
    for p in per_file:
        blocks = [list(p[i:i + BLOCK_ROWS]) for i in range(0, len(p), BLOCK_ROWS)]
        if len(blocks) > 1 and len(blocks[-1]) < BLOCK_ROWS // 2:
            last = blocks.pop()
            blocks[-1] = blocks[-1] + last
        out += [b for b in blocks if b]
    return out, f"block of {BLOCK_ROWS} positions"


def speedup(tau: float, k: int, cost: float) -> float:
    """Expected decode speed-up over the target alone: ``τ / (1 + k·c)`` (Leviathan et al. 2023, with the
    measured mean acceptance length τ as the expected tokens per verifier call)."""
    return tau / (1 + k * cost)


__all__ = ["DRAFT_COST", "MIN_UNITS", "BLOCK_ROWS", "t975", "accepted_counts", "ratio_interval", "length_interval",
           "units", "speedup"]
