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

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from forensics.analysis.kernels import _bits_view, intra_op_threads
from forensics.findings import Finding, FindingKind, Severity
from forensics.io.capture import Capture
from forensics.io.pages import release_tensors

if TYPE_CHECKING:  # pragma: no cover
    import torch

ROW_KINDS = ("zero_rows", "nonfinite", "row_count", "token_shift", "slot_misaligned", "foreign_rows")
MAX_LISTED_RUNS = 32  # row runs listed per finding (the share and counts are always complete)
HASH_COLS = 32  # columns hashed per row: equal rows ⇒ equal hashes; distinct real rows never agree on 32 values
#                 (bit patterns) …
HASH_RUNS = 4  # … read as this many runs of consecutive columns spread evenly over the row, each starting at a
#                multiple of its length: 8 bf16 values are 16 bytes of one cache line, so a row costs 4 line reads
#                instead of 32 strided ones, and the runs are read and mixed as 64-bit words
MAX_SHIFT = 4  # token offsets tried around 0 (and around the ids-minus-rows gap for row_count): ±this many
EMBED_MIN_TWINS = 3  # an embedding slot (rows a function of the id) has at least this many rows with a bit twin
OFFSET_MIN_PAIRS = 3  # twin-row pairs needed to decide an offset from the embedding slot
OFFSET_AGREE = 0.15  # at the decided offset, at least this share of twin pairs have equal ids (foreign rows
#                      pair among themselves: 0.18–1.0 on the tuning corruptions; clean captures 1.0) …
OFFSET_LEAD = 1.5  # … and at least this × the runner-up offset's share (clean tuning texts: ≥ 1.9×; a clean
#                    capture's true offset always scores 1.0, so no other offset can be decided on it)
FOREIGN_MIN_ROWS = 2  # contradicted rows (embedding ≠ its id's) needed in a run for foreign_rows
FOREIGN_MERGE_CONFIRMED = 3  # contradicted rows with at most this many confirmed rows between are one run
CROSS_ROWS = 256  # rows sampled for the cross-slot offset test
CROSS_MIN_ROWS = 32  # fewer usable rows: the cross-slot test is not run (short clean tuning texts had -4 ties)
CROSS_SHIFT = 2  # offsets tried between slots: ±this many
CROSS_MIN_PAIRS = 2  # a slot's offset needs this many decisive pairs that agree (with ≥ 3 layer slots)
EMBED_NORM_LEVEL = 0.2  # a slot whose median row norm is ≤ this × every other slot's is embedding-like: it is
#                         most like the layers one row *earlier* (the next-token prediction) and is left out
CROSS_MARGIN = 0.05  # best offset's mean centered cosine must beat the runner-up offset's by this
CROSS_SCREEN_BLOCKS = 8  # the cheap cross-slot test: this many blocks of consecutive rows …
CROSS_SCREEN_BLOCK_ROWS = 8  # … of this many rows each (their ±CROSS_SHIFT neighbours are read too). 16 before
#   2026-12-05; on every cross-slot call of the whole corpus (both halves, 1,404 calls of files ≥ 150 rows) 8-row
#   blocks left no call quiet where the full test had a decisive nonzero pair (16: none either), and the decisive
#   calls' screen lead stayed ≤ −0.06 (16: ≤ −0.065) against the 0.05 needed to be quiet (benchmarks/README.md)
CROSS_SCREEN_MARGIN = 0.05  # every pair best at offset 0 by at least this on the blocks: no row is late, the full
#                             sample is not read (set on the tuning half: see benchmarks/README.md)
CROSS_SCREEN_SAVES = 2  # the screen runs when the full sample reads at least this × its rows
ROW_MATCH_REL = 0.05  # exact mode: a row equals the reference state when ‖x − y‖/‖y‖ ≤ this (bf16 ≈ 0.003)
SCREEN_ROWS = 48  # exact mode: rows sampled to pick each slot's (r, offset) before all its rows are compared
ROW_MATCH_MIN_SHARE = 0.5  # exact mode: a slot is placed (r, offset) when at least this share of its rows match

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
        placed: exact mode — slot → ``(r, offset)`` it matches the reference at, on most of its rows.
        hashes: each slot's per-row hash of ``HASH_COLS`` columns' bits (equal rows ⇒ equal hashes), as the
            data-only checks computed it (None when they did not run); not part of ``to_dict``.
    """

    num_rows: int
    num_tokens: int | None
    findings: list[Finding] = field(default_factory=list)
    bad_rows: dict[int, Runs] = field(default_factory=dict)
    offset: int | None = 0
    slot_offsets: dict[int, int] = field(default_factory=dict)
    undecided: dict[str, str] = field(default_factory=dict)
    placed: dict[int, tuple[Any, int]] = field(default_factory=dict)
    hashes: list[np.ndarray] | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """No failing row finding (padding named in a batch is information, not a fault)."""
        return not any(f.severity is Severity.FAIL for f in self.findings)

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
                "undecided": dict(self.undecided),
                "placed": {str(k): [v[0], v[1]] for k, v in sorted(self.placed.items())}}


def check_rows(capture: Capture, tensors: Sequence[Any] | None = None, *,
               reference: Mapping[Any, torch.Tensor] | None = None, cross_slots: bool = True,
               norms: Sequence[np.ndarray] | None = None,
               hashes: Sequence[np.ndarray | None] | None = None) -> RowReport:
    """Row findings of one capture: zero blocks, non-finite rows, rows ≠ ids, token shifts, foreign rows.

    Args:
        capture: the capture (its slots, ``input_ids``).
        tensors: the slots' ``[rows, H]`` tensors when already loaded (default: ``slot.tensor()``).
        reference: exact mode — the reference states ``{r: [T, H]}`` on the capture's first T ids
            (``forensics.models.target.ladder(model, ids[:T])``); rows are then placed one by one against it.
        cross_slots: data only, run the cross-slot offset test (``slot_misaligned``). It reads ~256 × 5 rows of
            every layer slot in float32 (≈ 0.3 s of CPU on a Kimi-shaped file, 6× the file's statistics), so the
            scan runs it only on the files it fingerprints; the other checks read 32 columns or one max per row.
        norms: each slot's per-row L2 norms when already computed (``SlotStats.norms``): zero and non-finite
            rows are then found from them (a zero norm or a non-finite norm is a candidate, confirmed on that
            row's values: a subnormal row's float32 norm can underflow to 0, a huge finite row's overflow to inf)
            instead of a max-|x| pass over every slot.
        hashes: each slot's row hashes when already gathered (:class:`RowHashTaps` on the statistics' pass; None
            for a slot: hashed here).

    Returns:
        A :class:`RowReport`; ``findings`` empty on a clean capture.

    From data alone, offsets (``row_count``, ``token_shift``) and ``foreign_rows`` need an embedding slot
    (rows a function of the token id: bit-identical rows for repeated ids) and repeated ids; one slot late
    against the others (``slot_misaligned``) comes from cross-slot row similarity at offsets. Where the data
    does not decide, ``undecided`` says why and no finding is made.
    """
    ts = list(tensors) if tensors is not None else [s.tensor() for s in capture.slots]
    n = int(ts[0].shape[0]) if ts else 0
    ids_t = capture.input_ids.reshape(-1) if capture.input_ids is not None else None
    ids = None if ids_t is None else ids_t.numpy().astype(np.int64, copy=False)
    rep = RowReport(num_rows=n, num_tokens=None if ids is None else int(ids.size))
    if not ts or n == 0:
        return rep

    with intra_op_threads(1):  # small row-sample ops: one thread (2 threads were 6-8x slower on a busy CPU)
        broken = _zero_and_nonfinite(ts, rep, norms)
        if reference is not None and ids is not None and reference:
            _with_reference(ts, ids, reference, broken, rep, hashes)
        else:
            _data_only(ts, ids, broken, rep, cross_slots, norms, hashes)
    pad = capture.meta.get("padding")
    if isinstance(pad, dict) and isinstance(pad.get("rows"), (list, tuple)) and len(pad["rows"]) == 2:
        _name_padding(rep, len(ts), (int(pad["rows"][0]), int(pad["rows"][1])), pad.get("id"), pad.get("side"))
    return rep


def _name_padding(rep: RowReport, k: int, rows: tuple[int, int], pad_id: Any, side: Any) -> None:
    """A batch sample saved without its attention mask had its pad rows removed on reading
    (``forensics.io.layout``, rows in the file's numbering): named here, so a reader sees what was not judged."""
    a, b = rows
    n = b - a + 1
    rep.findings.append(Finding(
        FindingKind.PADDING, Severity.INFO, list(range(k)),
        f"rows {a}–{b} of the batch row ({n} row{'s' if n != 1 else ''}) are {side or 'edge'} padding (pad id "
        f"{pad_id}) of a batch saved without attention_mask: removed, not judged; save the mask with the batch to "
        "say which rows are real", {"rows": [[a, b]], "count": n, "pad_id": pad_id, "side": side}))


def _add_bad(rep: RowReport, slot: int, rs: Runs) -> None:
    if rs:
        merged = runs(mask_of(rep.bad_rows.get(slot, []) + list(rs), rep.num_rows))
        rep.bad_rows[slot] = merged


def _fmt_runs(rs: Runs, k: int = 4) -> str:
    return ", ".join(f"{a}–{b}" if a != b else f"{a}" for a, b in rs[:k]) + (", …" if len(rs) > k else "")


def _zero_and_nonfinite(ts: list, rep: RowReport, norms: Sequence[np.ndarray] | None = None) -> np.ndarray:
    """``zero_rows`` and ``nonfinite`` (one pass per slot: a row's max |x| is 0 ⇔ zero, non-finite ⇔ NaN/Inf).
    Returns the ``[k, n]`` mask of these broken rows."""
    import torch

    n = rep.num_rows
    zero = np.zeros((len(ts), n), dtype=bool)
    bad = np.zeros((len(ts), n), dtype=bool)
    for i, h in enumerate(ts):
        if norms is not None and len(norms[i]) == n:
            nm = np.asarray(norms[i])
            cand = np.flatnonzero((nm == 0) | ~np.isfinite(nm))
            if cand.size:
                sub = h[torch.from_numpy(cand)].abs().amax(dim=-1).float().numpy()
                zero[i, cand], bad[i, cand] = sub == 0, ~np.isfinite(sub)
            continue
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
        union = np.asarray(m[hit].any(axis=0))
        rs = runs(union)
        share = float(union.mean())
        where = "every slot" if every else f"slot{'s' if len(hit) > 1 else ''} {hit}"
        ev: dict[str, Any] = {"rows": [list(r) for r in rs[:MAX_LISTED_RUNS]], "runs": len(rs),
                              "share": share, "count": int(union.sum()), "slots": hit,
                              "per_slot": {str(i): [list(r) for r in runs(m[i])[:MAX_LISTED_RUNS]] for i in hit}}
        if kind == "zero_rows":
            ev["trailing"] = bool(rs and rs[-1][1] == n - 1)
        rep.findings.append(Finding(kind, Severity.FAIL, hit, f"{ev['count']} of {n} rows ({share:.0%}) are "
                                    f"{why} in {where} (rows {_fmt_runs(rs)}): these rows are no token's state; "
                                    "a draft trained on them learns nothing from them", ev))
    return zero | bad


# ------------------------------------------------------------------------------------------- data only
@functools.lru_cache(maxsize=64)
def _hash_cols(H: int) -> np.ndarray:
    """The ``HASH_COLS`` columns :func:`_row_hashes` reads: ``HASH_RUNS`` runs of consecutive columns, evenly spread,
    each starting at a multiple of its length (every column when the row has no more). One read-only array per
    width (every slot and file of a scan asks again)."""
    run = HASH_COLS // HASH_RUNS
    if H <= HASH_COLS:
        cols = np.arange(H, dtype=np.int64)
    else:
        starts = np.linspace(0, H - run, HASH_RUNS).astype(np.int64) // run * run
        cols = np.unique((starts[:, None] + np.arange(run)[None, :]).ravel())
    cols.flags.writeable = False
    return cols


def _row_words(bits: np.ndarray) -> np.ndarray | None:
    """A 2-D array of stored bits with C-contiguous rows as ``[rows, bytes / 8]`` 64-bit words (None where a row is
    not a whole number of words or the rows are not contiguous)."""
    if bits.ndim != 2 or bits.strides[1] != bits.itemsize or (bits.shape[1] * bits.itemsize) % 8 or \
            bits.strides[0] % 8:
        return None
    try:
        return bits.view(np.uint64)
    except ValueError:
        return None


@functools.lru_cache(maxsize=64)
def _hash_words(H: int, itemsize: int) -> np.ndarray:
    """The 64-bit words of a row (as :func:`_row_words`) that hold exactly the columns of :func:`_hash_cols`."""
    if H <= HASH_COLS:  # the whole row
        words = np.arange(H * itemsize // 8, dtype=np.int64)
    else:
        byte0 = _hash_cols(H)[::HASH_COLS // HASH_RUNS] * itemsize  # each run's first byte: a multiple of 8
        per = HASH_COLS // HASH_RUNS * itemsize // 8  # words in a run
        words = (byte0[:, None] // 8 + np.arange(per)[None, :]).ravel()
    words.flags.writeable = False
    return words


def _row_hashes(h: Any) -> np.ndarray:
    """A 64-bit hash of the ``HASH_COLS`` columns of :func:`_hash_cols` of every row (bit patterns)."""
    import torch

    cols = _hash_cols(int(h.shape[1]))
    stored = _bits_view(h)
    if stored is not None:  # numpy's take on the stored bits: ~7× cheaper than torch's gather on a mapped slot
        bits = np.take(stored, cols, axis=1)
    else:
        sub = h[:, torch.from_numpy(cols)].contiguous()
        bits = sub.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[sub.element_size()]).numpy()
    return _mix_columns(bits)


def _mix_columns(bits: np.ndarray) -> np.ndarray:
    """The hash of each row of the gathered ``[rows, cols]`` column bits (FNV-style): the row's bytes as 64-bit
    words, word by word, where they make whole words (one word a value otherwise)."""
    acc = np.zeros(bits.shape[0], dtype=np.uint64)
    b64 = _row_words(np.ascontiguousarray(bits)) if bits.shape[0] else None
    if b64 is None:
        b64 = bits.astype(np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        for j in range(b64.shape[1]):
            acc = (acc ^ b64[:, j]) * np.uint64(0x100000001B3)
    return acc


class RowHashTaps:
    """:func:`_row_hashes` of every slot, gathered from the statistics' norm pass (``summarize(capture,
    taps=h.taps)``) while each row block is in cache, instead of a strided read of every row afterwards
    (1.3 vs 0.3 ms on a Kimi-shaped file, measured 2026-12-05). ``hashes()`` gives the same values as
    :func:`_row_hashes`; a slot whose rows did not all arrive once, in order, as stored bits is None there (the
    row checks then hash it themselves).

    Example:
        >>> import forensics                                                    # doctest: +SKIP
        >>> cap = forensics.load("sample_data/speculators_v1/data_0.pt")        # doctest: +SKIP
        >>> ht = RowHashTaps(cap)                                               # doctest: +SKIP
        >>> st = forensics.summarize(cap, taps=ht.taps)                         # doctest: +SKIP
        >>> rep = check_rows(cap, hashes=ht.hashes())                           # doctest: +SKIP
    """

    def __init__(self, capture: Capture) -> None:
        self._shapes = {s.index: (int(s.shape[0]), int(s.shape[1])) for s in capture.slots}
        self._tensors = {s.index: s.tensor() for s in capture.slots}
        self._order = [s.index for s in capture.slots]
        self._cols: dict[int, np.ndarray | None] = {}
        self._next: dict[int, int] = {}

    def taps(self, slot: int) -> list:
        T, H = self._shapes[slot]
        cols = _hash_cols(H)
        self._next[slot] = 0
        self._cols[slot] = None
        h = self._tensors.get(slot)
        whole = _bits_view(h) if h is not None and h.dim() == 2 and tuple(h.shape) == (T, H) else None
        words = _row_words(whole) if whole is not None else None
        if words is not None and whole is not None and h is not None:
            # the runs as 64-bit words, from the tensor's own rows (the block's bytes, in cache)
            wcols = _hash_words(H, whole.itemsize)
            base, row_bytes = int(h.data_ptr()), int(h.stride(0)) * h.element_size()
            out_w = np.empty((T, wcols.size), dtype=np.uint64)

            def tap_words(start: int, block: Any) -> None:
                n = int(block.shape[0])
                if self._next.get(slot, -1) != start:
                    self._next[slot] = -1  # out of order: this slot's hashes are not trusted
                    return
                # the tensor's own rows (no view to make), else the block's
                w = words[start:start + n] if int(block.data_ptr()) == base + start * row_bytes else \
                    _row_words(b) if (b := _bits_view(block)) is not None else None
                if w is None or w.shape != (n, words.shape[1]):
                    self._next[slot] = -1
                    return
                self._cols[slot] = out_w
                np.take(w, wcols, axis=1, out=out_w[start:start + n], mode="clip")
                self._next[slot] = start + n

            return [tap_words]

        def tap(start: int, block: Any) -> None:
            if self._next.get(slot, -1) != start:
                self._next[slot] = -1  # out of order: this slot's hashes are not trusted
                return
            b = _bits_view(block)
            if b is None or b.ndim != 2 or b.shape[1] != H:
                self._next[slot] = -1
                return
            out = self._cols[slot]
            if out is None:
                out = self._cols[slot] = np.empty((T, cols.size), dtype=b.dtype)
            np.take(b, cols, axis=1, out=out[start:start + b.shape[0]], mode="clip")  # clip: unbuffered
            self._next[slot] = start + b.shape[0]

        return [tap]

    def hashes(self) -> list[np.ndarray | None]:
        """Per slot (file order): its row hashes, or None where the pass did not deliver every row. The slots'
        columns of one dtype are mixed together (one pass of :func:`_mix_columns`, the same values per row)."""
        ok = {i: c for i in self._order if (c := self._cols.get(i)) is not None and
              self._next.get(i) == self._shapes[i][0]}
        groups: dict[tuple, list[int]] = {}
        for i, c in ok.items():
            groups.setdefault((c.dtype.str, c.shape[1]), []).append(i)
        mixed: dict[int, np.ndarray] = {}
        for same in groups.values():  # one pass over the slots' rows together: ~4× fewer numpy calls
            cut = np.cumsum([0] + [ok[i].shape[0] for i in same])
            h = _mix_columns(np.concatenate([ok[i] for i in same]))
            mixed.update({i: h[cut[j]:cut[j + 1]] for j, i in enumerate(same)})
        return [mixed.get(i) for i in self._order]


def _twin_pairs(hs: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """``[p, 2]`` row pairs (consecutive members of each group of equal hashes among ``ok`` rows)."""
    rows = np.flatnonzero(ok)
    if rows.size < 2:
        return np.zeros((0, 2), dtype=np.int64)
    order = np.argsort(hs[rows], kind="stable")
    r = rows[order]
    same = hs[r[1:]] == hs[r[:-1]]
    return np.stack([r[:-1][same], r[1:][same]], axis=1)


def _pair_agreement(pairs: np.ndarray, ids: np.ndarray, k: int) -> tuple[float, int]:
    """Share of twin-row pairs whose ids at row + k are equal, and how many pairs had both ids."""
    a, b = pairs[:, 0] + k, pairs[:, 1] + k
    valid = (a >= 0) & (b >= 0) & (a < ids.size) & (b < ids.size)
    nv = int(valid.sum())
    if nv == 0:
        return 0.0, 0
    return float((ids[a[valid]] == ids[b[valid]]).mean()), nv


def _candidates(gap: int, whole: bool) -> list[int]:
    """Token offsets to try: ±``MAX_SHIFT`` around 0 and around ``gap`` (ids − rows), and with ``whole``
    every offset between (the rows may be any contiguous part of the ids)."""
    near = set(range(-MAX_SHIFT, MAX_SHIFT + 1)) | set(range(gap - MAX_SHIFT, gap + MAX_SHIFT + 1))
    if whole:
        near |= set(range(min(0, gap), max(0, gap) + 1))
    return sorted(near)


def _embedding_offset(pairs: np.ndarray, ids: np.ndarray, n: int) -> tuple[int | None, dict]:
    """The token offset k at which the embedding slot's twin rows have equal ids ("same row ⇒ same id")."""
    scores = {k: _pair_agreement(pairs, ids, k) for k in _candidates(int(ids.size) - n, whole=True)}
    scores = {k: v for k, v in scores.items() if v[1] >= OFFSET_MIN_PAIRS}
    if not scores:
        return None, {"why": "too few repeated rows in the embedding slot to place the ids"}
    best = max(scores, key=lambda k: (scores[k][0], -abs(k)))
    runner = max((v[0] for k, v in scores.items() if k != best), default=0.0)
    ev = {"agree": scores[best][0], "pairs": scores[best][1], "runner_up": runner}
    if scores[best][0] >= OFFSET_AGREE and scores[best][0] >= OFFSET_LEAD * runner:
        return best, ev
    return None, {"why": f"no offset places the embedding rows on the ids (best {best}: {scores[best][0]:.2f} "
                         f"of twin rows share an id, runner-up {runner:.2f})", **ev}


def _foreign_from_embedding(hs: np.ndarray, ok: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """Per row: +1 its embedding agrees with its id elsewhere, −1 contradicts it, 0 unknown."""
    n = hs.size
    t = np.arange(n) + k
    inside = ok & (t >= 0) & (t < ids.size)
    rows = np.flatnonzero(inside)
    label = np.zeros(n, dtype=np.int8)
    if rows.size < 2:
        return label
    rid, rh = ids[t[rows]], hs[rows]
    # confirmed: another row with the same hash and the same id (equal (hash, id) keys sit together in the
    # lexicographic order; a run of two or more is confirmed)
    order = np.lexsort((rid, rh))
    sh, si = rh[order], rid[order]
    start = np.concatenate([[True], (sh[1:] != sh[:-1]) | (si[1:] != si[:-1])])
    run = np.cumsum(start) - 1
    confirmed = np.empty(rows.size, dtype=bool)
    confirmed[order] = np.bincount(run)[run] > 1
    label[rows[confirmed]] = 1
    # an id whose confirmed rows have another hash: this row is not that id's embedding. An unconfirmed row's
    # (hash, id) occurs once, so its hash is never among its id's confirmed hashes: it contradicts its id
    # exactly when that id has confirmed rows. The same row as a confirmed row of another id is no evidence
    # on its own: tokens whose embedding rows are bit-identical (reserved or untrained ids share one initial
    # row) look exactly like that in a clean capture
    label[rows[~confirmed & np.isin(rid, rid[confirmed])]] = -1
    return label


def _foreign_runs(label: np.ndarray) -> Runs:
    """Runs of contradicted rows (−1) that no more than ``FOREIGN_MERGE_CONFIRMED`` confirmed rows (+1)
    separate (a foreign row of the same token at the same position is confirmed by chance), each trimmed to
    contradicted rows and kept when it holds ≥ ``FOREIGN_MIN_ROWS`` of them."""
    bad = np.flatnonzero(label == -1)
    if bad.size == 0:
        return []
    conf = np.cumsum(label == 1)
    out: Runs = []
    start = prev = int(bad[0])
    count = 1
    for t in bad[1:].tolist():
        if conf[t] - conf[prev] > FOREIGN_MERGE_CONFIRMED:
            if count >= FOREIGN_MIN_ROWS:
                out.append((start, prev))
            start, count = t, 0
        prev, count = t, count + 1
    if count >= FOREIGN_MIN_ROWS:
        out.append((start, prev))
    return out


def cross_offsets(ts: list, ok: np.ndarray, max_shift: int = CROSS_SHIFT,
                  screen: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Pairwise best row offsets: ``d[i, j]`` = the d at which slot i's row t is most like slot j's row t + d
    (mean centered cosine on a row sample), ``margin[i, j]`` its lead over the runner-up offset.

    With ``screen`` (default) a cheap test runs first (:func:`screen_quiet`: the same centered cosines on
    ``CROSS_SCREEN_BLOCKS`` contiguous blocks of rows, each row converted once, 1/8 of the rows of the full
    sample on a long capture). When it finds every pair best at offset 0 by at least ``CROSS_SCREEN_MARGIN``,
    no slot can be decided late and every offset is 0 (margins 0); otherwise the full sample decides, as
    without the screen. Short captures, whose blocks would read about as many rows as the full sample, go
    straight to the full sample.
    """
    k, n = len(ts), int(ts[0].shape[0])
    good = np.flatnonzero(ok[max_shift:n - max_shift]) + max_shift if n > 2 * max_shift else np.zeros(0, np.int64)
    d = np.zeros((k, k), dtype=np.int64)
    margin = np.zeros((k, k))
    if good.size < CROSS_MIN_ROWS:
        return d, margin
    rows = good[np.linspace(0, good.size - 1, min(CROSS_ROWS, good.size)).round().astype(np.int64)]
    rows = np.unique(rows)
    if screen and screen_quiet(ts, good, max_shift, full_rows=_span(rows, max_shift).size):
        return d, margin
    return _best_offsets(_cross_sims(ts, rows, max_shift), max_shift)


def screen_starts(good: np.ndarray, max_shift: int = CROSS_SHIFT) -> np.ndarray | None:
    """First rows of the cheap test's blocks: ``CROSS_SCREEN_BLOCKS`` runs of ``CROSS_SCREEN_BLOCK_ROWS``
    consecutive rows evenly spread over ``good``'s range, apart by at least a block and its ±``max_shift``
    neighbours (None: the range is too short for that)."""
    R, B = CROSS_SCREEN_BLOCK_ROWS, CROSS_SCREEN_BLOCKS
    lo, hi = int(good[0]), int(good[-1]) - R + 1
    if hi < lo or (hi - lo) < (B - 1) * (R + 2 * max_shift):
        return None
    return np.linspace(lo, hi, B).round().astype(np.int64)


def screen_rows(good: np.ndarray, max_shift: int = CROSS_SHIFT) -> np.ndarray | None:
    """The cheap test's base rows: the rows of its blocks that ``good`` holds (None: no blocks, or fewer than
    ``CROSS_MIN_ROWS`` good rows in them)."""
    starts = screen_starts(good, max_shift)
    if starts is None:
        return None
    cand = (starts[:, None] + np.arange(CROSS_SCREEN_BLOCK_ROWS)[None, :]).ravel()
    rows = cand[np.isin(cand, good)]
    return rows if rows.size >= CROSS_MIN_ROWS else None


def screen_quiet(ts: list, good: np.ndarray, max_shift: int = CROSS_SHIFT, full_rows: int | None = None) -> bool:
    """The cheap cross-slot test: True when, on the blocks of :func:`screen_rows`, every ordered pair of slots
    is best at offset 0 by at least ``CROSS_SCREEN_MARGIN``, every value finite (:func:`screen_sims`). False
    (run the full test) when it is not, when there are no blocks, or when the full sample would read fewer
    than ``CROSS_SCREEN_SAVES`` × the blocks' rows (``full_rows``: the rows the full sample reads)."""
    starts = screen_starts(good, max_shift)
    rows = screen_rows(good, max_shift)
    if starts is None or rows is None or (full_rows is not None and len(starts) * (
            CROSS_SCREEN_BLOCK_ROWS + 2 * max_shift) * CROSS_SCREEN_SAVES > full_rows):
        return False
    sims = screen_sims(ts, starts, rows, max_shift)
    if not np.isfinite(sims).all():
        return False
    off = ~np.eye(len(ts), dtype=bool)
    others = np.delete(sims, max_shift, axis=2).max(axis=2)
    return bool((sims[:, :, max_shift] - others >= CROSS_SCREEN_MARGIN)[off].all())


def screen_sims(ts: list, starts: np.ndarray, rows: np.ndarray, max_shift: int = CROSS_SHIFT) -> np.ndarray:
    """``sims[i, j, s]`` of :func:`_cross_sims` on the base ``rows`` (inside the blocks that begin at ``starts``),
    computed block by block: each block's rows and their ±``max_shift`` neighbours are read from the stored
    bytes and converted to float32 once (centered on the counted rows' mean), one batched matmul per unordered
    pair of slots gives every row dot product both ways, and the cosines of the counted rows at each shift are
    summed in float64 in one weighted sum (the row norms divided out of the small ``[B, P, P]`` products, not
    out of the rows). The products are taken block by block, every pair of one block while its rows are in cache."""
    import torch

    R, m = CROSS_SCREEN_BLOCK_ROWS, max_shift
    P = R + 2 * m
    B = len(starts)
    base = np.zeros((B, P), dtype=bool)  # rows that count, in each block with its neighbours
    base[:, m:m + R] = np.isin(starts[:, None] + np.arange(R)[None, :], rows)
    count = int(base.sum())
    w = torch.from_numpy(base.reshape(1, -1) / count).to(torch.float32)
    # diag[o, b, r, c] = 1 where row r of block b counts and c = r + o - m: the shift-o diagonal of the counted rows
    diag = np.zeros((2 * m + 1, B, P, P))
    r = np.arange(m, m + R)
    for o in range(2 * m + 1):
        diag[o][:, r, r + o - m] = base[:, r]
    sel = diag.reshape(2 * m + 1, -1)
    idx = torch.from_numpy((starts[:, None] + np.arange(-m, R + m)[None, :]).ravel())  # every block's rows
    xs, ns = [], []
    for h in ts:
        # [B, P, H] in float32 (one gather of the stored rows, then one conversion: a copy_ of each block into a
        # fresh float32 buffer cost 8× as much, measured 2026-12-05)
        x = h.index_select(0, idx).to(torch.float32).reshape(B, P, -1)
        release_tensors([h])  # its file pages (a few blocks map most of a slot: the page cache's folios)
        x -= w @ x.reshape(-1, x.shape[-1])  # centered on the counted rows' mean
        xs.append(x)
        ns.append(torch.linalg.vector_norm(x, dim=-1).clamp_min(1e-30).to(torch.float64).numpy())  # [B, P]
    k = len(ts)
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    # [pair, B, P, P]: row i · row j, block by block (every slot's rows of one block stay in cache for all its pairs;
    # a block's product is the same as in one batched matmul over the blocks)
    G = torch.empty(len(pairs), B, P, P, dtype=torch.float32)
    for b in range(B):
        for q, (i, j) in enumerate(pairs):
            torch.bmm(xs[i][b:b + 1], xs[j][b:b + 1].transpose(1, 2), out=G[q, b:b + 1])
    G64 = G.to(torch.float64).numpy()
    sims = np.zeros((k, k, 2 * m + 1))
    for q, (i, j) in enumerate(pairs):
        g = G64[q]
        g /= ns[i][:, :, None] * ns[j][:, None, :]  # cosines
        # shift o - m: the counted rows t of slot i against rows t + o - m of slot j (a diagonal of g), and
        # the counted rows of slot j against slot i's (the same diagonal of g transposed)
        sims[i, j] = sel @ g.reshape(-1) / count
        sims[j, i] = sel @ g.transpose(0, 2, 1).reshape(-1) / count
    return sims


def _span(rows: np.ndarray, max_shift: int) -> np.ndarray:
    return np.unique((rows[:, None] + np.arange(-max_shift, max_shift + 1)[None, :]).ravel())


def _cross_sims(ts: list, rows: np.ndarray, max_shift: int) -> np.ndarray:
    """``sims[i, j, s]``: mean over ``rows`` of the centered cosine of slot i's row t and slot j's row t + shift
    ``s - max_shift``; each row of the span converted to float32 once per slot."""
    import torch

    k = len(ts)
    shifts = list(range(-max_shift, max_shift + 1))
    span = _span(rows, max_shift)  # one gather per slot, float32
    pos = {s: np.searchsorted(span, rows + s) for s in shifts}
    base, moved = [], []
    for h in ts:
        x = h[torch.from_numpy(span)].to(torch.float32).numpy()
        release_tensors([h])
        x = x - x[pos[0]].mean(axis=0, keepdims=True)  # centered on the sampled rows' mean
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-30)
        base.append(x[pos[0]])
        moved.append({s: x[pos[s]] for s in shifts})
    sims = np.zeros((k, k, len(shifts)))
    for i in range(k):
        for j in range(k):
            if i == j:
                continue
            # mean over rows of the row cosines = one dot product of the flattened blocks (BLAS, no temporary)
            sims[i, j] = [float(np.dot(base[i].ravel(), moved[j][s].ravel())) / len(rows) for s in shifts]
    return sims


def _best_offsets(sims: np.ndarray, max_shift: int) -> tuple[np.ndarray, np.ndarray]:
    """Per pair: the best offset and its lead over the runner-up (diagonal: 0, 0)."""
    k = sims.shape[0]
    d = np.zeros((k, k), dtype=np.int64)
    margin = np.zeros((k, k))
    for i in range(k):
        for j in range(k):
            if i != j:
                o = np.argsort(-sims[i, j])
                d[i, j], margin[i, j] = int(o[0]) - max_shift, sims[i, j, o[0]] - sims[i, j, o[1]]
    return d, margin


def _slot_offsets(d: np.ndarray, margin: np.ndarray, slots: list[int]) -> tuple[dict[int, int], str | None]:
    """Each slot's offset against the others (0 for the majority), from the decisive pairwise offsets of
    ``slots`` (indices into ``d``'s rows are positions in ``slots``)."""
    k = len(slots)
    if k < 2:
        return {}, None
    decisive = margin >= CROSS_MARGIN
    off: dict[int, int] = {}
    for i in range(k):
        vals = [int(d[i, j]) for j in range(k) if j != i and decisive[i, j]]
        if len(vals) >= min(CROSS_MIN_PAIRS, k - 1):
            u, c = np.unique(vals, return_counts=True)
            if c.max() * 2 > len(vals):
                off[i] = int(u[np.argmax(c)])
    moved = {slots[i]: o for i, o in off.items() if o != 0}
    if not moved:
        return {}, None
    if k == 2:
        return {}, (f"slots {slots[0]} and {slots[1]} sit {int(d[0, 1]):+d} rows apart; with two layer slots, "
                    "which one is late cannot be told from the data (pass --model)")
    if len(moved) * 2 >= k:
        return {}, f"{len(moved)} of {k} layer slots sit at an offset from the others: no majority to anchor them"
    return moved, None


def _embedding_like(ts: list, broken: np.ndarray, norms: Sequence[np.ndarray] | None = None) -> set[int]:
    """Slots whose median row norm is ≤ ``EMBED_NORM_LEVEL`` × every other slot's (a lookup's tiny norms);
    the sampled rows' norms are read from ``norms`` (the statistics' float32 row norms) when given."""
    import torch

    if len(ts) < 2:
        return set()
    med = []
    for i, h in enumerate(ts):
        rows = np.flatnonzero(~broken[i])
        rows = rows[np.linspace(0, rows.size - 1, min(rows.size, CROSS_ROWS)).round().astype(np.int64)] \
            if rows.size else rows
        if not rows.size:
            med.append(float("nan"))
        elif norms is not None and len(norms[i]) == h.shape[0]:  # torch.median's lower median (no NaN: not broken)
            x = np.asarray(norms[i], dtype=np.float32)[rows]
            med.append(float(np.partition(x, (x.size - 1) // 2)[(x.size - 1) // 2]))
        else:
            med.append(float(torch.linalg.vector_norm(h[torch.from_numpy(rows)].float(), dim=-1).median()))
    out = set()
    for i, m in enumerate(med):
        others = [x for j, x in enumerate(med) if j != i and np.isfinite(x)]
        if np.isfinite(m) and others and m <= EMBED_NORM_LEVEL * min(others):
            out.add(i)
    return out


def _data_only(ts: list, ids: np.ndarray | None, broken: np.ndarray, rep: RowReport, cross_slots: bool = True,
               norms: Sequence[np.ndarray] | None = None, hashes: Sequence[np.ndarray | None] | None = None) -> None:
    n, k = rep.num_rows, len(ts)
    ok_all = np.asarray(~broken.any(axis=0))
    emb, pairs, hs = None, None, None
    best_twins = 0
    rep.hashes = []
    for i, h in enumerate(ts):
        given = hashes[i] if hashes is not None and i < len(hashes) else None
        hi = given if given is not None and len(given) == n else _row_hashes(h)
        rep.hashes.append(hi)
        p = _twin_pairs(hi, ~broken[i])
        twins = int(np.unique(p).size)
        if twins >= EMBED_MIN_TWINS and twins > best_twins:
            emb, pairs, hs, best_twins = i, p, hi, twins
    offset: int | None = 0
    if ids is not None and emb is not None and pairs is not None:
        offset, why = _embedding_offset(pairs, ids, n)
        if offset is None:
            rep.undecided["offset"] = why["why"]
    elif ids is not None and ids.size != n:
        offset = None
        rep.undecided["offset"] = "no embedding slot (rows a function of the id) to place the rows on the ids"
    else:
        rep.undecided["token_shift"] = ("no token ids" if ids is None else
                                        "no embedding slot with repeated ids: a whole-file shift needs --model")
    layer = [i for i in range(k) if i != emb and i not in _embedding_like(ts, broken, norms)] if cross_slots else []
    slot_off: dict[int, int] = {}
    why_cross = None if cross_slots else "the cross-slot offset test was not run (hsf scan runs it on the files it " \
        "fingerprints; hsf fingerprint runs it on every file)"
    if len(layer) >= 2:
        d, margin = cross_offsets([ts[i] for i in layer], ok_all)
        slot_off, why_cross = _slot_offsets(d, margin, layer)
    if why_cross:
        rep.undecided["slot_misaligned"] = why_cross
    _report_offsets(rep, k, ids, offset, slot_off, "the embedding slot's repeated rows")
    if ids is not None and emb is not None and hs is not None and offset is not None:
        e_off = offset + slot_off.get(emb, 0)
        label = _foreign_from_embedding(hs, ~broken[emb], ids, e_off)
        fr = _foreign_runs(label)
        if fr:
            for i in range(k):
                _add_bad(rep, i, fr)
            cnt = int(sum(b - a + 1 for a, b in fr))
            rep.findings.append(Finding(
                FindingKind.FOREIGN_ROWS, Severity.FAIL, list(range(k)),
                f"rows {_fmt_runs(fr)} are not the states of their token ids: in the embedding slot {emb} they "
                f"equal other tokens' embeddings ({int((label == -1).sum())} rows contradict their id) — rows "
                "from another sequence (the other slots' rows there are taken as foreign too)",
                {"rows": [list(r) for r in fr[:MAX_LISTED_RUNS]], "runs": len(fr), "count": cnt,
                 "share": cnt / max(1, n), "contradicted": int((label == -1).sum()),
                 "confirmed": int((label == 1).sum()), "slots": list(range(k)), "embedding_slot": emb,
                 "by": "embedding"}))


def _report_offsets(rep: RowReport, k: int, ids: np.ndarray | None, offset: int | None, slot_off: dict[int, int],
                    by: str) -> None:
    """``row_count`` / ``token_shift`` / ``slot_misaligned`` from the decided offsets; rows outside the ids bad."""
    n = rep.num_rows
    rep.offset = offset
    rep.slot_offsets = dict(slot_off)
    m = None if ids is None else int(ids.size)
    if m is not None and m != n:
        ev: dict[str, Any] = {"rows": n, "tokens": m, "offset": offset, "by": by if offset is not None else None}
        if offset is None:
            part = "which tokens the rows belong to cannot be told from the data (pass --model)"
        else:
            ev["token_range"] = [offset, offset + n - 1]
            part = (f"they fit tokens {offset}–{offset + n - 1}" + (" (a missing tail)" if offset == 0 and n < m else
                    " (the uncached suffix of a prefix-cached prompt)" if offset + n == m and offset > 0 else ""))
        rep.findings.append(Finding(FindingKind.ROW_COUNT, Severity.FAIL, list(range(k)),
                                    f"the slots hold {n} rows for {m} token ids: {part}", ev))
    elif offset not in (0, None):
        rep.findings.append(Finding(FindingKind.TOKEN_SHIFT, Severity.FAIL, list(range(k)),
                                    f"every slot's row t holds the state of token t{offset:+d} (found with {by}): "
                                    f"the rows sit {abs(offset)} token"
                                    f"{'s' if abs(offset) > 1 else ''} {'late' if offset > 0 else 'early'}",
                                    {"offset": offset, "by": by}))
    for i, o in sorted(slot_off.items()):
        rep.findings.append(Finding(FindingKind.SLOT_MISALIGNED, Severity.FAIL, [i],
                                    f"slot {i}'s row t holds the state the other slots hold at row t{o:+d}: "
                                    f"it sits {abs(o)} token"
                                    f"{'s' if abs(o) > 1 else ''} {'late' if o > 0 else 'early'} against them",
                                    {"slot": i, "offset": o, "slots": [i], "by": by}))
    if offset is not None and m is not None:
        for i in range(k):
            tok = np.arange(n) + offset + slot_off.get(i, 0)
            _add_bad(rep, i, runs((tok < 0) | (tok >= m)))


# ----------------------------------------------------------------------------------------- with a model
def _with_reference(ts: list, ids: np.ndarray, reference: Mapping[Any, Any], broken: np.ndarray,
                    rep: RowReport, hashes: Sequence[np.ndarray | None] | None = None) -> None:
    """Place every slot at (r, offset) against the reference ladder; rows that do not match there are foreign."""
    import torch

    n, k = rep.num_rows, len(ts)
    lad = {r: y.to(torch.float32) for r, y in reference.items()}
    T = min(int(y.shape[0]) for y in lad.values())
    cands = _candidates(int(ids.size) - n, whole=False)
    place: dict[int, tuple[Any, int, np.ndarray, np.ndarray]] = {}
    for i, h in enumerate(ts):
        screen = None  # (hits, r, offset) on a row sample; then the whole slot at the best one
        for o in cands:
            rows = np.flatnonzero(~broken[i] & (np.arange(n) + o >= 0) & (np.arange(n) + o < T))
            if rows.size < 2:
                continue
            pick = np.linspace(0, rows.size - 1, min(rows.size, SCREEN_ROWS)).round().astype(np.int64)
            rows = np.unique(rows[pick])
            x = h[torch.from_numpy(rows)].to(torch.float32)
            ti = torch.from_numpy(rows + o)
            for r, y in lad.items():
                yy = y[ti]
                rel_s = (x - yy).norm(dim=-1) / yy.norm(dim=-1).clamp_min(1e-30)
                hit = int((rel_s <= ROW_MATCH_REL).sum())
                if screen is None or hit > screen[0]:
                    screen = (hit, r, o)
        if screen is None or screen[0] == 0:
            continue
        _, r, o = screen
        rows = np.flatnonzero(~broken[i] & (np.arange(n) + o >= 0) & (np.arange(n) + o < T))
        x = h[torch.from_numpy(rows)].to(torch.float32)
        yy = lad[r][torch.from_numpy(rows + o)]
        rel = ((x - yy).norm(dim=-1) / yy.norm(dim=-1).clamp_min(1e-30)).numpy()
        if int((rel <= ROW_MATCH_REL).sum()) >= ROW_MATCH_MIN_SHARE * rows.size:
            place[i] = (r, o, rows, rel)
    data = RowReport(num_rows=n, num_tokens=rep.num_tokens,
                     bad_rows={i: list(v) for i, v in rep.bad_rows.items()})
    _data_only(ts, ids, broken, data, hashes=hashes)
    rep.hashes = data.hashes
    if not place:
        rep.undecided["reference"] = "no slot equals a reference state on most of its rows: data-only row checks"
        rep.findings += data.findings
        rep.bad_rows, rep.offset, rep.slot_offsets = data.bad_rows, data.offset, data.slot_offsets
        rep.undecided.update(data.undecided)
        return
    offs = [o for _, o, _, _ in place.values()]
    u, c = np.unique(offs, return_counts=True)
    common = int(u[np.argmax(c)])
    if c.max() * 2 <= len(offs) and len(offs) > 1:
        common = 0 if 0 in offs else common
    slot_off = {i: o - common for i, (_, o, _, _) in place.items() if o != common}
    _report_offsets(rep, k, ids, common, slot_off, "the reference forward")
    foreign: dict[int, Runs] = {}
    checked = min(n, T - min(0, common))  # rows past the reference's T: the data-only runs there
    beyond = [f for f in data.findings if f.kind == "foreign_rows"]
    for i, (_, _, rows, rel) in place.items():
        miss = np.zeros(n, dtype=bool)
        miss[rows[rel > ROW_MATCH_REL]] = True
        for f in beyond:
            miss |= mask_of([(max(a, checked), b) for a, b in f.evidence["rows"] if b >= checked], n)
        fr = runs(miss)
        if fr:
            foreign[i] = fr
            _add_bad(rep, i, fr)
    if foreign:
        union = runs(np.logical_or.reduce([mask_of(v, n) for v in foreign.values()]))
        cnt = int(sum(b - a + 1 for a, b in union))
        rep.findings.append(Finding(
            FindingKind.FOREIGN_ROWS, Severity.FAIL, sorted(foreign),
            f"rows {_fmt_runs(union)} are not the states of their token ids in this sequence: they match no "
            f"reference state where the slot's other rows do (slots {sorted(foreign)})",
            {"rows": [list(r) for r in union[:MAX_LISTED_RUNS]], "runs": len(union), "count": cnt,
             "share": cnt / max(1, n), "slots": sorted(foreign),
             "per_slot": {str(i): [list(r) for r in v[:MAX_LISTED_RUNS]] for i, v in foreign.items()},
             "checked_rows": int(checked), "by": "reference"}))
    rep.placed = {i: (r, o) for i, (r, o, _, _) in place.items()}
