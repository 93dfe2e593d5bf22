"""Text and HTML of the draft probe (ProbeResult): what __repr__, _repr_html_, the CLI and the report show.

Everything decided (verdict, findings, the served-vs-best cost) is read from the result; nothing is decided here.
"""

from __future__ import annotations

import os

from forensics.analysis.probe import TARGET_VERIFIER, ProbeResult
from forensics.display import renders
from forensics.views.format import (
    TEXT_WIDTH,
    badge,
    columns,
    count,
    esc,
    fit,
    headline_word,
    html_table,
    num,
    pct,
    shown_name,
)

BLOCKS = " ▁▂▃▄▅▆▇█"


def bars(rates: list[float]) -> str:
    """Per-position acceptance as one block character per position (full block = 100 %).

    >>> bars([1.0, 0.5, 0.0])
    '█▄ '
    """
    return "".join(BLOCKS[max(0, min(8, round(8 * a)))] for a in rates)


def _ci(ci) -> str:
    return "—" if ci is None else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


@renders(ProbeResult, "table")
def table(res) -> list[list[str]]:
    """One line per wiring (candidates ranked, then the controls marked ``ctrl``)."""
    out = []
    for i, r in enumerate(res.candidates):
        out.append([str(i + 1), r.label, f"{r.acceptance_length:.2f}", _ci(r.acceptance_length_ci),
                    bars(r.acceptance) + " " + "/".join(f"{100 * a:.0f}" for a in r.acceptance) + "%",
                    pct(r.top1), f"[{100 * r.top1_ci[0]:.1f}, {100 * r.top1_ci[1]:.1f}]", pct(r.topk), str(r.n),
                    ", ".join(r.tags)])
    for r in res.controls:
        out.append(["ctrl", r.label, f"{r.acceptance_length:.2f}", _ci(r.acceptance_length_ci),
                    bars(r.acceptance) + " " + "/".join(f"{100 * a:.0f}" for a in r.acceptance) + "%",
                    pct(r.top1), f"[{100 * r.top1_ci[0]:.1f}, {100 * r.top1_ci[1]:.1f}]", pct(r.topk), str(r.n),
                    ", ".join(r.tags)])
    return out


def headers(res) -> list[str]:
    return ["rank", "wiring", "accept len", "95% CI", "per position", "top-1", "95% CI", f"top-{res.topk}", "n",
            "tags"]


def reason(res) -> str:
    """The finding behind the verdict (the first fail, else the first one that leaves it undecided)."""
    order = [f for f in res.findings if f.severity.value == "fail"] + \
        [f for f in res.findings if f.kind in ("probe_no_interval", "probe_near_controls", "probe_tie")]
    return order[0].message if order else "clear winner"


@renders(ProbeResult, "headline")
def headline(res) -> str:
    """One line: the verdict, the best wiring with its acceptance length and interval, and why."""
    b = res.best
    if not b:
        return f"probe {os.path.basename(os.path.normpath(res.draft['path']))}: no wiring scored"
    return (f"probe: {headline_word(res.verdict)} — best wiring {b.label}: acceptance length "
            f"{b.acceptance_length:.2f} {_ci(b.acceptance_length_ci)} at k = {res.steps} (top-1 {pct(b.top1)}); "
            f"{reason(res)}")


def served_line(res) -> str | None:
    """The served-vs-best cost line (``--engine``), or None."""
    s = res.served
    if s is None:
        return None
    eng = s.engine + (f" {s.version}" if s.version else "")
    if s.acceptance_length is None:
        return (f"served by {eng}: not scored ({s.why}); best {s.best_label} acceptance length "
                f"{s.best_acceptance_length:.2f}, expected speed-up {s.speedup_best:.2f}×")
    return (f"served by {eng}: {s.label} acceptance length {s.acceptance_length:.2f} vs best {s.best_label} "
            f"{s.best_acceptance_length:.2f} → expected speed-up {s.speedup_served:.2f}× vs {s.speedup_best:.2f}× "
            f"(served/best {num(s.ratio)}; cost model τ / (1 + k·c), k = {s.steps}, c = {num(s.draft_cost)} "
            "draft/target cost per token)")


PROBE_DROP = (6, 7, 8, 9)  # too wide: top-1 CI, top-k, n, tags go first


@renders(ProbeResult, "text")
def text(res, width: int = TEXT_WIDTH, verbose: bool = False) -> str:
    """What ``hsf probe`` prints: the verdict and best wiring first, each finding once, the cost line, the ranking
    (one line per wiring, controls last), the ids that make each engine serve the best wiring."""
    what = "verifier prediction" if res.target == TARGET_VERIFIER else "actual next token"
    lines = [headline(res)]
    said = [p["caveat"] for p in (res.ids_per_engine or {}).values() if p.get("caveat")]
    lines += [f"  {f.severity.value.upper()} {f.message}" for f in res.findings
              if f.severity.value != "info" and not any(c in f.message or f.message in c for c in said)]
    sl = served_line(res)
    if sl:
        lines.append(f"  {sl}")
    lines.append(f"  {len(res.candidates)} wirings + {len(res.controls)} controls on {count(len(res.files), 'file')}, "
                 f"{res.positions} positions, chains of k = {res.steps}; target = {what} ({res.target_source}); "
                 f"embedding from {res.embed_source}; intervals: 95% t over {res.units} units ({res.ci_unit})")
    lines += columns(headers(res), table(res), width=width, right=(0, 2, 5, 7, 8), drop=PROBE_DROP)
    plans = res.ids_per_engine or {}
    caveats = list(dict.fromkeys(p["caveat"] for p in plans.values() if p.get("caveat")))
    for eng, plan in plans.items():
        ids = plan["ids"] if plan["ids"] is not None else "impossible"
        lines.append(f"  {eng}: ids {ids}" + (f" under {plan['key']}" if plan.get("key") else "")
                     + (f"  (caveat {caveats.index(plan['caveat']) + 1})" if plan.get("caveat") else ""))
    lines += [f"  caveat {k + 1}: {c}" for k, c in enumerate(caveats)]
    if verbose:
        lines += [f"  note: {f.message}" for f in res.findings if f.severity.value == "info"]
        lines += [f"  note: {n}" for n in res.notes]
    return fit("\n".join(shown_name(line) for line in lines), width)  # a file name cannot split a line


@renders(ProbeResult, "explain")
def explain(res) -> str:
    """The ranking with the notes behind it (how the declared wiring was read, skipped files)."""
    return text(res, verbose=True)


@renders(ProbeResult, "html")
def html(res) -> str:
    what = "verifier prediction" if res.target == TARGET_VERIFIER else "actual next token"
    parts = [f"<div class='hsf-probe'><p>{badge(res.verdict)} <b>Draft probe</b> {esc(res.draft['path'])}: "
             f"greedy chains of k = {res.steps}, target = {esc(what)} ({esc(res.target_source)}), embedding from "
             f"{esc(res.embed_source)}, {res.positions} positions in {count(len(res.files), 'file')}; intervals "
             f"95% t over {res.units} units ({esc(res.ci_unit)}). Controls are greyed.</p>"]
    rows = table(res)
    body = html_table(headers(res), rows)
    for r in res.controls:  # grey the control rows (their label is unique in the table)
        body = body.replace(f"<td>{esc(r.label)}</td>", f"<td style='color:#888888'>{esc(r.label)}</td>")
    parts.append(body)
    if res.best:
        parts.append(f"<p>{badge(res.verdict)} best wiring <b>{esc(res.best.label)}</b> (r = {esc(res.best.wiring)}): "
                     f"{esc(reason(res))}</p>")
    sl = served_line(res)
    if sl:
        parts.append(f"<p>{esc(sl)}</p>")
    if res.ids_per_engine:
        parts.append(html_table(["engine", "ids", "key", "caveat"],
                                [[e, p["ids"] if p["ids"] is not None else "impossible", p.get("key") or "",
                                  p.get("caveat") or ""] for e, p in res.ids_per_engine.items()]))
    parts += [f"<p>{badge(f.severity)} {esc(f.message)}</p>" for f in res.findings if f.severity.value != "info"]
    parts += [f"<p class='hsf-note'>{esc(n)}</p>" for n in res.notes]
    return "".join(parts) + "</div>"
