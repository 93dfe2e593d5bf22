"""View models for the HTML report's verdict block and provenance (plus shared helpers): plain dicts of values
the template escapes, built from the result objects.

Nothing here recomputes statistics: it reads ``CaptureStats`` / ``Fingerprint`` / ``AuditResult`` fields
and turns them into rows, SVG coordinates (numbers only) and the inline SVG figures of ``figures.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from forensics.findings import OUTCOME_RANK, Severity, Verdict, sort_findings, worst_outcome
from forensics.layers import r_label
from forensics.views.format import num

MAX_VERDICT_FILES = 40  # verdict rows: every non-passing file, then passing ones up to this many
MAX_INLINE_SLOTS = 8  # a passing file with more slots (a ladder) shows its slot rows folded
# fingerprint ``decided_by`` names → the evidence signals that carry its number, best first
DECIDED_ALIASES = {"exact": ("ladder_match", "exact_embedding", "exact_gamma")}
RANK = OUTCOME_RANK  # the one ranking (forensics.findings): fail, cannot tell, warn, then pass/info
OUTCOMES = ("fail", "cannot tell", "warn", "pass", "info")  # the words of the report's counts, worst first


@dataclass
class FileResult:
    """One input file as the report sees it: the capture, its stats and fingerprint, or an error."""

    path: str
    rel: str = ""
    capture: Any = None
    stats: Any = None
    fp: Any = None
    error: str | None = None
    tokens: list[str] | None = field(default=None, repr=False)


worst = worst_outcome


fmt = num  # the one number style of every view (forensics.views.format.num)


def _short(xs: list, k: int = 8) -> str:
    xs = [str(x) for x in xs]
    return ", ".join(xs) if len(xs) <= k else ", ".join(xs[:k - 2]) + ", …, " + ", ".join(xs[-2:])


def _clip(text: str, n: int = 90) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def _label(r: Any) -> str | None:
    return None if r is None else r_label(r)


# ---------------------------------------------------------------- tokens
TOKEN_TEXT_CHARS = 64  # a token's text is shown cut to this many characters + "…" (a hostile tokenizer's
# 2,000,000-character token at 1,000 positions made a 384 MB report; hardening round 3, N6 S15)


def load_tokens(cap, errors: list[dict]) -> list[str] | None:
    """Token text per position (the capture's own local tokenizer, never remote code), or None when unknown;
    each distinct id decoded once, its text cut to ``TOKEN_TEXT_CHARS`` characters + "…"."""
    from forensics.io.tokenizer import decode_tokens, find_tokenizer, load_tokenizer

    if cap.input_ids is None:
        return None
    folder = find_tokenizer(cap.path, cap.meta)
    tok, why = load_tokenizer(folder)
    if tok is None:
        if why and not any(e.get("message") == why for e in errors):
            errors.append({"where": f"tokenizer {folder}", "message": why})
        return None
    ids = [int(i) for i in cap.input_ids.tolist()]
    text = {}
    for i in dict.fromkeys(ids):
        t = decode_tokens(tok, [i])[0]
        text[i] = t if len(t) <= TOKEN_TEXT_CHARS else t[:TOKEN_TEXT_CHARS] + "…"
    return [text[i] for i in ids]


def show_token(t: str | None) -> str:
    """Token text with whitespace made visible (the template escapes it)."""
    if t is None:
        return ""
    return t.replace("\n", "⏎").replace("\t", "⇥").replace(" ", "·") or "∅"


# ---------------------------------------------------------------- verdicts
def _slot_verdict(fs, ss, findings: list, order: list | None = None) -> dict:
    """fail / cannot tell / warn / pass / info for one slot, read from the fingerprint's claim verdict and the
    severity of the findings on it (set where they were made), with the one number that decided it."""
    claim = getattr(fs, "claim", None) if fs is not None else None
    claimed = claim.label if claim is not None else _label(ss.declared_r) or ss.claimed or None
    claim_source = f"{claim.source.value}: {claim.detail}" if claim is not None else ""
    role = label = r = conf = None
    evidence = []
    if fs is not None:
        role, label, conf = fs.role, fs.label, fs.confidence
        if getattr(fs, "r_exact", None) is not None:
            r = f"{fmt(fs.r_exact)} (exact)"
        elif getattr(fs, "r_estimate", None) is not None:
            r = f"≈{fmt(fs.r_estimate)}"
        evidence = list(getattr(fs, "evidence", []) or [])
    inferred = label or (_label(fs.r_exact) if fs is not None and fs.r_exact is not None else None)
    mine = sort_findings(f for f in findings if ss.index in (getattr(f, "slots", None) or []))
    v = getattr(fs, "verdict", None) if fs is not None else None
    fails = [f for f in mine if f.severity is Severity.FAIL]
    verdict, decided = "info", None
    if ss.nan or ss.inf:
        verdict, decided = "fail", f"non-finite values: NaN×{ss.nan}, Inf×{ss.inf} (threshold 0)"
    elif v is Verdict.FAIL:
        verdict, decided = "fail", f"claimed {claim.label if claim else '?'}: {fs.verdict_why}"
    elif fails:
        verdict, decided = "fail", f"{fails[0].kind}: {fails[0].message}"
    elif v is Verdict.CANNOT_TELL:
        verdict = "cannot tell"
        decided = f"{fs.verdict_why}"  # what would settle it is said once, in the headline, not on every slot
    elif mine and mine[0].severity is Severity.WARN:
        verdict, decided = "warn", f"{mine[0].kind}: {mine[0].message}"
    elif v is Verdict.PASS:
        verdict = "pass"  # the deciding evidence line below carries its raw value and threshold
    if decided is None:
        decided = _deciding_evidence(evidence, getattr(fs, "decided_by", None), order)
    if decided is None:
        decided = (f"token-0 norm = {fmt(ss.first_ratio)}× median of the rest" if math.isfinite(ss.first_ratio)
                   else "—")
    return {"index": ss.index, "name": ss.name, "claimed": claimed or "—", "claim_source": claim_source,
            "role": role or "—",
            "label": inferred or "—", "r": r or "—",
            "confidence": fmt(conf) if conf is not None else "—", "verdict": verdict, "decided": decided}


def _order_line(order: list) -> str:
    """The file's depth-order evidence in one line (said once per file)."""
    return "; ".join(f"{e.signal} = {_clip(fmt(e.value), 60)}" + (f" → {_clip(str(e.verdict), 80)}" if e.verdict
                                                                   else "") for e in order)


def _deciding_evidence(evidence: list, decided_by: str | None, order: list | None) -> str | None:
    """The evidence line the fingerprint says decided (``decided_by``; ``order`` = the depth chain), else the
    first one, as ``signal = value → verdict (threshold …)``."""
    pool = list(evidence)
    if decided_by and decided_by.split()[0] == "order" and order:
        # the depth chain decided: its evidence is the file's, said once in the file's row, not on every slot
        return "its place in the file's depth order" + (decided_by.split(")", 1)[1] if ")" in decided_by else "")
    if decided_by:  # a signal name, possibly followed by words: "order (rank among layer slots) + sink"
        decided_by = decided_by.split()[0]
        names = DECIDED_ALIASES.get(decided_by, (decided_by,))
        pool = sorted((e for e in evidence if e.signal in names), key=lambda e: names.index(e.signal)) or \
            (list(order or []) if decided_by == "order" else []) or pool
    for e in pool:
        thr = getattr(e, "threshold", None)
        says = _clip(str(e.verdict)) if getattr(e, "verdict", None) else ""
        text = f"{e.signal} = {_clip(fmt(e.value))}" + (f" → {says}" if says else "")
        return text + (f" (threshold {fmt(thr)})" if thr is not None else "")
    return None


def _probe_summary(probe_res) -> dict | None:
    """The draft probe's verdict (``ProbeResult.verdict``, read, never recomputed), its best wiring's acceptance
    length and top-1 agreement with their intervals, the runner-up and the served-vs-best line."""
    best = probe_res.best if probe_res is not None else None
    if best is None:
        return None
    from forensics.views.probe import reason, served_line

    ci, al = best.top1_ci, best.acceptance_length_ci
    second = probe_res.candidates[1] if len(probe_res.candidates) > 1 else None
    verdict = probe_res.verdict.value
    return {"verdict": verdict, "says": "" if verdict == "pass" else f"draft probe: {reason(probe_res)}",
            "label": best.label, "r": fmt([_label(r) for r in best.wiring]), "steps": probe_res.steps,
            "length": f"{best.acceptance_length:.2f}", "length_ci": f"[{al[0]:.2f}, {al[1]:.2f}]" if al else "—",
            "top1": f"{100 * best.top1:.1f}%", "ci": f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]%", "n": best.n,
            "clear_winner": probe_res.clear_winner, "why": reason(probe_res), "served": served_line(probe_res),
            "second": f"{second.label} {second.acceptance_length:.2f}" if second else None}


def build_verdicts(files: list[FileResult], audit_res, probe_res=None) -> dict:
    rows: list[dict] = []
    counts = {k: 0 for k in OUTCOMES}
    for f in files:
        if f.error:
            rows.append({"file": f.rel, "error": f.error, "verdict": "fail", "slots": [], "findings": [], "order": "",
                         "claims": None,
                         "collapsed": False, "labels": "", "format": "unreadable"})
            counts["fail"] += 1
            continue
        findings = list(getattr(f.fp, "findings", []) or []) if f.fp is not None else []
        fslots = {s.index: s for s in (f.fp.slots if f.fp is not None else [])}
        order = list(getattr(f.fp, "order_evidence", None) or []) if f.fp is not None else []
        slots = [_slot_verdict(fslots.get(ss.index), ss, findings, order) for ss in f.stats.slots]
        for s in slots:
            counts[s["verdict"]] += 1
        fverdict = worst([s["verdict"] for s in slots] + [x.severity.value for x in findings])
        rows.append({"file": f.rel, "error": None, "verdict": fverdict, "slots": slots,
                     "order": _order_line(order),
                     "collapsed": len(slots) > MAX_INLINE_SLOTS and fverdict == "pass",
                     "labels": _short([s["label"] for s in slots]), "format": f.capture.format,
                     "claims": f.fp.claims.describe() if f.fp is not None and f.fp.claims is not None else None,
                     "findings": [{"kind": x.kind, "severity": x.severity.value, "slots": list(x.slots or []),
                                   "message": x.message} for x in sort_findings(findings)]})
    shown = [r for r in rows if r["verdict"] != "pass"]
    shown += [r for r in rows if r["verdict"] == "pass"][:max(0, MAX_VERDICT_FILES - len(shown))]
    hidden = len(rows) - len(shown)
    audit = None
    if audit_res is not None:
        fix = audit_res.fix.to_dict() if audit_res.fix is not None else {}
        problems = [{"kind": x.kind, "message": x.message, "cls": x.severity.value}
                    for x in sort_findings(getattr(audit_res, "findings", []) or []) if x.severity is not Severity.INFO]
        audit = {"wiring": audit_res.wiring, "outcome": audit_res.outcome.value,
                 "reason": audit_res.reason, "fix": fix, "settle": audit_res.settle,
                 "fixline": {k: fix.get(k) for k in ("ids", "key", "where", "engine", "version")},
                 "slices": [{"slice": sl.slice, "trained": _label(sl.trained_r) or "—",
                             "served": _label(sl.served_r) or "—", "ok": sl.ok} for sl in audit_res.slices],
                 "problems": problems}
    probe = _probe_summary(probe_res)
    # the header's colour: the worst verdict anywhere in the report (files, slots, the audit and its findings,
    # the probe), so a single fail below is never under a green header
    overall = worst([r["verdict"] for r in rows] + [s["verdict"] for r in rows for s in r["slots"]] +
                    ([audit["outcome"]] + [x["cls"] for x in audit["problems"]] if audit else []) +
                    ([probe["verdict"]] if probe else []))
    return {"rows": [r for r in rows if r in shown], "hidden": hidden, "counts": counts, "audit": audit,
            "probe": probe, "overall": overall, "nfiles": len(rows),
            "headline": _headline(rows, counts, audit, overall),
            "sentence": _sentence(rows, counts, audit, probe, overall)}


def _sentence(rows: list[dict], counts: dict, audit: dict | None, probe: dict | None, overall: str) -> str:
    """The one sentence under the title, in the header's colour: what failed, else what is not settled, else that
    every claim holds."""
    bad = [r for r in rows if r["error"]]
    failing = [r for r in rows if not r["error"] and any(s["verdict"] == "fail" for s in r["slots"])]
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
        if other:
            fails.append("audit findings " + ", ".join(dict.fromkeys(other)))
    if failing:
        fails.append(f"{counts['fail']} slot(s) in {_short([r['file'] for r in failing], 3)}")
    if bad:
        fails.append(f"{len(bad)} unreadable input(s)")
    if probe is not None and probe["verdict"] != "pass":
        (fails if probe["verdict"] == "fail" else open_).append(probe["says"])
    if counts.get("cannot tell"):
        open_.append(f"{counts['cannot tell']} slot(s) claimed but not proven (settle with --model or a ladder "
                     "capture of the same text)")
    if counts.get("warn"):
        open_.append(f"{counts['warn']} slot(s) with a finding")
    if fails:
        return "FAIL: " + "; ".join(fails) + "."
    word = {"cannot tell": "CANNOT TELL", "warn": "WARN"}.get(overall)
    if word or open_:
        return f"{word or 'WARN'}: no failure; " + ("; ".join(open_) or "see the findings below") + "."
    n = sum(1 for r in rows if not r["error"])
    tail = "; the draft is served the layers it was trained on" if audit is not None else ""
    return f"PASS: every claim about {n} file(s) holds{tail}." if counts.get("pass") else \
        f"NO CLAIM: {n} file(s) declare no slot identity; roles and depth order are listed{tail}."


def _headline(rows: list[dict], counts: dict, audit: dict | None, overall: str) -> list[str]:
    """The sentences a reviewer reads first, worst verdict first: what failed, what cannot be told, what passed."""
    out = []
    bad = [r for r in rows if r["error"]]
    failing = [r for r in rows if not r["error"] and r["verdict"] == "fail"]
    if audit is not None and audit["wiring"] == "mismatch":
        out.append("The draft is NOT served the layers it was trained on: slices and fix below.")
    if failing:
        kinds = [x for r in failing for x in r["findings"] if x["severity"] == "fail"]
        why = sorted({x["kind"] for x in kinds} | {"nonfinite" for r in failing for sl in r["slots"]
                                                   if sl["decided"].startswith("non-finite")})
        first = next((x for x in kinds if x["kind"] == "shifted"), kinds[0] if kinds else None)
        out.append(f"{counts['fail']} slot(s) in {len(failing)} file(s) fail" + (f" ({', '.join(why)})" if why
                   else " (claimed identity ≠ inferred)") + f": {_short([r['file'] for r in failing], 4)}."
                   + (f" {first['kind']}: {first['message']}" if first else ""))
    if bad:
        out.append(f"{len(bad)} input(s) could not be read: {_short([r['file'] for r in bad], 4)}.")
    if audit is not None and audit["wiring"] == "cannot-tell":
        out.append(f"Wiring audit: cannot tell ({audit['reason']}).")
    if counts["cannot tell"]:
        out.append(f"{counts['cannot tell']} slot(s) carry a claim the data neither confirms nor excludes: "
                   "settle with --model (exact r per slot) or a ladder capture of the same text.")
    if audit is not None and audit["wiring"] == "match":
        out.append("The draft is served the layers it was trained on.")
    if counts["warn"]:
        out.append(f"{counts['warn']} slot(s) carry a finding that does not contradict their claim.")
    if counts["pass"]:
        out.append(f"{counts['pass']} slot(s) are what they are claimed to be (the evidence supports the claim).")
    if counts["info"]:
        out.append(f"{counts['info']} slot(s) carry no claim: their inferred role and depth are listed.")
    word = {"fail": "FAIL", "cannot tell": "CANNOT TELL", "warn": "WARN", "pass": "PASS"}.get(overall, "NO CLAIM")
    out[0:1] = [f"{word}: {out[0]}"] if out else [f"{word}."]
    return out


# ---------------------------------------------------------------- provenance
def build_provenance(files: list[FileResult], **facts) -> dict:
    rows = []
    for f in files:
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
                     "num_layers": c.num_layers, "stamp": _stamp(f.path)})
    model_facts = facts.pop("facts", None) or {}
    settings = {k: v for k, v in facts.items() if v is not None}
    return {"rows": rows, "model_facts": model_facts, "settings": settings}


def _stamp(path: str) -> str:
    """The file's stamp (``hsf stamp``) in one cell: what it declares, or that there is none; values are checked
    by ``hsf verify``, not here."""
    from forensics.analysis.stamp import stamp_status
    from forensics.views.stamp import summary

    s = stamp_status(path)
    if s["status"] == "stamped":
        return "stamped: " + (summary(s["stamp"]) or "")
    return "unreadable stamp: " + s["error"] if s["status"] == "error" else "not stamped"


def _slots_summary(slots) -> str:
    """``k × [T, H] dtype: name0, name1, …`` when every slot shares shape and dtype, else one entry each."""
    kinds = {(tuple(s.shape), s.dtype) for s in slots}
    if len(kinds) == 1 and len(slots) > 1:
        shape, dtype = next(iter(kinds))
        return f"{len(slots)} × {list(shape)} {dtype}: " + _short([s.name for s in slots], 6)
    return ", ".join(f"{s.name} {list(s.shape)} {s.dtype}" for s in slots)
