"""Text and HTML of the draft probe (ProbeResult): what __repr__, _repr_html_, the CLI and the report show."""

from __future__ import annotations

import os

from forensics.analysis.probe import TARGET_VERIFIER
from forensics.views.format import badge, esc, html_table


def table(res) -> list[list[str]]:
    return [[str(i + 1), r["label"], f"{100 * r['top1']:.1f}%",
             f"[{100 * r['top1_ci'][0]:.1f}, {100 * r['top1_ci'][1]:.1f}]", f"{100 * r['topk']:.1f}%",
             str(r["n"]), ", ".join(r["tags"])] for i, r in enumerate(res.rows)]


def text(res) -> str:
    what = "verifier prediction" if res.target == TARGET_VERIFIER else "actual next token"
    head = (f"probe {os.path.basename(os.path.normpath(res.draft['path']))}: {len(res.rows)} wirings on "
            f"{len(res.files)} file(s), {res.positions} positions; target = {what} "
            f"({res.target_source}); embedding from {res.embed_source}")
    hdr = ["rank", "wiring", "top-1", "95% CI", f"top-{res.topk}", "n", "tags"]
    rows = [hdr] + res.table()
    widths = [max(len(r[i]) for r in rows) for i in range(len(hdr))]
    lines = [head] + ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if res.best:
        lines.append(f"best: {res.best['label']} (r = {res.best['wiring']})")
    for eng, plan in (res.ids_per_engine or {}).items():
        ids = plan["ids"] if plan["ids"] is not None else "impossible"
        lines.append(f"  {eng}: ids {ids}" + (f" under {plan['key']}" if plan.get("key") else "")
                     + (f"  ({plan['caveat']})" if plan.get("caveat") else ""))
    lines += [f"warning: {w}" for w in res.warnings] + [f"note: {n}" for n in res.notes]
    return "\n".join(lines)


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
