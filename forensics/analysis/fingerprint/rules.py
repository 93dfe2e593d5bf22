"""Rules of the fingerprint: named thresholds, the evidence records, and the signal → verdict steps.

Each rule cites its anchor: duplicate rows ⇒ embedding (transformers
#2461); token-0 sink ⇒ after massive-activation emergence (Sun et al. 2024); tight sinkless spread ⇒ late
or post-norm; B = RMSNorm(A) or a norm collapse ⇒ post-final-norm; the masked angular chain
and its direction vote ⇒ depth order; expected labels assigned by depth order ⇒ findings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from forensics.analysis.stats import SINK_RATIO, SlotStats
from forensics.layers import FINAL_POST, R, parse_r, r_label

if TYPE_CHECKING:  # pragma: no cover
    from forensics.analysis.fingerprint.core import Fingerprint

ROLES = ("embedding", "early", "middle", "late", "final_prenorm", "final_postnorm")
DUP_GROUP_FRACTION = 0.9  # ≥ this share of repeated-id groups bit-identical ⇒ embedding (table lookup)
DUP_ROW_FRACTION = 0.05  # without ids: ≥ this share of rows with an exact twin ⇒ embedding
EMBED_NORM_RATIO = 0.08  # median norm ≤ this × the next-smallest slot's median (and no sink) ⇒ context-free
TIGHT_SPREAD = 0.10  # robust spread of token norms (token 0 excluded) ≤ this ⇒ tight spread
MAD_TO_SD = 1.4826  # MAD × this = σ for a normal law: the robust spread reads like std/mean, minus outlier tokens
SINK_FADED_RATIO = 0.8  # token-0 norm < this × median ⇒ sink faded/inverted (seed L59: 0.55)
POSTNORM_NORM_DROP = 0.3  # tight + sinkless slot with median ≤ this × the largest layer median ⇒ post-norm
POSTNORM_NORM_DROP_WEAK = 0.6  # …or ≤ this when token 0 keeps a one-dim (sink) direction
TOKEN0_CONCENTRATION = 0.5  # max|x_0|/‖x_0‖ ≥ this ⇒ token 0 holds the sink direction (SmolLM2 post-norm 0.68)
DUPLICATE_SLOT_DISTANCE = 1e-4  # masked angular distance below this (and equal norms) ⇒ duplicate capture
W_NORM, W_LATE, W_FADED = 1.0, 1.5, 1.0  # votes on the direction of the depth chain
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
        return {"signal": self.signal, "value": _json(self.value), "threshold": _json(self.threshold),
                "verdict": self.verdict}

    def line(self) -> str:
        thr = "" if self.threshold is None else f"  (threshold {_fmt(self.threshold)})"
        return f"{self.signal:<20} {_fmt(self.value):<24} → {self.verdict}{thr}"


@dataclass
class Finding:
    """A file-level finding: ``kind`` (reordered, duplicate, missing_embedding, postnorm, …), slots, message."""

    kind: str
    slots: list[int]
    message: str

    def to_dict(self) -> dict:
        return {"kind": self.kind, "slots": list(self.slots), "message": self.message}


def _json(v: Any) -> Any:
    if isinstance(v, (np.floating, float)):
        v = float(v)
        return round(v, 6) if math.isfinite(v) else None
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, (list, tuple)):
        return [_json(x) for x in v]
    return v


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


def embedding_signals(st_slots: Sequence[SlotStats], tensors: list, ids: Any, meds: list[float],
                      ev: list[list[Evidence]]) -> list[float]:
    """Per-slot embedding score from duplicate rows and context-free norms; appends the evidence lines."""
    from forensics.analysis.fingerprint.depth import duplicate_rows

    k = len(st_slots)
    embed_score = [0.0] * k
    for i, (s, h) in enumerate(zip(st_slots, tensors, strict=True)):
        dup = duplicate_rows(h, ids)
        others = [meds[j] for j in range(k) if j != i and math.isfinite(meds[j])]
        ratio = meds[i] / min(others) if others and min(others) > 0 else float("nan")
        if dup.get("groups"):
            frac = dup["fraction"]
            ok = frac >= DUP_GROUP_FRACTION and not dup.get("clashes")
            ev[i].append(Evidence("dup_rows", frac, f"≥ {DUP_GROUP_FRACTION}", f"{dup['identical']}/{dup['groups']} "
                                  "repeated-id groups bit-identical ⇒ " + ("table lookup ⇒ embedding" if ok else
                                                                          "context-dependent rows, not a lookup")))
            embed_score[i] = 0.99 if ok else 0.0
        elif "rows_with_twin" in dup:
            frac = dup["fraction"]
            ok = frac >= DUP_ROW_FRACTION
            ev[i].append(Evidence("dup_rows", frac, f"≥ {DUP_ROW_FRACTION}", f"{dup['rows_with_twin']}/{dup['tokens']} "
                                  "rows have an exact twin (no input_ids) ⇒ " + ("table lookup ⇒ embedding" if ok
                                                                                 else "no lookup evidence")))
            embed_score[i] = 0.9 if ok else 0.0
        else:
            ev[i].append(Evidence("dup_rows", None, None, "no repeated token id in this sample: not applicable"))
        tiny = math.isfinite(ratio) and ratio <= EMBED_NORM_RATIO and not has_sink(s) and meds[i] > 0
        ev[i].append(Evidence("norm_level", ratio, f"≤ {EMBED_NORM_RATIO} × next-smallest slot, no sink",
                              f"median ‖x‖ {meds[i]:.4g} (sinks excluded): "
                              + ("tiny, context-free norms" if tiny else "layer-scale norms")))
        conc = token0_concentration(h)
        if tiny and embed_score[i] == 0.0:
            if conc >= TOKEN0_CONCENTRATION:  # a normalised sink keeps its one-dim direction; a lookup row does not
                ev[i][-1].verdict += " — but token 0 sits in one dim (a normalised sink), not a lookup"
            else:
                embed_score[i] = 0.6 if dup.get("groups") else 0.7  # absolute-position models: no duplicates
                if dup.get("groups"):
                    ev[i][-1].verdict += " — yet repeated ids differ: absolute position embeddings (GPT-2/OPT)?"
        ev[i].append(Evidence("token0_concentration", conc, f"≥ {TOKEN0_CONCENTRATION} one-dim sink direction",
                              "token 0 concentrated in one dim (sink direction)" if conc >= TOKEN0_CONCENTRATION
                              else "token 0 spread over dims"))
        rs = robust_spread(s)
        ev[i].append(Evidence("robust_spread", rs, f"≤ {TIGHT_SPREAD} tight", f"{MAD_TO_SD}·MAD/median of token "
                              f"norms (token 0 excluded): {'tight' if rs <= TIGHT_SPREAD else 'wide'}; "
                              f"std/mean {spread_cv(s):.3g}"))
        ev[i].append(Evidence("token0_ratio", s.first_ratio, f"≥ {SINK_RATIO} sink; < {SINK_FADED_RATIO} faded",
                              "sink (after massive-activation emergence)" if has_sink(s) else
                              "sink faded/inverted (late)" if s.first_ratio < SINK_FADED_RATIO else "no sink"))
        if s.massive_tokens:
            top = s.massive_tokens[0]
            ev[i].append(Evidence("massive_dims", f"dims {s.massive_dims[:6]} at tokens "
                                  f"{[t['pos'] for t in s.massive_tokens[:6]]}, max {top['max_abs']:.4g}",
                                  f"> {s.massive_threshold:.4g}", "massive activations (Sun et al. 2024)"))
    for i in range(k):
        if embed_score[i] >= EMBED_MIN_SCORE:
            for e in ev[i]:
                if e.signal == "token0_ratio" and not has_sink(st_slots[i]):
                    e.verdict = "no sink (context-free lookup)"
    return embed_score


def postnorm_signals(st_slots: Sequence[SlotStats], tensors: list, embed_score: list[float], meds: list[float],
                     drop: list[int], ev: list[list[Evidence]]) -> tuple[list[float], dict[int, int]]:
    """Per-slot post-norm score and ``{post slot: pre-norm slot}`` (γ-free: B = γ ⊙ A/rms(A) makes B/A
    constant per dimension).

    A tight, sinkless slot is post-norm when it is RMSNorm(another slot) for a fitted γ (0.99), or its
    norm collapsed next to the layer slots (0.8), or — when nothing says it is layer-scale — its token 0
    keeps the sink's one-dim direction at an ordinary norm: the norm was divided away (0.6).
    """
    from forensics.analysis.fingerprint.depth import NORMALIZES_MAX_RESIDUAL, NORMALIZES_SCREEN_ROWS, normalizes

    k = len(st_slots)
    same_T = len({int(t.shape[0]) for t in tensors}) == 1
    post_score = [0.0] * k
    prenorm_of: dict[int, int] = {}
    lookup = [embed_score[i] >= 0.9 for i in range(k)]  # duplicate rows: certainly not post-norm
    for i, s in enumerate(st_slots):
        if lookup[i] or has_sink(s):  # the identity test needs no tight spread: B = RMSNorm(A) is exact
            continue
        best = None
        for j in range(k):
            if j != i and not lookup[j] and same_T and embed_score[j] < EMBED_MIN_SCORE:
                res = normalizes(tensors[j], tensors[i], drop, NORMALIZES_SCREEN_ROWS)["residual"]
                if res <= NORMALIZES_MAX_RESIDUAL:  # an exact pair fits on any rows: confirm on all of them
                    res = normalizes(tensors[j], tensors[i], drop)["residual"]
                best = (res, j) if best is None or res < best[0] else best
        if best is not None and best[0] <= NORMALIZES_MAX_RESIDUAL:
            post_score[i], prenorm_of[i] = 0.99, best[1]
            ev[i].append(Evidence("normalizes", f"= RMSNorm(slot {best[1]}) with fitted γ, residual {best[0]:.2g}",
                                  f"≤ {NORMALIZES_MAX_RESIDUAL}", "post-norm of that slot"))
            continue
        if embed_score[i] >= EMBED_MIN_SCORE or not late_signature(s):
            continue
        conc = token0_concentration(tensors[i]) >= TOKEN0_CONCENTRATION
        layer_meds = [meds[j] for j in range(k) if j != i and embed_score[j] < EMBED_MIN_SCORE
                      and math.isfinite(meds[j]) and meds[j] > 0]
        ratio = meds[i] / max(layer_meds) if layer_meds else None
        if ratio is not None and ratio <= POSTNORM_NORM_DROP:
            post_score[i], verdict = 0.8, "tight, sinkless and norm collapsed ⇒ post-final-norm"
        elif conc and (ratio is None or ratio <= POSTNORM_NORM_DROP_WEAK):
            post_score[i], verdict = 0.6, "sink direction kept at an ordinary norm ⇒ post-final-norm"
        elif ratio is None:
            verdict = "no other layer slot to compare: late pre-norm or post-norm (run with --model for the γ test)"
        else:
            verdict = "tight, sinkless at layer-scale norm ⇒ late pre-norm"
        ev[i].append(Evidence("norm_drop", ratio, f"≤ {POSTNORM_NORM_DROP} (≤ {POSTNORM_NORM_DROP_WEAK} with a "
                              "one-dim token 0) ⇒ normalised", verdict))
    return post_score, prenorm_of


def token0_concentration(h: Any) -> float:
    """``max|x_0| / ‖x_0‖``: how much of token 0 sits in one dim (sink rows: ≈ 0.95–0.99; lookups ≈ 0.2–0.3)."""
    x = h[0].float()
    n = float(x.norm())
    return float(x.abs().max()) / n if n > 0 and math.isfinite(n) else 0.0


def _reference_dtype(m: dict) -> str:
    """`` (float32 reference)``: the compute dtype the tolerances were applied against, when known."""
    dt = (m.get("tolerance") or {}).get("compute_dtype")
    return f" ({dt} reference)" if dt else ""


def exact_evidence(ev: list[Evidence], x: dict) -> None:
    from forensics.analysis.fingerprint.exact import (
        LADDER_MATCH_COS,
        LADDER_MATCH_REL,
        LADDER_SEPARATION,
        POSTNORM_RMS_TOL,
    )

    e, p, m, lens = x["embedding"], x["postnorm"], x["ladder"], x.get("lens")
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


def order_chain(D: np.ndarray, chain: list[int], slots: Sequence[SlotStats],
                 meds: list[float]) -> tuple[list[int], list[Evidence]]:
    """Seriate the layer slots by masked angular distance, then vote the direction (shallow → deep)."""
    from forensics.analysis.fingerprint.depth import seriate

    if not chain:
        return [], []
    if len(chain) == 1:
        return chain, [Evidence("order", "one layer slot", None, "nothing to order")]
    path, cost, runner = seriate(D, chain)
    margin = (runner - cost) / cost if cost > 0 and math.isfinite(runner) else (math.inf if cost > 0 else 0.0)
    n = len(path)
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    tau = sum(np.sign(meds[path[b]] - meds[path[a]]) for a, b in pairs) / len(pairs)
    half = (n - 1) / 2
    late = sum(np.sign(p - half) for p, i in enumerate(path) if late_signature(slots[i]))
    faded = sum(np.sign(p - half) for p, i in enumerate(path)
                if math.isfinite(slots[i].first_ratio) and slots[i].first_ratio < SINK_FADED_RATIO)
    score = W_NORM * tau + W_LATE * late + W_FADED * faded
    if score < 0:
        path = path[::-1]
    chain_path = list(path)  # the evidence shows the chain itself; the order may be the norm order below
    if score == 0:  # no direction signal: the chain's listed direction is a coin flip (often a near-tie of
        path = sorted(path, key=lambda i: meds[i])  # two paths, margin ~0), so take the norm order the text names
    ev = [Evidence("chain", f"path cost {cost:.4f}, next-best {_fmt(runner)} (margin {_fmt(margin)})", None,
                   "masked angular-distance chain " + " → ".join(str(i) for i in chain_path)),
          Evidence("direction", f"norm τ {tau:+.2f}·{W_NORM} + late sig {late:+.0f}·{W_LATE} + faded sink "
                   f"{faded:+.0f}·{W_FADED} = {score:+.2f}", "sign", "shallow → deep as listed" if score != 0
                   else "no direction signal: norm order kept")]
    return path, ev


def order_confidence(order_ev: list[Evidence]) -> float:
    for e in order_ev:
        if e.signal == "chain":
            txt = e.value.split("margin ")[-1].rstrip(")")
            try:
                m = float(txt)
            except ValueError:
                return 0.5
            return 1.0 if not math.isfinite(m) else min(1.0, 0.5 + 5 * m)
        if e.verdict.startswith("exact"):
            return 1.0
    return 0.5


def find_duplicates(fp: Fingerprint, tensors: list) -> None:
    k = len(fp.slots)
    for i in range(k):
        for j in range(i + 1, k):
            if fp.similarity[i, j] < DUPLICATE_SLOT_DISTANCE and tensors[i].shape == tensors[j].shape:
                same = bool((tensors[i] == tensors[j]).all())
                fp.findings.append(Finding("duplicate", [i, j], f"slots {i} and {j} are "
                                           f"{'bit-identical' if same else 'the same state (distance < 1e-4)'}: "
                                           "the same layer captured twice"))


def assign_labels(fp: Fingerprint) -> None:
    """Assign the expected labels by depth order and report what disagrees with the expectation."""
    exp = list(fp.expected or [])
    k = len(fp.slots)
    order = list(fp.depth_order)
    emb = [i for i in order if fp.slots[i].role == "embedding"]
    post = [i for i in order if fp.slots[i].role == "final_postnorm"]
    if len(exp) + len(post) == k and post and FINAL_POST not in exp:
        exp += [FINAL_POST] * len(post)  # aux ids only (a draft's config): the file's own final_post target
    if len(exp) != k:
        fp.findings.append(Finding("count_mismatch", list(range(k)), f"expected {len(exp)} layers "
                                   f"[{', '.join(r_label(r) for r in exp)}] but the capture has {k} slots"))
    by_depth = sorted(exp, key=_depth_key)
    if 0 in by_depth and not emb:
        fp.findings.append(Finding("missing_embedding", [order[0]] if order else [], "an embedding output (r = 0) "
                                   "is expected but no slot has the embedding signature (no duplicate rows, "
                                   "layer-scale norms); the shallowest slot is "
                                   + (f"slot {order[0]}" if order else "—")))
        by_depth.remove(0)
    elif emb and 0 not in by_depth:
        fp.findings.append(Finding("unexpected_embedding", emb, f"slot {emb[0]} is an embedding output but the "
                                   "expected list has no embed"))
        order = [i for i in order if i not in emb]
    if FINAL_POST in by_depth and not post and order:
        last = order[min(len(order), len(by_depth)) - 1]
        st = fp.stats.slots[last]
        if isinstance(fp.slots[last].r_exact, int) or has_sink(st) or robust_spread(st) > TIGHT_SPREAD:
            fp.findings.append(Finding("prenorm", [last], f"final_post (after the final norm) is expected at slot "
                                       f"{last}, but it is pre-norm (sink or wide spread, or its exact r)"))
    pairs = list(zip(order, by_depth, strict=False))
    n_post = min(len(post), by_depth.count(FINAL_POST))
    if n_post:  # final_post binds to the post-norm slot(s) even when a missing embed shifts the layer labels
        rest = list(by_depth)
        for _ in range(n_post):
            rest.remove(FINAL_POST)
        pairs = list(zip(post[:n_post], [FINAL_POST] * n_post, strict=True)) + list(
            zip([i for i in order if i not in post[:n_post]], rest, strict=False))
    for i, r in pairs:
        fp.slots[i].label = r_label(r)
        if fp.slots[i].role == "final_postnorm" and r != FINAL_POST:
            fp.findings.append(Finding("postnorm", [i], f"slot {i} is labelled {r_label(r)} (pre-norm) but looks "
                                       f"post-final-norm ({fp.slots[i].decided_by})"))
    for sf in fp.slots:
        if sf.r_exact is not None and sf.label is not None:
            want = parse_r(sf.label)
            if want != sf.r_exact:
                kind = "off_by_one" if isinstance(want, int) and isinstance(sf.r_exact, int) and \
                    abs(want - sf.r_exact) == 1 else "wrong_layer"
                fp.findings.append(Finding(kind, [sf.index], f"slot {sf.index} is expected to be {sf.label} but "
                                           f"equals {r_label(sf.r_exact)} of the reference model"))
    if exp and len(exp) == k:
        file_labels = [r_label(r) for r in exp]
        got = [sf.label for sf in fp.slots]
        if got != file_labels and all(g is not None for g in got):
            fp.findings.append(Finding("reordered", [i for i in range(k) if got[i] != file_labels[i]],
                                       "file order ≠ depth order: stored slots are "
                                       f"[{', '.join(map(str, got))}], expected "
                                       f"[{', '.join(file_labels)}]"))


def _lens_near() -> float:
    from forensics.analysis.fingerprint.exact import LENS_NEAR

    return LENS_NEAR


def _rescaled(m: dict) -> str:
    """``same direction as L3 at ×1.5`` when a slot matches a reference state up to its scale only."""
    from forensics.analysis.fingerprint.exact import LADDER_MATCH_COS

    d = m.get("direction") or {}
    if m.get("match") or d.get("cos") is None or d["cos"] < LADDER_MATCH_COS:
        return ""
    return f"; same direction as {r_label(d['r'])} (cos {d['cos']:.5f}) at ×{d['scale']:.3g} scale"
