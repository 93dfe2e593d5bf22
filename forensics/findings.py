"""One vocabulary of problems and verdicts: ``Finding`` + ``Severity``, ``Verdict``, and the exit-code table.

A finding's severity is set where the finding is made and read by every view (text, JSON, notebook HTML,
report, sample browser, scan) and by every command's exit code — no view keeps its own table
(ydata-profiling's one ``Alert`` class is the model). Severities:

* ``fail``: the evidence excludes a claim, or the data is broken (NaN, all-zero, a slot captured twice);
* ``warn``: something to look at that contradicts no claim;
* ``info``: a fact.

A claim (what a slot is said to be) gets a ``Verdict``: ``pass`` when the evidence supports it, ``fail``
when the evidence excludes it, ``cannot tell`` when it does neither (then ``settle`` says what would).

Exit codes, the same for every ``hsf`` command (:func:`exit_code`):

====  ==========================================================
0     no fail (and nothing left undecided)
1     a fail (``hsf report --fail-on warn``: a warn too)
2     unreadable input or bad arguments
3     cannot tell: no fail, but some claim could not be decided
====  ==========================================================

Example:
    >>> f = Finding("shifted", Severity.FAIL, [0, 1, 2, 3], "the list is shifted by one slot")
    >>> f.severity.value, exit_code([f])
    ('fail', 1)
    >>> exit_code([], verdicts=[Verdict.PASS, Verdict.CANNOT_TELL])
    3
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Severity(StrEnum):
    """How bad a finding is; ordered ``info < warn < fail``."""

    INFO = "info"
    WARN = "warn"
    FAIL = "fail"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]



_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARN: 1, Severity.FAIL: 2}


class Verdict(StrEnum):
    """The answer to one claim: the evidence supports it, excludes it, or does neither."""

    PASS = "pass"
    FAIL = "fail"
    CANNOT_TELL = "cannot tell"

    @property
    def rank(self) -> int:
        """Worst first: fail 2, cannot tell 1, pass 0."""
        return _VERDICT_RANK[self]



_VERDICT_RANK = {Verdict.PASS: 0, Verdict.CANNOT_TELL: 1, Verdict.FAIL: 2}

EXIT_OK = 0  # no fail, nothing undecided
EXIT_FAIL = 1  # a fail: the evidence excludes a claim, or the data is broken
EXIT_BAD_INPUT = 2  # unreadable input or bad arguments
EXIT_CANNOT_TELL = 3  # no fail, but a claim could not be decided (non-zero: a CI gate never passes on it)
EXIT_CODES = {EXIT_OK: "no fail", EXIT_FAIL: "a fail", EXIT_BAD_INPUT: "unreadable input or bad arguments",
              EXIT_CANNOT_TELL: "cannot tell"}


def severity(value: Severity | str) -> Severity:
    """A ``Severity`` from itself or its name (``"fail"``, ``"warn"``, ``"info"``); anything else is an error."""
    if isinstance(value, Severity):
        return value
    try:
        return Severity(str(value).strip().lower())
    except ValueError:
        raise ValueError(f"severity must be one of {[s.value for s in Severity]}, got {value!r}") from None


def verdict(value: Verdict | str) -> Verdict:
    """A ``Verdict`` from itself or its name (``"pass"``, ``"fail"``, ``"cannot tell"``/``"cannot-tell"``)."""
    if isinstance(value, Verdict):
        return value
    text = str(value).strip().lower().replace("-", " ").replace("_", " ")
    try:
        return Verdict(text)
    except ValueError:
        raise ValueError(f"verdict must be one of {[v.value for v in Verdict]}, got {value!r}") from None


@dataclass
class Finding:
    """One problem or fact, with the slots it concerns and the evidence that shows it.

    ``severity`` is decided here, by whoever makes the finding; views and exit codes only read it.
    ``evidence`` holds numbers as numbers (JSON-safe values), never formatted text.
    """

    kind: str
    severity: Severity
    slots: list[int] = field(default_factory=list)
    message: str = ""
    evidence: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.severity = severity(self.severity)
        self.slots = [int(i) for i in (self.slots or [])]

    @property
    def is_fail(self) -> bool:
        return self.severity is Severity.FAIL

    def to_dict(self) -> dict:
        return {"kind": self.kind, "severity": self.severity.value, "slots": list(self.slots),
                "message": self.message, "evidence": dict(self.evidence)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Finding:
        """The inverse of :meth:`to_dict` (scan rows and JSON documents carry findings as dicts)."""
        return cls(str(d["kind"]), severity(d["severity"]), list(d.get("slots") or []), str(d.get("message", "")),
                   dict(d.get("evidence") or {}))


def _sev_of(f: Finding | Mapping[str, Any]) -> Severity:
    return f.severity if isinstance(f, Finding) else severity(f["severity"])


def worst_severity(findings: Iterable[Finding | Mapping[str, Any]]) -> Severity | None:
    """The worst severity among ``findings`` (Finding objects or their dicts); None when there are none."""
    sevs = [_sev_of(f) for f in findings]
    return max(sevs, key=lambda s: s.rank) if sevs else None


def worst_verdict(verdicts: Iterable[Verdict | str | None]) -> Verdict | None:
    """The worst of ``verdicts`` (fail > cannot tell > pass); None entries (no claim) are skipped."""
    vs = [verdict(v) for v in verdicts if v is not None]
    return max(vs, key=lambda v: v.rank) if vs else None


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Worst first (fail, warn, info), otherwise in the order they were made."""
    return sorted(findings, key=lambda f: -f.severity.rank)


def exit_code(findings: Iterable[Finding | Mapping[str, Any]] = (), verdicts: Iterable[Verdict | str | None] = (),
              unreadable: bool = False, fail_on: Severity | str = Severity.FAIL) -> int:
    """The exit code every ``hsf`` command returns (table in the module docstring).

    Args:
        findings: every finding the command made (objects or dicts with a ``severity``).
        verdicts: every claim's verdict (``Verdict`` or its name; None = no claim).
        unreadable: an input could not be read, or an argument was bad.
        fail_on: ``"warn"`` makes a warn count as a fail (``hsf report --fail-on warn``).

    Precedence: 2 (nothing can be trusted about an input that was not read), then 1, then 3, then 0.
    """
    if unreadable:
        return EXIT_BAD_INPUT
    bar = severity(fail_on)
    worst = worst_severity(findings)
    if worst is not None and worst.rank >= bar.rank and worst is not Severity.INFO:
        return EXIT_FAIL
    v = worst_verdict(verdicts)
    if v is Verdict.FAIL:
        return EXIT_FAIL
    if v is Verdict.CANNOT_TELL:
        return EXIT_CANNOT_TELL
    return EXIT_OK


__all__ = ["Finding", "Severity", "Verdict", "severity", "verdict", "worst_severity", "worst_verdict",
           "sort_findings", "exit_code", "EXIT_OK", "EXIT_FAIL", "EXIT_BAD_INPUT", "EXIT_CANNOT_TELL", "EXIT_CODES"]
