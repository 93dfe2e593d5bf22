"""Text and HTML views of a ``Fingerprint``: the verdict table first, then the evidence behind it."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from forensics.layers import r_label
from forensics.views.format import (
    TEXT_WIDTH,
    Raw,
    badge,
    columns,
    esc,
    finding_verdict,
    fit,
    html_table,
    short_list,
    worst,
)

if TYPE_CHECKING:  # pragma: no cover
    from forensics.analysis.fingerprint.core import Fingerprint

FINDING_VERDICT = {"reordered": "fail", "duplicate": "fail", "missing_embedding": "fail", "postnorm": "fail",
                   "prenorm": "fail", "off_by_one": "fail", "wrong_layer": "fail", "nonfinite": "fail",
                   "count_mismatch": "warn", "unexpected_embedding": "warn",
                   "no_reference_match": "warn", "all_zero": "fail", "few_tokens": "warn"}


MAX_MATRIX_SLOTS = 8  # print the k×k distance matrix up to this many slots (HTML: up to 16)


def _r(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.2f}·L"
    return r_label(v)


def _head(fp: Fingerprint) -> str:
    c = fp.capture
    L = f", L = {fp.num_layers}" if fp.num_layers else ", L unknown (r≈ is a depth fraction)"
    exp = ""
    if fp.expected is not None:
        exp = f"; expected {short_list([r_label(r) for r in fp.expected], 8)} ({fp.expected_source})"
    ex = f"; exact mode vs {os.path.basename(str(fp.exact['source']))}" if fp.exact else ""
    return (f"{os.path.basename(c.path)}: {c.format}, {c.num_tokens} tokens, hidden {c.hidden_size}, "
            f"{len(fp.slots)} slots{L}{exp}{ex}")


def verdict(fp: Fingerprint) -> str:
    """The file's verdict: the worst of its findings' severities, pass without any."""
    return worst([finding_verdict(f, FINDING_VERDICT) for f in fp.findings]) if fp.findings else "pass"


def headline(fp: Fingerprint) -> str:
    """One line: file, VERDICT, and what decided it (the failing findings, or the labels in depth order)."""
    v = verdict(fp)
    name = os.path.basename(fp.capture.path)
    if v == "pass":
        in_order = list(fp.depth_order) == list(range(len(fp.slots)))
        labels = [sf.label or (r_label(sf.r_exact) if sf.r_exact is not None else sf.role) for sf in fp.slots]
        order = "stored in depth order" if in_order else "depth order " + short_list(fp.depth_order, 8)
        return f"{name}: PASS — {len(fp.slots)} slots, {order}: {short_list(labels, 8)[1:-1]}"
    worst = [f.kind for f in fp.findings if finding_verdict(f, FINDING_VERDICT) == v]
    return f"{name}: {v.upper()} — {', '.join(dict.fromkeys(worst))}"


SLOT_HEADERS = ["#", "slot", "role", "conf", "rank", "r≈", "label", "r exact", "decided by"]
SLOT_DROP = (4, 7, 5, 2)  # under the width: rank, r exact, r≈, role go first (label and the deciding signal stay)


def slot_lines(fp: Fingerprint, width: int | None = None) -> list[str]:
    """One line per slot: index, name, role, confidence, rank, r≈, label, exact r, deciding signal."""
    rows = [[f"[{sf.index}]", sf.name, sf.role, f"{sf.confidence:.2f}", sf.depth_rank, _r(sf.r_estimate),
             sf.label or "—", _r(sf.r_exact), sf.decided_by] for sf in fp.slots]
    drop = SLOT_DROP if any(sf.r_exact is not None for sf in fp.slots) else (7, *SLOT_DROP)
    return columns(SLOT_HEADERS, rows, width=width or 10**6, right=(3, 4), drop=drop)


def text(fp: Fingerprint, width: int | None = None) -> str:
    """What ``repr`` and ``hsf fingerprint`` print: the verdict line, its findings, one line per slot (folded to
    ``width`` columns when given; ``repr`` keeps one line per slot)."""
    lines = [headline(fp), "  " + _head(fp).split(": ", 1)[1] + f"; order confidence {fp.order_confidence:.2f}"]
    for f in fp.findings:
        slots = f" (slots {', '.join(map(str, f.slots))})" if getattr(f, "slots", None) else ""
        lines.append(f"  {finding_verdict(f, FINDING_VERDICT).upper()} {f.kind}{slots}: {f.message}")
    lines += slot_lines(fp, width)
    return fit("\n".join(lines), width) if width else "\n".join(lines)


def explain(fp: Fingerprint, width: int = TEXT_WIDTH) -> str:
    """The evidence behind the verdict: distance matrix, depth-order evidence, every signal of every slot."""
    lines = ["  (r≈ coarse data-only depth from the slot's rank; label = expected list assigned in depth order; "
             "r exact = reference match, --model)"]
    k = len(fp.slots)
    if 1 < k <= MAX_MATRIX_SLOTS:
        lines.append("  masked angular distance (0 = same direction; sinks dropped, massive dims masked):")
        lines.append("        " + "".join(f"{f'[{j}]':>7}" for j in range(k)))
        for i in range(k):
            lines.append(f"    [{i}] " + "".join(f"{fp.similarity[i, j]:7.3f}" for j in range(k)))
    lines.append("  evidence:")
    for e in fp.order_evidence:
        lines.append(f"    order  {e.line()}")
    for sf in fp.slots:
        lines.append(f"    [{sf.index}] {sf.name} → {sf.role} ({sf.confidence:.2f})")
        lines += [f"      {e.line()}" for e in sf.evidence]
    return fit("\n".join(lines), width)


def html(fp: Fingerprint) -> str:
    """Escaped HTML fragment: verdict table, findings, order evidence, per-slot evidence tables."""
    rows = []
    for sf in fp.slots:
        declared = fp.stats.slots[sf.index].declared_r
        rows.append([sf.index, sf.name, Raw(f"<b>{esc(sf.role)}</b>"), f"{sf.confidence:.2f}", sf.depth_rank,
                     _r(sf.r_estimate), sf.label or "—", _r(sf.r_exact),
                     r_label(declared) if declared is not None else "—", sf.decided_by])
    out = [f"<div class='hsf-caption'><b>{esc(_head(fp))}</b></div>",
           f"<div>depth order (shallow → deep): {esc(' → '.join(str(i) for i in fp.depth_order))} "
           f"(order confidence {fp.order_confidence:.2f})</div>",
           html_table(["#", "slot", "role", "confidence", "depth rank", "r≈", "label", "r exact", "declared",
                       "decided by"], rows, cls="hsf-fingerprint")]
    if fp.findings:
        out.append(html_table(["verdict", "finding", "slots", "message"],
                              [[badge(finding_verdict(f, FINDING_VERDICT)), f.kind, ", ".join(map(str, f.slots)),
                                f.message] for f in fp.findings], cls="hsf-findings"))
    else:
        out.append(f"<div>{badge('pass')} no findings</div>")
    k = len(fp.slots)
    if 1 < k <= 2 * MAX_MATRIX_SLOTS:
        out.append("<div>masked angular distance (0 = same direction; sinks dropped, massive dims masked)</div>" +
                   html_table([""] + [f"[{j}]" for j in range(k)],
                              [[f"[{i}]"] + [f"{fp.similarity[i, j]:.3f}" for j in range(k)] for i in range(k)],
                              cls="hsf-similarity"))
    ev_rows = [["order", e.signal, e.value, e.threshold if e.threshold is not None else "—", e.verdict]
               for e in fp.order_evidence]
    for sf in fp.slots:
        ev_rows += [[f"[{sf.index}] {sf.name}", e.signal, e.value, e.threshold if e.threshold is not None else "—",
                     e.verdict] for e in sf.evidence]
    out.append("<details><summary>evidence</summary>" +
               html_table(["slot", "signal", "value", "threshold", "verdict"], ev_rows, cls="hsf-evidence") +
               "</details>")
    return "<div class='hsf-fingerprint-block'>" + "".join(out) + "</div>"
