"""hidden-state-forensics: which captured LLM hidden-state tensor is which, and is the EAGLE-3 draft fed
at serving time what it was trained on.

A flat verb API (heavy imports are lazy)::

    import forensics
    cap = forensics.load("data_0.pt")          # any supported format -> Capture
    st = forensics.summarize(cap)              # per-token norm statistics
    fp = forensics.fingerprint(cap)            # roles, depth order, labels, evidence
    au = forensics.audit(...)                  # training vs serving wiring verdict
    forensics.report(["data_0.pt"]).save("report.html")

Tensors in memory work as well as files: ``fingerprint``, ``summarize`` and ``as_capture`` take transformers'
``output.hidden_states`` tuple, a list of ``[T, H]`` tensors, a ``[k, T, H]`` stack or a dict of named tensors::

    out = model(ids, output_hidden_states=True)
    fp = forensics.fingerprint(out.hidden_states, input_ids=ids, model="default")
    print(fp)                                   # IDENTIFIED [embed, L1, ..., final_post] (exact)
    print(fp.explain())                         # the evidence behind it

A batch (``[B, T]`` ``input_ids`` with ``attention_mask``) or a many-sample file is B samples: ``load_all`` and
``as_captures`` give them, ``fingerprint``/``summarize`` return one result per sample, commands name them ``FILE#i``.

Verbs: load, load_all, as_capture, as_captures, read_ids, iter_files, summarize, fingerprint, audit, probe, scan,
report, capture, explore.
Every bad input raises one ``ForensicsError`` naming the file (or ``<in memory>``); a capture that cannot come
from ``model=`` (another hidden size, vocabulary or layer count) raises its subclass ``ModelMismatch``.
"""

from __future__ import annotations

from forensics.errors import ForensicsError, ModelMismatch

__version__ = "0.1.0"
__all__ = ["ForensicsError", "ModelMismatch", "load", "load_all", "as_capture", "as_captures", "read_ids",
           "iter_files", "summarize", "fingerprint", "audit", "report", "scan", "probe", "capture", "explore",
           "__version__"]

_LAZY = {
    "load": ("forensics.io.formats", "load"),
    "load_all": ("forensics.io.formats", "load_all"),
    "as_captures": ("forensics.io.formats", "as_captures"),
    "iter_files": ("forensics.io.formats", "iter_files"),
    "as_capture": ("forensics.io.formats", "as_capture"),
    "read_ids": ("forensics.io.formats", "read_ids"),
    "summarize": ("forensics.analysis.stats", "summarize"),
    "fingerprint": ("forensics.analysis.fingerprint.core", "fingerprint"),
    "audit": ("forensics.analysis.audit.core", "audit"),
    "report": ("forensics.views.report.core", "report"),
    "scan": ("forensics.analysis.scan.core", "scan"),
    "probe": ("forensics.analysis.probe", "probe"),
    "capture": ("forensics.models.recorder", "capture"),
    "explore": ("forensics.views.explore", "explore"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        value = getattr(importlib.import_module(mod), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'forensics' has no attribute {name!r}")


def __dir__() -> list[str]:
    """Tab completion lists the lazy verbs too (they are imported on first use)."""
    return sorted(set(__all__) | set(_LAZY))
