"""Row-forensics accuracy on the corpus's row cases (``make accuracy``; see scripts/make_corpus.py).

Every row case is a real SmolLM2 capture with one corruption of issue 22's table written into it, and its
ground truth in the manifest (``row_cases``: kind, rows, offset, slots). Each file is checked by
``forensics.analysis.rows.check_rows`` data-only and with the reference (``--model``: the text's own ladder on
the file's ids, which is what the model computes; the file's ids are always a prefix of the ladder's) and
scored:

* detected: a finding of the expected kind; located: with the right rows (Jaccard ≥ ``ROW_JACCARD`` of the
  row sets, or every listed run inside the truth and the count within ``COUNT_REL`` when the list is cut),
  the right ``offset``, the right ``slots``, and for ``row_count`` both counts;
* wrong kind: a row finding (warn or fail) of a kind the file does not have;
* false alarm: a row finding (warn or fail) on a clean file (the ``clean`` row cases, and with
  ``--clean-layer-cases`` every layer-case file of the split, which are all row-clean).

Thresholds live in ``forensics/analysis/rows.py`` and were set on the tuning half; the default report is
the evaluation half, ``--corpus .cache/holdout`` the fresh holdout.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

ROW_KINDS = ("zero_rows", "nonfinite", "row_count", "token_shift", "slot_misaligned", "foreign_rows")
ROW_JACCARD = 0.9  # located: |found ∩ truth| / |found ∪ truth| of the row sets at least this
COUNT_REL = 0.02  # … or, when the finding lists only its first runs, every listed run inside the truth and
#                   its row count within this share of the truth's
FP = "final_post"


@dataclass
class RowResult:
    """What one row case gave in one mode."""

    file: str
    format: str
    variant: str
    mode: str  # data | model
    has_embedding: bool
    expected: list
    found: list  # [{kind, severity, slots, evidence}] of the row kinds
    seconds: float
    error: str | None = None
    located: dict = field(default_factory=dict)  # expected kind -> bool

    @property
    def clean(self) -> bool:
        return not self.expected

    @property
    def alarms(self) -> list[str]:
        """Row kinds found (warn or fail) that the file does not have."""
        want = {e["kind"] for e in self.expected}
        return sorted({f["kind"] for f in self.found if f["kind"] not in want and f["severity"] in ("warn", "fail")})

    def detected(self, kind: str) -> bool:
        return any(f["kind"] == kind and f["severity"] == "fail" for f in self.found)


def _rows_set(runs) -> set[int]:
    return {r for a, b in runs or [] for r in range(int(a), int(b) + 1)}


def located(e: dict, f: dict) -> bool:
    """Does finding ``f`` (a dict with evidence) locate the expected corruption ``e``?"""
    ev = f.get("evidence") or {}
    kind = e["kind"]
    if kind == "row_count":
        return (ev.get("rows"), ev.get("tokens"), ev.get("offset")) == (e["rows"], e["tokens"], e["offset"])
    if "offset" in e and ev.get("offset") != e["offset"]:
        return False
    if kind == "slot_misaligned" and sorted(ev.get("slots") or f.get("slots") or []) != e["slots"]:
        return False
    if kind in ("zero_rows", "nonfinite", "foreign_rows"):
        if sorted(ev.get("slots") or f.get("slots") or []) != e["slots"]:
            return False
        truth, got = _rows_set(e["rows"]), _rows_set(ev.get("rows"))
        listed = len(ev.get("rows") or [])
        if int(ev.get("runs", listed)) > listed:  # the finding lists only its first runs
            return got <= truth and abs(int(ev.get("count", -1)) - len(truth)) <= COUNT_REL * len(truth)
        return len(got & truth) / max(1, len(got | truth)) >= ROW_JACCARD
    return True


def _reference(ladder_path: str, n: int, cache: dict) -> dict:
    """``{r: [n, H]}``: the ladder's states on the first ``n`` ids (a causal model's states on that prefix)."""
    import json

    from safetensors.torch import load_file

    if cache.get("path") != ladder_path:
        with open(os.path.join(os.path.dirname(ladder_path), "capture.json")) as f:
            rs = json.load(f)["r"]
        lad = load_file(ladder_path)
        labels = {r: ("embed" if r == 0 else FP if r == FP else f"L{r}") for r in rs}
        cache.clear()
        cache.update(path=ladder_path, states={r: lad[f"slot_{j}.{labels[r]}"] for j, r in enumerate(rs)})
    return {r: t[:n] for r, t in cache["states"].items()}


def run_row_case(corpus: str, case: dict, mode: str, cache: dict) -> RowResult:
    from forensics.analysis.rows import check_rows
    from forensics.errors import ForensicsError
    from forensics.io.formats import load

    t0 = time.perf_counter()
    res = RowResult(case["file"], case["format"], case.get("variant", "clean"), mode,
                    bool(case.get("has_embedding", 0 in case["truth"])), list(case.get("expected") or []), [], 0.0)
    try:
        cap = load(os.path.join(corpus, case["file"]))
        ref = None
        if mode == "model":
            n = int(cap.input_ids.numel()) if cap.input_ids is not None else 0
            ref = _reference(os.path.join(corpus, case["ladder"]), n, cache)
        rep = check_rows(cap, reference=ref)
        res.found = [{"kind": f.kind, "severity": f.severity.value, "slots": list(f.slots),
                      "evidence": dict(f.evidence)} for f in rep.findings if f.kind in ROW_KINDS]
    except ForensicsError as e:
        res.error = str(e)
    res.seconds = time.perf_counter() - t0
    for e in res.expected:
        res.located[e["kind"]] = any(f["kind"] == e["kind"] and located(e, f) for f in res.found)
    return res


def evaluate_rows(corpus: str, man: dict, split: str = "eval", modes: tuple = ("data", "model"),
                  limit: int | None = None, clean_layer_cases: bool = False,
                  progress: bool = False) -> list[RowResult]:
    """Every row case of ``split`` (and, with ``clean_layer_cases``, every layer case as a clean file)."""
    cases = [c for c in man.get("row_cases") or [] if split == "all" or c["split"] == split]
    if clean_layer_cases:
        cases += [{**c, "variant": "clean_layer_case", "expected": []} for c in man["cases"]
                  if split == "all" or c["split"] == split]
    cases = sorted(cases, key=lambda c: c["ladder"])[:limit]  # one ladder load per text in model mode
    out, cache = [], {}
    for n, c in enumerate(cases):
        for m in modes:
            out.append(run_row_case(corpus, c, m, cache))
        if progress and n % 200 == 0:
            print(f"  rows: {n}/{len(cases)} files", file=sys.stderr, flush=True)
    return out


def summarize_rows(results: list[RowResult]) -> dict:
    """Per (mode, variant): files, detected, located, wrong kind, errors; per mode and kind: the totals; per
    mode: false alarms on clean files."""
    table: dict = defaultdict(Counter)
    kinds: dict = defaultdict(Counter)
    for r in results:
        t = table[(r.mode, r.variant)]
        t["n"] += 1
        t["error"] += r.error is not None
        t["wrong_kind"] += bool(r.alarms)
        if r.clean:
            t["false_alarm"] += bool(r.alarms)
            k = kinds[(r.mode, "clean")]
            k["n"] += 1
            k["false_alarm"] += bool(r.alarms)
            k["error"] += r.error is not None
            continue
        t["detected"] += all(r.detected(e["kind"]) for e in r.expected)
        t["located"] += all(r.located.values())
        for e in r.expected:
            k = kinds[(r.mode, e["kind"])]
            k["n"] += 1
            k["detected"] += r.detected(e["kind"])
            k["located"] += r.located[e["kind"]]
            k["wrong_kind"] += bool(r.alarms)
            k["error"] += r.error is not None
            if r.has_embedding:
                k["n_embed"] += 1
                k["located_embed"] += r.located[e["kind"]]
            k[f"located_{r.format}"] += r.located[e["kind"]]
            k[f"n_{r.format}"] += 1
    return {"variants": {"/".join(k): dict(v) for k, v in sorted(table.items())},
            "kinds": {"/".join(k): dict(v) for k, v in sorted(kinds.items())},
            "files": len({r.file for r in results}), "seconds": sum(r.seconds for r in results)}


def _frac(a: int, n: int) -> str:
    return f"{a}/{n} ({100 * a / n:.0f} %)" if n else "—"


def render_rows(s: dict, split: str) -> str:
    lines = [f"row forensics on the {split} split: {s['files']} files ({s['seconds']:.0f} s of row checks)", ""]
    hdr = (f"{'mode':<6} {'kind':<20} {'files':>5}  {'detected':>15}  {'located':>15}  {'with embedding':>15}  "
           f"{'wrong kind':>10}  {'unreadable':>10}")
    lines += [hdr, "-" * len(hdr)]
    order = {k: i for i, k in enumerate(ROW_KINDS + ("clean",))}
    for key, c in sorted(s["kinds"].items(), key=lambda kv: (kv[0].split("/")[0], order[kv[0].split("/")[1]])):
        mode, kind = key.split("/")
        if kind == "clean":
            lines.append(f"{mode:<6} {'clean (false alarms)':<20} {c['n']:>5}  {'':>15}  {'':>15}  {'':>15}  "
                         f"{c.get('false_alarm', 0):>10}  {c.get('error', 0):>10}")
            continue
        lines.append(f"{mode:<6} {kind:<20} {c['n']:>5}  {_frac(c.get('detected', 0), c['n']):>15}  "
                     f"{_frac(c.get('located', 0), c['n']):>15}  "
                     f"{_frac(c.get('located_embed', 0), c.get('n_embed', 0)):>15}  "
                     f"{c.get('wrong_kind', 0):>10}  {c.get('error', 0):>10}")
    lines += ["", "per corruption (file counts; located = right kind and right rows / offset / slot):"]
    hdr = (f"{'mode':<6} {'variant':<20} {'files':>5} {'detected':>9} {'located':>8} {'wrong kind':>10} "
           f"{'unreadable':>10}")
    lines += [hdr, "-" * len(hdr)]
    for key, c in s["variants"].items():
        mode, v = key.split("/")
        lines.append(f"{mode:<6} {v:<20} {c['n']:>5} {c.get('detected', 0):>9} {c.get('located', 0):>8} "
                     f"{c.get('wrong_kind', 0):>10} {c.get('error', 0):>10}")
    return "\n".join(lines)


def row_misses(results: list[RowResult]) -> list[str]:
    out = []
    for r in results:
        bad = [k for k, ok in r.located.items() if not ok]
        if bad or r.alarms or r.error:
            found = "; ".join(f"{f['kind']} {f['severity']} {_ev(f['evidence'])}" for f in r.found) or "nothing"
            out.append(f"{r.mode:<5} {r.file}: expected {[_ev(e) for e in r.expected]} found {found}"
                       + (f" ERROR {r.error}" if r.error else ""))
    return out


def _ev(d: dict) -> str:
    keep = ("kind", "rows", "offset", "slots", "tokens", "share", "count", "runs")
    return ", ".join(f"{k}={str(d[k])[:60]}" for k in keep if k in d)
