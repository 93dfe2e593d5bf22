"""Text and HTML of statistics results (SlotStats, CaptureStats): __repr__, _repr_html_, CLI and report."""

from __future__ import annotations

import os

from forensics.analysis.stats import SINK_RATIO, CaptureStats, NormSummary, SlotStats
from forensics.display import renders
from forensics.layers import r_label
from forensics.views.format import columns, count, esc, fit, html_table, num, short_list, shown_name

HEADERS = ["#", "slot", "shape", "dtype", "declared", "‖x‖ mean", "std", "median", "p5", "p95", "token 0",
            "last", "mean excl. tok0", "flags"]



@renders(NormSummary, "text")
def norm_summary_text(res) -> str:
    return (f"NormSummary(n={res.n} mean={num(res.mean)} std={num(res.std)} median={num(res.median)} "
            f"p5–p95=[{num(res.p05)}, {num(res.p95)}] min={num(res.min)}@{res.min_pos} "
            f"max={num(res.max)}@{res.max_pos})")


@renders(SlotStats, "line")
def slot_line(res) -> str:
    n = res.norm
    s = (f"[{res.index}] {res.name} {list(res.shape)} {res.dtype} ‖x‖ med={num(n.median)} "
         f"μ={num(n.mean)} σ={num(n.std)} p5–p95=[{num(n.p05)}, {num(n.p95)}] "
         f"tok0={num(res.first)} ({num(res.first_ratio)}× med)")
    if res.sinks:
        s += f" sinks@{short_list(res.sinks)} (≥{SINK_RATIO:g}× med)"
    if res.massive_tokens:
        top = max(t["max_abs"] for t in res.massive_tokens)
        s += (f" massive: {res.num_massive_tokens} tok |x|max={num(top)} > {num(res.massive_threshold)}, "
              f"dims {short_list(res.massive_dims)}")
    if res.nan:
        s += f" NaN×{res.nan}!"
    if res.inf:
        s += f" Inf×{res.inf}!"
    return s


@renders(SlotStats, "html")
def slot_html(res) -> str:
    n = res.norm
    rows = [["‖x‖ (all tokens)", num(n.mean), num(n.std), num(n.median), num(n.p05), num(n.p95), num(n.mad),
             f"{num(n.min)} @{n.min_pos}", f"{num(n.max)} @{n.max_pos}"]]
    for label, m in (("‖x‖ excl. token 0", res.norm_excl_first), ("‖x‖ excl. sinks", res.norm_excl_sinks)):
        rows.append([label, num(m.mean), num(m.std), num(m.median), num(m.p05), num(m.p95), num(m.mad),
                     f"{num(m.min)} @{m.min_pos}", f"{num(m.max)} @{m.max_pos}"])
    head = (f"<div class='hsf-caption'><b>{esc(res.name)}</b> {esc(list(res.shape))} {esc(res.dtype)} — "
            f"token 0 {esc(num(res.first))} ({esc(num(res.first_ratio))}× median), last {esc(num(res.last))}"
            f"{'; ' + esc('; '.join(res.flags())) if res.flags() else ''}</div>")
    return head + html_table(["", "mean", "std", "median", "p5", "p95", "MAD", "min", "max"], rows,
                             cls="hsf-slot-stats")


@renders(CaptureStats, "text")
def text(res) -> str:
    head = (f"{os.path.basename(res.path)}: {res.capture.format}, {res.capture.num_tokens} tokens, "
            f"hidden {res.capture.hidden_size}, {count(len(res.slots), 'slot')}")
    return "\n".join([head] + ["  " + s.one_line() for s in res.slots])


def table_rows(res) -> list[list]:
    rows = []
    for s in res.slots:
        n = s.norm
        said = r_label(s.declared_r) if s.declared_r is not None else (s.claimed or "—")
        rows.append([s.index, s.name, "×".join(map(str, s.shape)), s.dtype, said, num(n.mean), num(n.std),
                     num(n.median), num(n.p05), num(n.p95), num(s.first), num(s.last), num(s.norm_excl_first.mean),
                     "; ".join(s.flags()) or "—"])
    return rows


TABLE_DROP = (11, 12, 8, 9, 2, 3)  # too wide: last, mean excl. token 0, p5, p95, shape, dtype go first


@renders(CaptureStats, "table")
def table(res, width: int | None = None) -> str:
    """A plain-text table of the slots (what ``hsf inspect`` prints), headed by file, format and layout; with a
    ``width``, it fits that many columns (less important columns are left out, the flags fold)."""
    width = width or 10**6
    c = res.capture
    head = [f"{c.name}", f"  format {c.format}, {c.num_tokens} tokens, hidden {c.hidden_size}, "
                         f"{count(len(res.slots), 'slot')}" + (f", layout {c.provenance.layout}" if c.provenance.layout
                                                      else "")]
    lines = head + columns(HEADERS, table_rows(res), width=width, right=(0, 5, 6, 7, 8, 9, 10, 11, 12),
                           drop=TABLE_DROP)
    lines += [f"  note: {note}" for note in c.provenance.notes]
    return fit("\n".join(shown_name(line.rstrip()) for line in lines), width)


@renders(CaptureStats, "html")
def html(res) -> str:
    c = res.capture
    layout = f", layout {c.provenance.layout}" if c.provenance.layout else ""
    head = (f"<div class='hsf-caption'><b>{esc(os.path.basename(res.path))}</b> — {esc(c.format)}, "
            f"{c.num_tokens} tokens, hidden {c.hidden_size}{esc(layout)}</div>")
    return head + html_table(HEADERS, table_rows(res), cls="hsf-stats")
