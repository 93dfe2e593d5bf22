"""Text and HTML views of a ``Fingerprint``: the verdict table first, then the evidence behind it."""

from __future__ import annotations

import os
from collections import Counter

from forensics.analysis.claims import SPECULATORS_FORMATS
from forensics.analysis.fingerprint.core import Fingerprint
from forensics.analysis.fingerprint.ladder import LADDER_MATCH_COS, LADDER_MATCH_REL
from forensics.analysis.fingerprint.verdicts import concatenated_cut
from forensics.display import renders
from forensics.findings import Verdict, sort_findings
from forensics.io.layout import unused_metadata
from forensics.layers import r_label
from forensics.views.format import Raw, Shown, badge, columns, count, esc, fit, headline_word, html_table, shown_name

MAX_MATRIX_SLOTS = 8  # print the k×k distance matrix up to this many slots (HTML: up to 16)


def _r(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.2f}·L"
    return r_label(v)


def _v(v) -> str:
    return "—" if v is None else str(v.value).upper()


def _head(fp: Fingerprint) -> str:
    c = fp.capture
    L = f", L = {fp.num_layers}" if fp.num_layers else ", L unknown (r≈ is a depth fraction)"
    exp = ""
    if fp.expected is not None:
        exp = f"; claimed [{', '.join('?' if r is None else r_label(r) for r in fp.expected)}] ({fp.expected_source})"
    ex = ""
    if fp.exact and fp.exact.ran:
        ex = f"; exact mode vs {os.path.basename(str(fp.exact.source))}"
    elif fp.exact:
        ex = "; exact mode could not run (no token ids: give --ids FILE or --text FILE)"
    return (f"{os.path.basename(c.name)}: {c.format}, {c.num_tokens} tokens, hidden {c.hidden_size}, "
            f"{count(len(fp.slots), 'slot')}{L}{exp}{ex}")


def stream_line(s: dict) -> str:
    """One line of a streamed reference's provenance: blocks, shards and bytes read, memory, time."""
    spb = s.get("seconds_per_block")
    return (f"streamed {s['blocks_run']} of {s['num_layers']} blocks ({s['model_type']}, {s['compute_dtype']}, "
            f"first {s['tokens']} tokens) from {len(s['shards_read'])} shards: {s['bytes_read'] / 1e9:.2f} GB read of "
            f"{s['weights_bytes'] / 1e9:.2f} GB, peak RSS {s['peak_rss'] / 1e9:.2f} GB"
            + (f" (budget {s['max_memory'] / 1e9:.2f} GB)" if s.get("max_memory") else "")
            + (f", {spb:.2f} s/block" if spb is not None else "") + f", {s['seconds']:.1f} s")


def tolerance(fp: Fingerprint) -> str:
    """What "exact" means here, with the worst value this file reached: ``within median per-token relative error
    ≤ 0.05 and mean cosine ≥ 0.999; worst here 0.0031`` (``forensics.analysis.fingerprint.ladder``)."""
    rels = [m.ladder["best_rel"] for m in (fp.exact.slots if fp.exact else [])
            if m.ladder and m.ladder.get("match") and m.ladder.get("best_rel") is not None]
    worst = f"; worst here {max(rels):.2g}" if rels else ""
    return (f"within median per-token relative error ≤ {LADDER_MATCH_REL:g} and mean cosine ≥ {LADDER_MATCH_COS:g}"
            f"{worst}")


def identified(fp: Fingerprint) -> list[str] | None:
    """Every slot's label when nothing is claimed, nothing fails and exact mode named every slot, else None."""
    return fp.identified


def verdict_word(fp: Fingerprint) -> str:
    """The headline's first word: the file's outcome (``Fingerprint.outcome``, the word every view writes)."""
    return headline_word(fp.outcome)


# the headline words worst first (the one ranking, forensics.findings.OUTCOME_RANK, plus the two words of an
# unclaimed file: named exactly, or roles and depth order only)
WORDS_WORST_FIRST = ("FAIL", "CANNOT TELL", "WARN", "PASS", "IDENTIFIED", "NO CLAIM")


def files_summary(fps: list[Fingerprint], unreadable: int = 0) -> str:
    """``12 files: 1 FAIL, 3 PASS, 8 NO CLAIM, 1 unreadable (stderr)`` for a multi-file run."""
    counts = Counter(verdict_word(fp) for fp in fps)
    return (f"{len(fps) + unreadable} files: " + ", ".join(f"{counts[w]} {w}" for w in WORDS_WORST_FIRST if counts[w])
            + (f", {unreadable} unreadable (stderr)" if unreadable else ""))


def worst_first(fps: list[Fingerprint]) -> list[Fingerprint]:
    """The fingerprints ordered by headline word, worst first (stable within a word)."""
    return sorted(fps, key=lambda fp: WORDS_WORST_FIRST.index(verdict_word(fp)))


def headline(fp: Fingerprint) -> str:
    """The worst verdict first, then why: the first failing finding, the undecided claims, or that all hold;
    ``IDENTIFIED [embed, L3, L16, L28] (exact)`` when nothing is claimed and exact mode named every slot."""
    v = fp.verdict
    word = fp.outcome
    names = identified(fp)
    if names is not None and word == "identified":
        return f"IDENTIFIED [{', '.join(names)}] (exact: every slot matched the reference forward {tolerance(fp)})"
    fails = [f for f in sort_findings(fp.findings) if f.severity.value == "fail"]
    warns = [f for f in sort_findings(fp.findings) if f.severity.value == "warn"]
    if fails:
        why = f"{fails[0].kind}: {fails[0].message}"
    elif word == "warn":  # a warn finding, nothing failing or undecided: what to look at, then what holds
        why = f"{warns[0].kind}: {warns[0].message}" + (
            "; every claimed slot is what it is claimed to be" if v is Verdict.PASS else
            f"; the reference forward named every slot [{', '.join(names)}]" if names is not None else "")
    elif v is Verdict.CANNOT_TELL:
        open_ = [sf for sf in fp.slots if sf.verdict is Verdict.CANNOT_TELL]
        cut = {sf.index for sf in open_ if concatenated_cut(fp, sf.index) is not None}
        parts = []
        for group, says in (([sf for sf in open_ if sf.index not in cut], "are consistent with the data but not "
                             "proven"), ([sf for sf in open_ if sf.index in cut], "look like several states side by "
                                         "side (see `concatenated`), not one layer: a one-layer claim cannot be "
                                         "checked on them as stored")):
            if group:
                settle = next((sf.settle for sf in group if sf.settle), None)
                parts.append(f"slot(s) {[sf.index for sf in group]} claimed "
                             f"[{', '.join(sf.claim.label for sf in group if sf.claim is not None)}] {says}"
                             + (f"; settle with {settle}" if settle else ""))
        why = "; ".join(parts)
    elif v is Verdict.PASS:
        why = "every claimed slot is what it is claimed to be"
        if fp.exact and fp.exact.ran:
            why += f" (exact: matched the reference forward {tolerance(fp)})"
    else:
        why = "nothing is claimed about these slots: roles and depth order only"
        if fp.capture.format in SPECULATORS_FORMATS and len(fp.slots) > 1 and fp.num_layers is None:
            # the format's claim needs L: said, so that `--model` turning this into a FAIL is no surprise
            why = (f"no claim is checked: {fp.capture.format} claims its last slot is the training target (r = L, the "
                   "last block pre-norm), but the layer count L is unknown (pass --model or --num-layers); roles "
                   "and depth order only")
    src = f" — claims from {fp.claims.source.value}: {fp.claims.detail}" if fp.claims is not None else ""
    return f"{headline_word(word)}: {why}{src}"


SLOT_HEADERS = ["#", "slot", "role", "conf", "rank", "r≈", "label", "r exact", "claimed", "verdict", "decided by"]
# under the width these go first: rank, r exact, r≈, role, claimed (label, verdict and the deciding signal stay)
SLOT_DROP = (4, 7, 5, 2, 8)


def slot_lines(fp: Fingerprint, width: int | None = None) -> list[str]:
    """One line per slot: index, name, role, confidence, rank, r≈, label, exact r, claim, verdict, deciding signal."""
    rows = [[f"[{sf.index}]", sf.name, sf.role, f"{sf.confidence:.2f}", sf.depth_rank, _r(sf.r_estimate),
             sf.label or "—", _r(sf.r_exact), sf.claim.label if sf.claim else "—", _v(sf.verdict), sf.decided_by]
            for sf in fp.slots]
    drop = list(SLOT_DROP)
    if all(sf.r_exact is None for sf in fp.slots):
        drop.insert(0, 7)
    if all(sf.claim is None for sf in fp.slots):
        drop[1:1] = [8, 9]
    return columns(SLOT_HEADERS, rows, width=width or 10**6, right=(3, 4), drop=drop)


@renders(Fingerprint, "text")
def text(fp: Fingerprint, width: int | None = None) -> str:
    """What ``repr`` and ``hsf fingerprint`` print: the verdict headline, the file, its findings, why each failing
    slot fails, then one line per slot (folded to ``width`` when given). The evidence is in
    :func:`explain`."""
    lines = [headline(fp), _head(fp)]
    if fp.claims is None:  # ids saved beside the states are not a claim: said, so the user knows to pass them
        lines += [f"  note: {n}" for n in unused_metadata(fp.capture.provenance.notes)]
    if fp.exact and fp.exact.stream:
        lines.append("  " + stream_line(fp.exact.stream))
    lines += [f"  {f.severity.value.upper()} {f.kind}: {f.message}" for f in sort_findings(fp.findings)]
    lines += [f"  [{sf.index}] {_v(sf.verdict)}: claimed {sf.claim.label if sf.claim else '?'} "
              f"({sf.claim.source.value if sf.claim else '?'}); {sf.verdict_why}"
              for sf in fp.slots if sf.verdict is Verdict.FAIL]
    lines += slot_lines(fp, width)
    text = "\n".join(shown_name(line) for line in lines)  # one line each: a file or slot name cannot split one
    return fit(text, width) if width else text


@renders(Fingerprint, "explain")
def explain(fp: Fingerprint, width: int | None = None) -> str:
    """The evidence behind the verdict: depth order, each claim's verdict, the distance matrix, every signal."""
    lines = ["  depth order (shallow → deep): " + " → ".join(
        f"[{i}]" + (f" {fp.slots[i].label}" if fp.slots[i].label else "") for i in fp.depth_order)
        + f"   (order confidence {fp.order_confidence:.2f})",
        "  (r≈ coarse data-only depth from the slot's rank; label = what the evidence names; claimed = the "
        "claim checked; r exact = reference match, --model)"]
    for sf in fp.slots:
        if sf.verdict is not None:
            lines.append(f"    [{sf.index}] {_v(sf.verdict)}: claimed {sf.claim.label if sf.claim else '?'} "
                         f"({sf.claim.source.value if sf.claim else '?'}); {sf.verdict_why}")
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
    text = "\n".join(shown_name(line) for line in lines)
    return Shown(fit(text, width) if width else text)


@renders(Fingerprint, "html")
def html(fp: Fingerprint) -> str:
    """Escaped HTML fragment: verdict table, findings, order evidence, per-slot evidence tables."""
    rows = []
    for sf in fp.slots:
        declared = fp.stats.slots[sf.index].declared_r
        rows.append([sf.index, sf.name, Raw(f"<b>{esc(sf.role)}</b>"), f"{sf.confidence:.2f}", sf.depth_rank,
                     _r(sf.r_estimate), sf.label or "—", _r(sf.r_exact),
                     r_label(declared) if declared is not None else "—",
                     f"{sf.claim.label} ({sf.claim.source.value})" if sf.claim else "—",
                     badge(sf.verdict) if sf.verdict is not None else "—", sf.verdict_why or sf.decided_by])
    out = [f"<div class='hsf-headline'>{badge(fp.outcome)} <b>{esc(headline(fp))}</b></div>",
           f"<div class='hsf-caption'><b>{esc(_head(fp))}</b></div>",
           f"<div>depth order (shallow → deep): {esc(' → '.join(str(i) for i in fp.depth_order))} "
           f"(order confidence {fp.order_confidence:.2f})</div>",
           html_table(["#", "slot", "role", "confidence", "depth rank", "r≈", "label", "r exact", "declared",
                       "claimed", "verdict", "decided by"], rows, cls="hsf-fingerprint")]
    if fp.findings:
        out.append(html_table(["verdict", "finding", "slots", "message"],
                              [[badge(f.severity), f.kind, ", ".join(map(str, f.slots)),
                                f.message] for f in sort_findings(fp.findings)], cls="hsf-findings"))
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
