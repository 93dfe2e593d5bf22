"""Is a slot the residual stream at all? Data-only signs that a slot claimed as a block's output is a state
inside a block (its attention or MLP output) instead.

A capture path that misses the residual add saves a sub-layer output with the right shape, dtype and layer id
(sglang#39286: Gemma-3 aux captures without the residual, EAGLE-3 acceptance 1.06 → 1.89 once fixed;
nnsight#630: on vLLM ``layer.output[0]`` is the MLP output, the stream is ``out[0] + out[1]``; IBM
vLLM-Hook#11). In a pre-norm decoder the residual stream carries token 0's massive activation from the block
that writes it on (Sun et al. 2024, "Massive Activations in Large Language Models"), and its row norms grow
with depth (Heimersheim & Turner 2023); a sub-layer output does neither. Two signs follow, each decided only
where the data shows it (the exact test is ``--model``: ``exact.sublayer_match``):

* token 0's row is nearly empty (≤ ``TOKEN0_EMPTY`` × the median row norm): the MLP writes almost nothing to
  the saturated sink token (SmolLM2-135M MLP outputs of blocks 4–7 and 13–27: 0.04–0.27), while a residual
  state's token 0 holds at least its embedding (every SmolLM2 residual r = 0..30 and the post-norm final:
  ≥ 0.72; the Kimi-K2.5 L59 capture of fingerprint-signals §1: 0.55; a LayerNorm'd encoder row: ≈ 1);
* claimed between two slots that carry a massive token-0 sink, the slot has no sink and its median row norm
  falls below ``NORM_FALL`` × the shallower one's: a residual state between them would have grown (SmolLM2's
  residual r = 10, 11 lose the sink too, but their norms keep growing, so they are not flagged).

Both need a claim saying the slot is a block's output (integer r ≥ 1). Encoders and post-LN models have no
massive sink (the second sign needs two), and their LayerNorm'd rows keep token 0 at an ordinary norm.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from forensics.analysis.stats import SINK_RATIO

if TYPE_CHECKING:  # pragma: no cover
    from forensics.analysis.claims import Claim
    from forensics.analysis.fingerprint.core import Fingerprint
    from forensics.analysis.stats import SlotStats

TOKEN0_EMPTY = 0.2  # token 0's row norm ≤ this × the median row norm: not a residual state (see the docstring)
NORM_FALL = 0.8  # claimed deeper than a sink-carrying slot, sinkless, median norm < this × its: not residual
POSTNORM_IDENTITY = 0.99  # a post-norm role proven by B = RMSNorm(A) (rules.postnorm_signals); a norm collapse
#                           (0.8) or a slot off the layers' line (0.6) fits a sub-layer output just as well
MIN_ROWS = 16  # fewer rows: the median is too noisy for either sign


def token0_empty(s: SlotStats) -> bool:
    """Token 0's row nearly empty (≤ ``TOKEN0_EMPTY`` × the median row norm, not zeroed): the first sign of the
    module docstring, which needs no claim — no residual state of a decoder or encoder shows it."""
    return len(s.norms) >= MIN_ROWS and math.isfinite(s.first_ratio) and s.first_ratio <= TOKEN0_EMPTY \
        and s.first > 0


def sublayer_slots(fp: Fingerprint) -> list[int]:
    """Slots that the data alone shows are no residual state (token 0 nearly empty), claim or not."""
    offset = getattr(fp.rows, "offset", 0) if fp.rows is not None else 0
    if offset not in (0, None):
        return []  # row 0 is not token 0
    return [i for i, s in enumerate(fp.stats.slots) if s.norm.n and token0_empty(s) and not _certain_role(fp, i)]


def _certain_role(fp: Fingerprint, i: int) -> bool:
    sf = fp.slots[i]
    return sf.role == "embedding" or (sf.role == "final_postnorm" and sf.confidence >= POSTNORM_IDENTITY)


def data_only(fp: Fingerprint, claims: list[Claim | None]) -> dict[int, str]:
    """Slot → why it is not the residual stream its claim says, from the data alone (empty when nothing shows)."""
    k = len(fp.slots)
    rs = [c.r if c is not None and isinstance(c.r, int) and not isinstance(c.r, bool) else None for c in claims]
    st = fp.stats.slots
    offset = getattr(fp.rows, "offset", 0) if fp.rows is not None else 0
    out: dict[int, str] = {}
    if offset not in (0, None) or any(len(s.norms) < MIN_ROWS for s in st):
        return out  # row 0 is not token 0 (a suffix, a shifted capture), or too few rows
    sinks = set(fp.massive_sinks)
    for i in range(k):
        r, s = rs[i], st[i]
        if r is None or r < 1 or not s.norm.n or s.norm.max == 0 or _certain_role(fp, i):
            continue  # an embedding or a decided post-norm slot is another finding (a shifted or reordered list)
        med = s.norm_excl_sinks.median
        if math.isfinite(s.first_ratio) and s.first_ratio <= TOKEN0_EMPTY and s.first > 0:
            out[i] = (f"token 0's row has norm {s.first:.3g}, {s.first_ratio:.2f}× the median row ({med:.3g}; "
                      f"≤ {TOKEN0_EMPTY}): a residual state's token 0 holds at least its embedding, while a block's "
                      "MLP writes almost nothing to the sink token, so this is a sub-layer output")
            continue
        if i in sinks or (math.isfinite(s.first_ratio) and s.first_ratio >= SINK_RATIO):
            continue
        above = [j for j in sinks if rs[j] is not None and 1 <= rs[j] < r]  # type: ignore[operator]
        below = [j for j in sinks if rs[j] is not None and rs[j] > r]  # type: ignore[operator]
        if not above or not below:
            continue
        a = max(above, key=lambda j: rs[j])  # type: ignore[arg-type,return-value]
        c = min(below, key=lambda j: rs[j])  # type: ignore[arg-type,return-value]
        med_a = st[a].norm_excl_sinks.median
        if med_a > 0 and med < NORM_FALL * med_a:
            out[i] = (f"slots {a} and {c} (claimed L{rs[a]}, L{rs[c]}) carry token 0's massive activation and "
                      f"this slot, claimed L{r} between them, has none (token 0 at {s.first_ratio:.2f}× the median), "
                      "and its "
                      f"median row norm {med:.3g} is {med / med_a:.2f}× slot {a}'s (< {NORM_FALL}) where the residual "
                      "stream grows: an attention or MLP output, not the residual (or a post-norm state, or a "
                      "shallower layer stored out of order)")
    return out


__all__ = ["data_only", "TOKEN0_EMPTY", "NORM_FALL"]
