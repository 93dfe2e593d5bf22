"""Findings: one problem or fact about the data, with its severity and the evidence that shows it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Finding:
    """One problem or fact, with the evidence that shows it."""

    kind: str
    severity: str  # error | warn | info
    message: str
    evidence: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "severity": self.severity, "message": self.message, "evidence": self.evidence}
