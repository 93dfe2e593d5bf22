"""Rules of the fingerprint: named thresholds, the evidence records, and the signal → verdict steps.

Each rule cites its anchor: duplicate rows ⇒ embedding (transformers
#2461); token-0 sink ⇒ after massive-activation emergence (Sun et al. 2024); tight sinkless spread ⇒ late
or post-norm; B = RMSNorm(A) or a norm collapse ⇒ post-final-norm; the masked angular chain
and its direction vote ⇒ depth order; expected labels assigned by depth order ⇒ findings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from forensics.analysis.fingerprint.depth import (
    NORMALIZES_MAX_RESIDUAL,
    NORMALIZES_SCREEN_ROWS,
    duplicate_rows,
    normalizes,
    seriate_ties,
)
from forensics.analysis.fingerprint.exact import (
    LADDER_MATCH_COS,
    LADDER_MATCH_REL,
    LADDER_SEPARATION,
    LENS_NEAR,
    POSTNORM_RMS_TOL,
)
from forensics.analysis.stats import SINK_RATIO, SlotStats
from forensics.findings import Finding, FindingKind, Severity
from forensics.jsonable import json_safe
from forensics.layers import FINAL_POST, R, r_label

if TYPE_CHECKING:  # pragma: no cover
    from forensics.analysis.fingerprint.core import Fingerprint

ROLES = ("embedding", "early", "middle", "late", "final_prenorm", "final_postnorm")
DUP_GROUP_FRACTION = 0.9  # ≥ this share of repeated-id groups bit-identical ⇒ embedding (table lookup)
DUP_ROW_FRACTION = 0.05  # without ids: ≥ this share of rows with an exact twin ⇒ embedding
EMBED_NORM_RATIO = 0.08  # median norm ≤ this × the next-smallest slot's median (and no sink) ⇒ context-free
#                          (tuning half: SmolLM2 embeddings ≤ 0.072, other sinkless slots ≥ 0.094)
EMBED_NORM_RATIO_UNIQUE_ROWS = 0.04  # …but ≤ this when repeated ids give different rows (no table lookup: only an
#   absolute-position model's embedding could still be one). A 1,416-token evaluation text's L1 sat at 0.076
#   beside L26 with 0 of 164 repeated-id groups identical; the tuning half's margin (0.094) had not shown it
TIGHT_SPREAD = 0.10  # robust spread of token norms (token 0 excluded) ≤ this ⇒ tight spread
MAD_TO_SD = 1.4826  # MAD × this = σ for a normal law: the robust spread reads like std/mean, minus outlier tokens
SINK_FADED_RATIO = 0.8  # token-0 norm < this × median ⇒ sink faded/inverted (seed L59: 0.55)
POSTNORM_NORM_DROP = 0.3  # tight + sinkless slot with median ≤ this × the largest layer median ⇒ post-norm
POSTNORM_CLAIM_RATIO = 1.0  # …and only when its median norm is at most the largest layer slot's: the final norm
#                             divides the scale away (tuning half: post-norm / r = L median 0.046–0.071; a SpecForge
#                             hidden_state holding r = L pre-norm on a 13-token text lost its sink, not its norm)
POSTNORM_DECIDED = 0.8  # post-norm score at/above this: the role is decided (identity, format claim, chain end)
POSTNORM_NORM_DROP_WEAK = 0.6  # …or ≤ this when token 0 keeps a one-dim (sink) direction: a candidate too
POSTNORM_TOKEN0_MAX = 1.5  # …and token 0's norm at most this × the median: the final norm divides a sink's size
#   away. Tuning half ladders: post-norm final 0.60–1.23 on all 37 texts; SmolLM2's sinkless L2 and L9 keep 1.7–9
#   and were taken for post-norm candidates without this gate (1,480 random 4-slot sets of the tuning ladders)
OFF_LINE_BETWEENNESS = 0.05  # off_line: a maybe-normalised slot with betweenness below this is off the depth line
#   (a post-norm final: γ makes it about equally far from every layer), at or above it a layer at the shallow end.
#   Tuning-half ladders, 1,419 such slots in random sets of 3 other layers: post-norm final −0.76 … 0.003 (1,110),
#   sinkless SmolLM2 L1/L10 shallower than the others 0.099 … 0.74 (309); the split sits in the gap
POSTNORM_CANDIDATE = 0.6  # post-norm score of a per-slot candidate (tight, sinkless, collapsed norm): ranked last
#                           only when the depth chain is too short to place it (fewer than POSTNORM_CHAIN_MIN)
POSTNORM_CLAIM_SPREAD = 0.2  # a sinkless slot the format calls the post-norm final (SpecForge hidden_state), or
#                               one the depth chain puts next to the deepest slot with a collapsed norm, is post-norm
#                               up to this robust spread. Tuning half: post-norm finals 0.043–0.154 (9 of 37 texts
#                               above TIGHT_SPREAD), while a token-0 sink excludes SmolLM2's r = L (100 % of texts)
MASSIVE_TOKEN0_CONCENTRATION = 0.5  # a massive-activation sink: token 0 ≥ SINK_RATIO × the median norm with at
#   least this share of it in one dim (Sun et al. 2024). SmolLM2 r = 3…28: 0.95–0.99 on every tuning ladder; a
#   sink spread over a few dims (the Kimi-shaped synthetic sample) 0.70. The post-LN encoder all-MiniLM-L6-v2 has
#   no token 0 at ≥ SINK_RATIO in any of 124 captures (its one outlier token: ratio 2.97)
TOKEN0_CONCENTRATION = 0.5  # max|x_0|/‖x_0‖ ≥ this ⇒ token 0 holds the sink direction (SmolLM2 post-norm 0.68)
POSTNORM_ISOLATION = 1.5  # isolated_end: end edge ≥ this × the chain's longest other edge. Tuning half: the 9
#   post-norm finals it placed had ≥ 1.64; one pre-norm candidate (a 13-token text) had 2.27 and was ranked
#   last at candidate score 0.6, which no verdict acts on
POSTNORM_CHAIN_MIN = 3  # chain slots needed for the norm-collapse-at-the-chain-end test (collapsed_end)
DUPLICATE_SLOT_DISTANCE = 1e-4  # masked angular distance below this (and equal norms) ⇒ duplicate capture
# Votes on the direction of the depth chain: W_NORM per pair of the path whose norm rises (falls), W_LATE /
# W_FADED per late-signature / faded-sink slot at the deep (shallow) half. Measured on the tuning half (1,480
# random 2–5-slot subsets of 37 SmolLM2 ladders, right seriation paths): direction wrong on 63 paths with
# Kendall's τ in [-1, 1] as the norm vote, 6 with one vote per pair, 1 with two votes per pair (SmolLM2's
# r ≈ 10 loses its sink and looks late). Two per pair still lets the late signature turn a two-slot chain
# like the seed's [L31, L59] (L59's norm 111 < L31's 174): −2 + 1.5 + 1 > 0.
W_NORM, W_LATE, W_FADED = 2.0, 1.5, 1.0
NORM_TIE = 0.05  # two slots whose median norms differ by at most this fraction cast no norm vote: SmolLM2's norm
#                  grows ≈ 3–5 % per layer mid-depth, and on a 30-token text L11 out-normed L12 at confidence 1.0
NEAR_TIE_PATH = 0.01  # paths costing within this relative margin of the best are a tie for the distances; the
#   norms pick among them. Tuning half (1,136 files), 4-slot depth order wrong: 10 without the rule; 7 at 0.005;
#   4 from 0.0075 to 0.015 (the middle of that plateau is taken); 5 at 0.02–0.03, where a post-norm final is ranked
#   shallowest again. No verdict changes anywhere on the range
ORDER_MARGIN_GAIN = 5.0  # chain confidence = 0.5 + this × relative margin over the next-best path; tuning half:
#                          every wrong path had margin ≤ 0.007 (confidence ≤ 0.54), right paths median 0.048
DIRECTION_CONFLICT_CONFIDENCE = 0.5  # cap when the norm votes and the late/faded votes disagree, or the norms cast
#   no vote (ties; a two-slot chain has no path margin, so its direction is all the evidence there is), or
#   when no layer slot has a sink: a post-LN encoder (all-MiniLM-L6-v2, BERT) normalises every layer, its last
#   layer's norm falls 14 → 4, and its 4-slot chains were reversed at confidence 0.92–1.0 on the tuning texts
BANDS = ((1 / 3, "early"), (2 / 3, "middle"), (1.01, "late"))  # rank fraction among layer slots → role

EMBED_MIN_SCORE = 0.6  # embedding score at/above this ⇒ role embedding


@dataclass
class Evidence:
    """One signal: its raw value, the threshold it was compared with, and what it says."""

    signal: str
    value: Any
    threshold: Any
    verdict: str

    def to_dict(self) -> dict:
        return {"signal": self.signal, "value": json_safe(self.value), "threshold": json_safe(self.threshold),
                "verdict": self.verdict}

    def line(self) -> str:
        thr = "" if self.threshold is None else f"  (threshold {_fmt(self.threshold)})"
        return f"{self.signal:<20} {_fmt(self.value):<24} → {self.verdict}{thr}"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        a = abs(v)
        return f"{v:.3g}" if a and (a >= 1e4 or a < 1e-2) else f"{v:.3f}".rstrip("0").rstrip(".")
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def _depth_key(r: R) -> float:
    return math.inf if r == FINAL_POST else float(r)


def spread_cv(s: SlotStats) -> float:
    """std/mean of the token norms (token 0 excluded): shown as context, no longer a gate."""
    n = s.norm_excl_first
    return float(n.std / n.mean) if n.mean and math.isfinite(n.mean) and n.mean > 0 else float("nan")


def robust_spread(s: SlotStats) -> float:
    """``MAD_TO_SD · MAD / median`` of the token norms (token 0 excluded): the tight-spread signal.

    Robust to a few outlier tokens: on short chat captures the system-prompt tokens widened std/mean of
    the SmolLM2 post-norm state to 0.101–0.112 and it was called "early"; the MAD ignores them.
    """
    n = s.norm_excl_first
    return float(MAD_TO_SD * n.mad / n.median) if n.median and math.isfinite(n.median) and n.median > 0 \
        else float("nan")


def has_sink(s: SlotStats) -> bool:
    return bool(s.massive_tokens) or (math.isfinite(s.first_ratio) and s.first_ratio >= SINK_RATIO) or bool(s.sinks)


def late_signature(s: SlotStats) -> bool:
    return robust_spread(s) <= TIGHT_SPREAD and not has_sink(s)


def _lookup_score(dup: dict, ev_i: list[Evidence]) -> float:
    """Embedding score from duplicate rows (:func:`duplicate_rows`): repeated token ids whose rows are bit-identical
    (0.99), or, without input_ids, rows with an exact twin (0.9); 0 otherwise. Its evidence joins ``ev_i``."""
    if dup.get("groups"):
        frac = dup["fraction"]
        ok = frac >= DUP_GROUP_FRACTION and not dup.get("clashes")
        ev_i.append(Evidence("dup_rows", frac, f"≥ {DUP_GROUP_FRACTION}", f"{dup['identical']}/{dup['groups']} "
                             "repeated-id groups bit-identical ⇒ " + ("table lookup ⇒ embedding" if ok else
                                                                     "context-dependent rows, not a lookup")))
        return 0.99 if ok else 0.0
    if "rows_with_twin" in dup:
        frac = dup["fraction"]
        ok = frac >= DUP_ROW_FRACTION
        ev_i.append(Evidence("dup_rows", frac, f"≥ {DUP_ROW_FRACTION}", f"{dup['rows_with_twin']}/{dup['tokens']} "
                             "rows have an exact twin (no input_ids) ⇒ " + ("table lookup ⇒ embedding" if ok
                                                                            else "no lookup evidence")))
        return 0.9 if ok else 0.0
    ev_i.append(Evidence("dup_rows", None, None, "no repeated token id in this sample: not applicable"))
    return 0.0


def _shape_evidence(s: SlotStats) -> list[Evidence]:
    """The slot's descriptive evidence lines: robust token-norm spread, token-0 sink ratio, massive activations."""
    out: list[Evidence] = []
    rs = robust_spread(s)
    out.append(Evidence("robust_spread", rs, f"≤ {TIGHT_SPREAD} tight", f"{MAD_TO_SD}·MAD/median of token "
                        f"norms (token 0 excluded): {'tight' if rs <= TIGHT_SPREAD else 'wide'}; "
                        f"std/mean {spread_cv(s):.3g}"))
    out.append(Evidence("token0_ratio", s.first_ratio, f"≥ {SINK_RATIO} sink; < {SINK_FADED_RATIO} faded",
                        "sink (after massive-activation emergence)" if has_sink(s) else
                        "sink faded/inverted (late)" if s.first_ratio < SINK_FADED_RATIO else "no sink"))
    if s.massive_tokens:
        top = s.massive_tokens[0]
        out.append(Evidence("massive_dims", f"dims {s.massive_dims[:6]} at tokens "
                            f"{[t['pos'] for t in s.massive_tokens[:6]]}, max {top['max_abs']:.4g}",
                            f"> {s.massive_threshold:.4g}", "massive activations (Sun et al. 2024)"))
    return out


def embedding_signals(st_slots: Sequence[SlotStats], tensors: list, ids: Any, meds: list[float],
                      ev: list[list[Evidence]], hashes: Sequence[np.ndarray] | None = None,
                      conc: Sequence[float] | None = None) -> list[float]:
    """Per-slot embedding score from duplicate rows and context-free norms; appends the evidence lines.
    ``hashes``: per-row hashes of ``tensors`` already computed (equal rows ⇒ equal hashes), screening the
    duplicate-row test (:func:`~forensics.analysis.fingerprint.depth.duplicate_rows`). ``conc``: each slot's
    :func:`token0_concentration` when already computed."""
    k = len(st_slots)
    embed_score = [0.0] * k
    for i, (s, h) in enumerate(zip(st_slots, tensors, strict=True)):
        if s.norm.n >= 2 and s.norm.max == s.norm.min and bool((h == h[:1]).all()):
            ev[i].append(Evidence("dup_rows", None, None, "every row is the same vector (a constant slot): no "
                                  "lookup evidence"))
            continue
        hs = hashes[i] if hashes is not None and len(hashes[i]) == int(h.shape[0]) else None
        dup = duplicate_rows(h, ids, hs, s.norms)
        others = [meds[j] for j in range(k) if j != i and math.isfinite(meds[j])]
        ratio = meds[i] / min(others) if others and min(others) > 0 else float("nan")
        embed_score[i] = _lookup_score(dup, ev[i])
        tiny = math.isfinite(ratio) and ratio <= EMBED_NORM_RATIO and not has_sink(s) and meds[i] > 0
        ev[i].append(Evidence("norm_level", ratio, f"≤ {EMBED_NORM_RATIO} × next-smallest slot, no sink",
                              f"median ‖x‖ {meds[i]:.4g} (sinks excluded): "
                              + ("tiny, context-free norms" if tiny else "layer-scale norms")))
        c0 = token0_concentration(h) if conc is None else conc[i]
        if tiny and embed_score[i] == 0.0:
            if c0 >= TOKEN0_CONCENTRATION:  # a normalised sink keeps its one-dim direction; a lookup row does not
                ev[i][-1].verdict += " — but token 0 sits in one dim (a normalised sink), not a lookup"
            elif dup.get("groups") and ratio > EMBED_NORM_RATIO_UNIQUE_ROWS:
                ev[i][-1].verdict += (f" — but repeated ids differ and the norm is not tiny enough (≤ "
                                      f"{EMBED_NORM_RATIO_UNIQUE_ROWS}) to call it an absolute-position embedding")
            else:
                embed_score[i] = 0.6 if dup.get("groups") else 0.7  # absolute-position models: no duplicates
                if dup.get("groups"):
                    ev[i][-1].verdict += " — yet repeated ids differ: absolute position embeddings (GPT-2/OPT)?"
        ev[i].append(Evidence("token0_concentration", c0, f"≥ {TOKEN0_CONCENTRATION} one-dim sink direction",
                              "token 0 concentrated in one dim (sink direction)" if c0 >= TOKEN0_CONCENTRATION
                              else "token 0 spread over dims"))
        ev[i] += _shape_evidence(s)
    for i in range(k):
        if embed_score[i] >= EMBED_MIN_SCORE:
            for e in ev[i]:
                if e.signal == "token0_ratio" and not has_sink(st_slots[i]):
                    e.verdict = "no sink (context-free lookup)"
    return embed_score


def _closest_prenorm(i: int, k: int, tensors: list, lookup: list[bool], embed_score: list[float], same_T: bool,
                     drop: list[int]) -> tuple[float, int] | None:
    """``(residual, slot)`` of the layer slot whose RMSNorm with a fitted γ is closest to slot ``i`` (screened on
    a few rows, confirmed on all); None when no other slot can be its pre-norm input."""
    best = None
    for j in range(k):
        if j != i and not lookup[j] and same_T and embed_score[j] < EMBED_MIN_SCORE:
            res = normalizes(tensors[j], tensors[i], drop, NORMALIZES_SCREEN_ROWS)["residual"]
            if res <= NORMALIZES_MAX_RESIDUAL:  # an exact pair fits on any rows: confirm on all of them
                res = normalizes(tensors[j], tensors[i], drop)["residual"]
            best = (res, j) if best is None or res < best[0] else best
    return best


def _norm_collapse(i: int, s: SlotStats, k: int, tensors: list, embed_score: list[float], meds: list[float],
                   claim_post: bool, ev_i: list[Evidence], conc: Sequence[float] | None = None,
                   ) -> tuple[float, str] | None:
    """Post-norm ``(score, reason)`` of sinkless, non-lookup slot ``i`` that is no RMSNorm of another slot, from its
    token-norm spread, its norm against the layer slots' and the format's claim; None when it reads as pre-norm.
    Its evidence joins ``ev_i``."""
    spread = robust_spread(s)
    tight = spread <= TIGHT_SPREAD
    if not tight and not (claim_post and spread <= POSTNORM_CLAIM_SPREAD):
        if claim_post:
            ev_i.append(Evidence("format_claim", spread, f"spread ≤ {POSTNORM_CLAIM_SPREAD}",
                                 "post-norm final by the format, but the token norms spread like a layer's"))
        return None
    found: tuple[float, str] | None = None
    one_dim = (token0_concentration(tensors[i]) if conc is None else conc[i]) >= TOKEN0_CONCENTRATION
    layer_meds = [meds[j] for j in range(k) if j != i and embed_score[j] < EMBED_MIN_SCORE
                  and math.isfinite(meds[j]) and meds[j] > 0]
    ratio = meds[i] / max(layer_meds) if layer_meds else None
    dropped = tight and ratio is not None and ratio <= POSTNORM_NORM_DROP
    if dropped and claim_post:
        found, verdict = (0.9, "norm_drop"), "tight, sinkless, norm collapsed, and where the " \
            "format stores the post-norm final ⇒ post-final-norm"
    elif claim_post and (ratio is None or ratio <= POSTNORM_CLAIM_RATIO):
        found, verdict = (0.8, "format_claim"), "sinkless and tight where the format stores the " \
            "post-norm final ⇒ post-final-norm"
    elif claim_post:
        verdict = "the format stores the post-norm final here, but its norm exceeds every layer slot's: pre-norm?"
    elif dropped or (one_dim and (ratio is None or ratio <= POSTNORM_NORM_DROP_WEAK) and ordinary_token0(s)):
        # a candidate only: SmolLM2's sinkless mid layers (r ≈ 10) are as tight and ≤ 0.2 × r = L; the depth
        # chain decides (collapsed_end)
        found = (POSTNORM_CANDIDATE, "norm_drop" if dropped else "sink_direction")
        verdict = ("tight, sinkless and norm collapsed" if dropped else "sink direction kept at an ordinary "
                   "norm") + ": post-norm candidate, confirmed only at the deep end of the depth chain"
    elif ratio is None:
        verdict = "no other layer slot to compare: late pre-norm or post-norm (run with --model for the γ test)"
    else:
        verdict = "tight, sinkless at layer-scale norm ⇒ late pre-norm"
    ev_i.append(Evidence("norm_drop", ratio, f"≤ {POSTNORM_NORM_DROP} (≤ {POSTNORM_NORM_DROP_WEAK} with a "
                         "one-dim token 0) ⇒ normalised", verdict))
    return found


def postnorm_signals(st_slots: Sequence[SlotStats], tensors: list, embed_score: list[float], meds: list[float],
                     drop: list[int], ev: list[list[Evidence]], claimed: Sequence[str | None] | None = None,
                     conc: Sequence[float] | None = None) -> tuple[list[float], dict[int, int], list[str]]:
    """Per-slot post-norm score, ``{post slot: pre-norm slot}`` and what decided it (γ-free: B = γ ⊙ A/rms(A)
    makes B/A constant per dimension).

    A sinkless slot is post-norm when it is RMSNorm(another slot) for a fitted γ (0.99, "normalizes"), or
    when its format stores the post-norm final there (SpecForge's ``hidden_state``) and the data agrees
    (0.8, "format_claim"; with a collapsed norm 0.9). A tight, sinkless slot whose norm collapsed next to the
    layer slots, or whose token 0 keeps the sink's one-dim direction when there is no other slot, is only a
    candidate (``POSTNORM_CANDIDATE``): the depth chain confirms it (``collapsed_end``). A token-0
    sink or a table lookup excludes post-norm whatever the format claims (the final norm divides a sink away).
    """
    k = len(st_slots)
    claims = list(claimed) if claimed is not None else [None] * k
    same_T = len({int(t.shape[0]) for t in tensors}) == 1
    post_score = [0.0] * k
    why = [""] * k
    prenorm_of: dict[int, int] = {}
    lookup = [embed_score[i] >= 0.9 for i in range(k)]  # duplicate rows: certainly not post-norm
    for i, s in enumerate(st_slots):
        claim_post = claims[i] == FINAL_POST
        if lookup[i] or has_sink(s):  # the identity test needs no tight spread: B = RMSNorm(A) is exact
            if claim_post:
                ev[i].append(Evidence("format_claim", "post-norm final (format)", "no sink, no lookup",
                                      "contradicted: " + ("a token-0 sink survives only before the final norm"
                                                          if has_sink(s) else "a table lookup (embedding)")))
            continue
        best = _closest_prenorm(i, k, tensors, lookup, embed_score, same_T, drop)
        if best is not None and best[0] <= NORMALIZES_MAX_RESIDUAL:
            post_score[i], prenorm_of[i], why[i] = 0.99, best[1], "normalizes"
            ev[i].append(Evidence("normalizes", f"= RMSNorm(slot {best[1]}) with fitted γ, residual {best[0]:.2g}",
                                  f"≤ {NORMALIZES_MAX_RESIDUAL}", "post-norm of that slot"))
            continue
        if embed_score[i] >= EMBED_MIN_SCORE:
            continue
        found = _norm_collapse(i, s, k, tensors, embed_score, meds, claim_post, ev[i], conc)
        if found is not None:
            post_score[i], why[i] = found
    return post_score, prenorm_of, why


def maybe_normalised(chain: Sequence[int], slots: Sequence[SlotStats], tensors: list, meds: list[float],
                     conc: Sequence[float] | None = None) -> list[int]:
    """The chain slots whose norm may have been divided away: sinkless, token 0 concentrated in one dim (a sink's
    direction kept, its size gone: :func:`ordinary_token0`) and a median norm ≤ ``POSTNORM_NORM_DROP_WEAK`` × the
    chain's largest.
    Tuning half: the post-norm final has token-0 concentration 0.59–0.78 and no sink on all 37 texts, but
    SmolLM2's L1/L2/L9/L10 can match too, so ``chain_order`` silences one only at a post-norm final's place.
    """
    top = max((meds[i] for i in chain if math.isfinite(meds[i])), default=0.0)
    return [i for i in chain if not has_sink(slots[i]) and math.isfinite(meds[i]) and top > 0
            and meds[i] <= POSTNORM_NORM_DROP_WEAK * top and ordinary_token0(slots[i])
            and (token0_concentration(tensors[i]) if conc is None else conc[i]) >= TOKEN0_CONCENTRATION]


def off_line(D: np.ndarray, chain: list[int], quiet: Sequence[int], slots: Sequence[SlotStats], meds: list[float],
             ev: list[list[Evidence]]) -> dict[int, bool]:
    """``{slot: off the depth line?}`` for each maybe-normalised chain slot (chains of ``POSTNORM_CHAIN_MIN``+).

    The residual stream is a line: a layer shallower than the others is nearer the shallowest of them than the
    deepest, by a good part of the distance between those two. Betweenness ``β = (D(e, deepest) − D(e,
    shallowest)) / D(shallowest, deepest)``, the others ordered by their own chain: ≈ +1 for a layer at the
    shallow end, ≤ 0 for a post-norm final, which γ keeps about equally far from every layer and nearest the
    deepest (``OFF_LINE_BETWEENNESS``). The others are the chain's other slots that are not maybe-normalised too,
    when there are two.
    """
    out: dict[int, bool] = {}
    if len(chain) < POSTNORM_CHAIN_MIN:
        return out
    layers = [i for i in chain if i not in quiet]  # measured against the slots that are surely layers
    shared = chain_order(D, layers, slots, meds).path if len(layers) >= 2 else None  # the same for every e
    for e in quiet:
        rest = shared if shared is not None else chain_order(D, [i for i in chain if i != e], slots, meds).path
        a, b = rest[0], rest[-1]
        if not D[a, b] > 0:
            continue
        beta = float((D[e, b] - D[e, a]) / D[a, b])
        out[e] = beta < OFF_LINE_BETWEENNESS
        ev[e].append(Evidence("betweenness", beta, f"< {OFF_LINE_BETWEENNESS} off the depth line",
                              f"{'off the line of the layers (as near slot ' + str(b) + ' as slot ' + str(a) + ')'}: "
                              "a post-norm candidate, ranked last" if out[e] else
                              f"on the line of the layers (nearer slot {a} than slot {b}): a layer, not a "
                              "post-norm final"))
    return out


def massive_sink(s: SlotStats, h: Any, conc: float | None = None) -> bool:
    """Token 0 of this slot is a massive-activation sink (``MASSIVE_TOKEN0_CONCENTRATION``): the signature of a
    pre-norm decoder's residual stream (Sun et al. 2024, "Massive Activations in Large Language Models")."""
    return math.isfinite(s.first_ratio) and s.first_ratio >= SINK_RATIO and \
        (token0_concentration(h) if conc is None else conc) >= MASSIVE_TOKEN0_CONCENTRATION


def ordinary_token0(s: SlotStats) -> bool:
    """Token 0's norm is an ordinary token's (≤ ``POSTNORM_TOKEN0_MAX`` × the median), as after a final norm."""
    return math.isfinite(s.first_ratio) and s.first_ratio <= POSTNORM_TOKEN0_MAX


def token0_concentration(h: Any) -> float:
    """``max|x_0| / ‖x_0‖``: how much of token 0 sits in one dim (sink rows: ≈ 0.95–0.99; lookups ≈ 0.2–0.3)."""
    x = h[0].float()
    n = float(x.norm())
    return float(x.abs().max()) / n if n > 0 and math.isfinite(n) else 0.0


def _reference_dtype(m: dict) -> str:
    """`` (float32 reference)``: the compute dtype the tolerances were applied against, when known."""
    dt = (m.get("tolerance") or {}).get("compute_dtype")
    return f" ({dt} reference)" if dt else ""


def exact_evidence(ev: list[Evidence], x: Any) -> None:
    """The evidence lines of one slot's exact checks (``exact.ExactMatch``)."""
    e, p, m, lens = x.embedding, x.postnorm, x.ladder, x.lens
    if e:
        ev.append(Evidence("exact_embedding", e["equal_rows"] / max(1, e["rows"]), "all rows (1.0)",
                           f"{e['equal_rows']}/{e['rows']} rows == embed_tokens.weight[ids] ⇒ "
                           + ("embedding output (r = 0)" if e["verdict"] else "not the embedding output")))
    if p:
        ev.append(Evidence("exact_gamma", p["max_abs_dev"], f"max|rms(x/γ)−1| ≤ {POSTNORM_RMS_TOL}",
                           "post-final-norm" if p["verdict"] else "not post-norm"))
    if m and m.get("best") is not None:
        ev.append(Evidence("ladder_match", m["best_rel"], f"cos ≥ {LADDER_MATCH_COS}, rel ≤ {LADDER_MATCH_REL}, "
                           f"≤ {LADDER_SEPARATION} × runner-up" + _reference_dtype(m),
                           f"{'r = ' if m['match'] else 'no match; nearest '}"
                           f"{r_label(m['best'])} (cos {m['best_cos']:.5f}, rel {m['best_rel']:.3g}); runner-up "
                           f"{r_label(m['runner_up'])} (cos {_fmt(m['runner_up_cos'])}, "
                           f"rel {_fmt(m['runner_up_rel'])})" + _rescaled(m)))
    if lens:
        near = lens["near"]
        span = (f"; reference depths with agreement within ±{_lens_near()}: "
                f"{r_label(near[0])}–{r_label(near[-1])}" if near else "") if near is not None else ""
        ev.append(Evidence("logit_lens", lens["agreement"], None, f"top-1 of lm_head(norm(x)) agrees with the "
                           f"model's final prediction on {lens['agreement']:.0%} of {lens['rows']} tokens "
                           f"(rises with depth){span}"))


@dataclass
class ChainOrder:
    """The depth order of the layer slots: the path (shallow → deep), its evidence and its confidence."""

    path: list[int]
    evidence: list[Evidence]
    confidence: float  # 0.5 coin flip … 1.0 unambiguous; see ORDER_MARGIN_GAIN and the direction conflict
    chain: list[int] = field(default_factory=list)  # the seriation path itself (either direction)


def _norm_vote(a: float, b: float) -> float:
    """+1 when the norm rises from a to b, −1 when it falls, 0 within ``NORM_TIE`` (adjacent layers)."""
    if not (math.isfinite(a) and math.isfinite(b)) or max(a, b) <= 0:
        return 0.0
    return 0.0 if abs(b - a) <= NORM_TIE * max(a, b) else float(np.sign(b - a))


def _chain_evidence(cost: float, runner: float, margin: float, seriated: list[int],
                    retied: list[int] | None) -> Evidence:
    """The ``chain`` evidence line: the seriated path, its cost against the next-best path, and the norm-ordered
    path taken when ``retied`` (a near-tie of paths)."""
    return Evidence("chain", f"path cost {cost:.4f}, next-best {_fmt(runner)} (margin {_fmt(margin)})",
                    f"confidence 0.5 + {ORDER_MARGIN_GAIN} × margin",
                    "masked angular-distance chain " + " → ".join(str(i) for i in seriated)
                    + (f"; a near-tie (paths within {NEAR_TIE_PATH:.0%}), ordered by the norms as "
                       + " → ".join(str(i) for i in retied) if retied is not None else ""))


def _direction_evidence(norm: float, late: float, faded: float, score: float, conflict: bool,
                        unanchored: bool) -> Evidence:
    """The ``direction`` evidence line: the weighted norm, late-signature and faded-sink votes and why the
    direction may be uncertain."""
    return Evidence("direction", f"norm pairs {norm:+.0f}·{W_NORM} + late sig {late:+.0f}·{W_LATE} + faded sink "
                    f"{faded:+.0f}·{W_FADED} = {score:+.2f}", "sign",
                    ("no direction signal: norm order kept" if score == 0 else "shallow → deep as listed")
                    + ("; norm and late/faded-sink votes disagree: direction uncertain" if conflict else "")
                    + ("; no layer slot has a token-0 sink, so nothing shows a pre-norm residual stream whose norm "
                       "grows with depth: direction uncertain" if unanchored and not conflict else ""))


def _quiet_ends(path: list[int], quiet: Sequence[int], meds: list[float]) -> list[int]:
    """The ``quiet`` slots the path puts at an end beside its largest-norm slot, where a post-norm final sits: they
    cast no norm vote."""
    top = max(path, key=lambda i: meds[i] if math.isfinite(meds[i]) else -math.inf)
    return [e for e, nb in ((path[0], path[1]), (path[-1], path[-2])) if e in quiet and nb == top and len(path) >= 3]


def _order_confidence(margin: float, uncertain: bool) -> float:
    """0.5 + ``ORDER_MARGIN_GAIN`` × the chain's margin over the next-best path (1 when none), capped at
    ``DIRECTION_CONFLICT_CONFIDENCE`` when the direction is ``uncertain``."""
    conf = 1.0 if not math.isfinite(margin) else min(1.0, 0.5 + ORDER_MARGIN_GAIN * margin)
    return min(conf, DIRECTION_CONFLICT_CONFIDENCE) if uncertain else conf


def _near_tie_path(path: list[int], ties: list, quiet: Sequence[int], meds: list[float]) -> list[int]:
    """A near-tie of paths (``ties``: ``(cost, path)`` within ``NEAR_TIE_PATH`` of the best): the one whose norms
    rise (or fall) most consistently, the cheaper on a draw; else ``path`` itself."""
    if len(path) >= 3 and len(ties) > 1:
        return max(ties, key=lambda c: (abs(_norm_votes(c[1], quiet, meds)), -c[0]))[1]
    return path


def _norm_votes(p: Sequence[int], quiet: Sequence[int], meds: list[float]) -> float:
    """Sum of :func:`_norm_vote` over every ordered pair of path ``p`` (the ``quiet`` slots cast none)."""
    v = [i for i in p if i not in quiet]
    return float(sum(_norm_vote(meds[v[a]], meds[v[b]]) for a in range(len(v)) for b in range(a + 1, len(v))))


def _end_votes(path: list[int], slots: Sequence[SlotStats]) -> tuple[float, float]:
    """``(late, faded)`` direction votes: +1 per late-signature / faded-sink slot in the path's deep half, −1 per
    one in its shallow half."""
    half = (len(path) - 1) / 2
    late = float(sum(np.sign(p - half) for p, i in enumerate(path) if late_signature(slots[i])))
    faded = float(sum(np.sign(p - half) for p, i in enumerate(path)
                      if math.isfinite(slots[i].first_ratio) and slots[i].first_ratio < SINK_FADED_RATIO))
    return late, faded


def chain_order(D: np.ndarray, chain: list[int], slots: Sequence[SlotStats], meds: list[float],
                quiet: Sequence[int] = (), anchors: Sequence[int] | None = None) -> ChainOrder:
    """Seriate the layer slots by masked angular distance, then vote the direction (shallow → deep).

    Direction votes: every pair of the path whose median norm rises along it (+1) or falls (−1), plus the late
    signature and a faded sink at either end (Heimersheim & Turner 2023: norms grow with depth; Sun et al.
    2024: massive activations fade in the last layers). The confidence is the chain's relative margin over the
    next-best path (``ORDER_MARGIN_GAIN``), capped at a coin flip when no layer slot has a sink, or when the norm
    votes and the signature votes point opposite ways: SmolLM2's sinkless, tight mid layers (r ≈ 10) look
    "late" and Kimi's last layer (norm 111 after 174 at L31) looks "shallow" by norm, and the data alone cannot
    say which story holds.

    When other paths cost within ``NEAR_TIE_PATH`` of the best, the distances cannot order the slots (SmolLM2's
    early layers: L2 → L6 → L21 and L6 → L2 → L21 differ by 0.3 %), and the path whose norms rise most
    consistently is taken among them. A slot of ``quiet`` (sinkless, token 0 in one dim at a collapsed norm: maybe
    post-norm) that the path puts at an end beside the largest-norm slot, where a post-norm final sits, casts no
    norm vote: the final norm divides the scale away, so its norm says nothing of depth. ``anchors``: the slots
    with a massive-activation sink (:func:`massive_sink`; default: any sink), without which the direction is a
    coin flip.
    """
    if not chain:
        return ChainOrder([], [], 1.0)
    if len(chain) == 1:
        return ChainOrder(list(chain), [Evidence("order", "one layer slot", None, "nothing to order")], 1.0,
                          list(chain))
    path, cost, runner, ties = seriate_ties(D, chain, NEAR_TIE_PATH)
    margin = (runner - cost) / cost if cost > 0 and math.isfinite(runner) else (math.inf if cost > 0 else 0.0)
    quiet = _quiet_ends(path, quiet, meds)
    seriated = list(path)
    path = _near_tie_path(path, ties, quiet, meds)
    retied = list(path) not in (seriated, seriated[::-1])
    norm = _norm_votes(path, quiet, meds)
    late, faded = _end_votes(path, slots)
    signature = W_LATE * late + W_FADED * faded
    score = W_NORM * norm + signature
    if score < 0:
        path = path[::-1]
    chain_path = list(path)  # the evidence shows the chain itself; the order may be the norm order below
    conflict = norm * signature < 0
    if score == 0:  # no direction signal: the chain's listed direction is a coin flip (often a near-tie of
        path = sorted(path, key=lambda i: meds[i])  # two paths, margin ~0), so take the norm order the text names
    unanchored = not any((i in anchors) if anchors is not None else has_sink(slots[i]) for i in path)
    # norm == 0: only a late/faded vote, or norm ties
    conf = _order_confidence(margin, score == 0 or conflict or unanchored or norm == 0)
    ev = [_chain_evidence(cost, runner, margin, seriated, chain_path if retied else None),
          _direction_evidence(norm, late, faded, score, conflict, unanchored)]
    return ChainOrder(path, ev, conf, chain_path)


def collapsed_end(path: list[int], slots: Sequence[SlotStats], meds: list[float],
                  ev: list[list[Evidence]]) -> int | None:
    """The slot at an end of the depth chain that is a post-norm final, or None.

    The final norm keeps a state's direction (γ rescales dims) but collapses its norm: the chain puts the
    post-norm final next to the deepest pre-norm slot, and its median norm is a small fraction of that slot's.
    A pre-norm slot sits next to the deepest one only when it is deeper still (or nearly as deep), so it keeps a
    layer-scale norm. Needs ``POSTNORM_CHAIN_MIN`` chain slots: in a chain of two, every slot is next to the
    deepest. The slot must be sinkless (the norm divides a sink away) with spread ≤ ``POSTNORM_CLAIM_SPREAD``.
    """
    if len(path) < POSTNORM_CHAIN_MIN:
        return None
    top = max(path, key=lambda i: meds[i] if math.isfinite(meds[i]) else -math.inf)
    for end, nb in ((path[0], path[1]), (path[-1], path[-2])):
        s = slots[end]
        if nb != top or has_sink(s) or not (math.isfinite(meds[end]) and meds[nb] > 0):
            continue
        ratio = meds[end] / meds[nb]
        if ratio <= POSTNORM_NORM_DROP and robust_spread(s) <= POSTNORM_CLAIM_SPREAD:
            ev[end].append(Evidence("norm_collapse", ratio, f"≤ {POSTNORM_NORM_DROP} × the deepest slot, next to it "
                                    "in the chain", f"sinkless, at the chain's end beside slot {nb} (largest norm) "
                                    "with its norm divided away ⇒ post-final-norm"))
            return end
    return None


def isolated_end(path: list[int], D: np.ndarray, candidates: list[int], ev: list[list[Evidence]]) -> int | None:
    """A post-norm candidate hanging off an end of the depth chain by its longest edge, or None.

    γ rescales every dim, so without a deep layer beside it a post-norm final is about equally far from every
    layer slot, farther than the layers are from each other: it then sits at an end of the chain, attached by
    an edge ``POSTNORM_ISOLATION`` × longer than any other. Such a candidate is ranked last (not shallowest)
    with its candidate score: the role is not decided by this.
    """
    if len(path) < POSTNORM_CHAIN_MIN:
        return None
    edges = [float(D[path[i], path[i + 1]]) for i in range(len(path) - 1)]
    for end, edge, rest in ((path[0], edges[0], edges[1:]), (path[-1], edges[-1], edges[:-1])):
        if end in candidates and rest and edge >= POSTNORM_ISOLATION * max(rest):
            ev[end].append(Evidence("isolation", edge / max(rest), f"≥ {POSTNORM_ISOLATION} × the chain's other "
                                    "edges", "hangs off the chain's end: a post-norm candidate, ranked last"))
            return end
    return None


def order_chain(D: np.ndarray, chain: list[int], slots: Sequence[SlotStats],
                meds: list[float]) -> tuple[list[int], list[Evidence]]:
    """``chain_order`` as ``(path, evidence)``."""
    c = chain_order(D, chain, slots, meds)
    return c.path, c.evidence


def identical_groups(tensors: list, D: np.ndarray) -> list[list[int]]:
    """Groups (≥ 2 slots, file order) of bit-identical slots: one state captured more than once."""
    import torch

    k = len(tensors)
    parent = list(range(k))
    for i in range(k):
        for j in range(i + 1, k):
            if D[i, j] < DUPLICATE_SLOT_DISTANCE and tensors[i].shape == tensors[j].shape and \
                    tensors[i].dtype == tensors[j].dtype and bool(torch.equal(tensors[i], tensors[j])):
                parent[j] = parent[i]
    groups: dict[int, list[int]] = {}
    for i in range(k):
        root = i
        while parent[root] != root:
            root = parent[root]
        groups.setdefault(root, []).append(i)
    return [g for g in groups.values() if len(g) > 1]


def share_identical_labels(fp: Fingerprint, groups: list[list[int]]) -> None:
    """Bit-identical slots are one state, so they carry one label: the label they agree on, else none
    (two different claimed layers cannot both be the same tensor; the data cannot say which one holds)."""
    for g in groups:
        labels = {fp.slots[i].label for i in g}
        if len(labels) > 1:
            for i in g:
                fp.slots[i].label = None
        for i in g:
            fp.slots[i].evidence.append(Evidence("identical", f"slots {g}", "bit-identical",
                                                 "one state captured more than once: one label"))


def find_duplicates(fp: Fingerprint, tensors: list) -> None:
    k = len(fp.slots)
    for i in range(k):
        for j in range(i + 1, k):
            if fp.similarity[i, j] < DUPLICATE_SLOT_DISTANCE and tensors[i].shape == tensors[j].shape:
                same = bool((tensors[i] == tensors[j]).all())
                fp.findings.append(Finding(FindingKind.DUPLICATE, Severity.FAIL, [i, j], f"slots {i} and {j} are "
                                           f"{'bit-identical' if same else 'the same state (distance < 1e-4)'}: "
                                           "the same layer captured twice"))


def _lens_near() -> float:
    return LENS_NEAR


def _rescaled(m: dict) -> str:
    """``same direction as L3 at ×1.5`` when a slot matches a reference state up to its scale only."""
    d = m.get("direction") or {}
    if m.get("match") or d.get("cos") is None or d["cos"] < LADDER_MATCH_COS:
        return ""
    return f"; same direction as {r_label(d['r'])} (cos {d['cos']:.5f}) at ×{d['scale']:.3g} scale"
