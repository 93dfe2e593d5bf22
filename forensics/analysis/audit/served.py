"""Config-free wiring check: compare a capture of what the engine *fed* the draft with the training data.

Works without any config: every served slot is compared with every training slot by the distance
between their per-token log-norm distributions (1-D Wasserstein-1 on ``log10 ‖h_t‖``, token 0
excluded because it is an attention sink whose norm says nothing about depth). When both captures hold
the same token ids, the tensors themselves are compared (mean per-token cosine); the fingerprinted roles
must also agree.

Example:
    >>> data, findings = compare_served(train_cap, trained, "served/")     # doctest: +SKIP
    >>> data["ok"], data["distances"][0]                                  # doctest: +SKIP
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from forensics.errors import ForensicsError
from forensics.io.capture import Capture
from forensics.layers import r_label

W1_NAME = "W1(log10 token norm, token 0 excluded)"
# log10 units (0.05 ≈ 12 % typical norm shift). Calibrated on SmolLM2-135M sample_data: the same r on
# different texts gives 0.004–0.017; slots 4+ blocks apart ≥ 0.10; adjacent blocks 0.03–0.07 (so an
# off-by-one on *different* texts needs the fingerprint or same-token cosine, not this distance).
W1_THRESHOLD = 0.05
SAME_TENSOR_COS = 0.999  # mean per-token cosine above which two slots on the same tokens are one tensor
MAX_FILES = 8  # files pooled per side for the norm distributions
QUANTILES = np.linspace(0.005, 0.995, 199)


def log_norms(caps: list[Capture], index: int) -> np.ndarray:
    """log10 per-token norms of slot ``index`` pooled over captures, token 0 and non-finite dropped."""
    from forensics.analysis.stats import token_norms

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


def _caps(path_or_cap: Any) -> list[Capture]:
    from forensics.io.formats import iter_files, load

    if isinstance(path_or_cap, Capture):
        return [path_or_cap]
    files = list(iter_files(os.fspath(path_or_cap)))[:MAX_FILES]
    if not files:
        raise ForensicsError("no capture files found", path=os.fspath(path_or_cap))
    return [load(f) for f in files]


def compare_served(data: Any, trained: dict, served: Any, use_fingerprint: bool = True,
                   model: Any = None) -> tuple[dict, list]:
    """Slot-by-slot comparison of a served capture with the training ``data`` (path or Capture);
    returns (served side, findings)."""
    from forensics.analysis.audit.training import STRONG_ROLES, fingerprint_slots
    from forensics.findings import Finding, Severity

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
    slots_r = trained.get("slots_r") or [None] * len(train.slots)
    fc_r = trained.get("fc_r") or []
    n_train, n_served = len(train.slots), len(s0.slots)
    t_norms = [log_norms(tcaps, i) for i in range(n_train)]
    s_norms = [log_norms(scaps, j) for j in range(n_served)]
    dist = np.array([[wasserstein1(s_norms[j], t_norms[i]) for i in range(n_train)] for j in range(n_served)])
    same_text = (s0.input_ids is not None and train.input_ids is not None
                 and s0.input_ids.shape == train.input_ids.shape and bool((s0.input_ids == train.input_ids).all()))
    cos = None
    if same_text:
        cos = np.array([[mean_cosine(s0.slots[j].tensor(), train.slots[i].tensor()) for i in range(n_train)]
                        for j in range(n_served)])
    s_fps = (fingerprint_slots(s0, model)[0] if use_fingerprint else None) or [{} for _ in s0.slots]
    t_roles = trained.get("roles") or [None] * n_train
    s_fp = [f.get("r_exact") if f.get("r_exact") is not None else s.declared_r
            for f, s in zip(s_fps, s0.slots, strict=True)]
    r_out, ok, findings, rows = [], [], [], []
    notes = []
    if s0.format == "speculators" and n_served == len(fc_r) + 1:
        # vLLM extract_hidden_states (--include-last-layer, default on) appends r = L after the aux states;
        # speculators reads it as the target ([:, -1], speculators#353): not an fc input
        n_served -= 1
        notes.append(f"served slot {n_served} is the verifier's last layer that extract_hidden_states appends "
                     "(the target, not an fc input): left out of the fc comparison")
    for j in range(n_served):
        nearest = int(np.nanargmin(dist[j])) if np.isfinite(dist[j]).any() else None
        if cos is not None:
            nearest = int(np.argmax(cos[j]))
        want = j if j < len(fc_r) else None  # fc slice j was trained on training slot j
        d_want = float(dist[j, want]) if want is not None else None
        # same: within the threshold *and* no other training slot is closer
        same = (d_want is not None and d_want <= W1_THRESHOLD and nearest == want) if cos is None else \
            (want is not None and cos[j, want] >= SAME_TENSOR_COS)
        fp_r = s_fp[j] if j < len(s_fp) else None
        if same and want is not None:
            rj = slots_r[want]
        elif nearest is not None and (dist[j, nearest] <= W1_THRESHOLD if cos is None
                                      else cos[j, nearest] >= SAME_TENSOR_COS):
            rj = slots_r[nearest]
        else:
            rj = fp_r
        if same and want is not None and fp_r is not None and slots_r[want] is not None and fp_r != slots_r[want]:
            same = False  # the fingerprints name different layers
        s_role = s_fps[j].get("role") if j < len(s_fps) else None
        t_role = t_roles[want] if want is not None and want < len(t_roles) else None
        if same and s_role and t_role and (s_role in STRONG_ROLES or t_role in STRONG_ROLES) and s_role != t_role:
            same = False  # e.g. an embedding served where a layer output was trained, or vice versa
        r_out.append(rj)
        ok.append(bool(same))
        ev = {"distance": W1_NAME, "value": d_want, "threshold": W1_THRESHOLD,
              "nearest_training_slot": nearest, "nearest_value": None if nearest is None else float(dist[j, nearest]),
              "nearest_r": None if nearest is None else slots_r[nearest], "served_fingerprint_r": fp_r,
              "served_role": s_role, "trained_role": t_role}
        if cos is not None:
            ev.update({"same_tokens": True, "mean_cosine": None if want is None else float(cos[j, want]),
                       "cosine_threshold": SAME_TENSOR_COS})
        rows.append(ev)
        if not same:
            what = f"training slot {nearest} ({r_label(slots_r[nearest])})" if nearest is not None else "?"
            val = f"{W1_NAME} = {d_want:.3f} > {W1_THRESHOLD}" if d_want is not None else "no training slice"
            if cos is not None and want is not None:
                val = f"mean cosine {cos[j, want]:.4f} < {SAME_TENSOR_COS} on the same tokens"
            findings.append(Finding("served_data", Severity.FAIL, [],
                                    f"served slot {j} is not what fc slice {j} was trained on "
                                    f"({r_label(slots_r[want]) if want is not None else 'none'}): {val}; "
                                    f"it is closest to {what}", ev))
    if n_served != len(fc_r):
        findings.append(Finding("served_data", Severity.FAIL, [], f"the served capture has {n_served} states, "
                                "training fed "
                                f"the fc {len(fc_r)}", {"served": n_served, "trained": len(fc_r)}))
    how = "mean cosine on the same tokens" if same_text else f"nearest training slot by {W1_NAME} ≤ {W1_THRESHOLD}"
    out = {"r": r_out, "ok": ok, "source": f"served capture {s0.path} ({len(scaps)} file(s), "
                                          f"{'same' if same_text else 'different'} tokens as training; r named by "
                                          f"{how})",
           "distances": rows, "matrix": np.round(dist, 4).tolist(), "distance": W1_NAME, "threshold": W1_THRESHOLD,
           "notes": notes}
    return out, findings
