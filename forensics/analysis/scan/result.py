"""`ScanResult`: rows, dataset summary and anomalies of a scan, as text, HTML fragment and JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forensics.analysis.scan.rows import read_rows
from forensics.display import render
from forensics.findings import Verdict, decide, exit_code
from forensics.jsonable import data_frame


@dataclass(frozen=True, slots=True)
class Anomaly:
    """One file that differs from its dataset, or breaks on its own: the file, the kind (a finding kind, or
    ``unreadable`` / ``slot_count`` / ``hidden_size`` / ``order`` / ``role`` / ``label`` / ``outlier_norm`` /
    ``nonfinite``), the slot (None: the whole file), the message, the value beside its threshold, and the
    severity (``fail`` unless the finding behind it was milder).

    >>> Anomaly("d/x.pt", "outlier_norm", 0, "slot 0 …", 7.5, 6.0).to_dict()["severity"]
    'fail'
    """

    file: str
    kind: str
    slot: int | None
    message: str
    value: Any = None
    threshold: Any = None
    severity: str = "fail"

    def to_dict(self) -> dict:
        return {"file": self.file, "kind": self.kind, "slot": self.slot, "message": self.message,
                "value": self.value, "threshold": self.threshold, "severity": self.severity}


@dataclass
class ScanResult:
    """Result of :func:`forensics.scan`. ``rows`` (one per file, in file order; read back from ``out``
    when the scan wrote one, so memory stays bounded), ``summary`` (per format: majority slot count,
    hidden size, depth order/roles/labels, dataset per-slot norm distributions), ``anomalies``
    (:class:`Anomaly` per file and kind), ``timing``."""

    path: str
    summary: dict
    anomalies: list[Anomaly]
    timing: dict
    out: str | None = None
    _rows: list[dict] | None = field(default=None, repr=False)
    _keys: list[tuple] = field(default_factory=list, repr=False)

    @property
    def rows(self) -> list[dict]:
        if self._rows is not None:
            return self._rows

        wanted = {k: i for i, k in enumerate(self._keys)}
        got = {}
        for row in read_rows(self.out) if self.out else ():
            i = wanted.get((row.get("path"), row.get("size"), row.get("mtime_ns")))
            if i is not None:
                got[i] = {k: v for k, v in row.items() if k != "sketch"}
        return [got[i] for i in sorted(got)]

    @property
    def slots(self) -> dict[str, list[dict]]:
        """Dataset per-slot norm summaries, per format: ``{format: [{index, name, mean, std, median, …}]}``."""
        return {fmt: g["slots"] for fmt, g in self.summary["groups"].items()}

    def _evidence(self) -> tuple[list[dict], list]:
        """The severities and claim verdicts the scan's decision rests on (anomalies, dataset findings, rows)."""
        findings = [{"severity": a.severity or "fail"} for a in self.anomalies]
        findings += [{"severity": d.get("severity") or "warn"} for d in self.summary.get("dataset_findings") or []]
        verdicts = [r.get("verdict") for r in self.rows if r.get("verdict") in {v.value for v in Verdict}]
        return findings, verdicts

    def exit_code(self) -> int:
        """``forensics.findings.exit_code`` of the scan: unreadable files 2; a fail (an anomaly, a dataset-wide
        finding of severity fail) 1; a claim no fingerprinted file could decide 3; else 0."""
        return exit_code(*self._evidence(), unreadable=bool(self.summary.get("errors")))

    @property
    def verdict(self) -> Verdict:
        """The scan's one verdict over the files it read (``forensics.findings.decide``): pass / fail / cannot
        tell; unreadable files are ``summary["errors"]`` and exit 2 beside it (and make a pass "cannot tell")."""
        return decide(*self._evidence(), unreadable=bool(self.summary.get("errors")))

    @property
    def ok(self) -> bool:
        """No anomaly in any file and no finding shared by the whole dataset."""
        return not self.anomalies and not self.summary.get("dataset_findings")

    def to_dataframe(self) -> Any:
        """One row per file (``pandas.DataFrame``; pandas is the ``dataframe`` extra): its format, tokens, hidden
        size, slots, verdict, the slot labels, its findings' kinds and worst severity, and any read error."""
        rank = {"fail": 0, "warn": 1, "info": 2}
        out = []
        for r in self.rows:
            kinds = [f.get("kind") for f in r.get("findings") or [] if isinstance(f, dict)]
            sev = sorted((str(f.get("severity")) for f in r.get("findings") or [] if isinstance(f, dict)
                          and f.get("severity") in rank), key=lambda x: rank[x])
            out.append({"path": r.get("path"), "format": r.get("format"), "num_tokens": r.get("num_tokens"),
                        "hidden": r.get("hidden"), "num_slots": r.get("num_slots"), "verdict": r.get("verdict"),
                        "labels": [sl.get("label") for sl in r.get("slots") or [] if isinstance(sl, dict)],
                        "findings": kinds, "worst": sev[0] if sev else None, "error": r.get("error"),
                        "basis": r.get("basis"), "size": r.get("size"), "seconds": r.get("elapsed")})
        return data_frame(out)

    def _headline(self) -> str:
        return render(self, "headline")

    def __repr__(self) -> str:
        return render(self, "text")

    def _repr_html_(self) -> str:
        return render(self, "html")

    def to_dict(self, with_rows: bool | None = None) -> dict:
        """JSON-safe dict; rows included when held in memory (no ``out``) unless ``with_rows`` says."""
        if with_rows is None:
            with_rows = self._rows is not None
        d = {"verdict": self.verdict.value, "path": self.path, "out": self.out, "summary": self.summary,
             "anomalies": [a.to_dict() for a in self.anomalies],
             "timing": self.timing}
        if with_rows:
            d["rows"] = self.rows
        return d
