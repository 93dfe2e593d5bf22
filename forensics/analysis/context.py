"""Lost context: rows from position p on that were computed without tokens 0..p-1.

A chunked prefill whose later chunk lost the earlier context gives the first chunk's rows right and every later
row wrong, with the right shape, dtype and layer (vllm#52909: Kimi-K3 TP8/PP2, the first 8K chunk equals a
one-shot prefill, later chunks diverge); two sequences packed into one sample without their boundary look the
same. A chunk computed alone starts a new sequence, so:

* data only: its first row carries token 0's massive activation (Sun et al. 2024: the starting token's
  sink, in the same dimension) in every slot that has the sink at token 0. That is a ``context_lost`` WARN naming
  the sequence start: a second sink-sized row is what a lost context looks like, but some models also put a
  massive activation on a delimiter (Sun et al. report the first period or newline in LLaMA2-7B), so only the
  reference forward decides;
* with the model (``net``): the rows from p on equal the reference run of tokens p.. alone, at the slot's r,
  and not the run of the whole sequence: a ``context_lost`` FAIL naming rows p..end. The positions tried are the
  data-only sequence starts, the starts of the row checks' ``foreign_rows`` runs, the first row where a slot
  stops equalling the reference run of the whole sequence (exact mode's ladder), and every multiple of
  ``CHUNK_STEP`` (chunked-prefill sizes are multiples of it: vLLM's ``max_num_batched_tokens`` 512–8192,
  SGLang's ``chunked_prefill_size``), each on ``PROBE_ROWS`` rows, then the whole tail at the first that matches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from forensics.analysis.rows import _add_bad
from forensics.findings import Finding, FindingKind, Severity
from forensics.layers import r_label
from forensics.models.target import ladder

if TYPE_CHECKING:  # pragma: no cover
    from forensics.analysis.rows import RowReport
    from forensics.analysis.stats import SlotStats
    from forensics.io.capture import Capture

SINK_SHARE = 0.5  # a row whose norm is ≥ this × token 0's sink norm, in the sink's dimension …
SINK_CONCENTRATION = 0.5  # … holding ≥ this share of its norm there (sink rows: 0.95–0.99), is a sequence start
TOKEN0_SINK_RATIO = 20.0  # token 0 is a sink: ≥ this × the median row norm … (SmolLM2 residual r = 12..28:
#                           32–185×; its early layers r = 3..9 carry a smaller token-0 spike, ≤ 11.7× on the
#                           corpus ladders, that delimiter tokens reach too: on clean files those gave sequence
#                           starts at a newline)
TOKEN0_CONCENTRATION = 0.5  # … with ≥ this share of its norm in one dimension (rules.MASSIVE_TOKEN0_CONCENTRATION)
CHUNK_STEP = 128  # with the model, every multiple of this is tried as a chunk boundary
MAX_CANDIDATES = 64  # positions tried with the model (the data-only starts and foreign runs first)
PROBE_ROWS = 8  # rows compared at each candidate boundary
TAIL_ROWS = 512  # rows of the tail compared once a boundary matched (the rest are named, not checked)
ROW_MATCH_REL = 0.05  # a row equals a reference state at ‖x − y‖/‖y‖ ≤ this (as ``rows.ROW_MATCH_REL``)
MATCH_SHARE = 0.75  # a boundary matches when this share of a slot's probed rows equal the chunk-alone run


@dataclass
class ContextReport:
    """What :func:`check_context` found: the sequence starts (data only), the boundary the model confirmed."""

    starts: list[int] = field(default_factory=list)
    lost_from: int | None = None
    findings: list[Finding] = field(default_factory=list)
    tried: int = 0

    def to_dict(self) -> dict:
        return {"starts": list(self.starts), "lost_from": self.lost_from, "tried": self.tried,
                "findings": [f.to_dict() for f in self.findings]}


def _sink_slots(stats: Sequence[SlotStats], tensors: Sequence[Any]) -> dict[int, int]:
    """Slot → the dimension of token 0's massive activation, for slots whose token 0 is a sink."""
    out: dict[int, int] = {}
    for i, (s, h) in enumerate(zip(stats, tensors, strict=True)):
        if not (np.isfinite(s.first_ratio) and s.first_ratio >= TOKEN0_SINK_RATIO):
            continue
        x = h[0].float()
        n = float(x.norm())
        if n > 0 and np.isfinite(n) and float(x.abs().max()) / n >= TOKEN0_CONCENTRATION:
            out[i] = int(x.abs().argmax())
    return out


def sequence_starts(stats: Sequence[SlotStats], tensors: Sequence[Any]) -> tuple[list[int], list[int]]:
    """``(rows p ≥ 1 that carry token 0's sink in every sink slot, those slots)``."""
    import torch

    sinks = _sink_slots(stats, tensors)
    if not sinks:
        return [], []
    common: set[int] | None = None
    for i, d in sinks.items():
        n = np.asarray(stats[i].norms)
        big = np.flatnonzero(n[1:] >= SINK_SHARE * n[0]) + 1
        if big.size:
            col = tensors[i][torch.from_numpy(big), d].float().abs().numpy()
            big = big[col >= SINK_CONCENTRATION * n[big]]
        common = set(big.tolist()) if common is None else common & set(big.tolist())
        if not common:
            return [], sorted(sinks)
    return sorted(common or ()), sorted(sinks)


def check_context(capture: Capture, tensors: Sequence[Any], stats: Sequence[SlotStats], rows: RowReport | None,
                  net: Any = None, reference: dict | None = None) -> ContextReport:
    """``context_lost`` findings of one capture (data only, or against the reference forward ``net``).

    ``rows`` is the row checks' report: its ``foreign_rows`` runs are candidate boundaries, and with a confirmed
    boundary the rows p..end become bad rows of every slot (their ``foreign_rows`` inside p..end are dropped:
    this finding says what they are). ``reference``: the full sequence's ladder ``{r: [T, H]}`` when exact mode
    ran it; the first row where a slot stops equalling it is a candidate boundary too."""
    rep = ContextReport()
    n = int(tensors[0].shape[0]) if tensors else 0
    if n < 2 or (rows is not None and rows.offset != 0) or (rows is not None and rows.slot_offsets):
        return rep  # row t is not token t: a sequence start cannot be placed
    rep.starts, sink_slots = sequence_starts(stats, tensors)
    ids = capture.input_ids.reshape(-1) if capture.input_ids is not None else None
    if net is not None and ids is not None and int(ids.numel()) >= n:
        _with_model(net, ids, tensors, rows, rep, _divergence(tensors, reference))
        return rep  # the reference decided: the data-only starts were among the positions it tried
    if rep.starts:
        p = rep.starts[0]
        more = f" (and {', '.join(map(str, rep.starts[1:4]))}{', …' if len(rep.starts) > 4 else ''})" \
            if len(rep.starts) > 1 else ""
        rep.findings.append(Finding(
            FindingKind.CONTEXT_LOST, Severity.WARN, sink_slots,
            f"row {p}{more} carries token 0's massive activation in every slot that has it (slots {sink_slots}): "
            f"a sequence starts there, so rows {p}–{n - 1} look computed without tokens 0–{p - 1} (a chunked "
            "prefill whose later chunk lost the earlier context, vllm#52909, or two sequences packed into one "
            "sample); some models also put a massive activation on a delimiter token: --model decides",
            {"rows": [[p, n - 1]], "start": p, "starts": rep.starts[:32], "slots": sink_slots, "by": "sink"}))
    return rep


def _divergence(tensors: Sequence[Any], reference: dict | None) -> list[int]:
    """Per slot, the first row after a run of rows equal to the full sequence's reference at the slot's best r
    (r ≥ 1) where they stop being equal: where a lost context would begin, within the reference's rows."""
    import torch

    if not reference:
        return []
    out = []
    for h in tensors:
        best: tuple[int, np.ndarray] | None = None
        for r, y in reference.items():
            if r == 0 or tuple(y.shape[1:]) != tuple(h.shape[1:]):
                continue
            m = min(int(h.shape[0]), int(y.shape[0]))
            x, yy = h[:m].to(torch.float32), y[:m].to(torch.float32)
            ok = ((x - yy).norm(dim=-1) / yy.norm(dim=-1).clamp_min(1e-30) <= ROW_MATCH_REL).numpy()
            if best is None or ok.sum() > best[0]:
                best = (int(ok.sum()), ok)
        if best is None or not best[1][:1].all():
            continue
        miss = np.flatnonzero(~best[1])
        if miss.size:
            out.append(int(miss[0]))
    return out


def _with_model(net: Any, ids: Any, tensors: Sequence[Any], rows: RowReport | None,
                rep: ContextReport, diverge: Sequence[int] = ()) -> int | None:
    """The first boundary p whose rows equal the reference run of tokens p.. alone; adds the FAIL finding."""
    import torch

    n = int(tensors[0].shape[0])
    foreign = []
    if rows is not None:
        for f in rows.findings:
            if f.kind == FindingKind.FOREIGN_ROWS:
                foreign += [int(a) for a, _ in f.evidence.get("rows", [])]
    cands: list[int] = []
    for p in [*rep.starts, *foreign, *diverge, *range(CHUNK_STEP, n, CHUNK_STEP)]:
        if 1 <= p <= n - 2 and p not in cands:
            cands.append(p)
    cands = sorted(cands[:MAX_CANDIDATES])
    xs = [h.to(torch.float32) if h.dtype != torch.float32 else h for h in tensors]
    for p in cands:
        rep.tried += 1
        k = min(PROBE_ROWS, n - p)
        hit = _matches(xs, ladder(net, ids[p:p + k]), p, k)
        if not hit:
            continue
        m = min(TAIL_ROWS, n - p)
        lad = ladder(net, ids[p:p + m]) if m > k else None
        tail = _matches(xs, lad, p, m) if lad is not None else hit
        if not tail:
            continue
        rep.lost_from = p
        slots = sorted(tail)
        for i in range(len(tensors)):
            if rows is not None:
                _add_bad(rows, i, [(p, n - 1)])
        if rows is not None:  # the foreign runs inside p..end are these rows: this finding names them
            rows.findings = [f for f in rows.findings if not (
                f.kind == FindingKind.FOREIGN_ROWS and all(int(a) >= p for a, _ in f.evidence.get("rows", [])))]
        share = {str(i): round(tail[i][1], 3) for i in slots}
        rep.findings.append(Finding(
            FindingKind.CONTEXT_LOST, Severity.FAIL, slots,
            f"rows {p}–{n - 1} were computed without tokens 0–{p - 1}: they equal the reference run of tokens "
            f"{p}… alone, not of the whole sequence (slots {slots}, at "
            f"{', '.join(_r(tail[i][0]) for i in slots)}; {min(m, n - p)} rows compared, "
            f"{min(v[1] for v in tail.values()):.0%}+ equal): a chunked prefill whose later chunk lost the earlier "
            "context (vllm#52909), or a second sequence packed in; a draft trained on these rows learns states no "
            "engine serves", {"rows": [[p, n - 1]], "start": p, "slots": slots, "checked_rows": int(m),
                              "match_share": share, "r": {str(i): tail[i][0] for i in slots}, "by": "reference",
                              "tried": rep.tried}))
        return p
    return None


def _r(r: Any) -> str:
    return r_label(r)


def _matches(xs: Sequence[Any], lad: dict, p: int, k: int) -> dict[int, tuple[Any, float]]:
    """Slot → (r, share of rows p..p+k-1 equal to the chunk-alone run at r) for slots matching at some r ≥ 1
    (the embedding output is context-free: it matches any run and proves nothing)."""
    out: dict[int, tuple[Any, float]] = {}
    for i, x in enumerate(xs):
        rows = x[p:p + k]
        best: tuple[Any, float] | None = None
        for r, y in lad.items():
            if r == 0 or int(y.shape[0]) < k or tuple(y.shape[1:]) != tuple(rows.shape[1:]):
                continue
            yy = y[:k].float()
            rel = (rows - yy).norm(dim=-1) / yy.norm(dim=-1).clamp_min(1e-30)
            share = float((rel <= ROW_MATCH_REL).float().mean())
            if best is None or share > best[1]:
                best = (r, share)
        if best is not None and best[1] >= MATCH_SHARE:
            out[i] = best
    return out


__all__ = ["check_context", "ContextReport", "sequence_starts"]


def without_sink_starts(findings: list) -> list:
    """``findings`` less the data-only sequence starts read from a second token-0 sink (``context_lost`` by
    ``sink``): for captures whose slots are not the residual stream that carries the sink (a sub-layer output),
    where that reading's premise does not hold. The fingerprint and the scan's statistics-only rows drop them
    alike."""
    return [f for f in findings if not (f.kind is FindingKind.CONTEXT_LOST and f.evidence.get("by") == "sink")]

