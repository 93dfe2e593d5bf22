"""Fingerprint: which captured tensor is which — role, depth order and label of every slot, with evidence.

From the data alone (fingerprint-signals §4 rulebook): exact duplicate rows ⇒ embedding (a table lookup,
transformers #2461); small context-free norms without a sink ⇒ embedding even for absolute-position
models; a token-0 sink (Sun et al. 2024) ⇒ after the emergence layer; a tight, sinkless spread ⇒ late or
post-norm (§1, "last layer"); a norm collapse next to a deep pre-norm slot, or B = RMSNorm(A) for some γ
⇒ post-final-norm; the masked angular-distance chain (``forensics.depth``) ⇒ depth order, whose
direction is voted by norm growth (Heimersheim & Turner 2023) and the late signature. Depth is not norm
order (the seed's L59 norm 111 ± 8 < L31 174 ± 99). Exact mode (``model=``, ``forensics.exact``) settles
r per slot. Every threshold is a named constant, shown next to the raw value.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .capture import FINAL_POST, Capture, R, parse_r, r_label
from .errors import ForensicsError
from .stats import SINK_RATIO, CaptureStats, SlotStats, summarize

ROLES = ("embedding", "early", "middle", "late", "final_prenorm", "final_postnorm")
DUP_GROUP_FRACTION = 0.9  # ≥ this share of repeated-id groups bit-identical ⇒ embedding (table lookup)
DUP_ROW_FRACTION = 0.05  # without ids: ≥ this share of rows with an exact twin ⇒ embedding
EMBED_NORM_RATIO = 0.08  # median norm ≤ this × the next-smallest slot's median (and no sink) ⇒ context-free
TIGHT_CV = 0.10  # std/mean of token norms (token 0 excluded) ≤ this ⇒ tight spread
SINK_FADED_RATIO = 0.8  # token-0 norm < this × median ⇒ sink faded/inverted (seed L59: 0.55)
POSTNORM_NORM_DROP = 0.3  # tight + sinkless slot with median ≤ this × the largest layer median ⇒ post-norm
DUPLICATE_SLOT_DISTANCE = 1e-4  # masked angular distance below this (and equal norms) ⇒ duplicate capture
W_NORM, W_LATE, W_FADED = 1.0, 1.5, 1.0  # votes on the direction of the depth chain
SMALL_CAPTURE_ELEMENTS = 4_000_000  # at or below: compute on one thread (measured 13× faster under load)
BANDS = ((1 / 3, "early"), (2 / 3, "middle"), (1.01, "late"))  # rank fraction among layer slots → role


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
        return f"{self.signal:<18} {_fmt(self.value):<24} → {self.verdict}{thr}"


@dataclass
class Finding:
    """A file-level finding: ``kind`` (reordered, duplicate, missing_embedding, postnorm, …), slots, message."""

    kind: str
    slots: list[int]
    message: str

    def to_dict(self) -> dict:
        return {"kind": self.kind, "slots": list(self.slots), "message": self.message}


@dataclass
class SlotFingerprint:
    """What one slot is: role, confidence, depth rank among the file's slots, coarse r, label, exact r."""

    index: int
    name: str
    role: str
    confidence: float
    depth_rank: int = 0
    r_estimate: Any = None
    depth_fraction: float | None = None
    label: str | None = None
    r_exact: R | None = None
    decided_by: str = ""
    evidence: list[Evidence] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"role": self.role, "confidence": round(self.confidence, 3), "depth_rank": self.depth_rank,
                "r_estimate": self.r_estimate, "depth_fraction": _json(self.depth_fraction),
                "label": self.label, "r_exact": self.r_exact, "decided_by": self.decided_by,
                "evidence": [e.to_dict() for e in self.evidence]}


@dataclass
class Fingerprint:
    """The fingerprint of one capture: per-slot verdicts, depth order, k×k masked distance, findings."""

    capture: Capture = field(repr=False)
    stats: CaptureStats = field(repr=False)
    slots: list[SlotFingerprint]
    findings: list[Finding]
    similarity: np.ndarray = field(repr=False)
    depth_order: list[int]
    num_layers: int | None = None
    expected: list | None = None
    expected_source: str | None = None
    order_evidence: list[Evidence] = field(default_factory=list)
    exact: dict | None = field(default=None, repr=False)

    @property
    def path(self) -> str:
        return self.capture.path

    @property
    def labels(self) -> list[str | None]:
        return [s.label for s in self.slots]

    def to_dict(self) -> dict:
        d = self.stats.to_dict()
        for sd, sf in zip(d["slots"], self.slots, strict=True):
            sd.update(sf.to_dict())
        d.update(findings=[f.to_dict() for f in self.findings], depth_order=list(self.depth_order),
                 similarity=[[_json(float(v)) for v in row] for row in self.similarity],
                 num_layers=self.num_layers, expected=self.expected, expected_source=self.expected_source,
                 order_evidence=[e.to_dict() for e in self.order_evidence],
                 exact_source=(self.exact or {}).get("source"))
        return d

    def __repr__(self) -> str:
        from .fingerprint_view import text

        return text(self)

    def _repr_html_(self) -> str:
        from .fingerprint_view import html

        return html(self)


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


# ----------------------------------------------------------------------------------------- expected list
def parse_expected(layers: Any) -> list | None:
    """``[0,3,16,28]``, ``"0,3,16,28"`` or ``"embed,L3,L16,L28"`` → list of r; None stays None."""
    if layers is None:
        return None
    items = layers.split(",") if isinstance(layers, str) else list(layers)
    try:
        return [parse_r(str(i).strip()) if not isinstance(i, int) else i for i in items if str(i).strip()]
    except ValueError as e:
        raise ForensicsError(f"expected layer list {layers!r}: {e}") from None


def _depth_key(r: R) -> float:
    return math.inf if r == FINAL_POST else float(r)


# ---------------------------------------------------------------------------------------------- signals
def _cv(s: SlotStats) -> float:
    n = s.norm_excl_first
    return float(n.std / n.mean) if n.mean and math.isfinite(n.mean) and n.mean > 0 else float("nan")


def _has_sink(s: SlotStats) -> bool:
    return bool(s.massive_tokens) or (math.isfinite(s.first_ratio) and s.first_ratio >= SINK_RATIO) or bool(s.sinks)


def _late_signature(s: SlotStats) -> bool:
    return _cv(s) <= TIGHT_CV and not _has_sink(s)


def fingerprint(capture: Capture | str | os.PathLike, layers: Any = None, model: Any = None,
                num_layers: int | None = None) -> Fingerprint:
    """Role, depth order, coarse r, label (given an expected list) and evidence for every slot.

    Args:
        capture: a ``Capture`` or a path to any supported capture file.
        layers: the expected r list in file order (``[0, 3, 16, 28]``, ``"embed,L3,L16,L28"``); default:
            the r the capture declares (``capture.json`` / ``data_config.json``).
        model: exact mode — an HF folder, safetensors checkpoint, ``.gguf``, a loaded model, or a ladder
            capture (path or ``Capture``) with the same input_ids.
        num_layers: L of the model, for ``r_estimate`` (default: capture.json's ``num_layers``).

    Example:
        >>> fp = fingerprint("sample_data/speculators_v1/data_0.pt")   # doctest: +SKIP
        >>> [s.label for s in fp.slots]                               # doctest: +SKIP
        ['embed', 'L3', 'L16', 'L28']
    """
    if not isinstance(capture, Capture):
        from .formats import load

        capture = load(capture)
    if not capture.slots:
        raise ForensicsError("capture has no slots to fingerprint", path=capture.path)
    import torch

    small = sum(s.shape[0] * s.shape[1] for s in capture.slots) <= SMALL_CAPTURE_ELEMENTS
    threads = torch.get_num_threads()
    if small and model is None:
        torch.set_num_threads(1)  # tiny tensors: thread hand-offs cost 10× the work on a busy machine
    try:
        return _fingerprint(capture, layers, model, num_layers)
    finally:
        torch.set_num_threads(threads)


def _fingerprint(capture: Capture, layers: Any, model: Any, num_layers: int | None) -> Fingerprint:
    from .depth import angular_distances, duplicate_rows, normalizes

    st = summarize(capture)
    k = len(capture.slots)
    tensors = [s.tensor() for s in capture.slots]
    ids = capture.input_ids.reshape(-1) if capture.input_ids is not None else None
    expected, exp_src = parse_expected(layers), ("argument" if layers is not None else None)
    if expected is None and capture.declared_r is not None and all(r is not None for r in capture.declared_r):
        expected, exp_src = list(capture.declared_r), "declared by the capture's sidecar"
    findings: list[Finding] = []
    ev: list[list[Evidence]] = [[] for _ in range(k)]

    # non-finite rows: reported, and left out of every cross-slot signal
    bad_rows: set[int] = set()
    for s in st.slots:
        if s.nan or s.inf:
            bad_rows |= set(s.nan_positions) | set(s.inf_positions)
            rows = s.nan_positions[:5] or s.inf_positions[:5]
            findings.append(Finding("nonfinite", [s.index], f"slot {s.index} ({s.name}) has {s.nan} NaN and "
                                    f"{s.inf} Inf values (first rows {rows})"))
    drop = sorted({0} | {p for s in st.slots for p in s.sinks} | bad_rows)
    mask = sorted({d for s in st.slots for d in s.massive_dims})
    same_T = len({int(t.shape[0]) for t in tensors}) == 1
    D, used = angular_distances(tensors, drop, mask) if k > 1 else (np.zeros((1, 1)), 0)

    # --- per-slot data-only signals
    meds = [s.norm_excl_sinks.median for s in st.slots]
    embed_score = [0.0] * k
    for i, (s, h) in enumerate(zip(st.slots, tensors, strict=True)):
        dup = duplicate_rows(h, ids)
        others = [meds[j] for j in range(k) if j != i and math.isfinite(meds[j])]
        ratio = meds[i] / min(others) if others and min(others) > 0 else float("nan")
        if dup.get("groups"):
            frac = dup["fraction"]
            ok = frac >= DUP_GROUP_FRACTION and not dup.get("clashes")
            ev[i].append(Evidence("dup_rows", f"{dup['identical']}/{dup['groups']} repeated-id groups identical",
                                  f"≥ {DUP_GROUP_FRACTION:.0%}", "table lookup ⇒ embedding" if ok
                                  else "context-dependent rows ⇒ not a plain embedding lookup"))
            embed_score[i] = 0.99 if ok else 0.0
        elif "rows_with_twin" in dup:
            frac = dup["fraction"]
            ok = frac >= DUP_ROW_FRACTION
            ev[i].append(Evidence("dup_rows", f"{dup['rows_with_twin']}/{dup['tokens']} rows have an exact twin "
                                  "(no input_ids)", f"≥ {DUP_ROW_FRACTION:.0%}",
                                  "table lookup ⇒ embedding" if ok else "no exact duplicate rows"))
            embed_score[i] = 0.9 if ok else 0.0
        else:
            ev[i].append(Evidence("dup_rows", "no repeated token id in this sample", None, "not applicable"))
        tiny = math.isfinite(ratio) and ratio <= EMBED_NORM_RATIO and not _has_sink(s)
        ev[i].append(Evidence("norm_level", f"median ‖x‖ {meds[i]:.4g} = {ratio:.3g}× next-smallest slot"
                              if math.isfinite(ratio) else f"median ‖x‖ {meds[i]:.4g}",
                              f"≤ {EMBED_NORM_RATIO} & no sink ⇒ context-free", "tiny, context-free norms"
                              if tiny else "layer-scale norms"))
        if tiny and embed_score[i] == 0.0:
            embed_score[i] = 0.6 if dup.get("groups") else 0.7  # absolute-position models: no duplicates
            if dup.get("groups"):
                ev[i][-1].verdict += " — yet repeated ids differ: absolute position embeddings (GPT-2/OPT)?"
        cv = _cv(s)
        ev[i].append(Evidence("spread_cv", cv, f"≤ {TIGHT_CV} tight", "tight" if cv <= TIGHT_CV else "wide"))
        ev[i].append(Evidence("token0_ratio", s.first_ratio, f"≥ {SINK_RATIO} sink; < {SINK_FADED_RATIO} faded",
                              "sink (after massive-activation emergence)" if _has_sink(s) else
                              "sink faded/inverted (late)" if s.first_ratio < SINK_FADED_RATIO else "no sink"))
        if s.massive_tokens:
            top = s.massive_tokens[0]
            ev[i].append(Evidence("massive_dims", f"dims {s.massive_dims[:6]} at tokens "
                                  f"{[t['pos'] for t in s.massive_tokens[:6]]}, max {top['max_abs']:.4g}",
                                  f"> {s.massive_threshold:.4g}", "massive activations (Sun et al. 2024)"))
    is_embed = [embed_score[i] >= 0.6 for i in range(k)]
    for i in range(k):
        if is_embed[i]:
            for e in ev[i]:
                if e.signal == "token0_ratio" and not _has_sink(st.slots[i]):
                    e.verdict = "no sink (context-free lookup)"

    # --- post-norm: B = RMSNorm(A) identity, or a tight sinkless slot whose norm collapsed
    post_score = [0.0] * k
    prenorm_of: dict[int, int] = {}
    for i, s in enumerate(st.slots):
        if is_embed[i] or not _late_signature(s):
            continue
        best = None
        for j in range(k):
            if j != i and not is_embed[j] and same_T:
                res = normalizes(tensors[j], tensors[i], drop)["residual"]
                best = (res, j) if best is None or res < best[0] else best
        if best is not None and best[0] <= _normalizes_max():
            post_score[i], prenorm_of[i] = 0.99, best[1]
            ev[i].append(Evidence("normalizes", f"= RMSNorm(slot {best[1]}) with fitted γ, residual {best[0]:.2g}",
                                  f"≤ {_normalizes_max()}", "post-norm of that slot"))
            continue
        layer_meds = [meds[j] for j in range(k) if j != i and not is_embed[j] and math.isfinite(meds[j])]
        if layer_meds:
            drop_ratio = meds[i] / max(layer_meds)
            post = drop_ratio <= POSTNORM_NORM_DROP
            ev[i].append(Evidence("norm_drop", drop_ratio, f"≤ {POSTNORM_NORM_DROP} ⇒ normalised",
                                  "tight, sinkless and norm collapsed ⇒ post-final-norm" if post
                                  else "tight, sinkless at layer-scale norm ⇒ late pre-norm"))
            post_score[i] = 0.8 if post else 0.0
        else:
            ev[i].append(Evidence("norm_drop", None, POSTNORM_NORM_DROP, "no other layer slot to compare: late "
                                  "pre-norm or post-norm (run with --model for the γ test)"))
    is_post = [post_score[i] > 0 for i in range(k)]

    # --- exact mode
    exact = None
    if model is not None:
        from .exact import exact_checks

        exact = exact_checks(capture, tensors, model)
        num_layers = num_layers or exact.get("num_layers")
        for i, x in enumerate(exact["slots"]):
            _exact_evidence(ev[i], x)
    L = num_layers or capture.num_layers
    r_exact = [x["r_exact"] for x in exact["slots"]] if exact else [None] * k

    # --- depth order
    order_ev: list[Evidence] = []
    if exact and all(r is not None for r in r_exact):
        order = sorted(range(k), key=lambda i: (_depth_key(r_exact[i]), i))
        order_ev.append(Evidence("order", "r_exact of every slot", None, "exact (reference ladder)"))
        chain = [i for i in order if r_exact[i] not in (0, FINAL_POST)]
    else:
        chain = [i for i in range(k) if not is_embed[i] and not is_post[i]]
        chain, order_ev = _order_chain(D, chain, st.slots, meds)
        order = [i for i in range(k) if is_embed[i]] + chain + [i for i in range(k) if is_post[i]]

    # --- roles, confidence, coarse r
    sfs = []
    n = max(1, len(chain))
    order_conf = _order_confidence(order_ev)
    for i, s in enumerate(st.slots):
        rank = order.index(i)
        if is_embed[i] or r_exact[i] == 0:
            role, conf, frac, why = "embedding", max(embed_score[i], 0.99 if r_exact[i] == 0 else 0), 0.0, "dup_rows" \
                if embed_score[i] >= 0.9 else "norm_level"
        elif is_post[i] or r_exact[i] == FINAL_POST:
            role, conf, frac = "final_postnorm", max(post_score[i], 0.99 if r_exact[i] == FINAL_POST else 0), None
            why = "exact" if r_exact[i] == FINAL_POST else ("normalizes" if i in prenorm_of else "norm_drop")
        else:
            pos = chain.index(i) if i in chain else 0
            frac = (pos + 0.5) / n  # coarse: rank among the layer slots (EAGLE-3 picks low/mid/high)
            role = next(b for t, b in BANDS if frac < t)
            if len(chain) == 1:
                role = "late" if _late_signature(s) else "middle" if _has_sink(s) else "early"
            conf, why = round(0.35 + 0.5 * order_conf, 3), "order"
            if role == "late" and _late_signature(s):
                conf, why = min(0.9, conf + 0.15), "order + spread_cv/token0_ratio"
            if isinstance(r_exact[i], int) and L:
                frac = r_exact[i] / L
                role = "final_prenorm" if r_exact[i] == L else next(b for t, b in BANDS if frac < t)
                conf, why = 0.99, "exact"
            elif i in prenorm_of.values():
                role, conf, why = "final_prenorm", 0.95, "normalizes"
        r_est: Any = None
        if role == "embedding":
            r_est = 0
        elif role == "final_postnorm":
            r_est = FINAL_POST
        elif frac is not None:
            r_est = int(round(frac * L)) if L else round(frac, 3)
            if role == "final_prenorm" and L:
                r_est = L
        sfs.append(SlotFingerprint(index=s.index, name=s.name, role=role, confidence=float(conf), depth_rank=rank,
                                   r_estimate=r_est, depth_fraction=frac, r_exact=r_exact[i], decided_by=why,
                                   evidence=ev[i]))

    fp = Fingerprint(capture=capture, stats=st, slots=sfs, findings=findings, similarity=D, depth_order=order,
                     num_layers=L, expected=expected, expected_source=exp_src, order_evidence=order_ev, exact=exact)
    _duplicates(fp, tensors)
    if expected is not None:
        _label(fp)
    elif exact:
        for sf in sfs:
            sf.label = r_label(sf.r_exact) if sf.r_exact is not None else None
    return fp


def _normalizes_max() -> float:
    from .depth import NORMALIZES_MAX_RESIDUAL

    return NORMALIZES_MAX_RESIDUAL


def _exact_evidence(ev: list[Evidence], x: dict) -> None:
    from .exact import LADDER_MATCH_COS, LADDER_MATCH_REL, POSTNORM_RMS_TOL

    e, p, m = x["embedding"], x["postnorm"], x["ladder"]
    if e:
        ev.append(Evidence("exact_embedding", f"{e['equal_rows']}/{e['rows']} rows == E[ids]", "all rows",
                           "embedding output (r = 0)" if e["verdict"] else "not the embedding output"))
    if p:
        ev.append(Evidence("exact_gamma", p["max_abs_dev"], f"max|rms(x/γ)−1| ≤ {POSTNORM_RMS_TOL}",
                           "post-final-norm" if p["verdict"] else "not post-norm"))
    if m and m.get("best") is not None:
        ev.append(Evidence("ladder_match", f"best {r_label(m['best'])} cos {m['best_cos']:.5f} "
                           f"rel {m['best_rel']:.3g}; "
                           f"runner-up {r_label(m['runner_up'])} cos {_fmt(m['runner_up_cos'])} rel "
                           f"{_fmt(m['runner_up_rel'])}", f"cos ≥ {LADDER_MATCH_COS}, rel ≤ {LADDER_MATCH_REL}",
                           f"r = {r_label(m['best'])}" if m["match"] else "no reference state matches"))


def _order_chain(D: np.ndarray, chain: list[int], slots: Sequence[SlotStats],
                 meds: list[float]) -> tuple[list[int], list[Evidence]]:
    """Seriate the layer slots by masked angular distance, then vote the direction (shallow → deep)."""
    from .depth import seriate

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
    late = sum(np.sign(p - half) for p, i in enumerate(path) if _late_signature(slots[i]))
    faded = sum(np.sign(p - half) for p, i in enumerate(path)
                if math.isfinite(slots[i].first_ratio) and slots[i].first_ratio < SINK_FADED_RATIO)
    score = W_NORM * tau + W_LATE * late + W_FADED * faded
    if score < 0:
        path = path[::-1]
    ev = [Evidence("chain", f"path cost {cost:.4f}, next-best {_fmt(runner)} (margin {_fmt(margin)})", None,
                   "masked angular-distance chain " + " → ".join(str(i) for i in path)),
          Evidence("direction", f"norm τ {tau:+.2f}·{W_NORM} + late sig {late:+.0f}·{W_LATE} + faded sink "
                   f"{faded:+.0f}·{W_FADED} = {score:+.2f}", "sign", "shallow → deep as listed" if score != 0
                   else "no direction signal: norm order kept")]
    return path, ev


def _order_confidence(order_ev: list[Evidence]) -> float:
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


def _duplicates(fp: Fingerprint, tensors: list) -> None:
    k = len(fp.slots)
    for i in range(k):
        for j in range(i + 1, k):
            if fp.similarity[i, j] < DUPLICATE_SLOT_DISTANCE and tensors[i].shape == tensors[j].shape:
                same = bool((tensors[i] == tensors[j]).all())
                fp.findings.append(Finding("duplicate", [i, j], f"slots {i} and {j} are "
                                           f"{'bit-identical' if same else 'the same state (distance < 1e-4)'}: "
                                           "the same layer captured twice"))


def _label(fp: Fingerprint) -> None:
    """Assign the expected labels by depth order and report what disagrees with the expectation."""
    exp = fp.expected or []
    k = len(fp.slots)
    if len(exp) != k:
        fp.findings.append(Finding("count_mismatch", list(range(k)), f"expected {len(exp)} layers "
                                   f"[{', '.join(r_label(r) for r in exp)}] but the capture has {k} slots"))
    by_depth = sorted(exp, key=_depth_key)
    order = list(fp.depth_order)
    emb = [i for i in order if fp.slots[i].role == "embedding"]
    post = [i for i in order if fp.slots[i].role == "final_postnorm"]
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
    if FINAL_POST in by_depth and not post:
        fp.findings.append(Finding("prenorm", [order[-1]] if order else [], "final_post (after the final norm) is "
                                   "expected but no slot has the post-norm signature"))
    for i, r in zip(order, by_depth, strict=False):
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
    if fp.expected and len(fp.expected) == k:
        file_labels = [r_label(r) for r in fp.expected]
        got = [sf.label for sf in fp.slots]
        if got != file_labels and all(g is not None for g in got):
            fp.findings.append(Finding("reordered", [i for i in range(k) if got[i] != file_labels[i]],
                                       f"file order ≠ depth order: stored slots are [{', '.join(got)}], expected "
                                       f"[{', '.join(file_labels)}]"))
