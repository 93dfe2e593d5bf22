"""View models for the HTML report's evidence panels: per-slot cards, cross-slot figures and the checks table (the
samples are the explorer's, ``forensics.views.explore``). Numbers only go into SVG coordinates; figures are drawn
by ``figures.py`` (SVG). Nothing here recomputes statistics.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

import numpy as np

from forensics.analysis.report import OUTCOMES, FileReport
from forensics.analysis.stats import SINK_RATIO
from forensics.findings import OUTCOME_RANK
from forensics.views.plots.slots import bad_rows_of
from forensics.views.report.figures import Figures
from forensics.views.report.verdicts import _label, fmt, show_token, slot_row, worst

MAX_CARD_FILES = 8  # per-slot cards for at most this many files; the rest summarised
MAX_OPEN_CARDS = 8  # with nothing flagged, the first file with at most this many slots shows its cards unfolded
MAX_FIGURE_FILES = 6  # files with cross-slot figures: flagged files first, then one per folder
MAX_OUTLIER_ROWS = 12  # sink / massive-activation rows per slot card
MAX_CHECK_ROWS = 1500
HIST_BINS = 28


# ---------------------------------------------------------------- per-slot cards
def _hist(norms: np.ndarray) -> dict | None:
    """A log-x histogram of per-token norms as SVG coordinates (viewBox 0..240 × 0..64)."""
    x = np.asarray(norms, dtype=np.float64)
    x = x[np.isfinite(x) & (x > 0)]
    if x.size == 0:
        return None
    lx = np.log10(x)
    lo, hi = float(lx.min()), float(lx.max())
    if hi - lo < 1e-6:
        lo, hi = lo - 0.05, hi + 0.05
    counts, edges = np.histogram(lx, bins=HIST_BINS, range=(lo, hi))
    top = max(int(counts.max()), 1)
    w = 240.0 / HIST_BINS
    bars = [{"x": round(i * w, 2), "w": round(w - 0.6, 2), "y": round(52 - 50 * math.sqrt(c / top), 2),
             "h": round(50 * math.sqrt(c / top), 2), "n": int(c), "lo": fmt(10 ** edges[i]),
             "hi": fmt(10 ** edges[i + 1])} for i, c in enumerate(counts) if c]
    med = float(np.median(x))
    return {"bars": bars, "median_x": round(240 * (math.log10(med) - lo) / (hi - lo), 2),
            "lo": fmt(10 ** lo), "hi": fmt(10 ** hi), "median": fmt(med)}


def _outliers(ss, tokens: list[str] | None) -> list[dict]:
    """Sink and massive-activation tokens of one slot: position, token text, norm, ratio, top dims."""
    med = ss.norm.median
    massive = {t["pos"]: t for t in ss.massive_tokens}
    rows = []
    for p in sorted(set(ss.sinks) | set(massive))[:MAX_OUTLIER_ROWS]:
        m = massive.get(p)
        norm = float(ss.norms[p])
        rows.append({"pos": p, "token": show_token(tokens[p]) if tokens and p < len(tokens) else "—",
                     "norm": fmt(norm), "ratio": fmt(norm / med) if med else "—",
                     "sink": p in ss.sinks, "max_abs": fmt(m["max_abs"]) if m else "—",
                     "dims": fmt(m["dims"][:6]) if m else "—"})
    return rows


def build_cards(files: list[FileReport], focus: str | None = None) -> dict:
    """Per-slot cards of the first ``MAX_CARD_FILES`` files (the audited file first); open: the audited file and
    every failing file."""
    out = []
    files = sorted(files, key=lambda f: f.rel != focus)
    for f in files[:MAX_CARD_FILES]:
        cards = []
        for ss, outcome in zip(f.stats.slots, f.slots, strict=True):
            v = slot_row(outcome)
            n, x0, xs = ss.norm, ss.norm_excl_first, ss.norm_excl_sinks
            stats = [("n tokens", n.n), ("median ‖x‖", n.median), ("mean", n.mean), ("std", n.std), ("MAD", n.mad),
                     ("p01", n.p01), ("p05", n.p05), ("p25", n.p25), ("p75", n.p75), ("p95", n.p95), ("p99", n.p99),
                     ("min (pos)", f"{fmt(n.min)} ({n.min_pos})"), ("max (pos)", f"{fmt(n.max)} ({n.max_pos})"),
                     ("token 0", ss.first), ("token 0 / median rest", ss.first_ratio),
                     ("median excl. token 0", x0.median),
                     ("mean ± std excl. token 0", f"{fmt(x0.mean)} ± {fmt(x0.std)}"),
                     ("mean ± std excl. sinks", f"{fmt(xs.mean)} ± {fmt(xs.std)}"), ("rms mean", ss.rms_mean),
                     ("median |x|", ss.median_abs), ("massive threshold", ss.massive_threshold)]
            cards.append({"id": f"{_anchor(f.rel)}-s{ss.index}", "verdict": v, "summary": ss.one_line(),
                          "stats": [(k, fmt(val)) for k, val in stats], "hist": _hist(ss.norms),
                          "outliers": _outliers(ss, f.tokens), "n_outliers": len(set(ss.sinks) |
                                                                               {t["pos"] for t in ss.massive_tokens})})
        fv = f.outcome  # the file's one badge (forensics.analysis.report.FileReport.outcome), as everywhere
        out.append({"file": f.rel, "anchor": _anchor(f.rel), "fragment": fragment(f.fp) or fragment(f.stats),
                    "cards": cards, "verdict": fv, "open": f.rel == focus or fv == "fail"})
    if out and not any(f["open"] for f in out):  # nothing flagged: open the first small file as an example
        small = [f for f in out if len(f["cards"]) <= MAX_OPEN_CARDS]
        (small or out)[0]["open"] = True
    return {"files": out, "omitted": max(0, len(files) - MAX_CARD_FILES)}


def _anchor(rel: str) -> str:
    return "f-" + "".join(c if c.isalnum() else "-" for c in rel)[:80]


def fragment(obj) -> str | None:
    """A result object's own escaped ``_repr_html_`` fragment (inserted verbatim), or None."""
    if obj is None or not hasattr(obj, "_repr_html_"):
        return None
    return obj._repr_html_()


# ---------------------------------------------------------------- key numbers
def _slot_name(f: FileReport, ss) -> str:
    fs = next((x for x in (f.fp.slots if f.fp is not None else []) if x.index == ss.index), None)
    return (fs.label if fs is not None and fs.label else None) or _label(ss.declared_r) or ss.name


def build_key_numbers(files: list[FileReport], focus: str | None, figures: Figures | None = None) -> list[dict]:
    """Per format, one row per slot of one file (the audited one, else the format's first): label, ‖x‖ mean ±
    std, median, token-0 norm and whether token 0 is a sink; the audited file also gets its norm-distribution
    figure (requested from ``figures``, drawn by the caller; drawn here without one)."""
    batch = figures if figures is not None else Figures()
    groups: dict[str, list[FileReport]] = {}
    for f in files:
        groups.setdefault(f.capture.format, []).append(f)
    out = []
    for fmt_name, fs in sorted(groups.items(), key=lambda kv: all(f.rel != focus for f in kv[1])):
        f = next((x for x in fs if x.rel == focus), fs[0])
        rows = []
        for ss in f.stats.slots:
            n = ss.norm
            sinks = sorted(ss.sinks)
            flag = ("token 0" + (f" + {len(sinks) - 1} more" if len(sinks) > 1 else "")) if 0 in sinks else \
                (f"{len(sinks)} other" if sinks else "—")
            rows.append({"index": ss.index, "label": _slot_name(f, ss), "mean_std": f"{fmt(n.mean)} ± {fmt(n.std)}",
                         "median": fmt(n.median), "tok0": fmt(ss.first), "ratio": fmt(ss.first_ratio),
                         "sink": flag, "is_sink": 0 in sinks})
        fig = batch.request("norm_distributions", f.fp if f.fp is not None else f.stats,
                            title=f"Per-token ‖x‖ of {f.rel} (log axis)") if f.rel == focus else None
        out.append({"format": fmt_name, "file": f.rel, "nfiles": len(fs), "rows": rows, "fig": fig,
                    "anchor": _anchor(f.rel), "focus": f.rel == focus})
    if figures is None:
        batch.draw()
    return out


# ---------------------------------------------------------------- cross-slot figures (figures.py, SVG)
CROSS_FIGURES = [("norm_distributions", "Per-token norm distributions (log axis)", False),
                 ("similarity_heatmap", "Pairwise angular distance between slots (massive dims masked)", True),
                 ("depth_ladder", "Depth ladder: slots placed on r with confidence", True),
                 ("massive_dims", "Massive-activation dimensions per slot", False)]


def _figure_files(files: list[FileReport]) -> list[FileReport]:
    """Files that get figures: every file with a finding, then the first file of each folder (samples of one
    folder look alike; a file's four figures are 40–450 kB of base64 SVG on sample_data/), at most
    ``MAX_FIGURE_FILES``."""
    flagged = [f for f in files if f.findings]
    seen, firsts = set(), []
    for f in files:
        d = os.path.dirname(f.rel)
        if d not in seen:
            seen.add(d)
            firsts.append(f)
    chosen = flagged + [f for f in firsts if f not in flagged]
    return [f for f in files if f in chosen[:MAX_FIGURE_FILES]]


def build_cross(files: list[FileReport], progress=None, focus: str | None = None,
                figures: Figures | None = None) -> dict:
    """Cross-slot figures of the chosen files (requested from ``figures`` and drawn by the caller; without
    ``figures``, drawn here with ``progress(done, total)``)."""
    out: list[dict] = []
    batch = figures if figures is not None else Figures()
    chosen = sorted(_figure_files(files), key=lambda f: f.rel != focus)
    for f in chosen:
        src = f.fp if f.fp is not None else f.stats
        figs = [batch.request(name, src, title=title) for name, title, needs_fp in CROSS_FIGURES
                if f.fp is not None or not needs_fp]
        if bad_rows_of(src):  # row findings: the bad row ranges shaded on the per-token norms
            figs.insert(1, batch.request("norm_by_position", src, title="Per-token norm by position (bad rows shaded)"))
        sim = f.fp.similarity if f.fp is not None else None
        flagged = bool(f.findings)
        out.append({"file": f.rel, "figures": figs, "similarity": _sim_table(f, sim),
                    "open": f.rel == focus or flagged or (focus is None and not out)})
    if figures is None:
        batch.draw(progress)
    return {"files": out, "omitted": len(files) - len(chosen)}


def _sim_table(f: FileReport, sim) -> dict | None:
    """The similarity matrix as numbers with a cell shade (for reading exact values next to the heatmap)."""
    if sim is None:
        return None
    m = np.asarray(sim, dtype=np.float64)
    names = [s.label or s.role or str(s.index) for s in f.fp.slots]
    top = float(np.nanmax(m)) if m.size and np.isfinite(m).any() else 1.0
    rows = [[{"v": fmt(float(v)), "a": round(float(v) / top, 3) if top > 0 and math.isfinite(v) else 0}
             for v in row] for row in m]
    return {"names": names, "rows": rows}


# ---------------------------------------------------------------- checks
def _cell(value: Any) -> str:
    """A check's raw value in the one number style; a value that is not a number says so in words (a token-0 ratio
    over a zero median, a statistic of non-finite rows), never a bare ``nan``."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return "undefined (not a number)" if math.isnan(value) else ("+∞" if value > 0 else "−∞")
    return re.sub(r"\bnan\b", "undefined", fmt(value))


def _row(where: str, check: str, value: Any, threshold: Any, outcome: str, says: str = "") -> dict:
    value = _cell(value)
    return {"where": where, "check": check, "value": value, "numeric": bool(_NUMERIC.fullmatch(value)),
            "threshold": threshold if isinstance(threshold, str) else fmt(threshold), "outcome": outcome,
            "cls": outcome if outcome in OUTCOME_RANK else "info", "says": says}


_NUMERIC = re.compile(r"-?[\d,]*\.?\d+(e[+-]?\d+)?")


def _file_checks(f: FileReport) -> list[dict]:
    """Every check of one file: non-finite counts (pass/fail) and each fingerprint evidence line (raw value,
    threshold, what it says); without a fingerprint, the stats' own sink and massive-activation measures."""
    rows = []
    fslots = {s.index: s for s in (f.fp.slots if f.fp is not None else [])}
    for ss in f.stats.slots:
        where = f"[{ss.index}] {ss.name}"
        rows.append(_row(where, "non-finite values (NaN + Inf)", ss.nan + ss.inf, "= 0",
                         "fail" if ss.nan or ss.inf else "pass"))
        fs = fslots.get(ss.index)
        evidence = (fs.evidence or []) if fs is not None else []
        if not evidence:
            rows.append(_row(where, "token-0 norm / median of the rest", ss.first_ratio,
                             f"≥ {fmt(SINK_RATIO)} ⇒ sink", "info"))
            mx = max((t["max_abs"] for t in ss.massive_tokens), default=None)
            rows.append(_row(where, "massive activations (max |x|)",
                             mx if mx is not None else f"none > {fmt(ss.massive_threshold)}",
                             f"> {fmt(ss.massive_threshold)}", "info"))
        for e in evidence:
            rows.append(_row(where, str(e.signal), e.value, e.threshold, "info", str(e.verdict or "")))
    if f.fp is not None:
        for e in f.fp.order_evidence or []:
            rows.append(_row("depth order", str(e.signal), e.value, e.threshold, "info", str(e.verdict or "")))
        for x in f.findings:
            rows.append(_row(f"slots {fmt(list(x.slots or []))}", f"finding: {x.kind}", x.message, "—",
                             x.severity.value))
    return rows


def _group(title: str, rows: list[dict], anchor: str, badge: str | None = None) -> dict:
    """A group of check rows; its badge is ``badge`` (a file's one outcome) or the worst of its rows."""
    counts = {k: sum(r["cls"] == k for r in rows) for k in OUTCOMES}
    rows_worst = worst([r["cls"] for r in rows])
    return {"title": title, "anchor": anchor, "rows": rows[:MAX_CHECK_ROWS], "counts": counts,
            "omitted": max(0, len(rows) - MAX_CHECK_ROWS), "worst": badge or rows_worst,
            "outcome": badge is not None,  # the badge is a file's outcome word (info: written "no claim")
            "open": rows_worst in ("warn", "fail", "cannot tell")}  # folded unless a row in it needs a look


def build_checks(files: list[FileReport], audit_res, scan_res) -> dict:
    """Checks grouped by file (then the audit and the scan), each group with its outcome counts."""
    groups = []
    if audit_res is not None:
        rows = [_row(f"fc slice {s.slice}", "trained r vs served r", f"{fmt(s.trained_r)} vs {fmt(s.served_r)}",
                     "equal", {True: "pass", False: "fail"}.get(s.ok, "cannot tell"))
                for s in audit_res.slices]
        for x in audit_res.findings:
            ev = x.evidence or {}
            value = "; ".join(f"{k} = {fmt(v)}" for k, v in ev.items()) if isinstance(ev, dict) else fmt(ev)
            rows.append(_row(str(x.kind), str(x.message), value or "—", "—", str(x.severity)))
        groups.append(_group("wiring audit", rows, "checks-audit"))
    for f in files:
        groups.append(_group(f.rel, _file_checks(f), "checks-" + _anchor(f.rel), f.outcome))
    if scan_res is not None:
        rows = [_row(a.file, str(a.kind), a.message, "—", a.severity) for a in scan_res.anomalies]
        groups.append(_group("dataset scan", rows, "checks-scan"))
    counts = {k: sum(g["counts"][k] for g in groups) for k in OUTCOMES}
    return {"groups": groups, "counts": counts}
