"""View models for the HTML report's verdict block and provenance (plus shared helpers): plain dicts of values
the template escapes, built from the result objects.

Nothing here recomputes statistics: it reads ``CaptureStats`` / ``Fingerprint`` / ``AuditResult`` fields
and turns them into rows, SVG coordinates (numbers only) and the inline SVG figures of ``figures.py``.
"""

from __future__ import annotations

import re
from typing import Any

from forensics.analysis.probe_wirings import ref_label
from forensics.analysis.report import OUTCOMES, Deciding, ReportResult, SlotOutcome
from forensics.findings import FindingKind, Severity, sort_findings, worst_outcome
from forensics.layers import r_label
from forensics.views.format import count, headline_word, num
from forensics.views.probe import reason, served_line
from forensics.views.stamp import summary

MAX_VERDICT_FILES = 40  # verdict rows: every non-passing file, then passing ones up to this many
WHOLE_LIST = ("shifted", "ids_off_by_one")  # a finding about the whole claimed list: its message leads the headline
MAX_INLINE_SLOTS = 8  # a passing file with more slots (a ladder) shows its slot rows folded

worst = worst_outcome
fmt = num  # the one number style of every view (forensics.views.format.num)


def _short(xs: list, k: int = 8) -> str:
    xs = [str(x) for x in xs]
    return ", ".join(xs) if len(xs) <= k else ", ".join(xs[:k - 2]) + ", …, " + ", ".join(xs[-2:])


def _clip(text: str, n: int = 90) -> str:
    """A long value (a list of numbers) cut to ``n`` characters; messages are never cut mid-sentence."""
    return text if len(text) <= n else text[:n - 1] + "…"


def _label(r: Any) -> str | None:
    return None if r is None else r_label(r)


def show_token(t: str | None) -> str:
    """Token text with whitespace made visible (the template escapes it)."""
    if t is None:
        return ""
    return t.replace("\n", "⏎").replace("\t", "⇥").replace(" ", "·") or "∅"


# ---------------------------------------------------------------- verdicts
def decided_text(d: Deciding) -> str:
    """The deciding evidence of a slot (``forensics.analysis.report.Deciding``) in one line, its raw value and
    threshold beside what it says."""
    if d.kind == "nonfinite":
        nan, inf = d.value
        return f"non-finite values: NaN×{nan}, Inf×{inf} (threshold {fmt(d.threshold)})"
    if d.kind == "claim":
        return f"claimed {d.value}: {d.message}"
    if d.kind == "undecided":
        return f"{d.message}"
    if d.kind == "finding":
        return f"{d.signal}: {d.message}"
    if d.kind == "order":
        return "its place in the file's depth order" + (f" + {d.message}" if d.message else "")
    if d.kind == "evidence":
        text = f"{d.signal} = {_clip(fmt(d.value))}" + (f" → {d.message}" if d.message else "")  # said whole
        return text + (f" (threshold {fmt(d.threshold)})" if d.threshold is not None else "")
    if d.kind == "token0":
        return f"token-0 norm = {fmt(d.value)}× median of the rest"
    return "—"


def slot_row(s: SlotOutcome) -> dict:
    """One slot's outcome as the template reads it (numbers formatted with the one number style)."""
    r = f"{fmt(s.r_exact)} (exact)" if s.r_exact is not None else (
        f"≈{fmt(s.r_estimate)}" if s.r_estimate is not None else None)
    return {"index": s.index, "name": s.name, "claimed": s.claimed or "—", "claim_source": s.claim_source,
            "role": s.role or "—", "label": s.label or "—", "r": r or "—",
            "confidence": fmt(s.confidence) if s.confidence is not None else "—", "verdict": s.outcome,
            "decided": decided_text(s.deciding), "nonfinite": s.deciding.kind == "nonfinite"}


def _order_line(order: list) -> str:
    """The file's depth-order evidence in one line (said once per file)."""
    return "; ".join(f"{e.signal} = {_clip(fmt(e.value), 60)}" + (f" → {e.verdict}" if e.verdict
                                                                   else "") for e in order)


def _probe_summary(probe_res) -> dict | None:
    """The draft probe's verdict (``ProbeResult.verdict``, read, never recomputed), its best wiring's acceptance
    length and top-1 agreement with their intervals, the runner-up and the served-vs-best line."""
    best = probe_res.best if probe_res is not None else None
    if best is None:
        return None

    ci, al = best.top1_ci, best.acceptance_length_ci
    second = probe_res.candidates[1] if len(probe_res.candidates) > 1 else None
    verdict = probe_res.verdict.value
    return {"verdict": verdict, "says": "" if verdict == "pass" else f"draft probe: {reason(probe_res)}",
            "label": best.label, "r": fmt([ref_label(r) for r in best.wiring]), "steps": probe_res.steps,
            "length": f"{best.acceptance_length:.2f}", "length_ci": f"[{al[0]:.2f}, {al[1]:.2f}]" if al else "—",
            "top1": f"{100 * best.top1:.1f}%", "ci": f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]%", "n": best.n,
            "clear_winner": probe_res.clear_winner, "why": reason(probe_res), "served": served_line(probe_res),
            "second": f"{second.label} {second.acceptance_length:.2f}" if second else None}


def build_verdicts(res: ReportResult) -> dict:
    """The verdict block of a ``ReportResult``: file rows with their slot outcomes, counts, the audit and probe
    summaries, the header's outcome word, the headline and the sentence under the title."""
    rows: list[dict] = []
    for f in res.files:
        if f.error:
            rows.append({"file": f.rel, "error": f.error, "verdict": f.outcome, "slots": [], "findings": [],
                         "order": "", "claims": None,
                         "collapsed": False, "labels": "", "format": "unreadable"})
            continue
        fp = f.fingerprint
        slots = [slot_row(s) for s in f.slots]
        rows.append({"file": f.rel, "error": None, "verdict": f.outcome, "slots": slots,
                     "order": _order_line(list(fp.order_evidence or []) if fp is not None else []),
                     "collapsed": len(slots) > MAX_INLINE_SLOTS and f.outcome == "pass",
                     "labels": _short([s["label"] for s in slots]), "format": f.capture.format,
                     "claims": fp.claims.describe() if fp is not None and fp.claims is not None else None,
                     "findings": [{"kind": x.kind, "severity": x.severity.value, "slots": list(x.slots or []),
                                   "message": x.message} for x in sort_findings(f.findings)]})
    shown = [r for r in rows if r["verdict"] != "pass"]
    shown += [r for r in rows if r["verdict"] == "pass"][:max(0, MAX_VERDICT_FILES - len(shown))]
    hidden = len(rows) - len(shown)
    audit = _audit_summary(res.audit)
    probe = _probe_summary(res.probe)
    scan = _scan_summary(res.scan)
    counts, overall = res.counts, res.overall  # decided in forensics.analysis.report, read here
    facts = [{"kind": g.kind, "severity": g.severity, "files": g.files, "says": plain(g.kind)}
             for g in res.file_facts]
    ctx = {"rows": rows, "counts": counts, "audit": audit, "probe": probe, "scan": scan, "overall": overall,
           "facts": facts, "model": res.settings.get("model") is not None}
    headline, sentence = _headline(ctx), _sentence(ctx)
    # a section asked for (--draft, --engine, --scan, --model) that could not run is said on the first screen: the
    # header's word is about the files, and a reader of it alone took the wiring for checked
    missed = [e for e in res.errors if e.where in NOT_RUN]
    if missed:
        names = list(dict.fromkeys(NOT_RUN[e.where] for e in missed))
        sentence = f"{sentence.rstrip('.')}; {' and '.join(names)} could not run (errors below)."
        headline[1:1] = [f"{NOT_RUN[e.where][0].upper()}{NOT_RUN[e.where][1:]} could not run: {e.message}."
                         for e in missed]
    return {"rows": [r for r in rows if r in shown], "hidden": hidden, "counts": counts, "audit": audit,
            "probe": probe, "overall": overall, "nfiles": len(rows), "facts": facts,
            "tiles": _tiles(res), "headline": headline, "sentence": sentence}


NOT_RUN = {"audit": "the wiring audit", "draft probe": "the draft probe", "scan": "the dataset scan",
           "model facts": "reading the model"}  # ReportError.where of a section, as the reader calls it


def plain(kind: Any) -> str:
    """A finding kind in plain words: its one-line meaning (``forensics.findings.FindingKind.meaning``) without
    the parenthesised aside; a kind outside the enum as its words."""
    try:
        text = FindingKind(str(kind)).meaning
    except ValueError:
        return str(kind).replace("_", " ")
    return re.sub(r"\s*\([^)]*\)", "", text)


def _tiles(res: ReportResult) -> dict:
    """The counts under the headline: everything decided (each file once with its one badge, the audit, the probe,
    the scan) by outcome, what was counted, and the slot outcomes (file-level facts counted on the file)."""
    items = res.items
    nfiles = len(res.files)
    parts = [count(nfiles, "file")] + [name for name, _ in items[nfiles:]]
    by = {k: [name for name, w in items if w == k] for k in OUTCOMES}
    slots = {k: v for k, v in res.counts.items() if v}
    return {"counts": res.item_counts, "what": ", ".join(parts), "names": {k: _short(v, 6) for k, v in by.items()},
            "slots": ", ".join(f"{v} {k}" for k, v in slots.items()) or "none"}


def _scan_summary(scan_res: Any) -> dict | None:
    """The dataset scan's verdict and its headline (``forensics.views.scan``), when it does not pass."""
    if scan_res is None or scan_res.verdict.value == "pass":
        return None
    s = scan_res.summary
    counts = ", ".join(f"{k}×{v}" for k, v in (s.get("anomaly_counts") or {}).items()) or "none"
    wide = ", ".join(str(d["kind"]) for d in s.get("dataset_findings") or [])
    return {"verdict": scan_res.verdict.value,
            "says": f"dataset scan of {s.get('files')} files: {scan_res.verdict.value} (anomalies: {counts}"
                    + (f"; dataset-wide: {wide}" if wide else "") + ")"}


def _audit_summary(audit_res: Any) -> dict | None:
    """The audit's verdict, reason, fix and slices as the template reads them."""
    if audit_res is None:
        return None
    fix = audit_res.fix.to_dict() if audit_res.fix is not None else {}
    problems = [{"kind": x.kind, "message": x.message, "cls": x.severity.value}
                for x in sort_findings(audit_res.findings) if x.severity is not Severity.INFO]
    return {"wiring": audit_res.wiring, "outcome": audit_res.outcome.value,
            "reason": audit_res.reason, "fix": fix, "settle": audit_res.settle,
            "fixline": {k: fix.get(k) for k in ("ids", "key", "where", "engine", "version")},
            "slices": [{"slice": sl.slice, "trained": _label(sl.trained_r) or "—",
                        "served": _label(sl.served_r) or "—", "ok": sl.ok} for sl in audit_res.slices],
            "problems": problems}


def _also(kinds: list[str], k: int = 3) -> str:
    """Finding kinds in plain words, at most ``k`` (the rest counted)."""
    words = list(dict.fromkeys(plain(x) for x in kinds))
    return "; ".join(words[:k]) + (f"; and {len(words) - k} more (below)" if len(words) > k else "")


def _verb(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


def _settle(model: bool) -> str:
    """What settles an undecided claim: the reference forward, unless --model was given already."""
    return "a ladder capture of the same text" if model else "--model (exact r per slot) or a ladder capture of " \
        "the same text"


def _sentence(c: dict) -> str:  # noqa: C901 - complexity 17, to be paid down
    """The one sentence under the title, in the header's colour: what failed, else what is not settled, else that
    every claim holds. A fact about a whole file (no token ids, too few tokens) is counted once per file."""
    rows, counts, audit, probe, scan = c["rows"], c["counts"], c["audit"], c["probe"], c["scan"]
    bad = [r for r in rows if r["error"]]
    failing = [r for r in rows if not r["error"] and r["verdict"] == "fail"]
    fails, open_ = [], []
    if audit is not None and audit["wiring"] == "mismatch":
        wrong = [sl for sl in audit["slices"] if sl["ok"] is False]
        fails.append("the draft is not served the layers it was trained on (" + ", ".join(
            f"{sl['trained']}→{sl['served']}" for sl in wrong[:4]) + (", …" if len(wrong) > 4 else "") + ")"
            if wrong else f"wiring audit: mismatch ({audit['reason']})")
    elif audit is not None and audit["wiring"] != "match":
        open_.append(f"wiring audit: {audit['wiring'].replace('-', ' ')}")
    if audit is not None:
        other = [x["kind"] for x in audit["problems"] if x["cls"] == "fail" and x["kind"] != "slices"]
        if other:  # "also" only after the mismatch sentence; a matching wiring is said before what still fails
            lead = "the wiring audit also finds" if fails else \
                "the draft is served the layers it was trained on, but the wiring audit finds" \
                if audit["wiring"] == "match" else "the wiring audit finds"
            fails.append(f"{lead}: " + _also(other))
    if failing:
        kinds = [x["kind"] for r in failing for x in r["findings"] if x["severity"] == "fail"]
        nslots = sum(1 for r in failing for s in r["slots"] if s["verdict"] == "fail")
        fails.append(f"{count(len(failing), 'file')} fail{'s' if len(failing) == 1 else ''} ("
                     + (f"{count(nslots, 'slot')}: " if nslots else "")
                     + (_also(kinds) if kinds else "a claimed identity ≠ the inferred one") + "): "
                     + _short([r["file"] for r in failing], 3))
    not_read = f"{count(len(bad), 'input')} could not be read ({_short([r['file'] for r in bad], 3)})" if bad else ""
    if probe is not None and probe["verdict"] != "pass":
        (fails if probe["verdict"] == "fail" else open_).append(probe["says"])
    if scan is not None and scan["verdict"] == "fail":
        fails.append(scan["says"])
    if counts.get("cannot tell"):
        n = sum(1 for r in rows if any(s["verdict"] == "cannot tell" for s in r["slots"]))
        open_.append(f"{count(counts['cannot tell'], 'slot')} in {count(n, 'file')} claimed but not proven "
                     f"(settle with {_settle(c['model'])})")
    for g in c["facts"]:
        if g["severity"] == "warn":
            open_.append(f"{count(len(g['files']), 'file')}: {g['says']}")
    n_warn = counts.get("warn", 0)
    if n_warn:
        open_.append(f"{count(n_warn, 'slot')} with a finding")
    if c["overall"] == "fail" and not fails:  # a fail finding on no slot: the header's word, and where it is
        fails.append("findings in " + _short([r["file"] for r in rows if r["verdict"] == "fail"], 3))
    if scan is not None and scan["verdict"] == "cannot tell" and not open_:  # the scan alone leaves it open
        open_.append(scan["says"])
    if fails:
        return "FAIL: " + "; ".join(fails + ([not_read] if not_read else [])) + "."
    if not_read:  # no fail in what was read; what was not read is no fail either, and no pass beside it
        n = sum(1 for r in rows if not r["error"])
        return f"{headline_word(c['overall'])}: {not_read}; " + ("; ".join(open_) if open_ else
                                                                f"no failure in the {count(n, 'file')} read") + "."
    word = {"cannot tell": "CANNOT TELL", "warn": "WARN"}.get(c["overall"])
    if word or open_:
        return f"{word or 'WARN'}: no failure; " + ("; ".join(open_) or "see the findings below") + "."
    n = sum(1 for r in rows if not r["error"])
    tail = "; the draft is served the layers it was trained on" if audit is not None else ""
    if c["overall"] == "identified":  # nothing claimed, and the reference forward named every slot (hsf fingerprint)
        return (f"IDENTIFIED: nothing is claimed; the reference forward named every slot of {count(n, 'file')}: "
                + _short([f"{r['file']} [{r['labels']}]" for r in rows if not r["error"]], 3) + f"{tail}.")
    return f"PASS: every claim about {count(n, 'file')} holds{tail}." if counts.get("pass") else \
        f"NO CLAIM: {count(n, 'file')} declare{'s' if n == 1 else ''} no slot identity; roles and depth order are " \
        f"listed{tail}."


def _headline(c: dict) -> list[str]:
    """The sentences a reviewer reads first, worst verdict first: what failed, what cannot be told, what passed.
    Slots are counted for what is about a slot, files for what is about a whole file."""
    rows, counts, audit, scan = c["rows"], c["counts"], c["audit"], c["scan"]
    out = []
    bad = [r for r in rows if r["error"]]
    failing = [r for r in rows if not r["error"] and r["verdict"] == "fail"]
    if audit is not None and audit["wiring"] == "mismatch":
        out.append("The draft is NOT served the layers it was trained on: slices and fix below.")
    audit_fails = [x["kind"] for x in audit["problems"] if x["cls"] == "fail" and x["kind"] != "slices"] \
        if audit is not None and audit["wiring"] == "match" else []
    if audit_fails:  # the wiring holds, yet the header fails: the reason comes first, not a reassurance
        out.append(f"The draft is served the layers it was trained on, but the wiring audit finds: "
                   f"{_also(audit_fails)} (below).")
    if failing:
        kinds = [x for r in failing for x in r["findings"] if x["severity"] == "fail"]
        why = sorted({x["kind"] for x in kinds} | {"nonfinite" for r in failing for sl in r["slots"]
                                                   if sl["nonfinite"]})
        first = next((x for x in kinds if x["kind"] in WHOLE_LIST), kinds[0] if kinds else None)
        nslots = sum(1 for r in failing for s in r["slots"] if s["verdict"] == "fail")
        out.append(f"{count(len(failing), 'file')} fail{'s' if len(failing) == 1 else ''}"
                   + (f" ({count(nslots, 'slot')})" if nslots else "")
                   + (f": {_also(why, 4)}" if why else ": a claimed identity ≠ the inferred one")
                   + f" — {_short([r['file'] for r in failing], 4)}." + (f" {first['message']}" if first else ""))
    if bad:
        out.append(f"{count(len(bad), 'input')} could not be read: {_short([r['file'] for r in bad], 4)}.")
    if scan is not None:
        out.append(scan["says"][0].upper() + scan["says"][1:] + ".")
    if audit is not None and audit["wiring"] == "cannot-tell":
        out.append(f"Wiring audit: cannot tell ({audit['reason']}).")
    if counts["cannot tell"]:
        n = counts["cannot tell"]
        out.append(f"{count(n, 'slot')} {_verb(n, 'carries', 'carry')} a claim the data neither confirms nor "
                   f"excludes: settle with {_settle(c['model'])}.")
    if audit is not None and audit["wiring"] == "match" and not audit_fails:
        out.append("The draft is served the layers it was trained on.")
    for g in c["facts"]:
        if g["severity"] != "fail":  # a failing file is named above
            out.append(f"{count(len(g['files']), 'file')} ({_short(g['files'], 3)}): {g['says']}.")
    if counts["warn"]:
        n = counts["warn"]
        out.append(f"{count(n, 'slot')} {_verb(n, 'carries', 'carry')} a finding that does not contradict "
                   f"{_verb(n, 'its', 'their')} claim.")
    if counts["pass"]:
        n = counts["pass"]
        out.append(f"{count(n, 'slot')} {_verb(n, 'is what it is', 'are what they are')} claimed to be (the "
                   "evidence supports the claim).")
    if counts.get("identified"):
        n = counts["identified"]
        out.append(f"{count(n, 'slot')} {_verb(n, 'carries', 'carry')} no claim and {_verb(n, 'is', 'are')} named "
                   "exactly by the reference forward (exact r): "
                   + _short([f"{r['file']} [{r['labels']}]" for r in rows
                             if any(s["verdict"] == "identified" for s in r["slots"])], 3) + ".")
    if counts["info"]:
        n = counts["info"]
        out.append(f"{count(n, 'slot')} {_verb(n, 'carries', 'carry')} no claim: {_verb(n, 'its', 'their')} "
                   "inferred role and depth are listed.")
    word = headline_word(c["overall"])
    out[0:1] = [f"{word}: {out[0]}"] if out else [f"{word}."]
    return out


# ---------------------------------------------------------------- provenance
def build_provenance(res: ReportResult) -> dict:
    """Per file: format, size, checksum, layout, shapes, declared layers and stamp; the run's settings and the
    target model's facts."""
    rows = []
    for f in res.files:
        if f.error:
            rows.append({"file": f.rel, "error": f.error})
            continue
        c = f.capture
        rows.append({"file": f.rel, "error": None, "format": c.format, "size": c.provenance.size_bytes,
                     "sha256": c.provenance.sha256(), "layout": c.provenance.layout or "—",
                     "tokens": c.num_tokens, "hidden": c.hidden_size,
                     "slots": _slots_summary(f.stats.slots),
                     "declared_layers": fmt(c.declared_layers) if c.declared_layers is not None else "—",
                     "convention": c.declared_convention or "—",
                     "declared_r": "[" + _short([_label(r) for r in c.declared_r]) + "]" if c.declared_r else "—",
                     "notes": list(c.provenance.notes), "model": (c.meta or {}).get("model"),
                     "num_layers": c.num_layers, "stamp": _stamp(f.stamp)})
    settings = {k: v for k, v in res.settings.items() if v is not None}
    return {"rows": rows, "model_facts": res.facts or {}, "settings": settings}


def _stamp(s: dict | None) -> str:
    """The file's stamp (``hsf stamp``, read by the report) in one cell: what it declares, or that there is none,
    and whether the values still match it (checked in the fingerprint's read; ``--no-stamp-check``: not checked)."""
    if s is None:
        return "not stamped"
    if s["status"] == "stamped":
        check = s.get("check")
        said = "stamped: " + (summary(s["stamp"]) or "")
        if check is None:
            return said
        return said + ("; values match" if check == "ok" else f"; CHANGED SINCE STAMPING: {s.get('message')}")
    return "unreadable stamp: " + s["error"] if s["status"] == "error" else "not stamped"


def _slots_summary(slots) -> str:
    """``k × [T, H] dtype: name0, name1, …`` when every slot shares shape and dtype, else one entry each."""
    kinds = {(tuple(s.shape), s.dtype) for s in slots}
    if len(kinds) == 1 and len(slots) > 1:
        shape, dtype = next(iter(kinds))
        return f"{len(slots)} × {list(shape)} {dtype}: " + _short([s.name for s in slots], 6)
    return ", ".join(f"{s.name} {list(s.shape)} {s.dtype}" for s in slots)
