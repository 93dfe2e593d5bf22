"""Data-only off-by-one claims on the calibration corpus's ladders: never one wrong "Corrected list".

    python benchmarks/accuracy_off_by_one.py [--split eval|tune] [--draws 3] [--seed 7]

For each text of the split (``.cache/corpus/ladder/<text>``: every r of SmolLM2 on that text, bf16) it draws
layer lists ``[embed, La, Lb, Lc]`` and checks two claims against the four stored states, data only (``L = 30``
as ``capture.json`` says): ids off by one (``[L1, La+1, Lb+1, Lc+1]``) and the Kimi-style slot shift
(``[La, Lb, Lc, Ld]``). It counts, per claim kind, a single corrected list that is right or wrong, two readings
with or without the truth among them, and any slot label shown that is not the truth. The promise: no single
wrong list and no wrong label, ever (2026-12-05, eval half, 32 texts × 3 draws: ids off by one 96/96 two
readings with the truth, shifted 89/96 single right and 7/96 two readings with the truth; before, ids off by
one gave 96/96 a single wrong list).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> int:
    import forensics
    from forensics.analysis.fingerprint.core import fingerprint
    from forensics.layers import r_label

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", default="eval", choices=["eval", "tune"])
    ap.add_argument("--draws", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--corpus", default=os.path.join(ROOT, ".cache", "corpus"))
    args = ap.parse_args()
    with open(os.path.join(args.corpus, "manifest.json")) as f:
        manifest = json.load(f)
    texts = [t for t, v in manifest["texts"].items() if v["split"] == args.split]
    rng = random.Random(args.seed)
    counts: dict[str, int] = {}
    for t in texts:
        cap = forensics.load(os.path.join(args.corpus, "ladder", t, "capture_0.safetensors"))
        for _ in range(args.draws):
            a, b, c = sorted(rng.sample(range(1, 29), 3))
            truth = [0, a, b, c]
            hs = [cap.slots[r].tensor() for r in truth]
            for kind, claim in (("ids off by one", [1, a + 1, b + 1, c + 1]),
                                ("slots shifted", [a, b, c, min(30, c + max(1, c - b))])):
                fp = fingerprint(hs, input_ids=cap.input_ids, layers=claim, num_layers=30)
                s = next((x for x in fp.findings if str(x.kind) == "shifted"), None)
                if s is None:
                    key = "no shifted finding"
                elif s.evidence.get("readings"):
                    key = "two readings, truth " + ("among them" if truth in s.evidence["readings"].values()
                                                    else "NOT among them")
                else:
                    key = "single list, " + ("right" if s.evidence["corrected"] == truth else "WRONG")
                counts[f"{kind}: {key}"] = counts.get(f"{kind}: {key}", 0) + 1
                if any(sf.label is not None and sf.label != r_label(r) for sf, r in zip(fp.slots, truth, strict=True)):
                    counts[f"{kind}: a wrong label shown"] = counts.get(f"{kind}: a wrong label shown", 0) + 1
    print(f"{len(texts)} {args.split} texts × {args.draws} draws")
    for k in sorted(counts):
        print(f"  {k}: {counts[k]}")
    bad = sum(v for k, v in counts.items() if "WRONG" in k or "NOT among" in k or "wrong label" in k)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
