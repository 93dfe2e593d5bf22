"""Row forensics: the right layer with the wrong rows — zero blocks, rows ≠ tokens, token shifts, foreign rows.

A capture can hold the right layer in every slot and still feed a draft the wrong rows: a zero block from
a KV block read at the wrong place (vllm#46301, speculators#613), a truncated tail (sglang#26163), only the
uncached suffix of a prefix-cached prompt (vllm#44485), every row one token late (SpecForge#470/#472), one
slot late against the others, or rows from another request (sglang#4997). :func:`check_rows` finds and
locates them from the data (and, given the reference ladder on the capture's ids, against the model).

Finding kinds (severity FAIL; evidence holds numbers only):

* ``zero_rows``: all-zero rows in a slot (or every slot) whose other rows are not zero. ``rows``: inclusive
  ``[first, last]`` runs; ``share``: zero rows / rows; ``slots``. A wholly zero slot is ``all_zero`` (the
  fingerprint's), never this. Padding: rows after the last real token are not padding here — a capture's
  rows are its tokens' states, so trailing zero rows are a ``zero_rows`` run too (a pad tail is reported,
  and named ``trailing``).
* ``nonfinite``: NaN/Inf rows per slot: ``rows`` runs, ``share``, ``slots``.
* ``row_count``: the slots hold ``rows`` rows for ``tokens`` token ids; ``offset`` = the first token the rows
  belong to when they fit a contiguous part of the ids (0: a missing tail; 32: the prefix-cache suffix),
  None when the data cannot say.
* ``token_shift``: every slot's row t holds token t + ``offset``'s state.
* ``slot_misaligned``: ``slots`` = [the late slot]; its row t holds the state the other slots hold at
  row t + ``offset``.
* ``foreign_rows``: ``rows`` runs that are not the states of their token ids in this sequence.

Example:
    >>> import forensics
    >>> from forensics.analysis.rows import check_rows
    >>> rep = check_rows(forensics.load("sample_data/speculators_v1/data_0.pt"))   # doctest: +SKIP
    >>> rep.findings, rep.bad_rows                                                # doctest: +SKIP
    ([], {})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from forensics.findings import Finding, FindingKind, Severity
from forensics.io.capture import Capture

if TYPE_CHECKING:  # pragma: no cover
    import torch

ROW_KINDS = ("zero_rows", "nonfinite", "row_count", "token_shift", "slot_misaligned", "foreign_rows")
MAX_LISTED_RUNS = 32  # row runs listed per finding (the share and counts are always complete)

Runs = list[tuple[int, int]]


def runs(mask: np.ndarray) -> Runs:
    """Inclusive ``(first, last)`` runs of True in a 1-D boolean mask.

    >>> runs(np.array([0, 1, 1, 0, 1], bool))
    [(1, 2), (4, 4)]
    """
    m = np.asarray(mask, dtype=bool).reshape(-1)
    if not m.any():
        return []
    d = np.diff(np.concatenate([[0], m.astype(np.int8), [0]]))
    starts, ends = np.nonzero(d == 1)[0], np.nonzero(d == -1)[0] - 1
    return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]


def mask_of(ranges: Sequence[tuple[int, int]], n: int) -> np.ndarray:
    """A boolean ``[n]`` mask, True on the inclusive ranges.

    >>> mask_of([(1, 2)], 4).tolist()
    [False, True, True, False]
    """
    m = np.zeros(n, dtype=bool)
    for a, b in ranges:
        m[max(0, a):min(n, b + 1)] = True
    return m


@dataclass
class RowReport:
    """What :func:`check_rows` found about the rows of one capture.

    Attributes:
        num_rows: rows per slot.
        num_tokens: token ids in the capture (None: no ids).
        findings: the row findings (kinds in ``ROW_KINDS``), severity FAIL.
        bad_rows: slot → inclusive ``(first, last)`` row ranges that are not their token's state (zero,
            non-finite, foreign, or outside the ids). A slot with no bad row is absent.
        offset: row t holds the state of token ``t + offset`` in every slot (0 aligned; set by ``row_count``
            or ``token_shift``; None: the rows fit no contiguous part of the ids that the data can name).
        slot_offsets: slot → its extra offset against the other slots (``slot_misaligned``).
        undecided: checks the data could not decide (``{"check": why}``): CANNOT TELL, no finding.
    """

    num_rows: int
    num_tokens: int | None
    findings: list[Finding] = field(default_factory=list)
    bad_rows: dict[int, Runs] = field(default_factory=dict)
    offset: int | None = 0
    slot_offsets: dict[int, int] = field(default_factory=dict)
    undecided: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No row finding."""
        return not self.findings

    def kinds(self) -> list[str]:
        return [f.kind for f in self.findings]

    def good_rows(self, slot: int | None = None) -> np.ndarray:
        """Boolean ``[num_rows]`` mask of rows to trust: of ``slot``, or of every slot when None."""
        bad = np.zeros(self.num_rows, dtype=bool)
        slots = self.bad_rows if slot is None else {slot: self.bad_rows.get(slot, [])}
        for rs in slots.values():
            bad |= mask_of(rs, self.num_rows)
        return ~bad

    def good_index(self, slot: int | None = None) -> np.ndarray:
        """Row indices of :meth:`good_rows` (int64), for ``tensor[idx]``."""
        return np.nonzero(self.good_rows(slot))[0]

    def token_of_row(self, slot: int | None = None) -> np.ndarray | None:
        """Token index of each row (``[num_rows]`` int64; -1 outside the ids); None when the offset is unknown."""
        if self.offset is None:
            return None
        off = self.offset + (self.slot_offsets.get(slot, 0) if slot is not None else 0)
        t = np.arange(self.num_rows, dtype=np.int64) + off
        if self.num_tokens is not None:
            t[(t < 0) | (t >= self.num_tokens)] = -1
        return t

    def to_dict(self) -> dict:
        return {"num_rows": self.num_rows, "num_tokens": self.num_tokens,
                "findings": [f.to_dict() for f in self.findings],
                "bad_rows": {str(k): [list(r) for r in v] for k, v in sorted(self.bad_rows.items())},
                "offset": self.offset, "slot_offsets": {str(k): v for k, v in sorted(self.slot_offsets.items())},
                "undecided": dict(self.undecided)}


def check_rows(capture: Capture, tensors: Sequence[Any] | None = None, *,
               reference: Mapping[Any, torch.Tensor] | None = None) -> RowReport:
    """Row findings of one capture: zero blocks, non-finite rows, rows ≠ ids, token shifts, foreign rows.

    Args:
        capture: the capture (its slots, ``input_ids``).
        tensors: the slots' ``[rows, H]`` tensors when already loaded (default: ``slot.tensor()``).
        reference: exact mode — the reference states ``{r: [T, H]}`` on the capture's ids (the first T ids;
            ``forensics.models.target.ladder(model, ids)``); rows are then checked one by one against it.

    Returns:
        A :class:`RowReport`; ``findings`` empty on a clean capture.
    """
    ts = list(tensors) if tensors is not None else [s.tensor() for s in capture.slots]
    n = int(ts[0].shape[0]) if ts else 0
    ids = capture.input_ids.reshape(-1) if capture.input_ids is not None else None
    rep = RowReport(num_rows=n, num_tokens=None if ids is None else int(ids.numel()))
    if not ts or n == 0:
        return rep
    _zero_and_nonfinite(ts, rep)
    return rep


def _add_bad(rep: RowReport, slot: int, rs: Runs) -> None:
    if rs:
        merged = runs(mask_of(rep.bad_rows.get(slot, []) + list(rs), rep.num_rows))
        rep.bad_rows[slot] = merged


def _zero_and_nonfinite(ts: list, rep: RowReport) -> None:
    """``zero_rows`` and ``nonfinite`` (one pass per slot: a row's max |x| is 0 ⇔ zero, non-finite ⇔ NaN/Inf)."""
    import torch

    n = rep.num_rows
    zero = np.zeros((len(ts), n), dtype=bool)
    bad = np.zeros((len(ts), n), dtype=bool)
    for i, h in enumerate(ts):
        amax = torch.cat([h[s:s + 4096].abs().amax(dim=-1).float() for s in range(0, n, 4096)]).numpy()
        zero[i] = amax == 0
        bad[i] = ~np.isfinite(amax)
    for kind, m, why in ((FindingKind.ZERO_ROWS, zero, "all zero"), (FindingKind.NONFINITE, bad, "NaN or Inf")):
        hit = [i for i in range(len(ts)) if m[i].any() and (kind == "nonfinite" or not m[i].all())]
        if not hit:
            continue
        every = len(hit) == len(ts) and all((m[i] == m[hit[0]]).all() for i in hit)
        for i in hit:
            _add_bad(rep, i, runs(m[i]))
        rs = runs(m[hit[0]]) if every else runs(np.asarray(m[hit].any(axis=0)))
        share = float(m[hit].any(axis=0).mean())
        where = "every slot" if every else f"slot{'s' if len(hit) > 1 else ''} {hit}"
        ev: dict[str, Any] = {"rows": [list(r) for r in rs[:MAX_LISTED_RUNS]], "runs": len(rs),
                              "share": share, "count": int(m[hit].any(axis=0).sum()), "slots": hit,
                              "per_slot": {str(i): [list(r) for r in runs(m[i])[:MAX_LISTED_RUNS]] for i in hit}}
        if kind == "zero_rows":
            ev["trailing"] = bool(rs and rs[-1][1] == n - 1)
        first = ", ".join(f"{a}–{b}" if a != b else f"{a}" for a, b in rs[:4])
        rep.findings.append(Finding(kind, Severity.FAIL, hit, f"{ev['count']} of {n} rows ({share:.0%}) are "
                                    f"{why} in {where} (rows {first}{', …' if len(rs) > 4 else ''}): these rows "
                                    "are no token's state; a draft trained on them learns nothing from them",
                                    ev))
