"""Text and HTML of the wiring audit (AuditResult): what __repr__, _repr_html_, the CLI and the report show."""

from __future__ import annotations

import json

from forensics.analysis.audit.core import AuditResult
from forensics.display import renders
from forensics.findings import Severity, sort_findings
from forensics.layers import r_label
from forensics.views.format import TEXT_WIDTH, badge, columns, count, esc, fit, headline_word, html_table, shown_name


@renders(AuditResult, "line")
def line(res) -> str:
    s = f"AuditResult({res.verdict.value}, wiring {res.wiring}: {res.reason}"
    if res.fix and res.fix.ids is not None:
        s += f"; fix {res.fix.where} {res.fix.key} = {res.fix.ids}"
    return s + ")"


@renders(AuditResult, "html")
def html(res) -> str:
    rows = [[s.slice, _trained(s), r_label(s.served_r), _ok(s.ok)] for s in res.slices]
    frows = [[badge(f.severity.value), f.kind, f.message] for f in sort_findings(res.findings)]
    fix = ""
    if res.fix:
        verb = "already has" if res.fix.already_set else "write"
        fix = (f"<p><b>fix</b>: {verb} <code>{esc(res.fix.ids)}</code> at "
               f"<code>{esc(res.fix.key)}</code> ({esc(res.fix.where)}, "
               f"{esc(res.fix.engine)} {esc(res.fix.version)})"
               + (f"<br>caveat: {esc(res.fix.caveat)}" if res.fix.caveat else "") + "</p>")
    return (f"<div class='hsf-audit'><p>{badge(res.verdict)} <b>wiring {esc(HEAD[res.wiring])}</b>"
            f" {esc(res.reason)}</p>"
            + html_table(["fc slice", "trained on", "served", "ok"], rows)
            + (html_table(["", "finding", "evidence"], frows) if frows else "") + fix
            + (f"<p><b>to settle it</b>: {esc(res.settle)}</p>" if res.settle else "") + "</div>")


def _lab(r) -> str:
    return "?" if r is None else r_label(r)


def _ok(ok) -> str:
    return "?" if ok is None else "OK" if ok else "NO"


def _trained(sl) -> str:
    """The trained r of an ``AuditSlice``, marked when it is only declared (``L3 (claimed)``) or unknown (``?``)."""
    lab = _lab(sl.trained_r)
    return f"{lab} (claimed)" if sl.trained_status == "claimed" else lab


HEAD = {"match": "MATCH", "mismatch": "MISMATCH", "cannot-tell": "CANNOT TELL"}


@renders(AuditResult, "headline")
def headline(res) -> str:
    """The verdict first (``PASS`` / ``FAIL`` / ``CANNOT TELL``, the result's ``verdict``), then the wiring word:
    ``FAIL (wiring MATCH)`` is a served wiring that matches with a fail finding elsewhere (a broken target)."""
    return f"{headline_word(res.verdict)} (wiring {HEAD[res.wiring]})"


def _fix_lines(fx) -> list[str]:
    """The fix lines: the id list to set in the draft's config.json (or why none can serve the trained r, or that
    it is set already), then its caveat and what else to change."""
    out: list[str] = []
    if fx.ids is None:
        out.append(f"fix: no id list can make {fx.engine} {fx.version} serve r = {fx.r}: {fx.caveat}")
    else:
        snippet = fx.snippet or (
            {"eagle_config": {"eagle_aux_hidden_state_layer_ids": fx.ids}} if fx.where == "nested"
            else {"eagle_aux_hidden_state_layer_ids": fx.ids})
        if fx.already_set:
            out.append(f"fix: the draft's config.json already sets {fx.where} `{fx.key}` = {fx.ids} "
                       f"({fx.engine} {fx.version} reads it as r = {fx.r}): the ids are right; "
                       "what still blocks serving is the caveat below")
        else:
            out.append(f"fix: in the draft's config.json set {fx.where} `{fx.key}` = {fx.ids} "
                       f"({fx.engine} {fx.version} then captures r = {fx.r})")
            out.append(f"    {json.dumps(snippet)}")
        if fx.caveat:
            out.append(f"  caveat: {fx.caveat}")
        if fx.also:
            out.append(f"  also: {fx.also}")
    return out


def _wiring_lines(res, width: int) -> list[str]:
    """The wiring behind the verdict: engine, trainer and target, then trained vs served fc sources and the
    per-fc-slice table."""
    c = res.context
    out: list[str] = []
    ctx = [f"engine {c.engine} {c.engine_version or ''}".strip() if c.engine else "engine ?",
           f"trainer {c.trainer or '?'}",
           f"target L={c.num_layers or '?'} H={c.hidden_size or '?'} ({c.arch} path)"]
    out.append("  " + " · ".join(ctx))
    t, s = res.trained, res.served
    if t.fc_r is not None:
        tgt = f", target {_lab(t.target_r)}" if t.target_r is not None else ""
        srcs = sorted(set(t.slot_source or []))
        out.append(f"  trained: fc <- [{', '.join(_lab(r) for r in t.fc_r)}]{tgt}   ({t.source}; r from "
                   f"{'/'.join(srcs) or '?'})")
    if s.r is not None:
        out.append(f"  served:  fc <- [{', '.join(_lab(r) for r in s.r)}]   ({s.source})")
    for n in s.notes or []:
        out.append(f"           {n}")
    if res.slices:
        out += columns(["fc slice", "trained", "served", "ok"],
                       [[sl.slice, _trained(sl), _lab(sl.served_r), _ok(sl.ok)]
                        for sl in res.slices], width=width, right=(0, 1, 2))
    return out


@renders(AuditResult, "text")
def text(res, width: int = TEXT_WIDTH, verbose: bool = False) -> str:
    """What ``hsf audit`` prints: the verdict and its findings first, then the fix, then the wiring behind it
    (trained vs served per fc slice); ``verbose`` adds each finding's evidence."""
    out = [f"hsf audit: {headline(res)}: {res.reason}"]
    for f in sort_findings(res.findings):
        out.append(f"  {f.severity.value.upper()} {f.kind}: {f.message}")
        if verbose:
            ev = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in f.evidence.items()}
            if ev:
                out.append(f"      evidence: {json.dumps(ev, default=str)}")
    if res.fix:
        out += _fix_lines(res.fix)
    if res.settle:
        out.append(f"to settle it: {res.settle}")
    other = [f for f in res.findings if f.severity is Severity.FAIL and f.kind not in
             ("slices", "off_by_one", "shifted", "served_data")]
    if res.wiring == "match" and other:
        out.append(f"note: the wiring matches, but {count(len(other), 'other problem')} above still "
                   f"{'needs' if len(other) == 1 else 'need'} fixing")
    out.append("")
    out += _wiring_lines(res, width)
    return fit("\n".join(shown_name(line) for line in out).rstrip(), width)


@renders(AuditResult, "explain")
def explain(res, width: int = TEXT_WIDTH) -> str:
    """Every finding with its evidence (the numbers behind the verdict)."""
    return text(res, width=width, verbose=True)
