"""hidden-state-forensics: which captured LLM hidden-state tensor is which, and is the EAGLE-3 draft fed
at serving time what it was trained on.

A flat verb API (heavy imports are lazy)::

    import forensics
    cap = forensics.load("data_0.pt")          # any supported format -> Capture
    st = forensics.summarize(cap)              # per-token norm statistics
    fp = forensics.fingerprint(cap)            # roles, depth order, labels, evidence
    au = forensics.audit(...)                  # training vs serving wiring verdict
    forensics.report(["data_0.pt"]).save("report.html")
"""

from __future__ import annotations

from .errors import ForensicsError

__version__ = "0.1.0"
__all__ = ["ForensicsError", "load", "summarize", "fingerprint", "audit", "report", "scan", "probe",
           "__version__"]

_LAZY = {
    "load": ("forensics.formats", "load"),
    "iter_files": ("forensics.formats", "iter_files"),
    "summarize": ("forensics.stats", "summarize"),
    "fingerprint": ("forensics.fingerprint", "fingerprint"),
    "audit": ("forensics.audit", "audit"),
    "report": ("forensics.report", "report"),
    "scan": ("forensics.scan", "scan"),
    "probe": ("forensics.draft", "probe"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        value = getattr(importlib.import_module(mod), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'forensics' has no attribute {name!r}")
