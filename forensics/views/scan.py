"""Text and HTML of dataset scans (ScanResult): what __repr__, _repr_html_, the CLI and the report show."""

from __future__ import annotations

import os

from forensics.analysis.scan.result import ScanResult
from forensics.display import renders
from forensics.findings import OUTCOME_RANK
from forensics.views.format import TEXT_WIDTH, badge, esc, fit, headline_word, html_table, num, short_list, shown_name

MAX_LISTED_ANOMALIES = 200  # anomalies shown in repr/HTML (all are in .anomalies and to_dict())
MAX_LISTED_SLOTS = 12  # slot lines per format in repr (a 32-slot ladder would drown the anomalies)


def _order(g: dict) -> tuple[str, dict]:
    """The group's majority depth order (fingerprint) or, without fingerprints, its norm-rank order."""
    m = g["majority"]
    if m["order"]["value"] is not None:
        return "depth order", m["order"]
    return "norm-rank order", m["norm_order"]



@renders(ScanResult, "headline")
def headline(res) -> str:
    s, t = res.summary, res.timing
    counts = ", ".join(f"{k}×{v}" for k, v in s["anomaly_counts"].items()) or "none"
    speed = f"; {t['gb_per_s']:.2f} GB/s, {t['files_per_s']:.1f} files/s" if t.get("gb_per_s") else ""
    resumed = f" ({t['resumed_files']} from the resumed output)" if t.get("resumed_files") else ""
    wide = "; dataset-wide: " + ", ".join(f"{d['kind']} ({d['files']}/{d['of']} {d['format']})"
                                         for d in s.get("dataset_findings") or []) \
        if s.get("dataset_findings") else ""
    # the result's verdict (decided in analysis/scan); unreadable files are named first, as their exit code 2 is
    word = "UNREADABLE" if s.get("errors") else headline_word(res.verdict)
    return (f"{word}: " if word else "") + (
        f"scan of {res.path}: {s['files']} files{resumed}, {s['bytes'] / 1e9:.3g} GB, {s['errors']} "
        f"unreadable; anomalies: {counts}{wide}{speed}")


def row_line(summary: dict) -> str | None:
    """``rows: zero_rows in 3 files (192 rows), …`` from the summary's row-forensics counts (None when clean).

    >>> row_line({"rows": {"zero_rows": {"files": 3, "rows": 192}, "row_count": {"files": 1, "rows": 20}}})
    'row forensics: zero_rows in 3 files (192 rows), row_count in 1 file (20 rows)'
    """
    rows = summary.get("rows") or {}
    if not rows:
        return None
    return "row forensics: " + ", ".join(
        f"{k} in {c['files']} file{'s' if c['files'] != 1 else ''} ({c['rows']} row{'s' if c['rows'] != 1 else ''})"
        for k, c in rows.items())


@renders(ScanResult, "text")
def text(res, width: int = TEXT_WIDTH) -> str:
    """What ``repr`` and ``hsf scan`` print: the verdict line, then per format its majority order and slots, then
    every anomaly (one line each)."""
    lines = [headline(res)]
    if row_line(res.summary):
        lines.append("  " + str(row_line(res.summary)))
    for fmt, g in res.summary["groups"].items():
        what, order = _order(g)
        lines.append(f"  {fmt}: {g['files']} files, {g['num_slots']} slots, hidden {g['hidden']}, tokens "
                     f"{g['tokens']['min']}–{g['tokens']['max']}; majority {what} {short_list(order['value'], 8)} "
                     f"({order['files']}/{order['of']})")
        labels = g["majority"]["labels"]["value"]
        if labels and any(labels):
            lines.append(f"    majority labels {short_list(labels, 8)}")
        for kind, f in sorted(g["findings"].items(), key=lambda kv: -OUTCOME_RANK.get(
                kv[1].get("severity", "warn"), 0)):
            if f["dataset_wide"]:
                lines.append(f"    ! {f.get('severity', 'warn').upper()} {kind} in {f['files']}/{g['files']} files "
                             f"(dataset-wide, so not listed per file), e.g. {os.path.basename(f['example']['file'])}: "
                             f"{f['example']['message']}")
        for sl in g["slots"][:MAX_LISTED_SLOTS]:
            lines.append(f"    [{sl['index']}] {sl['name']}{' ' + sl['label'] if sl.get('label') else ''}: "
                         f"‖x‖ median {num(sl['median'])} p5–p95 [{num(sl['p05'])}, {num(sl['p95'])}] "
                         f"μ {num(sl['mean'])} σ {num(sl['std'])} over {sl['tokens']} tokens")
        if len(g["slots"]) > MAX_LISTED_SLOTS:
            lines.append(f"    … {len(g['slots']) - MAX_LISTED_SLOTS} more slots")
    for a in res.anomalies[:MAX_LISTED_ANOMALIES]:
        lines.append(f"  {a.kind}: {a.message}")
    if len(res.anomalies) > MAX_LISTED_ANOMALIES:
        lines.append(f"  … {len(res.anomalies) - MAX_LISTED_ANOMALIES} more anomalies (see to_dict())")
    return fit("\n".join(shown_name(line) for line in lines), width)  # a file or slot name cannot split a line


@renders(ScanResult, "html")
def html(res) -> str:
    parts = [f"<div class='hsf-caption'>{badge(res.verdict)} "
             f"<b>{esc(headline(res))}</b></div>"]
    if row_line(res.summary):
        parts.append(f"<div class='hsf-caption hsf-scan-rows'>{esc(row_line(res.summary))}</div>")
    for fmt, g in res.summary["groups"].items():
        what, order = _order(g)
        parts.append(
            f"<div class='hsf-caption'>{esc(fmt)}: {g['files']} files, {g['num_slots']} slots, hidden "
            f"{esc(g['hidden'])}; majority {esc(what)} {esc(short_list(order['value'], 8))} "
            f"({order['files']}/{order['of']} files)</div>")
        wide = [[kind, f"{f['files']}/{g['files']}", os.path.basename(f["example"]["file"]),
                 f["example"]["message"]] for kind, f in g["findings"].items() if f["dataset_wide"]]
        if wide:
            parts.append(html_table(["dataset-wide finding", "files", "example", "message"], wide,
                                    cls="hsf-scan-findings"))
        rows = [[sl["index"], sl["name"], sl.get("label") or "—", sl.get("role") or "—", sl["files"],
                 sl["tokens"], num(sl["mean"]), num(sl["std"]), num(sl["p05"]), num(sl["median"]), num(sl["p95"]),
                 num(sl["max"]), f"{sl['nan']}/{sl['inf']}",
                 "—" if not sl.get("outliers") else sl["outliers"]["count"]] for sl in g["slots"]]
        parts.append(html_table(["#", "slot", "label", "role", "files", "tokens", "‖x‖ mean", "std", "p5",
                                 "median", "p95", "max", "NaN/Inf", "outlier files"], rows, cls="hsf-scan-slots"))
    if res.anomalies:
        shown = res.anomalies[:MAX_LISTED_ANOMALIES]
        parts.append(html_table(
            ["file", "kind", "slot", "message"],
            [[os.path.basename(a.file), a.kind, "—" if a.slot is None else a.slot, a.message]
             for a in shown], cls="hsf-scan-anomalies"))
        if len(res.anomalies) > len(shown):
            parts.append(f"<div class='hsf-caption'>… {len(res.anomalies) - len(shown)} more anomalies</div>")
    else:
        parts.append("<div class='hsf-caption'>no anomalies</div>")
    return "\n".join(parts)
