"""Fingerprint: which captured tensor is which — role, depth order and label of every slot, with evidence.

From the data alone: exact duplicate rows ⇒ embedding (a table lookup,
transformers #2461); small context-free norms without a sink ⇒ embedding even for absolute-position
models; a token-0 sink (Sun et al. 2024) ⇒ after the emergence layer; a tight, sinkless spread ⇒ late or
post-norm; a norm collapse next to a deep pre-norm slot, or B = RMSNorm(A) for some γ
⇒ post-final-norm; the masked angular-distance chain (``forensics.analysis.fingerprint.depth``) ⇒ depth order, whose
direction is voted by norm growth (Heimersheim & Turner 2023) and the late signature. Depth is not norm
order (the seed's L59 norm 111 ± 8 < L31 174 ± 99). Exact mode (``model=``,
``forensics.analysis.fingerprint.exact``) settles r per slot. Every threshold is a named constant, shown next
to the raw value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from forensics.analysis.claims import Claim, Claims, capture_claims, user_claims
from forensics.analysis.context import check_context, without_sink_starts
from forensics.analysis.fingerprint.depth import DistanceSample, angular_distance_sample, settle_chain
from forensics.analysis.fingerprint.exact import CONCAT_MAX_K, ConcatenatedWidth, exact_checks, reference_ladder
from forensics.analysis.fingerprint.residual import sublayer_slots
from forensics.analysis.fingerprint.rules import (
    BANDS,
    DIRECTION_CONFLICT_CONFIDENCE,
    DUP_GROUP_FRACTION,
    DUP_ROW_FRACTION,
    DUPLICATE_SLOT_DISTANCE,
    EMBED_MIN_SCORE,
    EMBED_NORM_RATIO,
    MAD_TO_SD,
    POSTNORM_CANDIDATE,
    POSTNORM_CHAIN_MIN,
    POSTNORM_DECIDED,
    POSTNORM_NORM_DROP,
    ROLES,
    SINK_FADED_RATIO,
    TIGHT_SPREAD,
    Evidence,
    _depth_key,
    chain_order,
    collapsed_end,
    embedding_signals,
    exact_evidence,
    find_duplicates,
    has_sink,
    identical_groups,
    isolated_end,
    late_signature,
    massive_sink,
    maybe_normalised,
    off_line,
    order_chain,
    postnorm_signals,
    share_identical_labels,
    token0_concentration,
)
from forensics.analysis.fingerprint.verdicts import judge, width_excludes
from forensics.analysis.loss_mask import capture_loss_mask_findings
from forensics.analysis.rows import RowHashTaps, check_rows
from forensics.analysis.stamp import StampReader, stamp_claims
from forensics.analysis.stats import CaptureStats, summarize
from forensics.display import render
from forensics.errors import ForensicsError
from forensics.findings import Finding, FindingKind, Severity, Verdict, worst_verdict
from forensics.io import limits, validate
from forensics.io.capture import Capture, Slot, constant_getter
from forensics.io.formats import as_captures
from forensics.io.pages import TrailingRelease, checked_once, release_tensors
from forensics.jsonable import data_frame, json_safe
from forensics.layers import FINAL_POST, R, r_label
from forensics.models.target import resolve_model

if TYPE_CHECKING:  # pragma: no cover
    from forensics.analysis.fingerprint.exact import ExactResult

__all__ = ["fingerprint", "Fingerprint", "SlotFingerprint", "Evidence", "Finding", "ROLES", "BANDS",
           "DIRECTION_CONFLICT_CONFIDENCE", "DUP_GROUP_FRACTION", "DUP_ROW_FRACTION", "DUPLICATE_SLOT_DISTANCE",
           "EMBED_MIN_SCORE", "EMBED_NORM_RATIO", "MAD_TO_SD", "POSTNORM_CANDIDATE", "POSTNORM_CHAIN_MIN",
           "POSTNORM_DECIDED", "POSTNORM_NORM_DROP", "SINK_FADED_RATIO", "TIGHT_SPREAD", "_depth_key", "chain_order",
           "collapsed_end", "embedding_signals", "exact_evidence", "find_duplicates", "has_sink", "identical_groups",
           "isolated_end", "late_signature", "massive_sink", "maybe_normalised", "off_line", "order_chain",
           "postnorm_signals", "share_identical_labels"]

# A norm at or above sqrt(float32 max) ≈ 1.8e19 means values whose squares overflow float32: real residual
# streams stay below ~1e5 (massive activations, Sun et al. 2024: ~1e3–1e4), so this is corrupt data.
FLOAT32_SQUARE_LIMIT = 1.8e19
MIN_TOKENS = 16  # fewer tokens: a few_tokens finding (duplicate rows, spreads and distances need tokens)
SMALL_CAPTURE_ELEMENTS = 4_000_000  # at or below: compute on one thread (measured 13× faster under load)


@dataclass
class SlotFingerprint:
    """What one slot is: role, confidence, depth rank among the file's slots, coarse r, label, exact r."""

    index: int
    name: str
    role: str
    confidence: float
    depth_rank: int = 0
    r_estimate: Any = None
    depth_fraction: float | None = None
    label: str | None = None
    r_exact: R | None = None
    decided_by: str = ""  # what decided the role, in words ("order (rank among layer slots) + sink, lowest norm")
    decided_signal: str = ""  # the same as data: the deciding signal ("exact", "order", "normalizes", …)
    decided_detail: str = ""  # and what else it rests on ("sink, lowest norm"), "" when nothing
    evidence: list[Evidence] = field(default_factory=list)
    claim: Claim | None = None  # the claim checked for this slot (with its source)
    verdict: Verdict | None = None  # PASS / FAIL / CANNOT TELL of that claim; None: nothing claimed
    verdict_why: str = ""  # the evidence that decided the verdict
    settle: str | None = None  # for CANNOT TELL: what would settle it

    def to_dict(self) -> dict:
        return {"role": self.role, "confidence": round(self.confidence, 3), "depth_rank": self.depth_rank,
                "r_estimate": self.r_estimate, "depth_fraction": json_safe(self.depth_fraction),
                "label": self.label, "r_exact": self.r_exact, "decided_by": self.decided_by,
                "claim": None if self.claim is None else self.claim.to_dict(),
                "verdict": None if self.verdict is None else self.verdict.value, "verdict_why": self.verdict_why,
                "settle": self.settle, "evidence": [e.to_dict() for e in self.evidence]}


@dataclass
class Fingerprint:
    """The fingerprint of one capture: per-slot verdicts, depth order, k×k masked distance, findings."""

    capture: Capture = field(repr=False)
    stats: CaptureStats = field(repr=False)
    slots: list[SlotFingerprint]
    findings: list[Finding]
    similarity: np.ndarray = field(repr=False)
    depth_order: list[int]
    num_layers: int | None = None
    expected: list | None = None
    expected_source: str | None = None
    order_evidence: list[Evidence] = field(default_factory=list)
    order_confidence: float = 0.5  # 1.0 exact or unambiguous; 0.5 + 5 × (relative margin of the best chain)
    exact: ExactResult | None = field(default=None, repr=False)
    claims: Claims | None = None  # the claim list checked (user, draft config, or the capture's own)
    massive_sinks: list[int] = field(default_factory=list)  # slots whose token 0 is a massive-activation sink
    rows: Any = field(default=None, repr=False)  # the row checks' RowReport (forensics.analysis.rows), read by scan
    stamp: Any = field(default=None, repr=False)  # the file's stamp checked in this read (analysis.stamp.StampCheck)

    @property
    def path(self) -> str:
        """The capture's name: its path, or ``FILE#i`` for one sample of a many-sample file."""
        return self.capture.name

    @property
    def verdict(self) -> Verdict | None:
        """The file's verdict: FAIL when a finding fails or a claim is excluded, CANNOT TELL when a claim is
        undecided, PASS when every claim is supported; None when nothing is claimed and nothing fails."""
        if any(f.severity is Severity.FAIL for f in self.findings):
            return Verdict.FAIL
        return worst_verdict(s.verdict for s in self.slots)

    @property
    def identified(self) -> list[str] | None:
        """Every slot's label when nothing is claimed, nothing fails and exact mode named every slot, else None."""
        if self.verdict is not None or not self.exact or not self.exact.ran:
            return None
        rs = [sf.r_exact for sf in self.slots]
        return None if any(r is None for r in rs) else [r_label(r) for r in rs]

    @property
    def outcome(self) -> str:
        """The file's one outcome word, the same in every view (``forensics.findings.OUTCOME_RANK``): ``fail`` /
        ``cannot tell`` (the verdict), ``warn`` (a warn finding and nothing worse), ``pass`` (every claim holds),
        ``identified`` (nothing claimed, every slot named by the reference forward), else ``info`` (no claim:
        roles and depth order only)."""
        v = self.verdict
        if v is Verdict.FAIL or v is Verdict.CANNOT_TELL:
            return v.value
        if any(f.severity is Severity.WARN for f in self.findings):
            return Severity.WARN.value
        if v is Verdict.PASS:
            return v.value
        return "identified" if self.identified is not None else Severity.INFO.value

    @property
    def labels(self) -> list[str | None]:
        return [s.label for s in self.slots]

    def to_dict(self) -> dict:
        d = self.stats.to_dict()
        for sd, sf in zip(d["slots"], self.slots, strict=True):
            sd.update(sf.to_dict())
        d.update(findings=[f.to_dict() for f in self.findings], depth_order=list(self.depth_order),
                 similarity=[[json_safe(float(v)) for v in row] for row in self.similarity],
                 num_layers=self.num_layers, expected=self.expected, expected_source=self.expected_source,
                 order_evidence=[e.to_dict() for e in self.order_evidence],
                 order_confidence=round(self.order_confidence, 3),
                 exact_source=None if self.exact is None else self.exact.source,
                 exact_stream=None if self.exact is None else self.exact.stream,
                 claims=None if self.claims is None else self.claims.to_dict(),
                 stamp=None if self.stamp is None else self.stamp.to_dict(),
                 verdict=None if self.verdict is None else self.verdict.value,
                 outcome=self.outcome, identified=self.identified)
        return d

    def to_dataframe(self) -> Any:
        """One row per slot (``pandas.DataFrame``; pandas is the ``dataframe`` extra): the slot, what it is
        (role, depth rank, r estimate, label, exact r), what is claimed and by whom, the verdict and why, and its
        norm statistics."""
        rows = []
        for sf, ss in zip(self.slots, self.stats.slots, strict=True):
            n = ss.norm
            rows.append({"path": self.path, "slot": sf.index, "name": sf.name, "tokens": ss.shape[0],
                         "hidden": ss.shape[1], "dtype": ss.dtype, "role": sf.role, "confidence": sf.confidence,
                         "depth_rank": sf.depth_rank, "r_estimate": sf.r_estimate, "label": sf.label,
                         "r_exact": sf.r_exact, "claimed": None if sf.claim is None else sf.claim.label,
                         "claim_source": None if sf.claim is None else sf.claim.source.value,
                         "verdict": None if sf.verdict is None else sf.verdict.value, "why": sf.verdict_why,
                         "decided_by": sf.decided_by, "settle": sf.settle, "norm_mean": n.mean,
                         "norm_median": n.median, "norm_std": n.std, "token0_ratio": ss.first_ratio,
                         "nan": ss.nan, "inf": ss.inf})
        return data_frame(rows)

    def __repr__(self) -> str:
        return render(self, "text")

    def _repr_html_(self) -> str:
        return render(self, "html")

    def explain(self) -> str:
        """The evidence behind every verdict: distance matrix, depth-order signals, each slot's signals."""
        return render(self, "explain")


# ----------------------------------------------------------------------------------------- expected list
# ---------------------------------------------------------------------------------------------- signals
@overload
def fingerprint(capture: Capture, layers: Any = None, model: Any = None, num_layers: int | None = None,
                expected_source: str | None = None, claims: Claims | None = None, input_ids: None = None,
                stamp_check: bool = True, attention_mask: None = None) -> Fingerprint: ...


@overload
def fingerprint(capture: Any, layers: Any = None, model: Any = None, num_layers: int | None = None,
                expected_source: str | None = None, claims: Claims | None = None, input_ids: Any = None,
                stamp_check: bool = True, attention_mask: Any = None) -> Fingerprint | list[Fingerprint]: ...


def fingerprint(capture: Any, layers: Any = None, model: Any = None,
                num_layers: int | None = None, expected_source: str | None = None,
                claims: Claims | None = None, input_ids: Any = None, stamp_check: bool = True,
                attention_mask: Any = None) -> Fingerprint | list[Fingerprint]:
    """Role, depth order, coarse r, label (given an expected list) and evidence for every slot.

    Args:
        capture: a ``Capture``, a path to any supported capture file, or hidden states in memory in any layout
            ``forensics.io.layout`` accepts (transformers' ``output.hidden_states`` tuple, a list of ``[T, H]``
            tensors, a ``[k, T, H]`` stack, a dict of named tensors, numpy arrays).
        layers: the expected r list in file order (``[0, 3, 16, 28]``, ``"embed,L3,L16,L28"``); default:
            the r the capture declares (``capture.json`` / ``data_config.json``).
        model: exact mode — an HF folder, safetensors checkpoint, ``.gguf``, a loaded model, or a ladder
            capture (path or ``Capture``) with the same input_ids.
        num_layers: L of the model, for ``r_estimate`` (default: capture.json's ``num_layers``).
        expected_source: where ``layers`` came from, shown in the output (default ``layers=``; the CLI
            passes ``--layers`` / ``--expect``).
        claims: a ready claim list (``forensics.analysis.claims``: a draft config's ids, a served capture);
            wins over ``layers``. Each slot's claim gets a verdict (``SlotFingerprint.verdict``).
        input_ids: the token ids of a capture saved without them (exact mode needs them; they also decide a
            stack's axes). ``[B, T]`` ids make a batch (``[k, B, T, H]``, transformers' tuple of ``[B, T, H]``).
        stamp_check: check the file's stamp (``hsf stamp``) against the values this fingerprint reads (no
            second read): a slot changed since stamping is a ``stamp_drift`` FAIL; the stamp's r list is the
            claim when none is given. False (``--no-stamp-check``) skips it.
        attention_mask: a batch's ``[B, T]`` padding mask (in memory; a file carries its own): each sample's pad
            rows are removed before any check.

    Returns:
        A :class:`Fingerprint`; a list of them, one per sample (named ``FILE#i``), when the input holds several
        samples (a ``[B, T]`` batch, a TensorRT-LLM record list, an SGLang JSON list).

    Example:
        >>> fp = fingerprint("sample_data/speculators_v1/data_0.pt")   # doctest: +SKIP
        >>> [s.label for s in fp.slots]                               # doctest: +SKIP
        ['embed', 'L3', 'L16', 'L28']
    """
    if not isinstance(capture, Capture) or input_ids is not None or attention_mask is not None:
        caps = as_captures(capture, input_ids=input_ids, attention_mask=attention_mask)
        if len(caps) > 1:
            model = None if model is None else resolve_model(model)  # resolved once for every sample
            return [_one(c, layers, model, num_layers, expected_source, claims, stamp_check) for c in caps]
        capture = caps[0]
    return _one(capture, layers, model, num_layers, expected_source, claims, stamp_check)


def _one(capture: Capture, layers: Any, model: Any, num_layers: int | None, expected_source: str | None,
         claims: Claims | None, stamp_check: bool = True) -> Fingerprint:
    if not capture.slots:
        raise ForensicsError("capture has no slots to fingerprint", path=capture.path)

    validate.count(num_layers, "num_layers", hi=limits.MAX_NUM_LAYERS, none=True)  # the CLI's bounds, one line
    validate.layers(layers)
    limits.slots_per_file(len(capture.slots), capture.path)  # pairwise work: a bounded number of slots
    import torch

    small = sum(s.shape[0] * s.shape[1] for s in capture.slots) <= SMALL_CAPTURE_ELEMENTS
    threads = torch.get_num_threads()

    model = None if model is None else resolve_model(model)  # "default" → the packaged SmolLM2
    if small and model is None:
        torch.set_num_threads(1)  # tiny tensors: thread hand-offs cost 10× the work on a busy machine
    try:
        with checked_once([s.tensor() for s in capture.slots]):  # its stages release pages: one page-table read
            return _fingerprint(capture, layers, model, num_layers, expected_source, claims, stamp_check)
    finally:
        torch.set_num_threads(threads)


@dataclass
class _Signals:
    """The per-slot data-only signals one fingerprint computes and its steps refine (index = slot)."""

    st: CaptureStats
    tensors: list
    ev: list[list[Evidence]]
    meds: list[float]
    embed_score: list[float]
    is_embed: list[bool]
    post_score: list[float]
    is_post: list[bool]
    post_why: list[str]
    prenorm_of: dict[int, int]
    drop: list[int]
    mask: list[int]
    massive: list[bool]  # token 0 is a massive-activation sink (rules.massive_sink): a pre-norm decoder's signature
    token0: list[float] = field(default_factory=list)  # each slot's rules.token0_concentration (read once)


def _fingerprint(capture: Capture, layers: Any, model: Any, num_layers: int | None,
                 expected_source: str | None, claims: Claims | None, stamp_check: bool = True) -> Fingerprint:
    k = len(capture.slots)
    full = [s.tensor() for s in capture.slots]
    reader = StampReader(capture) if stamp_check else None  # the stamp, checked on this fingerprint's own pass
    hash_taps = RowHashTaps(capture)  # the row checks' per-row hashes, gathered while the pass has each block
    reference = None
    # what the file holds (NaN counts, norms of every row): shown and scanned; the stamp's checksums and the row
    # hashes ride on it
    stamp_taps = reader.taps if reader is not None and reader.feeds else None
    # ... and, last, the file pages behind the pass are released (io/pages.py; so after each stage below that reads
    # rows): a scan worker then holds a few MB of its file mapped, not all of it
    release = {s.index: TrailingRelease(s.tensor()) for s in capture.slots}
    st_all = summarize(capture, taps=lambda i: [*(stamp_taps(i) if stamp_taps else ()), *hash_taps.taps(i),
                                                *((release[i],) if i in release else ())])
    release_tensors(full)  # the rest behind the pass
    stamp = reader.check(full) if reader is not None else None
    if claims is None and layers is not None:
        claims = user_claims(layers, expected_source or "layers=")
    reference, too_wide = _reference(capture, st_all, model, claims, num_layers)
    model = None if too_wide is not None else model  # the claims fail on the width; the rest is read from the data
    # every row placed against the reference forward when there is a ladder (not streamed, ids given), else data only
    rows = check_rows(capture, full, reference=None if reference is None else reference[1],
                      norms=[s.norms for s in st_all.slots], hashes=hash_taps.hashes())
    # data only, the row samples gave back each slot they read (rows.screen_sims); against the reference, every row
    release_tensors(full if reference is not None else ())
    context = check_context(capture, full, st_all.slots, rows, net=None if reference is None else reference[0].net,
                            reference=None if reference is None else reference[1])
    view = good_rows_view(capture, full, rows)  # statistics and order from the rows that are their tokens'
    st = st_all if view is capture else summarize(view)
    tensors = [s.tensor() for s in view.slots]
    findings, bad_rows = _anomalies(view, st)
    if view is not capture:  # a slot all zero or overflowing in the file, not only in its good rows
        whole = (FindingKind.ALL_ZERO, FindingKind.OVERFLOW, FindingKind.CONSTANT)
        findings = [f for f in findings if f.kind not in whole] + [
            f for f in _anomalies(capture, st_all)[0] if f.kind in whole]
    findings += rows.findings + context.findings
    findings += capture_loss_mask_findings(capture, model)  # a stored loss mask against the chat turns
    if stamp is not None:
        findings += stamp.findings
    drop = sorted({0} | {p for s in st.slots for p in s.sinks} | bad_rows)
    mask = sorted({d for s in st.slots for d in s.massive_dims})
    finite = not any(s.nan or s.inf for s in st.slots)  # no NaN/Inf anywhere: nothing for the sample to zero
    sample = angular_distance_sample(tensors, drop, mask, finite=finite) if k > 1 else \
        DistanceSample(np.zeros((1, 1)), np.zeros((1, 1)), 0, 0)  # (gives back the pages it read)
    sig = _signals(view, st, tensors, drop, mask, rows.hashes if view is capture else None)
    release_tensors(full)

    exact = None
    if model is not None:
        exact = _exact(capture, full, model, sig, findings, rows, reference)
        num_layers = num_layers or (exact.num_layers if _matched_any(exact) else None)
    L = num_layers or capture.num_layers
    if claims is None:
        claims = capture_claims(capture, L)
        if stamp is not None and stamp.claim_rs is not None:  # the stamp's r list: the file's claim
            claims = stamp_claims(stamp.stamp, claims) or claims
    r_exact: list[R | None] = [x.r_exact for x in exact.slots] if exact else [None] * k

    D = sample.D
    if exact and all(r is not None for r in r_exact):
        order = sorted(range(k), key=lambda i: (_depth_key(r_exact[i] or 0), i))
        order_ev = [Evidence("order", "r_exact of every slot", None, "exact (reference ladder)")]
        chain = [i for i in order if r_exact[i] not in (0, FINAL_POST)]
        order_conf = 1.0
        # the reference forward named every slot: too few tokens weakens only the data-only signals, which decided
        # nothing here, so it is no finding (it headlined batches whose every slot exact mode had decided)
        findings = [f for f in findings if f.kind is not FindingKind.FEW_TOKENS]
    else:
        D, order, chain, order_ev, order_conf = _data_only_order(sample, sig)
    groups = identical_groups(tensors, D)
    for g in groups:  # one state captured twice: its copies sit together in the depth order
        rest = [i for i in order if i not in g[1:]]
        at = rest.index(g[0]) + 1
        order = rest[:at] + list(g[1:]) + rest[at:]

    sfs = _slot_fingerprints(sig, r_exact, L, order, chain, order_conf)
    for f in findings:  # one row repeated: no layer can be read from it (its norms look post-norm, its rows alike)
        if f.kind == FindingKind.CONSTANT:
            for i in f.slots:
                if sfs[i].r_exact is None:
                    sfs[i].label, sfs[i].confidence = None, 0.0
    fp = Fingerprint(capture=capture, stats=st_all, slots=sfs, findings=findings, similarity=D, depth_order=order,
                     num_layers=L, expected=None if claims is None else claims.rs,
                     expected_source=None if claims is None else f"{claims.source.value}: {claims.detail}",
                     order_evidence=order_ev, exact=exact, order_confidence=order_conf, claims=claims,
                     massive_sinks=[i for i in range(k) if sig.massive[i]], rows=rows, stamp=stamp)
    find_duplicates(fp, tensors)
    fp.findings += judge(fp, claims)
    fp.findings = width_excludes(fp, too_wide)
    if any(f.kind is FindingKind.NOT_RESIDUAL for f in fp.findings) or sublayer_slots(fp):
        # the data-only sequence start reads token 0's massive activation as the residual stream carries it; a
        # file whose capture path saved sub-layer outputs breaks that premise (a block's MLP writes the massive
        # activation on delimiter rows too), so the more specific not_residual finding speaks for it alone; with
        # no claim, a slot whose token 0 row is nearly empty (no residual state's is) shows the premise fails
        fp.findings = without_sink_starts(fp.findings)
    share_identical_labels(fp, groups)
    capture.check_unchanged()  # nothing read from a file truncated or rewritten meanwhile reaches the verdict
    return fp


def _reference(capture: Capture, st: CaptureStats, model: Any, claims: Claims | None,
               num_layers: int | None) -> tuple[Any, ConcatenatedWidth | None]:
    """The reference and its ladder (None without a model), or ``(None, the error)`` when the slots are k·H wide
    against the model's H, something is claimed, and the data shows every claimed slot is states side by side (its
    massive-activation dims repeat every H: the data-only ``concatenated`` rule, with the model's H): those claims
    fail on the width (``width_excludes``). Else the one-line error (exit 2): nothing claimed, or a slot that may as
    well be one state of a wider model (the wrong ``--model``)."""
    if model is None:
        return None, None
    try:
        return reference_ladder(capture, model), None
    except ConcatenatedWidth as e:
        said = claims or capture_claims(capture, num_layers or capture.num_layers)
        claimed = [] if said is None or len(said.slots) != len(st.slots) else \
            [i for i, c in enumerate(said.slots) if c is not None]
        cuts = [concatenated(st.slots[i].massive_dims, e.width) for i in claimed]
        if not cuts or any(c is None or c[1] % e.hidden_size for c in cuts):
            raise
        e.dims = sorted({d for c in cuts if c is not None for d in c[2]})
        return None, e


def _constant(h: Any) -> bool:
    """Every row of ``h`` equal to its first (read only when the norms already are all equal)."""
    import torch

    with torch.inference_mode():
        return all(bool((h[a:a + 4096] == h[:1]).all()) for a in range(0, int(h.shape[0]), 4096))


CONCAT_MIN_H = 128  # no LLM's hidden size is narrower


def concatenated(dims: list[int], width: int) -> tuple[int, int, list[int]] | None:
    """``(k, H, dims)`` when a slot ``width`` wide reads as k ≥ 2 states of width H side by side: its massive-
    activation dims fall in at least two H-wide pieces at one and the same offset (a model's massive activations sit
    in a few fixed dims of every late layer, Sun et al. 2024, so concatenated layers repeat them every H). The
    widest such H (the fewest pieces) is taken; None otherwise."""
    for k in range(2, CONCAT_MAX_K + 1):
        if width % k or width // k < CONCAT_MIN_H:
            continue
        h = width // k
        by_offset: dict[int, set[int]] = {}
        for d in dims:
            by_offset.setdefault(d % h, set()).add(d // h)
        # every offset in two pieces or more on average: a few dims repeated, not many scattered ones that meet by
        # chance (a slot with zeroed rows has dozens of 'massive' dims against its lowered median)
        if any(len(p) >= 2 for p in by_offset.values()) and 2 * len(by_offset) <= len(dims):
            return k, h, sorted(dims)
    return None


def _anomalies(capture: Capture, st: CaptureStats) -> tuple[list[Finding], set[int]]:
    """Broken-data findings (NaN/Inf, float32 overflow, all zeros, too few tokens) and the non-finite rows,
    which every cross-slot signal leaves out."""
    findings: list[Finding] = []
    bad_rows: set[int] = set()
    for s in st.slots:
        if s.nan or s.inf:  # the finding itself, with the rows and slots, is analysis.rows' ``nonfinite``
            bad_rows |= set(s.nan_positions) | set(s.inf_positions)
        if s.norm.n and s.norm.max >= FLOAT32_SQUARE_LIMIT:
            findings.append(Finding(FindingKind.OVERFLOW, Severity.FAIL, [s.index],
                                    f"slot {s.index} ({s.name}) has token "
                                    f"norms up to {s.norm.max:.3g}: squares of its values overflow float32 (above "
                                    f"{FLOAT32_SQUARE_LIMIT:.2g}), so no real hidden state looks like this and "
                                    "its angles and fits are not reliable"))
        if s.norm.n and s.norm.max == 0:
            findings.append(Finding(FindingKind.ALL_ZERO, Severity.FAIL, [s.index], f"slot {s.index} ({s.name}) is all "
                                    "zeros: nothing was captured there (padding, or a hook that never fired)"))
        elif s.norm.n >= 2 and s.norm.max == s.norm.min and _constant(capture.slots[s.index].tensor()):
            findings.append(Finding(FindingKind.CONSTANT, Severity.FAIL, [s.index], f"slot {s.index} ({s.name}) is "
                                    f"constant across tokens: its {s.norm.n} rows are one and the same vector, so "
                                    "it holds nothing per token (a broadcast, or one token's state copied) and takes "
                                    "no place in the depth order", {"rows": s.norm.n}))
    for s in st.slots:
        if (cut := concatenated(s.massive_dims, int(capture.slots[s.index].hidden_size))) is not None:
            k, h, dims = cut
            findings.append(Finding(FindingKind.CONCATENATED, Severity.WARN, [s.index],
                                    f"slot {s.index} ({s.name}) looks like {k} states of width {h} side by side "
                                    f"(its massive-activation dims {dims} sit at the same place in {h}-wide "
                                    f"pieces: one layer's massive dims do not repeat): EAGLE-3's concatenated "
                                    f"[T, {k}·H] aux states are no one layer; save them as [T, {k}, H] "
                                    f"(hs.view(T, {k}, {h})), read as {k} slots",
                                    {"k": k, "hidden_size": h, "dims": dims}))
    if capture.num_tokens < MIN_TOKENS:
        findings.append(Finding(FindingKind.FEW_TOKENS, Severity.WARN, list(range(len(capture.slots))), f"only "
                                f"{capture.num_tokens} tokens (< {MIN_TOKENS}): the data-only signals are weak; the "
                                "model's reference forward (exact mode) decides"))
    return findings, bad_rows


def good_rows_view(capture: Capture, tensors: list, rows: Any) -> Capture:
    """``capture`` restricted to the rows that are good in every slot, with the ids those rows hold (a shifted
    or suffix-only capture gets its ids realigned; ids dropped where the rows cannot be placed). The capture
    itself when every row is its own token's."""
    import torch

    n = rows.num_rows
    tok = rows.token_of_row()
    aligned = tok is not None and rows.num_tokens == n and (tok == np.arange(n)).all() and not rows.slot_offsets
    if not rows.bad_rows and aligned:
        return capture
    t = np.arange(n)
    good = np.ones(n, dtype=bool)
    for i in range(len(tensors)):  # a slot late by o holds row t's token at its row t − o
        src = t - rows.slot_offsets.get(i, 0)
        inside = (src >= 0) & (src < n)
        good &= inside & rows.good_rows(i)[np.clip(src, 0, n - 1)]
    keep = np.flatnonzero(good) if good.sum() >= 2 else np.arange(n)
    slots = [Slot(s.index, s.name, s.key, (int(keep.size), s.shape[1]), s.dtype,
                  constant_getter(h[torch.from_numpy(np.clip(keep - rows.slot_offsets.get(s.index, 0), 0, n - 1))]),
                  s.claimed, s.declared_r) for s, h in zip(capture.slots, tensors, strict=True)]
    ids = mask = None
    if tok is not None and capture.input_ids is not None and (tok[keep] >= 0).all():
        ti = torch.from_numpy(tok[keep])
        ids = capture.input_ids.reshape(-1)[ti]
        if capture.loss_mask is not None and int(capture.loss_mask.numel()) == int(capture.input_ids.numel()):
            mask = capture.loss_mask.reshape(-1)[ti]
    return Capture(slots=slots, input_ids=ids, loss_mask=mask, provenance=capture.provenance,
                   declared_layers=capture.declared_layers, declared_convention=capture.declared_convention,
                   meta=capture.meta)


def _signals(capture: Capture, st: CaptureStats, tensors: list, drop: list[int], mask: list[int],
             hashes: list | None = None) -> _Signals:
    """Per-slot data-only signals: the embedding (a table lookup, or a tiny norm) and the post-norm final
    (B = RMSNorm(A) identity, the format's claim, or a tight sinkless slot whose norm collapsed). ``hashes``: the
    row checks' per-row hashes of these same tensors (they screen the duplicate-row test)."""
    k = len(tensors)
    ev: list[list[Evidence]] = [[] for _ in range(k)]
    ids = capture.input_ids.reshape(-1) if capture.input_ids is not None else None
    meds = [s.norm_excl_sinks.median for s in st.slots]
    conc = [token0_concentration(t) for t in tensors]  # token 0's one-dim share, which four rules read
    embed_score = embedding_signals(st.slots, tensors, ids, meds, ev, hashes, conc)
    release_tensors(tensors)  # the file pages each step maps (io/pages.py: only file pages are dropped)
    post_score, prenorm_of, post_why = postnorm_signals(st.slots, tensors, embed_score, meds, drop, ev,
                                                        [s.claimed for s in capture.slots], conc)
    is_post = [post_score[i] >= POSTNORM_DECIDED for i in range(k)]
    is_embed = [embed_score[i] >= EMBED_MIN_SCORE and not is_post[i] for i in range(k)]
    massive = [massive_sink(s, t, c) for s, t, c in zip(st.slots, tensors, conc, strict=True)]
    return _Signals(st, tensors, ev, meds, embed_score, is_embed, post_score, is_post, post_why, prenorm_of,
                    drop, mask, massive, conc)


def _exact(capture: Capture, tensors: list, model: Any, sig: _Signals, findings: list[Finding], rows: Any = None,
           reference: Any = None) -> ExactResult:
    """Exact mode: every slot matched against the reference forward (``--model``) or a ladder capture, on
    its good rows at their tokens (``rows``)."""
    exact = exact_checks(capture, tensors, model, rows=rows, reference=reference)
    exact.ran = capture.input_ids is not None
    if not exact.ran:  # the reference cannot run without the tokens: say so, name no slot from it
        findings.append(Finding(FindingKind.NO_TOKEN_IDS, Severity.WARN, list(range(len(tensors))),
                                "exact mode cannot run: the capture has no token ids, so the model cannot be run "
                                "on its tokens (only the final-norm γ test ran); give them: input_ids= in Python, "
                                "hsf fingerprint/hsf report --ids FILE or --text FILE (tokenised by the model)"))
    for i, x in enumerate(exact.slots):
        exact_evidence(sig.ev[i], x)
    subs = {i: x.sublayer for i, x in enumerate(exact.slots) if x.sublayer is not None}
    if subs:
        findings.append(Finding(FindingKind.NOT_RESIDUAL, Severity.FAIL, sorted(subs), "; ".join(
            f"slot {i} ({capture.slots[i].name}) is {s['name']}, not a residual-stream state: it equals that state "
            f"of the reference forward (per-token cosine {s['cos']:.4f}, relative error {s['rel']:.3g}; the next "
            f"nearest state, {s['runner_up_name']}, {s['runner_up_rel']:.3g})" for i, s in subs.items())
            + ": the capture saved a sub-layer output where the residual stream was meant (sglang#39286, "
              "nnsight#630, vllm#55423)",
            {"slots": sorted(subs), "what": [subs[i]["what"] for i in sorted(subs)],
             "block": [subs[i]["block"] for i in sorted(subs)], "rel": [subs[i]["rel"] for i in sorted(subs)],
             "by": "reference"}))
    unmatched = [i for i, x in enumerate(exact.slots) if x.ladder is not None and x.r_exact is None
                 and x.sublayer is None]
    laddered = [i for i, x in enumerate(exact.slots) if x.ladder is not None]
    embeds = [i for i in unmatched if sig.is_embed[i]]
    if unmatched and unmatched == laddered and embeds:
        # the embedding is a table lookup: a slot the data names embed that is not embed_tokens[ids] says the model
        # (or the ids) is not the capture's, whatever its width
        findings.append(Finding(FindingKind.NO_REFERENCE_MATCH, Severity.WARN, unmatched, f"slots {unmatched} equal "
                                "no state of the reference on these input_ids, not even slot "
                                f"{embeds[0]}, which the data names the embedding (a table lookup: it equals "
                                "embed_tokens[ids] of the model it came from): the capture is not from this model "
                                "(or not at these weights, or the ids are not its rows' tokens); pass the model it "
                                "was captured with. Its depths come from the data-only signals, and the model's "
                                "layer count is not used"))
    elif unmatched:
        findings.append(Finding(FindingKind.NO_REFERENCE_MATCH, Severity.WARN, unmatched, f"slots {unmatched} equal "
                                "no state of the reference on these input_ids (another model, other weights or "
                                "dtype, or other tokens); their depth comes from the data-only signals"))
    return exact


def _matched_any(exact: ExactResult) -> bool:
    """Whether the reference named any slot (an r or a sub-layer state): when it named none, its layer count is not
    the capture's, so no r≈ or format claim is read against it."""
    return any(x.r_exact is not None or x.sublayer is not None for x in exact.slots if x.ladder is not None) or \
        not any(x.ladder is not None for x in exact.slots)


def _data_only_order(sample: Any, sig: _Signals) -> tuple[np.ndarray, list[int], list[int], list[Evidence], float]:
    """The depth order from data alone: ``(D, order, layer chain, evidence, confidence)``.

    Embedding slots first, then the layer chain (seriated by distance, direction voted), the final pre-norm
    state (a slot another slot is RMSNorm of) after it, post-norm slots last. A post-norm candidate is placed
    here too (norm collapse at the chain's deep end, betweenness off the layers' line, or an isolated end);
    ``sig`` keeps the role decisions.
    """
    st, tensors, ev, meds = sig.st, sig.tensors, sig.ev, sig.meds
    is_embed, is_post, post_score, post_why = sig.is_embed, sig.is_post, sig.post_score, sig.post_why
    k = len(tensors)
    # a slot that another slot is RMSNorm of is the final pre-norm state r = L: the deepest layer slot,
    # placed last rather than seriated (the last block moves the residual far: SmolLM2 L30 is as far
    # from L3 as from L8, and the chain then put L8 before L3)
    anchor = sorted({j for j in sig.prenorm_of.values() if not is_embed[j] and not is_post[j]})
    chain = [i for i in range(k) if not is_embed[i] and not is_post[i] and i not in anchor]
    D = settle_chain(sample, tensors, sig.drop, sig.mask, chain).D  # all rows where the sample is a near-tie
    quiet = maybe_normalised(chain, st.slots, tensors, meds, sig.token0 or None)
    anchors = [i for i in range(k) if sig.massive[i]]
    co = chain_order(D, chain, st.slots, meds, quiet, anchors)
    weak = [i for i in chain if 0 < post_score[i] < POSTNORM_DECIDED]
    # one final norm: once a slot is post-norm by identity or format, the chain's ends are layers
    end = None if any(is_post) else collapsed_end(co.chain, st.slots, meds, ev)
    off = {} if end is not None or any(is_post) else off_line(D, chain, quiet, st.slots, meds, ev)
    weak = [i for i in weak if off.get(i, True)]  # a slot on the line of the layers is no candidate
    offs = sorted((e for e, v in off.items() if v), key=lambda e: meds[e])
    if end is not None:  # the chain puts it beside the deepest slot: a post-norm final, out of the chain
        is_post[end], post_score[end], post_why[end] = True, POSTNORM_DECIDED, "norm_collapse"
    elif offs:  # off the line of the layers: ranked last with a candidate score, the role not decided by this
        e = offs[0]
        is_post[e], post_score[e], post_why[e] = True, max(post_score[e], POSTNORM_CANDIDATE), "off_line"
        weak = sorted(set(weak) | {e})
    elif not any(is_post) and (hang := isolated_end(co.chain, D, weak, ev)) is not None:
        is_post[hang] = True  # ranked last with its candidate score: the role is not decided by this
    elif len(co.chain) < POSTNORM_CHAIN_MIN and not any(is_post):  # too short a chain to place a candidate
        for i in weak:
            is_post[i] = True
    for i in weak:
        if not is_post[i]:
            post_score[i] = 0.0
            ev[i].append(Evidence("norm_collapse", "inside the depth chain", "an end, beside the deepest slot",
                                  "the chain places it among the layers: pre-norm"))
    if end is not None or any(is_post[i] for i in weak):
        co = chain_order(D, [i for i in chain if not is_post[i]], st.slots, meds, quiet, anchors)
    chain, order_ev, order_conf = co.path + anchor, co.evidence, co.confidence
    placed = [i for i in weak if is_post[i]]
    if placed:  # a candidate ranked last without a decided role: the order around it is a guess too
        order_conf = min(order_conf, DIRECTION_CONFLICT_CONFIDENCE)
        order_ev.append(Evidence("candidate", f"slot {placed[0]}", f"confidence ≤ {DIRECTION_CONFLICT_CONFIDENCE}",
                                 "a post-norm candidate ranked last, its role undecided"))
    if anchor:
        order_ev.append(Evidence("anchor", f"slot {anchor[0]}", "another slot = RMSNorm(it)",
                                 "the final pre-norm state: deepest layer slot"))
    order = [i for i in range(k) if is_embed[i]] + chain + [i for i in range(k) if is_post[i]]
    return D, order, chain, order_ev, order_conf


def _slot_fingerprints(sig: _Signals, r_exact: list[R | None], L: int | None, order: list[int],
                       chain: list[int], order_conf: float) -> list[SlotFingerprint]:
    """Each slot's role, confidence and coarse r: exact evidence first, then the data-only signals and the
    slot's rank among the layer slots (EAGLE-3 picks low / mid / high layers)."""
    k = len(sig.tensors)
    pre_final = {j for j in sig.prenorm_of.values() if r_exact[j] is None} | {
        i for i in range(k) if L and r_exact[i] == L}
    ranked = [i for i in chain if i not in pre_final]
    n = max(1, len(ranked))
    sfs = []
    for i, s in enumerate(sig.st.slots):
        ex = r_exact[i]  # exact evidence, when there is some, decides the role over the data-only signals
        emb_i = ex == 0 if ex is not None else sig.is_embed[i]
        post_i = ex == FINAL_POST if ex is not None else sig.is_post[i]
        frac: float | None
        signal: str | None = None  # the deciding signal, when the words say more than its name
        detail = ""
        if emb_i:
            role, conf, frac = "embedding", max(sig.embed_score[i], 0.99 if ex == 0 else 0), 0.0
            why = "exact" if ex == 0 else "dup_rows" if sig.embed_score[i] >= 0.9 else "norm_level"
        elif post_i:
            role, conf, frac = "final_postnorm", max(sig.post_score[i], 0.99 if ex == FINAL_POST else 0), None
            why = "exact" if ex == FINAL_POST else sig.post_why[i]
        elif i in pre_final:
            role, frac = "final_prenorm", 1.0
            conf, why = (0.99, "exact") if ex is not None else (0.95, "normalizes")
        elif isinstance(ex, int) and L:
            frac = ex / L
            role, conf, why = next(b for t, b in BANDS if frac < t), 0.99, "exact"
        else:  # coarse: rank among the layer slots
            pos = ranked.index(i) if i in ranked else 0
            frac = (pos + 0.5) / n
            role = next(b for t, b in BANDS if frac < t)
            if len(ranked) == 1:
                role = "late" if late_signature(s) else "middle" if has_sink(s) else "early"
            conf, why, signal = 0.4 + 0.2 * order_conf, "order (rank among layer slots)", "order"
            if role == "late" and late_signature(s):
                conf, detail = conf + 0.2, "tight sinkless spread"
            elif role == "early" and has_sink(s) and pos == 0:
                conf, detail = conf + 0.1, "sink, lowest norm"
            why = why + (f" + {detail}" if detail else "")
        r_est: Any = None
        if role == "embedding":
            r_est = 0
        elif role == "final_postnorm":
            r_est = FINAL_POST
        elif isinstance(r_exact[i], int):
            r_est = r_exact[i]
        elif frac is not None:
            r_est = int(round(frac * L)) if L else round(frac, 3)
        sfs.append(SlotFingerprint(index=s.index, name=s.name, role=role, confidence=round(float(conf), 3),
                                   depth_rank=order.index(i), r_estimate=r_est, depth_fraction=frac,
                                   r_exact=r_exact[i], decided_by=why, decided_signal=signal or why,
                                   decided_detail=detail, evidence=sig.ev[i]))
    return sfs
