"""`ScanResult`: rows, dataset summary and anomalies of a scan, as text, HTML fragment and JSON."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .render import esc, html_table

MAX_LISTED_ANOMALIES = 200  # anomalies shown in repr/HTML (all are in .anomalies and to_dict())
MAX_LISTED_SLOTS = 12  # slot lines per format in repr (a 32-slot ladder would drown the anomalies)


def _order(g: dict) -> tuple[str, dict]:
    """The group's majority depth order (fingerprint) or, without fingerprints, its norm-rank order."""
    m = g["majority"]
    if m["order"]["value"] is not None:
        return "depth order", m["order"]
    return "norm-rank order", m["norm_order"]


def _g(x) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        ax = abs(x)
        return f"{x:.3g}" if ax != 0 and (ax >= 1e5 or ax < 1e-3) else (f"{x:.4g}" if ax >= 100 else f"{x:.3g}")
    return str(x)


def _short(xs, k: int = 8) -> str:
    xs = list(xs or [])
    return "[" + ", ".join("?" if x is None else str(x) for x in xs[:k]) + (", …" if len(xs) > k else "") + "]"


@dataclass
class ScanResult:
    """Result of :func:`forensics.scan`. ``rows`` (one per file, in file order; read back from ``out``
    when the scan wrote one, so memory stays bounded), ``summary`` (per format: majority slot count,
    hidden size, depth order/roles/labels, dataset per-slot norm distributions), ``anomalies``
    (``[{file, kind, slot, message, value, threshold}]``), ``timing``."""

    path: str
    summary: dict
    anomalies: list[dict]
    timing: dict
    out: str | None = None
    _rows: list[dict] | None = field(default=None, repr=False)
    _keys: list[tuple] = field(default_factory=list, repr=False)

    @property
    def rows(self) -> list[dict]:
        if self._rows is not None:
            return self._rows
        from .scan import read_rows

        wanted = {k: i for i, k in enumerate(self._keys)}
        got = {}
        for row in read_rows(self.out):
            i = wanted.get((row.get("path"), row.get("size"), row.get("mtime_ns")))
            if i is not None:
                got[i] = {k: v for k, v in row.items() if k != "sketch"}
        return [got[i] for i in sorted(got)]

    @property
    def slots(self) -> dict[str, list[dict]]:
        """Dataset per-slot norm summaries, per format: ``{format: [{index, name, mean, std, median, …}]}``."""
        return {fmt: g["slots"] for fmt, g in self.summary["groups"].items()}

    @property
    def ok(self) -> bool:
        """No anomaly in any file and no finding shared by the whole dataset."""
        return not self.anomalies and not self.summary.get("dataset_findings")

    def _headline(self) -> str:
        s, t = self.summary, self.timing
        counts = ", ".join(f"{k}×{v}" for k, v in s["anomaly_counts"].items()) or "none"
        speed = f"; {t['gb_per_s']:.2f} GB/s, {t['files_per_s']:.1f} files/s" if t.get("gb_per_s") else ""
        resumed = f" ({t['resumed_files']} from the resumed output)" if t.get("resumed_files") else ""
        wide = "; dataset-wide: " + ", ".join(f"{d['kind']} ({d['files']}/{d['of']} {d['format']})"
                                             for d in s.get("dataset_findings") or []) \
            if s.get("dataset_findings") else ""
        return (f"scan of {self.path}: {s['files']} files{resumed}, {s['bytes'] / 1e9:.3g} GB, {s['errors']} "
                f"unreadable; anomalies: {counts}{wide}{speed}")

    def __repr__(self) -> str:
        lines = [self._headline()]
        for fmt, g in self.summary["groups"].items():
            what, order = _order(g)
            lines.append(f"  {fmt}: {g['files']} files, {g['num_slots']} slots, hidden {g['hidden']}, tokens "
                         f"{g['tokens']['min']}–{g['tokens']['max']}; majority {what} {_short(order['value'])} "
                         f"({order['files']}/{order['of']})")
            labels = g["majority"]["labels"]["value"]
            if labels and any(labels):
                lines.append(f"    majority labels {_short(labels)}")
            for kind, f in g["findings"].items():
                if f["dataset_wide"]:
                    lines.append(f"    ! {kind} in {f['files']}/{g['files']} files (dataset-wide, so not listed per "
                                 f"file), e.g. {os.path.basename(f['example']['file'])}: {f['example']['message']}")
            for sl in g["slots"][:MAX_LISTED_SLOTS]:
                lines.append(f"    [{sl['index']}] {sl['name']}{' ' + sl['label'] if sl.get('label') else ''}: "
                             f"‖x‖ median {_g(sl['median'])} p5–p95 [{_g(sl['p05'])}, {_g(sl['p95'])}] "
                             f"μ {_g(sl['mean'])} σ {_g(sl['std'])} over {sl['tokens']} tokens")
            if len(g["slots"]) > MAX_LISTED_SLOTS:
                lines.append(f"    … {len(g['slots']) - MAX_LISTED_SLOTS} more slots")
        for a in self.anomalies[:MAX_LISTED_ANOMALIES]:
            lines.append(f"  {a['kind']}: {a['message']}")
        if len(self.anomalies) > MAX_LISTED_ANOMALIES:
            lines.append(f"  … {len(self.anomalies) - MAX_LISTED_ANOMALIES} more anomalies (see to_dict())")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        parts = [f"<div class='hsf-caption'><b>{esc(self._headline())}</b></div>"]
        for fmt, g in self.summary["groups"].items():
            what, order = _order(g)
            parts.append(
                f"<div class='hsf-caption'>{esc(fmt)}: {g['files']} files, {g['num_slots']} slots, hidden "
                f"{esc(g['hidden'])}; majority {esc(what)} {esc(_short(order['value']))} "
                f"({order['files']}/{order['of']} files)</div>")
            wide = [[kind, f"{f['files']}/{g['files']}", os.path.basename(f["example"]["file"]),
                     f["example"]["message"]] for kind, f in g["findings"].items() if f["dataset_wide"]]
            if wide:
                parts.append(html_table(["dataset-wide finding", "files", "example", "message"], wide,
                                        cls="hsf-scan-findings"))
            rows = [[sl["index"], sl["name"], sl.get("label") or "—", sl.get("role") or "—", sl["files"],
                     sl["tokens"], _g(sl["mean"]), _g(sl["std"]), _g(sl["p05"]), _g(sl["median"]), _g(sl["p95"]),
                     _g(sl["max"]), f"{sl['nan']}/{sl['inf']}",
                     "—" if not sl.get("outliers") else sl["outliers"]["count"]] for sl in g["slots"]]
            parts.append(html_table(["#", "slot", "label", "role", "files", "tokens", "‖x‖ mean", "std", "p5",
                                     "median", "p95", "max", "NaN/Inf", "outlier files"], rows, cls="hsf-scan-slots"))
        if self.anomalies:
            shown = self.anomalies[:MAX_LISTED_ANOMALIES]
            parts.append(html_table(
                ["file", "kind", "slot", "message"],
                [[os.path.basename(a["file"]), a["kind"], "—" if a["slot"] is None else a["slot"], a["message"]]
                 for a in shown], cls="hsf-scan-anomalies"))
            if len(self.anomalies) > len(shown):
                parts.append(f"<div class='hsf-caption'>… {len(self.anomalies) - len(shown)} more anomalies</div>")
        else:
            parts.append("<div class='hsf-caption'>no anomalies</div>")
        return "\n".join(parts)

    def to_dict(self, with_rows: bool | None = None) -> dict:
        """JSON-safe dict; rows included when held in memory (no ``out``) unless ``with_rows`` says."""
        if with_rows is None:
            with_rows = self._rows is not None
        d = {"path": self.path, "out": self.out, "summary": self.summary, "anomalies": self.anomalies,
             "timing": self.timing}
        if with_rows:
            d["rows"] = self.rows
        return d
