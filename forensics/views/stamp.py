"""Text of ``hsf stamp`` and ``hsf verify`` results (one line for ``__repr__``, a block for the CLI)."""

from __future__ import annotations

import os

from forensics.analysis.stamp import StampResult, VerifyResult
from forensics.display import renders
from forensics.layers import r_label
from forensics.views.format import count, headline_word, shown_name


@renders(StampResult, "line")
def stamp_line(res) -> str:
    bad = len(res.failed)
    return f"StampResult({count(len(res.files) - bad, 'file')} stamped" + (f", {bad} left unchanged)" if bad else ")")


@renders(VerifyResult, "line")
def verify_line(res) -> str:
    bad = sum(f.status != "ok" for f in res.files)
    return f"VerifyResult({res.verdict.value}: {len(res.files) - bad}/{len(res.files)} file(s) match their stamp)"


def _rel(path: str) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return path


def stamp_text(res) -> str:
    bad = res.failed
    out = [f"hsf stamp: {count(len(res.files) - len(bad), 'file')} stamped"
           + (f", {len(bad)} NOT stamped (left unchanged)" if bad else "")]
    for f in res.files:
        if f.error is not None:
            out.append(f"  NOT stamped {_rel(f.path)}: {f.error}")
            continue
        labels = ", ".join(r_label(r) for r in f.r)
        where = "header __metadata__" if f.where.startswith("safetensors") else _rel(f.where)
        out.append(f"  {_rel(f.path)}: [{labels}] -> {where}")
        out += [f"    note: {n}" for n in f.notes]
    return "\n".join(shown_name(line) for line in out)  # a file name cannot split a line


def summary(stamp: dict | None) -> str | None:
    """One line from a stamp (or its ``brief``): the labels per slot, the target and the producer."""
    if not stamp:
        return None
    labels = stamp.get("labels") or [s.get("label") for s in stamp.get("slots") or []]
    tgt = stamp.get("target") or {}
    bits = [f"[{', '.join(x or '?' for x in labels)}]"]
    if tgt.get("model") or tgt.get("num_layers"):
        bits.append(f"{tgt.get('model') or '?'} L={tgt.get('num_layers') or '?'}")
    if stamp.get("producer"):
        bits.append(str(stamp["producer"]))
    return " · ".join(bits)


def verify_text(res) -> str:
    mb = res.bytes_read / 1e6
    rate = f", {mb / res.seconds:.0f} MB/s" if res.seconds > 0 else ""
    head = headline_word(res.verdict)
    out = [f"hsf verify: {head}: {sum(f.status == 'ok' for f in res.files)}/{len(res.files)} file(s) match their "
           f"stamp ({mb:.1f} MB in {res.seconds:.2f} s{rate})"]
    for f in res.files:
        tag = "ok  " if f.status == "ok" else "----" if f.status == "unstamped" else "FAIL"
        line = f"  {tag} {_rel(f.path)}"
        s = summary(f.stamp) if f.stamp else None
        old = f.status == "ok" and f.stamp is not None and f.stamp.get("version", 1) == 1
        out.append(line + (f"  {s}" if s else "") + ("" if f.status == "ok" else f": {f.message}")
                   + ("  (a version-1 stamp: its checksum misses swapped words and paired edits; re-stamp)"
                      if old else ""))
    return "\n".join(shown_name(line) for line in out)  # a file name cannot split a line
