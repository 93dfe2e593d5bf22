"""Config-free wiring check: compare a capture of what the engine *fed* the draft with the training data.

Joined on tokens first, as a training/serving skew check joins examples on an id: when a served file and a
training file share a ``token_ids`` prefix, their rows are compared one by one (per-token cosine and
relative error for every served × training slot pair, and the best offset in r). On different text, every
served slot is compared with every training slot by the distance between their per-token log-norm
distributions (1-D Wasserstein-1 on ``log10 ‖h_t‖``, token 0 excluded: an attention sink whose norm says
nothing about depth). There a W1 to the trained slot of ``W1_THRESHOLD`` or more is a MISMATCH, and anything
less is CANNOT TELL, with the nearest training slot named when it wins by a margin over the runner-up: the
norm distributions of adjacent layers overlap across texts, so only same-token rows can confirm a MATCH. The
fingerprinted roles must also agree (an embedding served where a layer was trained is a MISMATCH).

Example:
    >>> data, findings = compare_served(train_cap, trained, "served/")     # doctest: +SKIP
    >>> data["ok"], data["distances"][0]                                  # doctest: +SKIP
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from forensics.analysis.audit.parts import ServedSide, TrainedSide
from forensics.analysis.audit.training import KNOWN, STRONG_ROLES, fingerprint_slots
from forensics.analysis.rows import check_rows, runs
from forensics.analysis.stats import token_norms
from forensics.errors import ForensicsError
from forensics.findings import Finding, FindingKind, Severity
from forensics.io.capture import Capture
from forensics.io.formats import iter_files, load
from forensics.layers import FINAL_POST, r_label

W1_NAME = "W1(log10 token norm, token 0 excluded)"
# log10 units. On other text, a served slot whose W1 to the training slot it should equal reaches this is not that
# layer. Measured on real SmolLM2 ladders of 37 texts (6,000 random served/training pairs of different texts):
# the same r reached 0.18 (r = 1 and r = 30 on short texts; median 0.025, 99th percentile 0.098), so 0.2 called
# 0 of 3,089 rightly served slots a mismatch; it caught 980 of 1,352 slots served from a layer ≥ 2 away and
# 117 of 1,559 served one layer off. The seed's shift (embed ← L3, L3 ← L16, L16 ← L28) is ≥ 0.3 apart.
W1_THRESHOLD = 0.2
SAME_TENSOR_COS = 0.999  # median per-token cosine above which two slots on the same tokens are one tensor
SAME_TENSOR_REL = 0.05  # …and median per-token relative error at/below this: bf16 storage ≈ 0.002, a whole bf16
#                         forward ≤ 0.02 (the ladder match's LADDER_MATCH_REL); adjacent SmolLM2 layers ≥ 0.22
FOREIGN_ROW_REL = 0.2  # one joined row this far from its training row (and below SAME_TENSOR_COS) is not that row's
#                        state: adjacent SmolLM2 layers differ by ≥ 0.22 (median), another token's state by ~1
FOREIGN_MIN_ROWS = 2  # joined rows that differ before the matched slot gets a foreign-rows finding
MIN_JOIN_TOKENS = 16  # a shared token_ids prefix at least this long joins a served file to a training file
W1_MARGIN = 0.5  # other text: the nearest training slot is named only when ≤ this × the runner-up's W1. It never
#   decides a match: on the same 6,000 pairs, a slot served one layer off had its trained slot nearest by this
#   margin 870 of 1,470 times (norm distributions of adjacent layers overlap), so only same-token rows can say MATCH
MAX_FILES = 8  # files pooled per side for the norm distributions
QUANTILES = np.linspace(0.005, 0.995, 199)


def log_norms(caps: list[Capture], index: int) -> np.ndarray:
    """log10 per-token norms of slot ``index`` pooled over captures, token 0 and non-finite dropped."""
    parts = []
    for c in caps:
        if index < len(c.slots):
            n = token_norms(c.slots[index].tensor()).numpy().astype(np.float64)[1:]
            n = n[np.isfinite(n) & (n > 0)]
            parts.append(np.log10(n))
    return np.concatenate(parts) if parts else np.zeros(0)


def wasserstein1(a: np.ndarray, b: np.ndarray) -> float:
    """1-D Wasserstein-1 distance between two samples (mean |Q_a(p) − Q_b(p)| on a quantile grid)."""
    if a.size == 0 or b.size == 0:
        return float("nan")
    return float(np.mean(np.abs(np.quantile(a, QUANTILES) - np.quantile(b, QUANTILES))))


def mean_cosine(x, y) -> float:
    """Mean per-token cosine of two ``[T, H]`` tensors on the same tokens (float32 row blocks)."""
    import torch

    cs = []
    for s in range(0, x.shape[0], 256):
        a, b = x[s:s + 256].to(torch.float32), y[s:s + 256].to(torch.float32)
        cs.append(torch.nn.functional.cosine_similarity(a, b, dim=-1))
    return float(torch.cat(cs).mean())


def shared_prefix(a: Any, b: Any) -> int:
    """Length of the common ``token_ids`` prefix of two captures (0 when either has none)."""
    if a.input_ids is None or b.input_ids is None:
        return 0
    x, y = a.input_ids.reshape(-1), b.input_ids.reshape(-1)
    n = min(int(x.numel()), int(y.numel()))
    if n == 0:
        return 0
    diff = (x[:n] != y[:n]).nonzero()
    return int(diff[0]) if diff.numel() else n


def joined_rows(s, t, n: int, skip: Any = None) -> tuple[float, float, np.ndarray]:
    """(median per-token cosine, median per-token relative error ‖s − t‖ / ‖t‖, the rows where the two differ) over
    the first ``n`` rows, leaving out the rows ``skip`` (a bool mask: rows a row check already flagged, e.g. a zero
    block). Medians, so a minority of corrupt rows does not hide which layer the slot is; those rows are returned
    (cosine < ``SAME_TENSOR_COS`` and relative error > ``FOREIGN_ROW_REL``) for a finding of their own."""
    import torch

    cs, rel = [], []
    for k in range(0, n, 256):
        a, b = s[k:min(n, k + 256)].to(torch.float32), t[k:min(n, k + 256)].to(torch.float32)
        cs.append(torch.nn.functional.cosine_similarity(a, b, dim=-1))
        rel.append((a - b).norm(dim=-1) / b.norm(dim=-1).clamp_min(1e-30))
    c, r = torch.cat(cs).double().numpy(), torch.cat(rel).double().numpy()
    keep = np.ones(n, dtype=bool) if skip is None else ~np.asarray(skip[:n], dtype=bool)
    if not keep.any():
        return float("nan"), float("nan"), np.zeros(n, dtype=bool)
    differ = keep & (c < SAME_TENSOR_COS) & (r > FOREIGN_ROW_REL)
    return float(np.median(c[keep])), float(np.median(r[keep])), differ


def _caps(path_or_cap: Any) -> list[Capture]:
    if isinstance(path_or_cap, Capture):
        return [path_or_cap]
    files = list(iter_files(os.fspath(path_or_cap)))[:MAX_FILES]
    if not files:
        raise ForensicsError("no capture files found", path=os.fspath(path_or_cap))
    return [load(f) for f in files]


def compare_served(data: Any, trained: TrainedSide, served: Any, use_fingerprint: bool = True,  # noqa: C901
                   model: Any = None, stamp_check: bool = True) -> tuple[ServedSide, list]:
    """Slot-by-slot comparison of a served capture with the training ``data`` (path or Capture);
    returns (served side, findings)."""
    if data is None or isinstance(data, (list, tuple)):
        raise ForensicsError("the config-free check (--served) needs the training data as capture files (--data)")
    tcaps = _caps(data)
    train = tcaps[0]
    tcaps = [c for c in tcaps if len(c.slots) == len(train.slots)]
    scaps = _caps(served)
    s0 = scaps[0]
    if s0.hidden_size != train.hidden_size:
        raise ForensicsError(f"served hidden size {s0.hidden_size} != training hidden size {train.hidden_size}",
                             path=s0.path)
    slots_r = trained.slots_r or [None] * len(train.slots)
    fc_r = trained.fc_r or []
    n_train, n_served = len(train.slots), len(s0.slots)
    t_norms = [log_norms(tcaps, i) for i in range(n_train)]
    s_norms = [log_norms(scaps, j) for j in range(n_served)]
    dist = np.array([[wasserstein1(s_norms[j], t_norms[i]) for i in range(n_train)] for j in range(n_served)])
    # join on tokens: the training file sharing the longest token_ids prefix with the served file
    joined, P = max(((c, shared_prefix(s0, c)) for c in tcaps), key=lambda x: x[1])
    same_text = P >= MIN_JOIN_TOKENS

    row_report = check_rows(s0)
    cos = rel = None
    differ: list[list[np.ndarray]] = []
    if same_text:
        pairs = [[joined_rows(s0.slots[j].tensor(), joined.slots[i].tensor(), P,
                              _mask(row_report.bad_rows.get(j, []), s0.slots[j].num_tokens))
                  for i in range(n_train)] for j in range(n_served)]
        cos = np.array([[c for c, _, _ in row] for row in pairs])
        rel = np.array([[r for _, r, _ in row] for row in pairs])
        differ = [[d for _, _, d in row] for row in pairs]
    for c in (*tcaps, *scaps):  # nothing read from a file truncated or rewritten meanwhile is compared
        c.check_unchanged()
    s_fps = (fingerprint_slots(s0, model, stamp_check)[0] if use_fingerprint else None) or [{} for _ in s0.slots]
    t_status = list(trained.slots_status or [])
    t_roles = trained.roles or [None] * n_train
    s_fp = [f.get("r_exact") if f.get("r_exact") is not None else s.declared_r
            for f, s in zip(s_fps, s0.slots, strict=True)]
    r_out: list = []
    ok: list[bool | None] = []
    findings: list = [Finding(f.kind, f.severity, f.slots, f"served capture: {f.message}",
                              {**f.evidence, "source": "served rows"}) for f in row_report.findings]
    rows: list[dict] = []
    notes = []
    if s0.format == "speculators" and n_served == len(fc_r) + 1:
        # vLLM extract_hidden_states (--include-last-layer, default on) appends r = L after the aux states;
        # speculators reads it as the target ([:, -1], speculators#353): not an fc input
        n_served -= 1
        notes.append(f"served slot {n_served} is the verifier's last layer that extract_hidden_states appends "
                     "(the target, not an fc input): left out of the fc comparison")
    final = final_slots(s0)
    if final and n_served == len(s0.slots):
        # the format itself says these trailing slots are the final state (TensorRT-LLM SaveState's hidden_state,
        # a Model-Optimizer dump's hidden_states, SGLang's return_hidden_states rows): the LM head's input, which no
        # engine concatenates into an EAGLE-3 fc (they capture pre-norm aux states only)
        n_served -= len(final)
        notes.append(f"served slot(s) {final} ({', '.join(s0.slots[j].name for j in final)}) hold the final state "
                     f"the {s0.format} format stores beside the aux states (not an fc input): left out of the fc "
                     "comparison")
    if n_served == 0:
        findings.append(Finding(FindingKind.SERVED_UNDECIDED, Severity.WARN, [],
                                f"the served capture ({s0.format}) holds no fc input, only the final state "
                                f"{[s.name for s in s0.slots]}: it cannot show what the engine fed the draft. Capture "
                                "the aux states (vLLM extract_hidden_states, TensorRT-LLM SaveState "
                                "eagle3_layers_to_capture)", {"format": s0.format, "slots": len(s0.slots)}))
    for j in range(n_served):
        want = j if j < len(fc_r) else None  # fc slice j was trained on training slot j
        fp_r = s_fp[j] if j < len(s_fp) else None
        ev: dict = {"distance": W1_NAME, "value": None if want is None else float(dist[j, want]),
                    "threshold": W1_THRESHOLD}
        if cos is not None and rel is not None:  # joined on tokens: the tensors decide
            same, rj, more = _same_text_slot(cos[j], rel[j], want, slots_r, fp_r)
            more.update({"joined_tokens": P, "joined_file": joined.path})
        else:  # different text: a mismatch when W1 excludes the trained slot; a match is never decided here
            same, rj, more = _other_text_slot(dist[j], want, slots_r, fp_r)
        ev.update(more)
        if same and want is not None and fp_r is not None and slots_r[want] is not None and fp_r != slots_r[want]:
            same = False  # the fingerprints name different layers
        s_role = s_fps[j].get("role") if j < len(s_fps) else None
        t_role = t_roles[want] if want is not None and want < len(t_roles) else None
        if s_role and t_role and (s_role in STRONG_ROLES or t_role in STRONG_ROLES) and s_role != t_role:
            same = False  # e.g. an embedding served where a layer output was trained, or vice versa
        ev.update({"served_fingerprint_r": fp_r, "served_role": s_role, "trained_role": t_role})
        s_exact = s_fps[j].get("r_exact") if j < len(s_fps) else None
        t_known = want is not None and slots_r[want] is not None and want < len(t_status) and \
            t_status[want] in KNOWN
        if s_exact is not None and t_known and want is not None and (cos is None or same is None):
            # --model: the served capture has token ids, so its slots get an exact r like any training file;
            # on other text that decides where norm distributions cannot (known against known only)
            same, rj = s_exact == slots_r[want], s_exact
            ev.update({"decided_by": "exact r", "served_exact_r": s_exact, "trained_r": slots_r[want]})
        elif s_exact is not None:  # the reference forward names it: exact beats a nearest slot by W1 or rows
            rj = s_exact
            ev["served_exact_r"] = s_exact
        elif same is None and s_role and s_role == t_role and s_role in STRONG_ROLES and t_known and want is not None:
            # a role the data alone names (embedding, post-norm final) on both sides: the same r, known on both
            same, rj = True, slots_r[want]
            ev.update({"decided_by": "role", "trained_r": slots_r[want]})
        if want is None:  # a state past the fc's inputs: the counts differ (the served_data count finding says so)
            same = False
        r_out.append(rj)
        ok.append(same)
        rows.append(ev)
        f = _slot_finding(j, want, same, ev, slots_r, cos is not None) if want is not None else None
        if f is not None:
            findings.append(f)
        if same and differ and want is not None:
            f = _foreign_finding(j, differ[j][want], ev)
            if f is not None:
                findings.append(f)
    if n_served != len(fc_r) and n_served > 0:
        findings.append(Finding(FindingKind.SERVED_DATA, Severity.FAIL, [],
                                f"the served capture has {n_served} states, "
                                "training fed "
                                f"the fc {len(fc_r)}", {"served": n_served, "trained": len(fc_r)}))
    how = (f"rows joined on {P} shared tokens (cosine ≥ {SAME_TENSOR_COS}, rel ≤ {SAME_TENSOR_REL})" if same_text
           else f"{W1_NAME}: ≥ {W1_THRESHOLD} excludes the trained layer, nothing on other text confirms it")
    if any(ev.get("decided_by") == "exact r" for ev in rows):
        how = "the exact r of each served slot against the reference forward (--model)"
    out = ServedSide(r=r_out, ok=ok, source=f"served capture {s0.path} ({len(scaps)} file(s), "
                                            f"{'same' if same_text else 'different'} tokens as training; r named by "
                                            f"{how})",
                     distances=rows, matrix=np.round(dist, 4).tolist(), distance=W1_NAME, threshold=W1_THRESHOLD,
                     notes=notes, joined_tokens=P if same_text else 0,
                     cosine=None if cos is None else np.round(cos, 5).tolist(),
                     rel=None if rel is None else np.round(rel, 5).tolist(), basis="capture")
    return out, findings


def final_slots(cap: Capture) -> list[int]:
    """The trailing slots a capture's format stores as the model's final state (never an fc input): every slot the
    format claims post-norm (TensorRT-LLM SaveState ``hidden_state``, SGLang rows, a Model-Optimizer HF/TRT-LLM
    dump), and a Model-Optimizer dump's last ``hidden_states`` slot, pre- or post-norm by its dumper."""
    out: list[int] = []
    for j in range(len(cap.slots) - 1, -1, -1):
        s = cap.slots[j]
        if s.claimed == FINAL_POST or (cap.format == "modelopt" and j == len(cap.slots) - 1
                                       and s.key in ("hidden_states", "base_model_hidden_states")):
            out.insert(0, j)
        else:
            break
    return out


def _mask(runs: list, n: int) -> np.ndarray:
    """Inclusive ``(first, last)`` row runs as a bool mask of ``n`` rows."""
    m = np.zeros(n, dtype=bool)
    for a, b in runs:
        m[max(0, a):min(n, b + 1)] = True
    return m


def _foreign_finding(j: int, differ: np.ndarray, ev: dict) -> Any:
    """Served slot ``j`` is the trained tensor on most shared tokens but not on the rows ``differ``: those rows
    hold another state (another request's, or garbage) — a FAIL of its own, naming the rows."""
    n = int(differ.sum())
    if n < FOREIGN_MIN_ROWS:
        return None
    rs = runs(differ)
    shown = ", ".join(f"{a}–{b}" if a != b else f"{a}" for a, b in rs[:4]) + (" …" if len(rs) > 4 else "")
    return Finding(FindingKind.FOREIGN_ROWS, Severity.FAIL, [j],
                   f"served capture: slot {j} is the trained tensor on most of the {ev.get('joined_tokens')} shared "
                   f"tokens, but {n} row(s) ({shown}) are not (cosine < {SAME_TENSOR_COS}, relative error > "
                   f"{FOREIGN_ROW_REL}): those rows fed the draft another state",
                   {"slot": j, "rows": [list(r) for r in rs], "count": n, "source": "served rows joined on tokens"})


def _same_text_slot(cos: np.ndarray, rel: np.ndarray, want: int | None, slots_r: list,
                    fp_r: Any) -> tuple[bool | None, Any, dict]:
    """One served slot against every training slot on shared tokens: ``(same, its r, evidence)``. Same tensor:
    median per-token cosine ≥ ``SAME_TENSOR_COS`` and median relative error ≤ ``SAME_TENSOR_REL`` (rows a row check
    flagged left out)."""
    match = [i for i in range(len(cos)) if cos[i] >= SAME_TENSOR_COS and rel[i] <= SAME_TENSOR_REL]
    best = int(np.argmin(rel))
    same = want is not None and want in match
    rj = slots_r[want] if same and want is not None else (slots_r[best] if best in match else fp_r)
    off = None
    if best in match and want is not None and isinstance(slots_r[best], int) and isinstance(slots_r[want], int):
        off = slots_r[best] - slots_r[want]
    return same, rj, {"same_tokens": True,
                      "median_cosine": None if want is None else float(cos[want]),
                      "median_rel": None if want is None else float(rel[want]),
                      "cosine_threshold": SAME_TENSOR_COS, "rel_threshold": SAME_TENSOR_REL,
                      "best_training_slot": best, "best_r": slots_r[best],
                      "best_offset_slots": None if want is None else best - want, "best_offset_r": off,
                      "nearest_r": slots_r[best] if best in match else None}


def _other_text_slot(dist: np.ndarray, want: int | None, slots_r: list, fp_r: Any) -> tuple[bool | None, Any, dict]:
    """One served slot against every training slot on other text, by W1: ``(same, its r, evidence)``. False
    when W1 to the trained slot is ≥ ``W1_THRESHOLD``, else None; the nearest slot is named with a margin."""
    order = [int(i) for i in np.argsort(dist) if np.isfinite(dist[i])]
    nearest = order[0] if order else None
    runner = order[1] if len(order) > 1 else None
    d_near = float(dist[nearest]) if nearest is not None else None
    d_run = float(dist[runner]) if runner is not None else None
    decided = d_near is not None and (d_run is None or d_near <= W1_MARGIN * d_run)
    d_want = float(dist[want]) if want is not None and np.isfinite(dist[want]) else None
    same = False if d_want is not None and d_want >= W1_THRESHOLD else None
    rj = slots_r[nearest] if decided and nearest is not None else fp_r
    return same, rj, {"nearest_training_slot": nearest, "nearest_value": d_near,
                      "nearest_r": None if nearest is None else slots_r[nearest], "runner_up_slot": runner,
                      "runner_up_value": d_run, "margin": W1_MARGIN,
                      "ratio": None if d_near is None or not d_run else d_near / d_run}


def _slot_finding(j: int, want: int | None, same: bool | None, ev: dict, slots_r: list,
                  same_text: bool) -> Any:
    """The finding for served slot ``j``: ``served_data`` (FAIL) when it is not what fc slice ``j`` was trained
    on, ``served_undecided`` (WARN) when the data cannot tell, None when it matches."""
    trained_lab = r_label(slots_r[want]) if want is not None else "none"
    s_role, t_role = ev.get("served_role"), ev.get("trained_role")
    if same is False:
        if ev.get("decided_by") == "exact r":
            val = (f"the reference forward (--model) names served slot {j} {r_label(ev['served_exact_r'])}, "
                   f"the training slot {r_label(ev['trained_r'])}")
            what = r_label(ev["served_exact_r"])
        elif same_text and want is not None:
            val = (f"on {ev['joined_tokens']} shared tokens: median cosine {ev['median_cosine']:.4f}, median relative "
                   f"error {ev['median_rel']:.3g} (same tensor: ≥ {SAME_TENSOR_COS}, ≤ {SAME_TENSOR_REL})")
            near = ev["best_training_slot"]
            what = (f"training slot {near} ({r_label(slots_r[near])}, offset "
                    f"{ev['best_offset_slots']:+d} slot(s))" if ev.get("nearest_r") is not None
                    else "no training slot")
        else:
            val = (f"{W1_NAME} to it {ev['value']:.3f} (≥ {W1_THRESHOLD}: not that layer, even on other text)"
                   if ev["value"] is not None else "no training slice")
            near = ev.get("nearest_training_slot")
            what = ("nearest to " if ev.get("ratio") is not None and ev["ratio"] <= W1_MARGIN else
                    "no training slot by a margin; the nearest is ") + \
                (f"training slot {near} ({r_label(slots_r[near])})" if near is not None else "?")
        if s_role and t_role and s_role != t_role:
            val += f"; roles differ: served {s_role}, trained {t_role}"
        return Finding(FindingKind.SERVED_DATA, Severity.FAIL, [j],
                       f"served slot {j} is not what fc slice {j} was trained "
                       f"on ({trained_lab}): {val}; it {'equals' if same_text else 'is'} {what}", ev)
    if same is None:
        d_w = ev["value"]
        near = ev.get("nearest_training_slot")
        named = (f"nearest training slot {near} by a margin (≤ {W1_MARGIN}× the runner-up)"
                 if ev.get("ratio") is not None and ev["ratio"] <= W1_MARGIN else
                 f"no training slot nearest by a margin (nearest {near}, runner-up {ev.get('runner_up_slot')})")
        return Finding(FindingKind.SERVED_UNDECIDED, Severity.WARN, [j],
                       f"served slot {j} vs fc slice {j} ({trained_lab}), other text: {W1_NAME} "
                       + (f"{d_w:.3f} < {W1_THRESHOLD}, " if d_w is not None else "")
                       + f"{named}; norm distributions on other text cannot tell a layer from its neighbours — "
                       "cannot tell; a served capture on the same prompts (shared token_ids with a training "
                       "file) settles it", ev)
    return None
