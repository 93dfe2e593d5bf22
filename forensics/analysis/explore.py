"""What the explorer shows (``forensics.explore``): per-slot per-token norms, token text, verdicts, row bands, lens.

One typed result, :class:`ExploreState`, is read by the live Jupyter widget and by the report's static copy
(``forensics/views/explore/``); nothing here formats text. The heatmap's cells are columns of tokens: one
token per column up to ``MAX_COLUMNS``, beyond that equal bins of consecutive tokens, each showing its
largest norm (so a sink, a massive activation or a NaN row never averages away) and its smallest cosines.

The linked views are precomputed per token, so a hover or a click needs no kernel:
``cos_prev[s, t]`` is the cosine of token t between slot s and slot s-1 (NaN for slot 0 and across hidden
sizes); ``cos_same[s, t]`` the cosine, inside slot s, between token t and the nearest other occurrence of the
same token id (the previous one, else the next; NaN for an id seen once). An embedding slot holds 1.0 there:
a lookup gives every occurrence of an id one vector.

The logit lens (:func:`logit_lens`) reads a slot through the model's head: ``lm_head(final_norm(h))``
(nostalgebraist's logit lens, 2020; the tuned-lens paper, Belrose et al. 2023, arXiv:2303.08112), with the
final norm skipped for a slot already past it (``final_post``).

Example:
    >>> import torch
    >>> st = explore_state([torch.ones(3, 4), 2 * torch.ones(3, 4)], tokenizer=None)
    >>> st.norms.tolist(), st.cos_prev[1].tolist()
    ([[2.0, 2.0, 2.0], [4.0, 4.0, 4.0]], [1.0, 1.0, 1.0])
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from forensics.analysis.kernels import intra_op_threads
from forensics.analysis.rows import check_rows
from forensics.analysis.stats import summarize
from forensics.errors import ForensicsError
from forensics.findings import Finding, Severity
from forensics.io.capture import Capture
from forensics.io.capture import Slot as CaptureSlot
from forensics.io.formats import as_capture as read
from forensics.io.tokenizer import decode_tokens, find_tokenizer, load_tokenizer
from forensics.jsonable import json_safe
from forensics.layers import FINAL_POST, r_label

MAX_COLUMNS = 4096  # heatmap columns; more tokens are binned (the widget's payload stays ≤ 16 B × slots × 4096)
COS_BLOCK_ROWS = 256  # rows per block of the cosine passes (float32 working set ≤ 2 × 256 × H)
LENS_TOP_K = 5
LENS_MAP_COLUMNS = 96  # tokens in the logit-lens overview (the first ones): slots × 96 rows of lm_head, ≈ 1 s on CPU
MAX_BANDS = 400  # row bands drawn; more are counted, not drawn


@dataclass
class Band:
    """Rows a finding names, on one slot: tokens ``first``–``last`` inclusive."""

    slot: int
    first: int
    last: int
    kind: str
    severity: str
    message: str = ""

    def to_dict(self) -> dict:
        return {"slot": self.slot, "first": self.first, "last": self.last, "kind": self.kind,
                "severity": self.severity, "message": self.message}


@dataclass
class ExploreState:
    """One capture as the explorer shows it. Arrays are ``[slots, columns]`` float32; ``starts[c]`` is the first
    token of column c (``starts[-1] == num_tokens``), so a column is tokens ``starts[c]`` … ``starts[c+1]-1``."""

    path: str
    format: str
    num_tokens: int
    names: list[str]
    labels: list[str]
    norms: np.ndarray = field(repr=False)
    cos_prev: np.ndarray = field(repr=False)
    cos_same: np.ndarray = field(repr=False)
    starts: np.ndarray = field(repr=False)
    tokens: list[str] | None = field(default=None, repr=False)  # text of each column's first token
    ids: list[int] | None = field(default=None, repr=False)  # id of each column's first token
    bands: list[Band] = field(default_factory=list)
    verdicts: list[str | None] = field(default_factory=list)  # each slot's claim verdict (pass/fail/cannot tell)
    verdict_why: list[str] = field(default_factory=list)
    file_verdict: str | None = None
    findings: list[dict] = field(default_factory=list)
    fingerprinted: bool = False
    tokenizer_note: str | None = None  # why there is no token text, when there is none
    bands_omitted: int = 0
    row_findings: list[Finding] = field(default_factory=list, repr=False)  # forensics.analysis.rows.check_rows
    tokenizer: Any = field(default=None, repr=False)  # where the token text came from (the lens decodes with it)
    lens_map: dict | None = field(default=None, repr=False)  # LensMap.to_dict() when a model read it (the report)

    @property
    def binned(self) -> bool:
        return len(self.starts) - 1 < self.num_tokens

    def to_dict(self) -> dict:
        return json_safe({"path": self.path, "format": self.format, "num_tokens": self.num_tokens,
                          "names": self.names, "labels": self.labels, "verdicts": self.verdicts,
                          "verdict_why": self.verdict_why, "file_verdict": self.file_verdict,
                          "starts": self.starts.tolist(), "tokens": self.tokens, "ids": self.ids,
                          "norms": self.norms.tolist(), "cos_prev": self.cos_prev.tolist(),
                          "cos_same": self.cos_same.tolist(), "bands": [b.to_dict() for b in self.bands],
                          "bands_omitted": self.bands_omitted, "findings": self.findings,
                          "fingerprinted": self.fingerprinted, "tokenizer_note": self.tokenizer_note})


@dataclass
class LensRow:
    """The logit lens of one slot at one token: the top tokens and their probabilities, or why there is none."""

    slot: int
    ids: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    normed: bool = True  # the final norm was applied (False for a final_post slot)
    note: str | None = None

    def to_dict(self) -> dict:
        return {"slot": self.slot, "ids": self.ids, "texts": self.texts, "probs": [round(p, 5) for p in self.probs],
                "normed": self.normed, "note": self.note}


@dataclass
class LensMap:
    """The logit-lens overview of one capture: for each slot (row) and each of the first tokens (column), the
    top-1 next token of ``softmax(lm_head(final_norm(h)))`` and its probability (tuned-lens' layers × tokens
    plot). ``ids[s][c]`` is -1 and ``probs[s][c]`` NaN where the slot cannot be read (``notes[s]`` says why)."""

    positions: list[int]
    ids: list[list[int]]
    texts: list[list[str]]
    probs: list[list[float]]
    notes: list[str | None]
    num_tokens: int

    def to_dict(self) -> dict:
        return json_safe({"positions": self.positions, "ids": self.ids, "texts": self.texts,
                          "probs": [[float(f"{p:.4g}") if p == p else None for p in row] for row in self.probs],
                          "notes": self.notes, "num_tokens": self.num_tokens})


# ------------------------------------------------------------------------------------------------- inputs
def as_capture(x: Any, input_ids: Any = None) -> Capture:
    """A :class:`Capture` from a capture path, a ``Capture``, or hidden states in memory in any layout (with their
    token ids): :func:`forensics.io.formats.as_capture`."""
    return read(x, input_ids=input_ids)


# --------------------------------------------------------------------------------------------- the state
def column_starts(num_tokens: int, max_columns: int = MAX_COLUMNS) -> np.ndarray:
    """First token of each heatmap column, plus ``num_tokens`` at the end (equal bins beyond ``max_columns``).

    >>> column_starts(5).tolist(), column_starts(10, 4).tolist()
    ([0, 1, 2, 3, 4, 5], [0, 2, 5, 7, 10])
    """
    cols = max(1, min(num_tokens, max_columns))
    return np.linspace(0, num_tokens, cols + 1).astype(np.int64) if num_tokens else np.zeros(1, np.int64)


def bin_max(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The largest value of each column (NaN wins: a non-finite row stays visible).

    >>> bin_max(np.array([1.0, 5.0, 2.0, np.nan, 3.0]), np.array([0, 2, 5])).tolist()
    [5.0, nan]
    """
    if len(starts) - 1 == len(values):
        return values.astype(np.float32)
    return np.maximum.reduceat(values, starts[:-1], axis=-1).astype(np.float32)


def bin_min(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The smallest non-NaN value of each column along the last axis (NaN only when the whole column is)."""
    if values.shape[-1] == len(starts) - 1:
        return values.astype(np.float32)
    with np.errstate(invalid="ignore"):
        return np.fmin.reduceat(values, starts[:-1], axis=-1).astype(np.float32)


def same_id_partner(ids: np.ndarray) -> np.ndarray:
    """For each position, the nearest other position with the same id (the previous one, else the next); -1
    for an id seen once.

    >>> same_id_partner(np.array([7, 8, 7, 7, 9])).tolist()
    [2, -1, 0, 2, -1]
    """
    out = np.full(len(ids), -1, dtype=np.int64)
    last: dict[int, int] = {}
    for p, t in enumerate(ids.tolist()):
        if t in last:
            out[p] = last[t]
        last[t] = p
    first_seen: dict[int, int] = {}
    for p in range(len(ids) - 1, -1, -1):  # the first occurrence takes the next one
        t = int(ids[p])
        if out[p] < 0 and t in first_seen:
            out[p] = first_seen[t]
        first_seen[t] = p
    return out


def _cosines(slots: list[CaptureSlot], norms: list[np.ndarray], partner: np.ndarray | None) -> tuple:
    """``cos_prev`` and ``cos_same`` ``[slots, tokens]`` float32, in row blocks with float32 accumulation."""
    import torch

    k, T = len(slots), slots[0].num_tokens if slots else 0
    cos_prev = np.full((k, T), np.nan, dtype=np.float32)
    cos_same = np.full((k, T), np.nan, dtype=np.float32)
    has = None if partner is None else np.flatnonzero(partner >= 0)
    with intra_op_threads(), torch.inference_mode():
        prev = None
        for i, s in enumerate(slots):
            h = s.tensor()
            n = norms[i]
            if prev is not None and prev[0].shape[1] == h.shape[1]:
                hp, n_p = prev
                for a in range(0, T, COS_BLOCK_ROWS):
                    b = min(T, a + COS_BLOCK_ROWS)
                    dot = (h[a:b].float() * hp[a:b].float()).sum(-1).numpy()
                    with np.errstate(invalid="ignore", divide="ignore"):
                        cos_prev[i, a:b] = dot / (n[a:b] * n_p[a:b])
            if partner is not None and has is not None and len(has):
                for a in range(0, len(has), COS_BLOCK_ROWS):
                    p = has[a:a + COS_BLOCK_ROWS]
                    q = partner[p]
                    dot = (h[torch.from_numpy(p)].float() * h[torch.from_numpy(q)].float()).sum(-1).numpy()
                    with np.errstate(invalid="ignore", divide="ignore"):
                        cos_same[i, p] = dot / (n[p] * n[q])
            prev = (h, n)
    return np.clip(cos_prev, -1, 1), np.clip(cos_same, -1, 1)


def _runs(positions: list[int]) -> list[tuple[int, int]]:
    """Consecutive positions as inclusive ``(first, last)`` runs.

    >>> _runs([0, 1, 2, 5, 7, 8])
    [(0, 2), (5, 5), (7, 8)]
    """
    out: list[tuple[int, int]] = []
    for p in sorted(set(int(x) for x in positions)):
        if out and p == out[-1][1] + 1:
            out[-1] = (out[-1][0], p)
        else:
            out.append((p, p))
    return out


def stat_bands(stats: Any) -> list[Band]:
    """Bands from the per-slot statistics: sinks, massive activations and NaN/Inf rows."""
    bands = []
    for s in stats.slots:
        for kind, sev, pos in (("sink", "info", s.sinks), ("massive activation", "info",
                                                           [t["pos"] for t in s.massive_tokens]),
                               ("nonfinite", "fail", list(s.nan_positions) + list(s.inf_positions))):
            bands += [Band(s.index, a, b, kind, sev) for a, b in _runs(pos)]
    return bands


def finding_bands(findings: list[Finding], num_slots: int, num_tokens: int) -> list[Band]:
    """Bands from any finding whose evidence names rows: ``evidence["rows"] = [[first, last], ...]`` (inclusive)
    on the finding's ``slots`` (every slot when it names none); rows outside the capture are clipped away."""
    bands = []
    for f in findings:
        rows = (f.evidence or {}).get("rows") if isinstance(f.evidence, dict) else None
        if not isinstance(rows, (list, tuple)):
            continue
        slots = [s for s in (f.slots or range(num_slots)) if 0 <= int(s) < num_slots]
        for r in rows:
            try:
                a, b = (int(r[0]), int(r[1])) if isinstance(r, (list, tuple)) else (int(r), int(r))
            except (TypeError, ValueError, IndexError):
                continue
            a, b = max(0, min(a, b)), min(num_tokens - 1, max(a, b))
            if a <= b:
                bands += [Band(int(s), a, b, str(f.kind), f.severity.value, f.message) for s in slots]
    return bands


def resolve_tokenizer(capture: Capture, tokenizer: Any = "auto", fallback: Any = None) -> tuple[Any, str | None]:
    """``(tokenizer, None)`` or ``(None, why there is none)`` for ``capture``: ``tokenizer`` is ``"auto"`` (the
    capture's own local tokenizer, else ``fallback``: the tokenizer of ``model=``), a folder the user names, a
    tokenizer object, or None."""
    if isinstance(tokenizer, str) and tokenizer == "auto":
        tok, note = load_tokenizer(find_tokenizer(capture.path, capture.meta))
        if tok is None and fallback is not None:
            return fallback, None
        return tok, note or (None if tok is not None else "no tokenizer found next to the capture (model= or "
                                                          "tokenizer= gives one)")
    if isinstance(tokenizer, (str, os.PathLike)):
        return load_tokenizer(os.fspath(tokenizer), confined=False)
    if tokenizer is None:
        return None, "no tokenizer given"
    return tokenizer, None


def _tokens(capture: Capture, tokenizer: Any, starts: np.ndarray,
            fallback: Any = None) -> tuple[list | None, list | None, str | None, Any]:
    ids = capture.input_ids
    if ids is None:
        return None, None, "no token ids in this capture", None
    flat = [int(i) for i in ids.flatten().tolist()]
    col_ids = [flat[int(p)] for p in starts[:-1]] if len(flat) >= capture.num_tokens else None
    if col_ids is None:
        return None, None, f"{len(flat)} token ids for {capture.num_tokens} tokens", None
    tok, note = resolve_tokenizer(capture, tokenizer, fallback)
    if tok is None:
        return None, col_ids, note, None

    return decode_tokens(tok, col_ids), col_ids, None, tok


def with_tokenizer(state: ExploreState, tokenizer: Any) -> ExploreState:
    """``state`` with token text from ``tokenizer`` where it has ids but no text yet (in place): the tokenizer of
    ``model=`` arriving after the heatmap was drawn."""
    if tokenizer is None or state.tokens is not None or state.ids is None:
        return state

    state.tokens, state.tokenizer, state.tokenizer_note = decode_tokens(tokenizer, state.ids), tokenizer, None
    return state


def explore_state(x: Any, fingerprint: Any = None, tokenizer: Any = "auto", stats: Any = None,
                  max_columns: int = MAX_COLUMNS, input_ids: Any = None, fallback: Any = None) -> ExploreState:
    """The explorer's state of one capture (a path, a ``Capture`` or tensors, as :func:`as_capture` reads them).

    Args:
        fingerprint: a ``Fingerprint`` of the capture (labels, verdicts, row findings), or None (add it later
            with :func:`with_fingerprint`).
        tokenizer: ``"auto"`` (the capture's own local tokenizer), a folder, a tokenizer object, or None.
        fallback: the tokenizer ``"auto"`` takes when the capture has none (the model's:
            :func:`forensics.models.target.model_tokenizer`).
        stats: the capture's ``CaptureStats`` when already computed (else :func:`forensics.summarize`).
        input_ids: the token ids of hidden states given in memory (token text, the same-id cosine).
    """
    cap = as_capture(x, input_ids)
    if not cap.slots:
        raise ForensicsError("no hidden-state slots to explore", path=cap.path)
    stats = fingerprint.stats if fingerprint is not None else (stats or summarize(cap))
    T = cap.num_tokens
    starts = column_starts(T, max_columns)
    full = [np.asarray(s.norms, dtype=np.float32) for s in stats.slots]
    ids = None if cap.input_ids is None else cap.input_ids.flatten().numpy()
    partner = same_id_partner(ids[:T]) if ids is not None and len(ids) >= T else None
    try:
        cos_prev, cos_same = _cosines(cap.slots, full, partner)
    except (RuntimeError, ValueError, TypeError) as e:  # a tensor torch cannot reduce: norms only
        raise ForensicsError(f"cannot compute cosines: {type(e).__name__}: {str(e)[:200]}", path=cap.path) from None
    tokens, col_ids, note, tok = _tokens(cap, tokenizer, starts, fallback)
    names = [s.name for s in cap.slots]
    labels = [r_label(s.declared_r) if s.declared_r is not None else s.name for s in cap.slots]
    state = ExploreState(path=cap.name, format=cap.format, num_tokens=T, names=names, labels=labels,
                         norms=np.stack([bin_max(n, starts) for n in full]),
                         cos_prev=bin_min(cos_prev, starts), cos_same=bin_min(cos_same, starts), starts=starts,
                         tokens=tokens, ids=col_ids, tokenizer_note=note, verdicts=[None] * len(names),
                         verdict_why=[""] * len(names), tokenizer=tok)
    # zero blocks and NaN/Inf rows as bands before any fingerprint: check_rows reads every slot again, so only when
    # the norms already show such a row (a norm is 0 or non-finite exactly then); the fingerprint brings the rest
    if any(bool((n == 0).any()) or not bool(np.isfinite(n).all()) for n in full):
        state.row_findings = check_rows(cap, norms=[s.norms for s in stats.slots]).findings
    _set_bands(state, finding_bands(state.row_findings, len(names), T) + stat_bands(stats))
    cap.check_unchanged()  # nothing read from a file truncated or rewritten meanwhile is shown
    return with_fingerprint(state, fingerprint) if fingerprint is not None else state


def _set_bands(state: ExploreState, bands: list[Band]) -> None:
    seen: set[tuple] = set()
    unique = []
    for b in bands:  # a row finding the fingerprint also makes is drawn once
        key = (b.slot, b.first, b.last, b.kind)
        if key not in seen:
            seen.add(key)
            unique.append(b)
    state.bands = unique[:MAX_BANDS]
    state.bands_omitted = max(0, len(unique) - MAX_BANDS)


def with_fingerprint(state: ExploreState, fp: Any) -> ExploreState:
    """``state`` with the fingerprint's labels, claim verdicts, file verdict and row-finding bands (in place)."""
    k = len(state.names)
    named = fp.outcome == "identified"  # nothing claimed, every slot named by the reference forward
    for sf in fp.slots[:k]:
        if sf.label:
            state.labels[sf.index] = sf.label
        state.verdicts[sf.index] = sf.verdict.value if sf.verdict is not None else "identified" if named else None
        state.verdict_why[sf.index] = sf.verdict_why or ""
    state.file_verdict = fp.outcome  # the word every view writes (Fingerprint.outcome; info reads NO CLAIM)
    state.findings = [f.to_dict() for f in list(fp.findings) + state.row_findings]
    _set_bands(state, finding_bands(list(fp.findings) + state.row_findings, k, state.num_tokens)
               + stat_bands(fp.stats))
    state.fingerprinted = True
    return state


def failed_fingerprint(state: ExploreState, error: str) -> ExploreState:
    """``state`` when the fingerprint could not be computed: the file reads as FAIL with the reason (in place)."""
    state.file_verdict = Severity.FAIL.value
    state.findings = [{"kind": "fingerprint failed", "severity": "fail", "slots": [], "message": error,
                       "evidence": {}}]
    state.fingerprinted = True
    return state


# ---------------------------------------------------------------------------------------------- the lens
def logit_lens(capture: Capture, pos: int, verifier: Any, tokenizer: Any = None, labels: list | None = None,
               k: int = LENS_TOP_K) -> list[LensRow]:
    """The top-``k`` next tokens each slot's hidden state at token ``pos`` decodes to: ``softmax(lm_head(
    final_norm(h)))`` in float32 (``final_norm`` skipped for a slot labelled ``final_post``).

    ``verifier``: a :class:`forensics.models.verifier.Verifier` (``open_verifier("default")`` for SmolLM2).
    """
    import torch

    if not 0 <= pos < capture.num_tokens:
        raise ForensicsError(f"token {pos} is outside 0–{capture.num_tokens - 1}", path=capture.path)
    W, g, eps = verifier.lm_head, verifier.norm_weight, float(verifier.norm_eps)
    rows = []
    with torch.inference_mode():
        for s in capture.slots:
            if s.hidden_size != W.shape[1]:
                rows.append(LensRow(s.index, note=f"hidden size {s.hidden_size} ≠ the model's {W.shape[1]}"))
                continue
            h = s.tensor()[pos].float()
            post = labels is not None and s.index < len(labels) and labels[s.index] == FINAL_POST
            if not post:  # LlamaRMSNorm: g · h / sqrt(mean(h²) + eps)
                h = g.float() * (h * torch.rsqrt(h.pow(2).mean() + eps))
            p = torch.softmax(torch.nn.functional.linear(h, W.float()), dim=-1)
            if not bool(torch.isfinite(p).all()):
                rows.append(LensRow(s.index, normed=not post, note="non-finite logits"))
                continue
            top = torch.topk(p, k)
            ids = [int(i) for i in top.indices]
            rows.append(LensRow(s.index, ids=ids, texts=_decode(tokenizer, ids), probs=[float(v) for v in top.values],
                                normed=not post))
    capture.check_unchanged()
    return rows


def _decode(tokenizer: Any, ids: list[int]) -> list[str]:
    if tokenizer is None:
        return [f"<id {i}>" for i in ids]

    return decode_tokens(tokenizer, ids)


def lens_map(capture: Capture, verifier: Any, tokenizer: Any = None, labels: list | None = None,
             max_columns: int = LENS_MAP_COLUMNS) -> LensMap:
    """The logit lens of every slot at each of the first ``max_columns`` tokens, top-1 only (the explorer's
    overview): what :func:`logit_lens` gives one token at a time, for a row of tokens at once, in float32."""
    import torch

    W, g, eps = verifier.lm_head, verifier.norm_weight, float(verifier.norm_eps)
    n = min(int(capture.num_tokens), int(max_columns))
    pos = list(range(n))
    ids: list[list[int]] = []
    probs: list[list[float]] = []
    notes: list[str | None] = []
    with torch.inference_mode():
        Wf = W.float()
        for s in capture.slots:
            if s.hidden_size != W.shape[1]:
                ids.append([-1] * n)
                probs.append([float("nan")] * n)
                notes.append(f"hidden size {s.hidden_size} ≠ the model's {W.shape[1]}")
                continue
            h = s.tensor()[:n].float()
            post = labels is not None and s.index < len(labels) and labels[s.index] == FINAL_POST
            if not post:
                h = g.float() * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps))
            p = torch.softmax(torch.nn.functional.linear(h, Wf), dim=-1)
            top = p.max(dim=-1)
            ok = torch.isfinite(top.values)
            ids.append([int(i) if bool(f) else -1 for i, f in zip(top.indices, ok, strict=True)])
            probs.append([float(v) if bool(f) else float("nan") for v, f in zip(top.values, ok, strict=True)])
            notes.append(None if bool(ok.all()) else "non-finite logits")
    seen = sorted({i for row in ids for i in row if i >= 0})
    text = dict(zip(seen, _decode(tokenizer, seen), strict=True))
    return LensMap(positions=pos, ids=ids, texts=[[text.get(i, "") for i in row] for row in ids], probs=probs,
                   notes=notes, num_tokens=int(capture.num_tokens))
