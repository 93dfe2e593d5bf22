"""Figures of dataset-level and wiring results: the audit's fc slice diagram and the dataset scan.

Pure functions like the rest of :mod:`forensics.views.plots` (which re-exports them): ``AuditResult`` /
``ScanResult`` in, a new ``Figure`` out, drawing only numbers the result already holds.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from forensics.errors import escape
from forensics.layers import r_label
from forensics.views.plots.slots import BAD_COLOR, OK_COLOR, UNKNOWN_COLOR, _figure, slot_colors

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

MAX_MARKED_ANOMALY_FILES = 40  # anomalous files marked on the per-file plot (the anomaly table lists all)


AUDIT_TITLE = "EAGLE-3 fc input slices: trained vs served"


@dataclass(frozen=True)
class SliceRow:
    """One fc input slice as :func:`audit_slices` draws it: trained and served r labels ("?" unknown), the
    colour (same r, mismatch, cannot tell) and the caption under the arrow."""

    trained: str
    served: str
    color: str
    caption: str


def audit_slice_rows(audit: Any) -> list[SliceRow]:
    """The slices of ``AuditResult.slices`` as drawn."""
    out = []
    for s in audit.slices:
        tr, sv, ok = s.trained_r, s.served_r, s.ok
        color = UNKNOWN_COLOR if ok is None else (OK_COLOR if ok else BAD_COLOR)
        mark = "✓" if ok else ("✗" if ok is not None else "?")
        out.append(SliceRow(r_label(tr) if tr is not None else "?", r_label(sv) if sv is not None else "?", color,
                            f"{mark} {s.slice}"))
    return out


def audit_slices(audit: Any, title: str | None = None) -> Figure:
    """The audit's fc slice diagram: per input slice of the draft's fc, trained r (top) vs served r (bottom).

    Green = same r, vermillion = mismatch, grey = cannot tell. Reads ``AuditResult.slices`` only.
    """
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    slices = list(audit.slices)
    fig = _figure(height=2.6)
    ax = fig.add_subplot()
    ax.set_axis_off()
    verdict = audit.wiring
    ax.set_title(f"{title or AUDIT_TITLE} — verdict: {verdict}", fontsize=10)
    if not slices:
        ax.text(0.5, 0.5, "no slice information (the audit could not map fc slices)", ha="center", va="center",
                transform=ax.transAxes, color="#555555")
        return fig
    n = len(slices)
    ax.set_xlim(-1.6, n)
    ax.set_ylim(-0.2, 2.3)
    ax.text(-1.5, 1.75, "trained", fontsize=9, va="center", weight="bold")
    ax.text(-1.5, 0.35, "served", fontsize=9, va="center", weight="bold")
    for j, sl in enumerate(audit_slice_rows(audit)):
        color = sl.color
        for y, text in ((1.5, sl.trained), (0.1, sl.served)):
            ax.add_patch(FancyBboxPatch((j + 0.1, y), 0.8, 0.5, boxstyle="round,pad=0.02", facecolor=color,
                                        alpha=0.25, edgecolor=color, lw=1.5, gid=f"slice-{j}-{'t' if y > 1 else 's'}"))
            ax.text(j + 0.5, y + 0.25, text, ha="center", va="center", fontsize=10,
                    weight="bold")
        ax.add_patch(FancyArrowPatch((j + 0.5, 1.48), (j + 0.5, 0.64), arrowstyle="-|>", mutation_scale=10,
                                     color=color, lw=1.2))
        ax.text(j + 0.55, 1.06, sl.caption, ha="left",
                va="center", fontsize=7, color="#333333")
    return fig


# ------------------------------------------------------------------------------------------------- scan
def _group(scan: Any, fmt: str | None) -> tuple[str, dict]:
    groups = scan.summary.get("groups") or {}
    if not groups:
        raise ValueError("the scan found no readable capture (no format group to plot)")
    if fmt is None:
        fmt = max(groups, key=lambda k: groups[k].get("files", 0))
    return fmt, groups[fmt]


def _slot_name(sl: dict) -> str:
    return f"{sl['index']}: {sl.get('label') or sl.get('name')}"


def scan_norms(scan: Any, fmt: str | None = None, title: str | None = None) -> Figure:
    """Dataset per-slot norm distribution of one format group (box = p25–p75, whiskers p5–p95, line = median,
    dot = max), from ``ScanResult.summary['groups'][fmt]['slots']`` — the scan's streaming quantiles."""
    fmt, g = _group(scan, fmt)
    slots = g["slots"]
    fig = _figure(width=min(7.0, 2.6 + 1.0 * len(slots)))
    ax = fig.add_subplot()
    colors = slot_colors(len(slots))
    boxes = [{"label": _slot_name(sl), "whislo": sl["p05"], "q1": sl["p25"], "med": sl["median"], "q3": sl["p75"],
              "whishi": sl["p95"], "fliers": []} for sl in slots]
    art = ax.bxp(boxes, showfliers=False, patch_artist=True, widths=0.5)
    for patch, c in zip(art["boxes"], colors, strict=True):
        patch.set_facecolor(c)
        patch.set_alpha(0.45)
    for i, m in enumerate(art["medians"]):
        m.set_color("black")
        m.set_gid(f"scan-median-{i}")
    ax.scatter(range(1, len(slots) + 1), [sl["max"] for sl in slots], marker="^", color="#555555", s=18, zorder=4,
               label="max", gid="scan-max")
    ax.set_yscale("log")
    ax.set_ylabel("per-token ‖x‖₂ over all files (log)")
    ax.tick_params(axis="x", labelsize=8)
    ax.legend(fontsize=7, loc="best")
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(title or f"Dataset norms per slot — {fmt}: {g['files']} files, {slots[0]['tokens'] if slots else 0}"
                 " tokens/slot", fontsize=10)
    return fig


def scan_file_medians(scan: Any, fmt: str | None = None, title: str | None = None) -> Figure:
    """Median token norm of every slot, file by file (log axis); files with anomalies marked ✕ on top.

    Reads ``ScanResult.rows[].slots[].norm.median`` and ``ScanResult.anomalies``; a reordered or NaN file
    shows as a jump in one or more slot lines at its x position.
    """
    fmt, g = _group(scan, fmt)
    rows = [r for r in scan.rows if r.get("format") == fmt and not r.get("error")]
    k = max((len(r["slots"]) for r in rows), default=0)
    fig = _figure()
    ax = fig.add_subplot()
    colors = slot_colors(k)
    names = {sl["index"]: _slot_name(sl) for sl in g["slots"]}
    for i in range(k):
        xs, ys = [], []
        for x, r in enumerate(rows):
            if i < len(r["slots"]):
                v = (r["slots"][i].get("norm") or {}).get("median")
                if v is not None and math.isfinite(v) and v > 0:
                    xs.append(x)
                    ys.append(v)
        ax.plot(xs, ys, marker="o", ms=3, lw=1, color=colors[i], label=names.get(i, f"slot {i}"),
                gid=f"scan-medians-{i}")
    bad = {a.file for a in scan.anomalies}
    marked = [x for x, r in enumerate(rows) if r["path"] in bad][:MAX_MARKED_ANOMALY_FILES]
    for x in marked:
        ax.axvline(x, color=BAD_COLOR, alpha=0.35, lw=4, zorder=0)
    if marked:
        ax.scatter(marked, [1.02] * len(marked), transform=ax.get_xaxis_transform(), marker="x", color=BAD_COLOR,
                   s=30, clip_on=False, label="file with anomaly", gid="scan-anomalies")
    ax.set_yscale("log")
    ax.set_xlabel(f"file (scan order; {len(rows)} readable {fmt} files)")
    ax.set_ylabel("median token ‖x‖₂ (log)")
    if len(rows) <= 12:
        ax.set_xticks(range(len(rows)), [escape(os.path.basename(r["path"])) for r in rows], rotation=30,
                      ha="right", fontsize=7)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_title(title or f"Per-file median norm per slot — {fmt}", fontsize=10, pad=12)
    return fig


# ------------------------------------------------------------------------------------------------ probe
MAX_PROBE_ROWS = 12  # wirings shown (best first); the rest are in ProbeResult.rows


def probe_wirings(probe: Any, top: int = MAX_PROBE_ROWS, title: str | None = None) -> Figure:
    """The draft probe's ranking: mean acceptance length per candidate wiring with its 95 % interval.

    Reads ``ProbeResult.rows`` (candidates best first, then the controls, greyed); the best wiring is green,
    the one the data/config declares is outlined.
    """
    bars = probe_bars(probe, top)
    fig = _figure(height=max(2.4, 0.32 * len(bars.labels) + 1.2))
    ax = fig.add_subplot()
    if not bars.labels:
        ax.text(0.5, 0.5, "no wiring was scored", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    y = list(range(len(bars.labels)))
    colors = [CONTROL_COLOR if c else OK_COLOR if k == 0 else UNKNOWN_COLOR
              for k, c in zip(y, bars.control, strict=True)]
    widths = [1.5 if d else 0.0 for d in bars.declared]
    ax.barh(y, bars.length, left=1.0, xerr=[bars.err_lo, bars.err_hi], color=colors, edgecolor="black",
            linewidth=widths, alpha=0.8, capsize=2, gid="probe-length")
    ax.set_yticks(y, bars.labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(bars.xlabel)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title or PROBE_TITLE, fontsize=10)
    return fig


PROBE_TITLE = "Draft probe: which wiring does the draft work with?"
CONTROL_COLOR = "#bbbbbb"  # the shift and random controls: greyed


@dataclass(frozen=True)
class ProbeBars:
    """What :func:`probe_wirings` draws (candidates best first, then the controls): mean acceptance length minus 1
    (bars start at 1, the length with nothing accepted), the 95 % interval as distances below and above it, row
    labels, whether each row is the declared wiring or a control, and the axis label."""

    length: list[float]
    err_lo: list[float]
    err_hi: list[float]
    labels: list[str]
    declared: list[bool]
    control: list[bool]
    xlabel: str


def probe_bars(probe: Any, top: int = MAX_PROBE_ROWS) -> ProbeBars:
    """The bars of :func:`probe_wirings` from a ``ProbeResult`` (its first ``top`` candidates, then its controls)."""
    rows = [r for r in probe.rows if r.control is None][:top] + [r for r in probe.rows if r.control is not None]
    declared = ["declared" in r.tags for r in rows]
    target = "verifier" if probe.target == "verifier" else "next token"
    xlabel = (f"mean acceptance length at k = {probe.steps} against the {target}, 95 % interval; "
              f"n = {rows[0].n} positions") if rows else ""
    cis = [r.acceptance_length_ci or [r.acceptance_length, r.acceptance_length] for r in rows]
    return ProbeBars(length=[r.acceptance_length - 1 for r in rows],
                     err_lo=[r.acceptance_length - c[0] for r, c in zip(rows, cis, strict=True)],
                     err_hi=[c[1] - r.acceptance_length for r, c in zip(rows, cis, strict=True)],
                     labels=[r.label + ("  (declared)" if d else "") for r, d in zip(rows, declared, strict=True)],
                     declared=declared, control=[r.control is not None for r in rows], xlabel=xlabel)

