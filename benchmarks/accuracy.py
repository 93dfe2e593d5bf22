"""Accuracy of the fingerprint's verdicts on the calibration corpus (evaluation half), per format and claim.

    make accuracy                                    # builds .cache/corpus if missing, then this
    python benchmarks/accuracy.py [--split eval|tune|all] [--mode data|exact|both] [--json out.json]

For every case file (a real SmolLM2 capture written as a trainer writes it, with a true r list and a claim;
see scripts/make_corpus.py) it runs the fingerprint data-only and in exact mode (the text's own ladder
capture as the reference, which is what ``--model`` computes) and reports:

* per format × claim kind × mode: PASS / FAIL / CANNOT TELL counts, the accuracy of the decided verdicts
  (PASS when the claim equals the truth, FAIL otherwise) and how often a decided verdict was wrong;
* data-only evidence: embedding found (every r = 0 slot, and no other, has the embedding role), depth order
  of 4-slot files (the fingerprint's depth order never puts a deeper slot before a shallower one), a
  post-norm final never ranked shallowest, post-norm role found, and bit-identical slots sharing one label.

Then the row-forensics table (``benchmarks/accuracy_rows.py``): per corruption kind, detection and location
data-only and with the model, and false alarms on clean files (``--what rows`` runs only that part), and the
below-the-row table (``benchmarks/accuracy_residual.py``: ``not_residual``, ``context_lost``; ``--what residual``).

Thresholds are tuned on the tuning half only; the default report is the evaluation half.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # accuracy_rows beside this file
DEFAULT_CORPUS = os.path.join(ROOT, ".cache", "corpus")
FP = "final_post"
PASS, FAIL, CANNOT_TELL = "PASS", "FAIL", "CANNOT TELL"

# the floors of the "Done means" (evaluation half)
FLOOR_WRONG = 0.01  # decided verdicts wrong ≤ 1 %
FLOOR_EMBED = 1.0  # embedding found 100 %
FLOOR_ORDER = 0.99  # depth order of 4-slot sets ≥ 99 %
try:  # the order confidence at which the verdict engine lets a contradicted order FAIL a claim
    from forensics.analysis.fingerprint.verdicts import ORDER_DECIDES
except ImportError:  # no verdict engine yet
    ORDER_DECIDES = 0.75


def _depth(r) -> float:
    return float("inf") if r == FP else float(r)


@dataclass
class CaseResult:
    """What one case file gave in one mode (data-only or exact)."""

    file: str
    format: str
    kind: str
    mode: str
    truth: list
    claim: list
    verdict: str | None  # PASS / FAIL / CANNOT TELL, or None when no verdict engine is available
    roles: list
    depth_order: list
    labels: list
    order_confidence: float
    seconds: float
    notes: list = field(default_factory=list)

    @property
    def expected(self) -> str:
        return PASS if list(self.claim) == list(self.truth) else FAIL

    @property
    def embedding_found(self) -> bool:
        return all((r == 0) == (role == "embedding") for r, role in zip(self.truth, self.roles, strict=True))

    @property
    def order_ok(self) -> bool:
        d = [_depth(self.truth[i]) for i in self.depth_order]
        return all(a <= b for a, b in zip(d, d[1:], strict=False))

    @property
    def post_shallowest(self) -> bool | None:
        if FP not in self.truth:
            return None
        return self.truth[self.depth_order[0]] == FP

    @property
    def post_role_found(self) -> bool | None:
        if FP not in self.truth:
            return None
        return all((r == FP) == (role == "final_postnorm") for r, role in zip(self.truth, self.roles, strict=True))

    @property
    def identical_share_label(self) -> bool | None:
        dup = [r for r in set(map(str, self.truth)) if [str(t) for t in self.truth].count(r) > 1]
        if not dup:
            return None
        ok = True
        for r in dup:
            labels = {self.labels[i] for i, t in enumerate(self.truth) if str(t) == r}
            ok &= len(labels) == 1
        return ok


def verdict_of(fp) -> str | None:
    """The file-level verdict of a fingerprint through the project's verdict engine (None if it has none)."""
    v = getattr(fp, "verdict", None)
    if v is None:
        return None
    v = getattr(v, "value", v)
    v = str(getattr(v, "name", v)).upper().replace("_", " ")
    return {"PASS": PASS, "FAIL": FAIL, "CANNOT TELL": CANNOT_TELL, "CANNOTTELL": CANNOT_TELL}.get(v, v)


def run_case(corpus: str, case: dict, mode: str) -> CaseResult:
    from forensics.analysis.fingerprint.core import fingerprint
    from forensics.io.formats import load

    t0 = time.perf_counter()
    cap = load(os.path.join(corpus, case["file"]))
    model = os.path.join(corpus, case["ladder"]) if mode == "exact" else None
    fp = fingerprint(cap, layers=case["claim"], model=model, expected_source="claim of the accuracy benchmark")
    return CaseResult(file=case["file"], format=case["format"], kind=case["kind"], mode=mode,
                      truth=case["truth"], claim=case["claim"], verdict=verdict_of(fp),
                      roles=[s.role for s in fp.slots], depth_order=list(fp.depth_order),
                      labels=[s.label for s in fp.slots], order_confidence=float(fp.order_confidence),
                      seconds=time.perf_counter() - t0)


def load_manifest(corpus: str) -> dict:
    path = os.path.join(corpus, "manifest.json")
    if not os.path.isfile(path):
        raise SystemExit(f"no corpus at {corpus} (run: python scripts/make_corpus.py --out {corpus})")
    with open(path) as f:
        return json.load(f)


def evaluate(corpus: str = DEFAULT_CORPUS, split: str = "eval", modes: tuple = ("data", "exact"),
             limit: int | None = None, progress: bool = False) -> list[CaseResult]:
    """Run every case of ``split`` in every mode (one torch thread: the machine is shared)."""
    import torch

    torch.set_num_threads(1)
    man = load_manifest(corpus)
    cases = [c for c in man["cases"] if split == "all" or c["split"] == split][:limit]
    out = []
    for n, c in enumerate(cases):
        for m in modes:
            out.append(run_case(corpus, c, m))
        if progress and n % 50 == 0:
            print(f"  {n}/{len(cases)} cases", file=sys.stderr, flush=True)
    return out


def summarize(results: list[CaseResult]) -> dict:
    """Counts per (mode, format, kind), the decided-verdict accuracy and the evidence rates."""
    table: dict = defaultdict(Counter)
    for r in results:
        key = (r.mode, r.format, r.kind)
        table[key]["n"] += 1
        if r.verdict is not None:
            table[key][r.verdict] += 1
            if r.verdict in (PASS, FAIL):
                table[key]["decided"] += 1
                table[key]["wrong"] += r.verdict != r.expected
    data = [r for r in results if r.mode == "data"]

    def rate(xs: list) -> dict:
        xs = [x for x in xs if x is not None]
        return {"ok": sum(xs), "n": len(xs), "rate": (sum(xs) / len(xs)) if xs else None}

    four = [r for r in data if len(r.truth) == 4]
    evidence = {
        "embedding_found": rate([r.embedding_found for r in data]),
        "depth_order_4slot": rate([r.order_ok for r in four]),
        "postnorm_never_shallowest": rate([(not r.post_shallowest) if r.post_shallowest is not None else None
                                           for r in data]),
        "postnorm_role_found": rate([r.post_role_found for r in data]),
        "identical_share_label": rate([r.identical_share_label for r in data]),
    }
    per_mode = {}
    for m in sorted({r.mode for r in results}):
        rs = [r for r in results if r.mode == m and r.verdict is not None]
        dec = [r for r in rs if r.verdict in (PASS, FAIL)]
        wrong = [r for r in dec if r.verdict != r.expected]
        shifted = [r for r in rs if r.kind.startswith("shifted")]
        per_mode[m] = {"cases": len(rs), "decided": len(dec), "wrong": len(wrong),
                       "wrong_rate": len(wrong) / len(dec) if dec else None,
                       "shifted_fail": rate([r.verdict == FAIL for r in shifted]),
                       "verdicts": dict(Counter(r.verdict for r in rs))}
    wrong_order = [r for r in data if not r.order_ok]
    evidence["wrong_order_confident"] = {"ok": sum(r.order_confidence >= ORDER_DECIDES for r in wrong_order),
                                         "n": len(wrong_order), "rate": None}
    return {"table": {"/".join(k): dict(v) for k, v in sorted(table.items())}, "evidence": evidence,
            "modes": per_mode, "cases": len({r.file for r in results}),
            "seconds": sum(r.seconds for r in results)}


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def render(s: dict, split: str) -> str:
    lines = [f"accuracy on the {split} half: {s['cases']} case files ({s['seconds']:.0f} s of fingerprinting)", ""]
    hdr = f"{'mode':<6} {'format':<15} {'claim kind':<18} {'n':>4} {'PASS':>5} {'FAIL':>5} {'CANNOT':>7} " \
          f"{'decided acc':>12} {'wrong':>6}"
    lines += [hdr, "-" * len(hdr)]
    for key, c in s["table"].items():
        mode, fmt, kind = key.split("/")
        dec = c.get("decided", 0)
        acc = (dec - c.get("wrong", 0)) / dec if dec else None
        lines.append(f"{mode:<6} {fmt:<15} {kind:<18} {c['n']:>4} {c.get(PASS, 0):>5} {c.get(FAIL, 0):>5} "
                     f"{c.get(CANNOT_TELL, 0):>7} {_pct(acc):>12} {c.get('wrong', 0):>6}")
    lines.append("")
    for m, v in s["modes"].items():
        if not v["cases"]:
            lines.append(f"{m}: no verdicts (the fingerprint has no verdict engine yet)")
            continue
        sh = v["shifted_fail"]
        lines.append(f"{m}: {v['decided']}/{v['cases']} decided, {v['wrong']} wrong ({_pct(v['wrong_rate'])}; floor "
                     f"≤ {FLOOR_WRONG:.0%}); shifted lists FAIL {sh['ok']}/{sh['n']} ({_pct(sh['rate'])})")
    e = s["evidence"]
    names = {"embedding_found": f"embedding found (floor {FLOOR_EMBED:.0%})",
             "depth_order_4slot": f"depth order of 4-slot files (floor {FLOOR_ORDER:.0%})",
             "postnorm_never_shallowest": "post-norm final not ranked shallowest (floor 100 %)",
             "postnorm_role_found": "post-norm final found (role, no false positives)",
             "identical_share_label": "bit-identical slots share a label (floor 100 %)"}
    lines.append("")
    lines += [f"data-only {names[k]:<52} {v['ok']}/{v['n']} = {_pct(v['rate'])}" for k, v in e.items() if k in names]
    w = e["wrong_order_confident"]
    lines.append(f"data-only {'wrong depth orders at confidence ≥ ' + str(ORDER_DECIDES):<52} {w['ok']} of {w['n']} "
                 "(these are the ones a verdict could act on)")
    return "\n".join(lines)


def failures(results: list[CaseResult]) -> list[str]:
    out = []
    for r in results:
        why = []
        if r.verdict in (PASS, FAIL) and r.verdict != r.expected:
            why.append(f"verdict {r.verdict}, expected {r.expected}")
        if r.mode == "data":
            if not r.embedding_found:
                why.append("embedding role")
            if len(r.truth) == 4 and not r.order_ok:
                why.append("depth order")
            if r.post_shallowest:
                why.append("post-norm shallowest")
            if r.identical_share_label is False:
                why.append("identical slots labelled apart")
        if why:
            out.append(f"{r.mode:<5} {r.file}: truth {r.truth} claim {r.claim} roles {r.roles} order {r.depth_order} "
                       f"(confidence {r.order_confidence:.2f}) labels {r.labels}: {'; '.join(why)}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=DEFAULT_CORPUS)
    ap.add_argument("--split", choices=("eval", "tune", "all"), default="eval",
                    help="eval (default): the held-out half; tune: the half the thresholds were set on")
    ap.add_argument("--mode", choices=("data", "exact", "both"), default="both")
    ap.add_argument("--limit", type=int, help="only the first N cases (a quick look)")
    ap.add_argument("--json", help="also write the summary and every case result to this file")
    ap.add_argument("--failures", action="store_true", help="list every case that missed")
    ap.add_argument("--what", choices=("layers", "rows", "residual", "both"), default="both",
                    help="the layer verdicts, the row-forensics table, the below-the-row table "
                         "(accuracy_residual.py), or all three (default: both)")
    ap.add_argument("--clean-layer-cases", action="store_true",
                    help="also count every layer-case file as a clean file for row false alarms")
    a = ap.parse_args(argv)
    modes = ("data", "exact") if a.mode == "both" else (a.mode,)
    doc: dict = {}
    if a.what in ("layers", "both"):
        res = evaluate(a.corpus, a.split, modes, a.limit, progress=True)
        s = summarize(res)
        print(render(s, a.split))
        if a.failures:
            print("\n".join(["", "misses:"] + failures(res)))
        doc.update(summary=s, results=[r.__dict__ for r in res])
    if a.what in ("rows", "both"):
        import torch
        from accuracy_rows import evaluate_rows, render_rows, row_misses, summarize_rows

        torch.set_num_threads(1)
        rmodes = tuple("model" if m == "exact" else m for m in modes)
        rres = evaluate_rows(a.corpus, load_manifest(a.corpus), a.split, rmodes, a.limit, a.clean_layer_cases,
                             progress=True)
        rs = summarize_rows(rres)
        print(("\n" if doc else "") + render_rows(rs, a.split))
        if a.failures:
            print("\n".join(["", "row misses:"] + row_misses(rres)))
        doc.update(rows_summary=rs, rows_results=[r.__dict__ for r in rres])
    if a.what in ("residual", "both") and load_manifest(a.corpus).get("residual_cases"):
        from accuracy_residual import evaluate as evaluate_residual
        from accuracy_residual import render as render_residual
        from accuracy_residual import summarize as summarize_residual

        rmodes = tuple("model" if m == "exact" else m for m in modes)
        xres = evaluate_residual(a.corpus, a.split, rmodes, a.clean_layer_cases, a.limit, progress=True)
        xs = summarize_residual(xres)
        print(("\n" if doc else "") + render_residual(xs, a.split))
        doc.update(residual_summary=xs, residual_results=xres)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
