"""Dataset-level aggregation of scan rows: per-slot norm distributions, majority slot order, anomalies.

Rows are added one at a time in any order (completion order, or read back from a resumed scan's JSON
Lines file); the summary depends only on the set of rows, never on their order: histogram counts and
exact sums are order-free, and everything per file is keyed by the file's position in the sorted file
list. Memory: one :class:`~forensics.analysis.scan.sketch.LogHistogram` + exact sums per (format, slot) and a few
numbers per file (its order signature and per-slot median norm), never per-token arrays.

Files are grouped by format (a mixed directory is summarised per format); within a group the majority
slot count, hidden size, depth order, roles and labels are the reference every file is checked against.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any

import numpy as np

from forensics.analysis.rows import ROW_KINDS
from forensics.analysis.scan.result import Anomaly
from forensics.analysis.scan.sketch import BINS_PER_DECADE, SKETCH_MIN, SKETCH_REL_ERROR, LogHistogram, Moments
from forensics.findings import OUTCOME_RANK
from forensics.jsonable import json_safe

OUTLIER_Z = 6.0  # |robust z| of a file's log median token norm vs the dataset (per slot) above which it is flagged
OUTLIER_MIN_LOG_SCALE = 0.05  # floor of the robust log-scale (≈ 5 % in norm) so near-identical files are not flagged
OUTLIER_MIN_FILES = 8  # fewer files than this in a group: no outlier test (a median of few files is no reference)
MAD_TO_SIGMA = 1.4826  # MAD × this = σ for a normal distribution
MINORITY_FINDING_SHARE = 0.5  # a fingerprint finding in fewer files than this share is an anomaly per file
# findings that are anomalies even when most files have them: each names what is wrong in that file (the slot
# stored twice, its bad rows), so every file is listed
ALWAYS_ANOMALY = {"duplicate", *ROW_KINDS, "loss_mask", "stamp_drift", "stamp_shape", "stamp_moved", "stamp_unreadable"}
HIST_BINS_PER_DECADE = 20  # resolution of the per-slot histogram in the summary (for plots)
QUANTILES = {"p01": 0.01, "p05": 0.05, "p25": 0.25, "median": 0.5, "p75": 0.75, "p95": 0.95, "p99": 0.99}


def _majority(counter: Counter) -> tuple[Any, int]:
    """Most common key; ties broken by the key's repr so the choice never depends on arrival order."""
    if not counter:
        return None, 0
    key, n = min(counter.items(), key=lambda kv: (-kv[1], repr(kv[0])))
    return key, n


class _SlotAgg:
    __slots__ = ("moments", "hist", "files", "nan", "inf", "names", "labels", "roles", "medians")

    def __init__(self) -> None:
        self.moments, self.hist = Moments(), LogHistogram()
        self.files = self.nan = self.inf = 0
        self.names: Counter[str | None] = Counter()
        self.labels: Counter[str | None] = Counter()
        self.roles: Counter[str | None] = Counter()
        self.medians: dict[int, float] = {}  # file number -> median token norm


class _Group:
    def __init__(self) -> None:
        self.files = 0
        self.bytes = 0
        self.tokens: Counter[int] = Counter()  # n -> files (min/max/total from it; bounded by distinct lengths)
        self.num_slots: Counter[int] = Counter()
        self.hidden: Counter[int] = Counter()
        self.slots: dict[int, _SlotAgg] = defaultdict(_SlotAgg)
        self.sig: dict[str, dict[int, tuple]] = {"order": {}, "roles": {}, "labels": {}, "norm_order": {}}
        self.fingerprinted: set[int] = set()
        self.shape: dict[int, tuple] = {}
        self.findings: dict[str, dict[int, dict]] = defaultdict(dict)
        self.row_kinds: dict[str, Counter[str]] = defaultdict(Counter)  # kind -> {files, rows}


class Aggregator:
    """Streaming aggregation of rows into the dataset summary and anomaly list."""

    def __init__(self, paths: list[str]):
        self.paths = paths
        self.groups: dict[str, _Group] = defaultdict(_Group)
        self.anomalies: list[tuple[int, Anomaly]] = []  # (file number, anomaly)
        self.errors = 0
        self.bytes = 0
        self.rows = 0

    def add(self, no: int, row: dict) -> None:
        """Fold in the row of file number ``no`` (its index in ``paths``)."""
        self.rows += 1
        self.bytes += row.get("size") or 0
        path = row["path"]
        if row.get("error"):
            self.errors += 1
            self._anomaly(no, row.get("error_kind") or "unreadable", None, row["error"])
            return
        g = self.groups[row["format"]]
        g.files += 1
        g.bytes += row.get("size") or 0
        g.tokens[row["num_tokens"]] += 1
        g.num_slots[row["num_slots"]] += 1
        g.hidden[row["hidden"]] += 1
        g.shape[no] = (row["num_slots"], row["hidden"])
        for s, sk in zip(row["slots"], row["sketch"], strict=True):
            a = g.slots[s["index"]]
            a.files += 1
            a.moments.add_sums(sk["n"], sk["s1"], sk["s2"])
            a.hist.merge(LogHistogram.from_dict(sk["hist"]))
            a.nan += s["nan"]
            a.inf += s["inf"]
            a.names[s["name"]] += 1
            a.labels[s.get("label")] += 1
            a.roles[s.get("role")] += 1
            m = s["norm"]["median"]
            if m is not None and m > 0:
                a.medians[no] = m
            if s["nan"] or s["inf"]:
                self._anomaly(no, "nonfinite", s["index"],
                              f"{path}: slot {s['index']} ({s['name']}): NaN×{s['nan']} Inf×{s['inf']}",
                              value={"nan": s["nan"], "inf": s["inf"]})
        g.sig["norm_order"][no] = tuple(s["norm_rank"] for s in row["slots"])
        if row.get("basis") == "fingerprint":
            g.fingerprinted.add(no)
            g.sig["order"][no] = tuple(s["depth_rank"] for s in row["slots"])
            g.sig["roles"][no] = tuple(s.get("role") for s in row["slots"])
            g.sig["labels"][no] = tuple(s.get("label") for s in row["slots"])
        for f in row.get("findings") or []:
            if f["kind"] in ROW_KINDS:
                c = g.row_kinds[f["kind"]]
                c["files"] += 1
                c["rows"] += affected_rows(f, row)
            if f["kind"] == "nonfinite":  # reported from the NaN/Inf counts above
                continue
            g.findings[f["kind"]][no] = f

    def _anomaly(self, no: int, kind: str, slot: int | None, message: str, value: Any = None,
                 threshold: Any = None, severity: str = "fail") -> None:
        """A file that differs from its dataset (or breaks on its own): ``fail`` unless the finding behind it was
        made with a milder severity (``forensics.findings``)."""
        self.anomalies.append((no, Anomaly(self.paths[no], kind, slot, message, value, threshold, severity)))

    def finish(self) -> tuple[dict, list[Anomaly]]:
        """The summary dict and the sorted anomaly list (file order, then kind, then slot)."""
        groups = {fmt: self._finish_group(g) for fmt, g in sorted(self.groups.items())}
        anomalies = [a for _, a in sorted(self.anomalies, key=lambda x: (x[0], x[1].kind,
                                                                           -1 if x[1].slot is None else x[1].slot))]
        summary = {
            "files": self.rows, "bytes": self.bytes, "errors": self.errors,
            "groups": groups,
            "anomaly_counts": dict(sorted(Counter(a.kind for a in anomalies).items())),
            # row forensics over every group: files with each row finding and the rows it concerns
            "rows": {k: {"files": sum(g["rows"].get(k, {}).get("files", 0) for g in groups.values()),
                         "rows": sum(g["rows"].get(k, {}).get("rows", 0) for g in groups.values())}
                     for k in ROW_KINDS if any(k in g["rows"] for g in groups.values())},
            # fingerprint findings shared by most files of a format: the whole dataset is mis-wired that way
            "dataset_findings": [{"format": fmt, "kind": kind, "severity": f["severity"], "files": f["files"],
                                  "of": g["files"], "example": f["example"]}
                                 for fmt, g in groups.items() for kind, f in g["findings"].items()
                                 if f["dataset_wide"]],
            "thresholds": {"OUTLIER_Z": OUTLIER_Z, "OUTLIER_MIN_LOG_SCALE": OUTLIER_MIN_LOG_SCALE,
                           "OUTLIER_MIN_FILES": OUTLIER_MIN_FILES,
                           "MINORITY_FINDING_SHARE": MINORITY_FINDING_SHARE,
                           "SKETCH_REL_ERROR": SKETCH_REL_ERROR},
        }
        return summary, anomalies

    def _finish_group(self, g: _Group) -> dict:
        n_slots, _ = _majority(g.num_slots)
        hidden, _ = _majority(g.hidden)
        for no, (k, h) in sorted(g.shape.items()):
            if k != n_slots:
                self._anomaly(no, "slot_count", None, f"{self.paths[no]}: {k} slots, the majority of this "
                              f"format's files have {n_slots}", value=k, threshold=n_slots)
            elif h != hidden:
                self._anomaly(no, "hidden_size", None, f"{self.paths[no]}: hidden size {h}, majority {hidden}",
                              value=h, threshold=hidden)
        majority = {}
        kinds = {"order": "order", "roles": "role", "labels": "label", "norm_order": "order"}
        for what, sigs in g.sig.items():
            same = {no: s for no, s in sigs.items() if len(s) == n_slots}
            ref, count = _majority(Counter(same.values()))
            majority[what] = {"value": list(ref) if ref is not None else None, "files": count, "of": len(same)}
            if ref is None or all(v is None for v in ref):
                continue  # e.g. no labels without a declared/expected layer list: nothing to compare
            for no, s in sorted(same.items()):
                if s == ref or (what == "norm_order" and no in g.fingerprinted):
                    continue  # a fingerprinted file is judged on its fingerprint depth order, not norm ranks
                basis = " (ranks of median token norms)" if what == "norm_order" else ""
                self._anomaly(no, kinds[what], None, f"{self.paths[no]}: slot {what.replace('_', ' ')}{basis} "
                              f"{list(s)}, but the majority of files have {list(ref)} ({count} of {len(same)})",
                              value=list(s), threshold=list(ref))
        findings = {}
        for kind, per_file in sorted(g.findings.items()):
            share = len(per_file) / g.files
            first = min(per_file)
            findings[kind] = {"files": len(per_file), "share": round(share, 4),
                              "dataset_wide": share >= MINORITY_FINDING_SHARE,
                              "severity": max((f.get("severity") or "warn" for f in per_file.values()),
                                              key=lambda v: OUTCOME_RANK.get(v, 1)),
                              "example": {"file": self.paths[first], "message": per_file[first]["message"]}}
            if kind in ALWAYS_ANOMALY or share < MINORITY_FINDING_SHARE:
                for no, f in sorted(per_file.items()):
                    self._anomaly(no, kind, (f.get("slots") or [None])[0], f"{self.paths[no]}: {f['message']}",
                                  value=f.get("slots"), severity=f.get("severity") or "warn")
        slots = [self._finish_slot(i, a) for i, a in sorted(g.slots.items())]
        toks = sorted(g.tokens)
        return {
            "files": g.files, "bytes": g.bytes, "num_slots": n_slots, "hidden": hidden,
            "tokens": {"total": sum(k * v for k, v in g.tokens.items()), "min": toks[0] if toks else None,
                       "max": toks[-1] if toks else None},
            "majority": majority, "findings": findings, "slots": slots,
            "rows": {k: dict(c) for k, c in sorted(g.row_kinds.items())},
        }

    def _finish_slot(self, index: int, a: _SlotAgg) -> dict:
        q = a.hist.quantile(list(QUANTILES.values()))
        assert isinstance(q, list)
        d = {"index": index, "name": _majority(a.names)[0], "label": _majority(a.labels)[0],
             "role": _majority(a.roles)[0], "files": a.files, "tokens": a.moments.n,
             "mean": json_safe(a.moments.mean()), "std": json_safe(a.moments.std()),
             "min": json_safe(a.hist.min), "max": json_safe(a.hist.max),
             **{k: json_safe(v) for k, v in zip(QUANTILES, q, strict=True)},
             "nan": a.nan, "inf": a.inf, "outliers": None, "histogram": _coarse(a.hist)}
        if len(a.medians) >= OUTLIER_MIN_FILES:
            nos = np.array(sorted(a.medians))
            logm = np.log(np.array([a.medians[n] for n in nos], dtype=np.float64))
            center = float(np.median(logm))
            scale = max(MAD_TO_SIGMA * float(np.median(np.abs(logm - center))), OUTLIER_MIN_LOG_SCALE)
            z = (logm - center) / scale
            d["outliers"] = {"file_median": math.exp(center), "log_scale": scale, "z_threshold": OUTLIER_Z,
                             "count": int((np.abs(z) > OUTLIER_Z).sum())}
            for no, zi, lm in zip(nos.tolist(), z.tolist(), logm.tolist(), strict=True):
                if abs(zi) > OUTLIER_Z:
                    self._anomaly(no, "outlier_norm", index,
                                  f"{self.paths[no]}: slot {index} ({d['name']}) median token norm "
                                  f"{math.exp(lm):.4g} vs dataset median {math.exp(center):.4g}: robust z "
                                  f"{zi:+.1f} (log scale, |z| > OUTLIER_Z={OUTLIER_Z:g})",
                                  value=round(zi, 3), threshold=OUTLIER_Z)
        return d


def affected_rows(finding: dict, row: dict) -> int:
    """Rows a row finding concerns: its ``count`` (or the length of its ``rows`` runs); for ``row_count`` the
    ids without a row (or rows without an id); for a shift every row of the file.

    >>> affected_rows({"kind": "zero_rows", "evidence": {"rows": [[96, 159]]}}, {})
    64
    >>> affected_rows({"kind": "row_count", "evidence": {"rows": 180, "tokens": 200}}, {})
    20
    """
    ev = finding.get("evidence") or {}
    kind = finding.get("kind")
    try:
        if kind == "row_count":
            return abs(int(ev["tokens"]) - int(ev["rows"]))
        if kind in ("token_shift", "slot_misaligned"):
            return int((row.get("rows") or {}).get("num_rows") or row.get("num_tokens") or 0)
        if ev.get("count") is not None:
            return int(ev["count"])
        return sum(int(b) - int(a) + 1 for a, b in ev.get("rows") or [])
    except (KeyError, TypeError, ValueError):  # a finding without the evidence (an older scan row)
        return 0


def _coarse(h: LogHistogram) -> dict:
    """The slot's token-norm histogram at ``HIST_BINS_PER_DECADE`` (bin j spans ``10**(log10_lo + j/b)``
    to ``10**(log10_lo + (j+1)/b)``), trimmed to the non-empty run; zero/under/over counted apart."""
    f = BINS_PER_DECADE // HIST_BINS_PER_DECADE
    c = h.counts.reshape(-1, f).sum(1)
    nz = np.nonzero(c)[0]
    i0, i1 = (int(nz[0]), int(nz[-1]) + 1) if nz.size else (0, 0)
    return {"log10_lo": round(math.log10(SKETCH_MIN) + i0 / HIST_BINS_PER_DECADE, 6),
            "bins_per_decade": HIST_BINS_PER_DECADE, "counts": c[i0:i1].tolist(),
            "zero": h.zero, "under": h.under, "over": h.over}

