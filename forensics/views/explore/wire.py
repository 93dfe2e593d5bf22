"""The explorer's state on the wire: binary arrays for the widget, base64 JSON for the report's static copy.

Both feed ``static/explore.js`` the same attributes: ``meta`` (labels, verdicts, bands, …), ``tokens``/``ids``
(one per column), and ``starts`` (int32), ``norms``/``cos_prev``/``cos_same`` (float32, slots × columns,
row-major) as little-endian bytes.
"""

from __future__ import annotations

import base64
import html
import json
import os
from importlib import resources
from typing import Any

import numpy as np

from forensics.jsonable import json_safe

BINARY = ("starts", "norms", "cos_prev", "cos_same")
EXPORT_LINE = "export default { render };"  # the module's last line; cut for the report's classic script


def meta(state: Any, name: str | None = None) -> dict:
    """Everything but the arrays: what the heading, the axis labels, the bands and the linked view read."""
    return json_safe({"path": state.path, "name": name or os.path.basename(state.path), "format": state.format,
                      "num_tokens": state.num_tokens, "columns": len(state.starts) - 1, "binned": state.binned,
                      "names": state.names, "labels": state.labels, "verdicts": state.verdicts,
                      "verdict_why": state.verdict_why, "file_verdict": state.file_verdict,
                      "bands": [b.to_dict() for b in state.bands], "bands_omitted": state.bands_omitted,
                      "findings": [{k: f.get(k) for k in ("kind", "severity", "slots", "message")}
                                   for f in state.findings],
                      "fingerprinted": state.fingerprinted, "tokenizer_note": state.tokenizer_note})


def arrays(state: Any) -> dict[str, bytes]:
    """The four arrays as little-endian bytes (int32 starts, float32 slots × columns)."""
    return {"starts": np.ascontiguousarray(state.starts, dtype="<i4").tobytes(),
            "norms": np.ascontiguousarray(state.norms, dtype="<f4").tobytes(),
            "cos_prev": np.ascontiguousarray(state.cos_prev, dtype="<f4").tobytes(),
            "cos_same": np.ascontiguousarray(state.cos_same, dtype="<f4").tobytes()}


def payload(state: Any, name: str | None = None) -> dict:
    """The widget's synced attributes for one capture."""
    return {"meta": meta(state, name), "tokens": list(state.tokens or []), "ids": list(state.ids or []),
            **arrays(state)}


def static_state(state: Any, name: str | None = None) -> dict:
    """:func:`payload` as JSON: the binary arrays base64-encoded."""
    p = payload(state, name)
    for k in BINARY:
        p[k] = base64.b64encode(p[k]).decode("ascii")
    if getattr(state, "lens_map", None):
        p["lens_map"] = state.lens_map
    return p


def asset(name: str) -> str:
    """``static/explore.js`` or ``static/explore.css`` (package data)."""
    return resources.files("forensics.views.explore").joinpath("static", name).read_text(encoding="utf-8")


def static_script() -> str:
    """The explorer as a classic script (the module's export cut) that renders every ``.hsf-explore-static``."""
    js = asset("explore.js")
    if EXPORT_LINE not in js:  # pragma: no cover - a packaging error
        raise RuntimeError("explore.js lost its export line")
    return "(function () {\n\"use strict\";\n" + js.replace(EXPORT_LINE, "bootStatic();") + "\n}());\n"


def report_embed(items: list[tuple[str, Any, str | None]]) -> dict:
    """The report's static explorer: ``items`` are ``(name, ExploreState, file verdict)``; returns ``{"html",
    "css", "js"}`` (the HTML a ``<div>`` whose ``data-state`` attribute holds the escaped JSON: inert text)."""
    if not items:
        return {"html": "", "css": "", "js": ""}
    doc = {"files": [{"name": n, "verdict": v} for n, _, v in items],
           "states": [static_state(s, n) for n, s, _ in items]}
    text = json.dumps(doc, separators=(",", ":"), allow_nan=False)
    div = f'<div class="hsf-explore-static" data-state="{html.escape(text, quote=True)}"></div>'
    return {"html": div, "css": asset("explore.css"), "js": static_script()}
