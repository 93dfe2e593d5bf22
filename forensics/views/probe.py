"""Text and HTML of the draft probe (ProbeResult): what __repr__, _repr_html_, the CLI and the report show."""

from __future__ import annotations

import os

from forensics.analysis.probe import TARGET_VERIFIER
from forensics.views.format import TEXT_WIDTH, badge, columns, esc, fit, html_table, pct


def table(res) -> list[list[str]]:
    return [[str(i + 1), r["label"], f"{100 * r['top1']:.1f}%",
             f"[{100 * r['top1_ci'][0]:.1f}, {100 * r['top1_ci'][1]:.1f}]", f"{100 * r['topk']:.1f}%",
             str(r["n"]), ", ".join(r["tags"])] for i, r in enumerate(res.rows)]


def headline(res) -> str:
    """One line: the best wiring, its top-1 agreement with its 95 % interval, and whether it clearly wins."""
    b = res.best
    if not b:
        return f"probe {os.path.basename(os.path.normpath(res.draft['path']))}: no wiring scored"
    declared = next((r for r in res.rows if "declared" in r["tags"]), None)
    beaten = declared is not None and declared is not b and declared["top1_ci"][1] < b["top1_ci"][0]
    word = "MISMATCH" if beaten else ("PASS" if res.clear_winner else "WARN")
    why = (f"the declared wiring {declared['label']} scores {pct(declared['top1'])}, clearly below"
           if beaten else ("clear winner" if res.clear_winner else "not clearly ahead of the runner-up"))
    return (f"probe: {word} — best wiring {b['label']}: top-1 {pct(b['top1'])} "
            f"[{pct(b['top1_ci'][0])}, {pct(b['top1_ci'][1])}]; {why}")


PROBE_DROP = (5, 4, 6)  # too wide: n, top-k, tags go first


def text(res, width: int = TEXT_WIDTH, verbose: bool = False) -> str:
    """What ``hsf probe`` prints: the best wiring and verdict first, the ranking (one line per wiring), the ids
    that make each engine serve the best wiring; each caveat once."""
    what = "verifier prediction" if res.target == TARGET_VERIFIER else "actual next token"
    lines = [headline(res)]
    said = [p["caveat"] for p in (res.ids_per_engine or {}).values() if p.get("caveat")]
    lines += [f"  WARN {w}" for w in res.warnings if not any(c in w or w in c for c in said)]
    lines.append(f"  {len(res.rows)} wirings on {len(res.files)} file(s), {res.positions} positions; "
                 f"target = {what} ({res.target_source}); embedding from {res.embed_source}")
    hdr = ["rank", "wiring", "top-1", "95% CI", f"top-{res.topk}", "n", "tags"]
    lines += columns(hdr, res.table(), width=width, right=(0, 2, 4, 5), drop=PROBE_DROP)
    plans = res.ids_per_engine or {}
    caveats = list(dict.fromkeys(p["caveat"] for p in plans.values() if p.get("caveat")))
    for eng, plan in plans.items():
        ids = plan["ids"] if plan["ids"] is not None else "impossible"
        lines.append(f"  {eng}: ids {ids}" + (f" under {plan['key']}" if plan.get("key") else "")
                     + (f"  (caveat {caveats.index(plan['caveat']) + 1})" if plan.get("caveat") else ""))
    lines += [f"  caveat {k + 1}: {c}" for k, c in enumerate(caveats)]
    if verbose:
        lines += [f"  note: {n}" for n in res.notes]
    return fit("\n".join(lines), width)


def html(res) -> str:

    what = "verifier prediction" if res.target == TARGET_VERIFIER else "actual next token"
    parts = [f"<div class='hsf-probe'><p><b>Draft probe</b> {esc(res.draft['path'])}: target = {esc(what)} "
             f"({esc(res.target_source)}), embedding from {esc(res.embed_source)}, "
             f"{res.positions} positions in {len(res.files)} file(s).</p>",
             html_table(["rank", "wiring", "top-1", "95% CI", f"top-{res.topk}", "n", "tags"], res.table())]
    if res.best:
        parts.append(f"<p>{badge('pass' if res.clear_winner else 'warn')} best wiring "
                     f"<b>{esc(res.best['label'])}</b> (r = {esc(res.best['wiring'])})</p>")
    if res.ids_per_engine:
        parts.append(html_table(["engine", "ids", "key", "caveat"],
                                [[e, p["ids"] if p["ids"] is not None else "impossible", p.get("key") or "",
                                  p.get("caveat") or ""] for e, p in res.ids_per_engine.items()]))
    parts += [f"<p>{badge('warn')} {esc(w)}</p>" for w in res.warnings]
    parts += [f"<p class='hsf-note'>{esc(n)}</p>" for n in res.notes]
    return "".join(parts) + "</div>"
