"""Verdict = evidence against claim: each slot's claim is PASS, FAIL or CANNOT TELL, and the list as a whole.

Evidence, strongest first:

* exact (``--model`` / a ladder capture): ``r_exact``, the r the slot equals in the reference forward;
* certain data-only roles: an embedding output (repeated token ids give bit-identical rows, a table
  lookup: transformers #2461), a post-norm state (B = RMSNorm(A) for a fitted γ, or a norm collapse),
  the final pre-norm state (the slot a post-norm slot normalises), a pre-norm state (a token-0 sink:
  Sun et al. 2024);
* the data-only depth order of the layer slots (masked angular chain), when its confidence is high.

A claim is PASS only when the evidence supports it (exact r equal; the embedding role for r = 0; the
post-norm role for ``final_post``; the normalised pre-image for r = L), FAIL when the evidence excludes
it, and CANNOT TELL otherwise, with what would settle it. A slot never gets a label its evidence
contradicts. A shift of the whole list — an embedding where the claim starts at an early layer, or the
reverse — is the ``shifted`` finding (the seed's bug: Kimi-K2.5 data ``[embed, L3, L31, L59]`` whose
drafts were served ``[L3, L31, L59]``). When the reference forward shows every slot exactly one block from its
claimed layer, all the same way, the claimed ids are counted off by one instead (``[embed, L3, L16, L28]`` claimed
as ids 1,4,17,29): the ``ids_off_by_one`` finding, whose corrected list is the exact one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from forensics.analysis.fingerprint.residual import data_only
from forensics.analysis.fingerprint.rules import DUP_GROUP_FRACTION, has_sink

from ...findings import Finding, FindingKind, Severity, Verdict
from ...layers import FINAL_POST, R, r_label

if TYPE_CHECKING:  # pragma: no cover
    from ..claims import Claim, Claims
    from .core import Fingerprint

ORDER_DECIDES = 0.75  # order confidence (0.5 + 5 × relative margin of the best chain) at/above which a claimed
#   order the measured chain contradicts is FAIL; below it the chain is a near-tie: CANNOT TELL. Tuning half
#   (1,136 files): every wrong depth order had confidence ≤ 0.5 (2 files; ≤ 0.57 before the tie rules), 425 of
#   the 1,134 right ones ≥ 0.75. On all-MiniLM-L6-v2 (a post-LN encoder) no order reaches it (124 files)
POSTNORM_DECIDES = 0.8  # post-norm score at/above this (RMSNorm identity 0.99, norm collapse 0.8) decides the role.
#   Tuning half: 500 of the 514 post-norm finals reach it, no other slot does (a candidate ranked last has 0.6)
SETTLE_EXACT = ("--model HF_FOLDER (exact r per slot against the reference forward; add --max-memory 1GB to stream "
                "a target larger than memory block by block), or a ladder capture of the same text")
SETTLE_IDS = "--ids FILE or --text FILE (exact mode runs the model on the capture's token ids)"


def settle_hint(fp: Fingerprint) -> str | None:
    """What would settle an undecided claim, never what was already given: the model (``SETTLE_EXACT``) when exact
    mode did not run, the token ids (``SETTLE_IDS``) when it ran without them; None when it ran on the ids."""
    if fp.exact is None:
        return SETTLE_EXACT
    return SETTLE_IDS if fp.capture.input_ids is None else None

SETTLE_RAN = ("the reference forward ran and this slot equals none of its states (residual r, attention or MLP "
              "output, residual after attention): check that --model holds the captured weights and dtype and "
              "that the ids are the captured tokens")


@dataclass
class SlotVerdict:
    """One slot's claim, its verdict, the evidence that decided it, and what would settle a CANNOT TELL."""

    index: int
    claim: Claim | None
    verdict: Verdict | None
    why: str
    settle: str | None = None

    def to_dict(self) -> dict:
        return {"claim": None if self.claim is None else self.claim.to_dict(),
                "verdict": None if self.verdict is None else self.verdict.value, "why": self.why,
                "settle": self.settle}


def _is(why: str) -> str:
    """A verdict's reason after "but": exact mode's "equals L3 ..." is already a verb; the others are nouns."""
    return why if why.startswith("equals ") else f"is {why}"


def _claim_text(c: Claim | None) -> str:
    return "nothing" if c is None else f"{c.label} ({c.source.value})"


def _labels(rs: list) -> str:
    return "[" + ", ".join("?" if r is None else r_label(r) for r in rs) + "]"


def _depth_key(r: R) -> float:
    return math.inf if r == FINAL_POST else float(r)


def _evidence(fp: Fingerprint, i: int, name: str) -> Any:
    for e in fp.slots[i].evidence:
        if e.signal == name:
            return e
    return None


def is_embedding(fp: Fingerprint, i: int) -> bool:
    sf = fp.slots[i]
    return sf.r_exact == 0 if sf.r_exact is not None else sf.role == "embedding"


def not_embedding(fp: Fingerprint, i: int) -> bool:
    """The data excludes an embedding output: exact r ≠ 0, or a sink, or repeated ids whose rows differ where
    the data shows a pre-norm decoder (:func:`decoder_signature`)."""
    sf = fp.slots[i]
    if sf.r_exact is not None:
        return sf.r_exact != 0
    if sf.role == "embedding":
        return False
    dup = _evidence(fp, i, "dup_rows")
    context = dup is not None and isinstance(dup.value, (int, float)) and dup.value < DUP_GROUP_FRACTION
    return (context and decoder_signature(fp)) or has_sink(fp.stats.slots[i])


def decoder_signature(fp: Fingerprint) -> bool:
    """Some slot carries a massive-activation sink at token 0 (``Fingerprint.massive_sinks``, found once by
    :func:`~forensics.analysis.fingerprint.rules.massive_sink`), as a pre-norm decoder's residual stream does.

    Only there is an embedding output known to be a pure table lookup (rotary positions enter inside
    attention), so that repeated ids with different rows exclude it. An encoder that adds absolute position
    embeddings and LayerNorms them (BERT) gives repeated ids different rows in its embedding output too:
    on all-MiniLM-L6-v2 a correct ``embed`` claim was FAILed on 59 of 62 captures without this check.
    GPT-2-style decoders (learned absolute positions) do carry massive activations and are not told apart.
    """
    return bool(fp.massive_sinks)


def is_postnorm(fp: Fingerprint, i: int) -> bool:
    sf = fp.slots[i]
    if sf.r_exact is not None:
        return sf.r_exact == FINAL_POST
    return sf.role == "final_postnorm" and sf.confidence >= POSTNORM_DECIDES


def not_postnorm(fp: Fingerprint, i: int) -> bool:
    """Pre-norm for sure: exact r an integer, an embedding, or a token-0 sink (the final norm divides it away)."""
    sf = fp.slots[i]
    if sf.r_exact is not None:
        return sf.r_exact != FINAL_POST
    return sf.role in ("embedding", "final_prenorm") or has_sink(fp.stats.slots[i])


def sublayer(fp: Fingerprint, i: int) -> dict | None:
    """The state inside a block that slot ``i`` equals in the reference forward (exact mode), or None."""
    if fp.exact is None or i >= len(fp.exact.slots):
        return None
    return fp.exact.slots[i].sublayer


def _judge_slot(fp: Fingerprint, i: int, c: Claim, L: int | None,  # noqa: C901 - complexity 16, one rule per line
                not_residual: dict[int, str] | None = None) -> tuple[Verdict, str, FindingKind | None]:
    """(verdict, why, finding kind when FAIL)."""
    sf = fp.slots[i]
    sub = sublayer(fp, i)
    if sub is not None:  # the not_residual finding itself is made by exact mode, claim or not
        return Verdict.FAIL, f"{sub['name']} of the reference forward, not the residual stream ({c.label})", None
    if sf.r_exact is None and not_residual and i in not_residual:
        return Verdict.FAIL, f"not the residual stream: {not_residual[i]}", FindingKind.NOT_RESIDUAL
    if sf.r_exact is not None:
        if sf.r_exact == c.r:
            return Verdict.PASS, f"equals {r_label(sf.r_exact)} of the reference forward", None
        one = isinstance(c.r, int) and isinstance(sf.r_exact, int) and abs(c.r - sf.r_exact) == 1
        kind = FindingKind.OFF_BY_ONE if one else FindingKind.WRONG_LAYER
        return Verdict.FAIL, f"equals {r_label(sf.r_exact)} of the reference forward, not {c.label}", kind
    if c.r == 0:
        if is_embedding(fp, i):
            return Verdict.PASS, f"embedding output ({sf.decided_by})", None
        if not_embedding(fp, i):
            return Verdict.FAIL, f"not an embedding output: {sf.role} ({sf.decided_by})", FindingKind.MISSING_EMBEDDING
        return Verdict.CANNOT_TELL, f"no repeated token id to test for a table lookup; role {sf.role}", None
    if c.r == FINAL_POST:
        if is_postnorm(fp, i):
            return Verdict.PASS, f"post-final-norm ({sf.decided_by})", None
        if not_postnorm(fp, i):
            return Verdict.FAIL, f"pre-norm: {sf.role} ({sf.decided_by})", FindingKind.PRENORM
        return Verdict.CANNOT_TELL, f"role {sf.role} ({sf.decided_by}): neither post-norm nor a sink", None
    # an integer layer r >= 1
    if is_embedding(fp, i):
        return Verdict.FAIL, f"an embedding output ({sf.decided_by}), not the output of block {c.r}", \
            FindingKind.UNEXPECTED_EMBEDDING
    if is_postnorm(fp, i):
        return Verdict.FAIL, f"post-final-norm ({sf.decided_by}), not a block's pre-norm output", FindingKind.POSTNORM
    if sf.role == "final_prenorm" and sf.decided_by == "normalizes" and L:
        if c.r == L:
            return Verdict.PASS, f"the final pre-norm state r = L = {L}: another slot is RMSNorm of it", None
        return Verdict.FAIL, f"the final pre-norm state r = L = {L} (another slot is RMSNorm of it), not " \
                             f"{c.label}", FindingKind.WRONG_LAYER
    cut = concatenated_cut(fp, i)
    if cut is not None:  # one layer claimed on a slot whose massive dims repeat every H: no "consistent" reading
        return Verdict.CANNOT_TELL, (f"looks like {cut['k']} states of width {cut['hidden_size']} side by side (see "
                                     f"`concatenated`), not one layer: {c.label} cannot be checked on it as stored"), \
            None
    return Verdict.CANNOT_TELL, f"a layer output ({sf.role}, {sf.decided_by}); its exact r needs the reference", None


def width_excludes(fp: Fingerprint, e: Any) -> list[Finding]:  # e: ConcatenatedWidth | None (None: fp.findings)
    """The findings once ``--model`` fixed the hidden size H and every slot is ``k·H`` wide (``e``: the
    :class:`~forensics.analysis.fingerprint.exact.ConcatenatedWidth` the reference raised): each claim of one state
    on a slot is excluded by the width alone (no state of that model is k·H wide): FAIL ``concatenated`` with the
    arithmetic; the data-only ``concatenated`` WARN it confirms is dropped."""
    if e is None:
        return fp.findings
    claimed = [sf for sf in fp.slots if sf.claim is not None]
    words = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}
    k = words.get(e.k, str(e.k))
    for sf in claimed:
        sf.verdict, sf.settle, sf.label = Verdict.FAIL, None, None
        sf.verdict_why = (f"width {e.width} = {e.k} × {e.hidden_size} (the hidden size of {e.model}): {k} layers "
                          f"concatenated, claimed one ({sf.claim.label if sf.claim else '?'})")
    keep = [f for f in fp.findings if not (f.kind is FindingKind.CONCATENATED and f.severity is Severity.WARN)]
    return keep + [Finding(
        FindingKind.CONCATENATED, Severity.FAIL, [sf.index for sf in claimed],
        f"slot(s) {[sf.index for sf in claimed]} claimed "
        f"[{', '.join(sf.claim.label for sf in claimed if sf.claim is not None)}] are {e.width} wide = {e.k} × "
        f"{e.hidden_size}, the hidden size of {e.model}: {k} layers concatenated (EAGLE-3's [T, {e.k}·H] aux states), "
        f"no one layer; the reference forward did not run on them; re-save as [T, {e.k}, H] (hs.view(T, {e.k}, "
        f"{e.hidden_size})), read as {e.k} slots with {e.k} layers claimed",
        {"width": e.width, "k": e.k, "hidden_size": e.hidden_size, "model": e.model,
         "claimed": [sf.claim.label for sf in claimed if sf.claim is not None]})]


def concatenated_cut(fp: Fingerprint, i: int) -> dict | None:
    """The ``concatenated`` finding's evidence (k, hidden_size, dims) when slot ``i`` looks like k states side by
    side and exact mode did not name it, else None."""
    if fp.slots[i].r_exact is not None:
        return None
    return next((f.evidence for f in fp.findings if f.kind is FindingKind.CONCATENATED and i in f.slots
                 and f.evidence), None)


def _concat_hint(fp: Fingerprint, n: int) -> str:
    """One slot as wide as ``n`` states side by side (EAGLE-3's concatenated ``[T, n·H]`` aux states): how to
    re-save it as ``n`` slots; empty otherwise."""
    width = fp.capture.hidden_size
    if len(fp.slots) != 1 or n < 2 or not width or width % n:
        return ""
    H = width // n
    return (f"; its width {width} is {n} × {H}: if it holds {n} states concatenated on the last axis "
            f"(EAGLE-3's [T, {n}·H] aux states), save them as [T, {n}, H] (hs.view(T, {n}, {H})), read as {n} slots")


def judge(fp: Fingerprint, claims: Claims | None) -> list[Finding]:  # noqa: C901 - complexity 21, to be paid down
    """Set every slot's ``claim``/``verdict``/``verdict_why``/``settle``/``label`` and return the findings."""
    k = len(fp.slots)
    L = fp.num_layers
    findings: list[Finding] = []
    for sf in fp.slots:  # without claims: exact r, else a certain role, names the slot
        sf.label = _evidence_label(fp, sf.index)
    if claims is None:
        return findings
    cl = list(claims.slots)
    if len(cl) != k:
        findings.append(Finding(FindingKind.COUNT_MISMATCH, Severity.FAIL, list(range(k)),
                                f"{len(cl)} layers are claimed {_labels(claims.rs)} ({claims.source.value}: "
                                f"{claims.detail}) but the capture has {k} slots: no slot can be checked"
                                + _concat_hint(fp, len(cl)),
                                {"claimed": len(cl), "slots": k}))
        return findings
    verdicts: list[SlotVerdict] = []
    kinds: dict[FindingKind, list[int]] = {}

    not_residual = data_only(fp, cl)
    for f in fp.findings:  # a slot with one row repeated has no depth: named, and out of the list-wide checks
        if f.kind == FindingKind.CONSTANT:
            for i in f.slots:
                not_residual[i] = "constant across tokens (every row the same vector): nothing per token was captured"
    settle = settle_hint(fp) or (SETTLE_RAN if fp.exact is not None and fp.exact.ran else None)
    for i, c in enumerate(cl):
        if c is None:
            verdicts.append(SlotVerdict(i, None, None, "nothing claimed"))
            continue
        v, why, kind = _judge_slot(fp, i, c, L, not_residual)
        cut = concatenated_cut(fp, i) if v is Verdict.CANNOT_TELL else None
        how = None if cut is None else (f"a re-save as [T, {cut['k']}, H] (hs.view(T, {cut['k']}, "
                                        f"{cut['hidden_size']})), read as {cut['k']} slots with {cut['k']} "
                                        "layers claimed")
        verdicts.append(SlotVerdict(i, c, v, why, how or (settle if v is Verdict.CANNOT_TELL else None)))
        if kind:
            kinds.setdefault(kind, []).append(i)
    _duplicate_claims(fp, verdicts)
    corrected: list | None = None
    # a slot that is not the residual stream has no place in the depth order: the list-wide checks skip it
    skip = set(not_residual) | {i for i in range(k) if sublayer(fp, i) is not None}
    cl_whole = [None if i in skip else c for i, c in enumerate(cl)]
    whole = _shift(fp, cl_whole) if any(c is not None for c in cl_whole) else None
    if whole is None:
        whole = _reordered(fp, cl_whole, verdicts, kinds)
    readings: dict = {}
    if whole is not None:
        corrected = whole.evidence["corrected"]
        readings = whole.evidence.get("readings") or {}
        findings.append(whole)
    for kind, idx in kinds.items():
        findings.append(Finding(kind, Severity.FAIL, idx, "; ".join(
            f"slot {i} ({fp.slots[i].name}) is claimed {_claim_text(verdicts[i].claim)} but {_is(verdicts[i].why)}"
            for i in idx), {"claimed": [claims.rs[i] for i in idx], "r_exact": [fp.slots[i].r_exact for i in idx],
                            "roles": [fp.slots[i].role for i in idx]}))
    for sv in verdicts:
        sf = fp.slots[sv.index]
        sf.claim, sf.verdict, sf.verdict_why, sf.settle = sv.claim, sv.verdict, sv.why, sv.settle
        if corrected is not None and whole is not None:  # the whole list is off: the corrected list names slots
            r = corrected[sv.index]
            if sf.label is None and r is not None:
                sf.label = r_label(r)
            if sv.verdict is Verdict.CANNOT_TELL and r is not None and sv.claim is not None and r != sv.claim.r:
                sf.verdict_why += f"; the list is {whole.kind} (see `{whole.kind}`): most likely {r_label(r)}"
        elif readings and whole is not None:  # two readings of the shift: the slot is one of them, not named
            named = {w: v[sv.index] for w, v in readings.items()}  # a reading may leave the slot unnamed (None)
            alts = list(dict.fromkeys(named.values()))
            if sv.verdict is Verdict.CANNOT_TELL and len(alts) > 1:
                sf.verdict_why += (f"; the list is {whole.kind} (see `{whole.kind}`): " + " or ".join(
                    f"{'unnamed' if r is None else r_label(r)} ({w})" for w, r in named.items()))
            elif sf.label is None and len(alts) == 1 and alts[0] is not None:  # every reading names it alike
                sf.label = r_label(alts[0])
        elif sv.claim is not None and sv.verdict is Verdict.PASS and sf.label is None:
            sf.label = sv.claim.label  # a claim the evidence supports names the slot; an undecided one does not
            #   (the claim stays in ``claim``: a CANNOT TELL slot labelled as claimed reads as named by the data)
    return findings


def _reordered(fp: Fingerprint, cl: list[Claim | None], verdicts: list[SlotVerdict],
               kinds: dict[FindingKind, list[int]]) -> Finding | None:
    """The claimed set is right but stored in another order: the measured depth order places each claim.

    Decided (FAIL) when a slot with a certain identity (exact r, embedding, post-norm) is involved or the
    chain's order confidence is at least ``ORDER_DECIDES``; otherwise a WARN and the slots stay CANNOT TELL.
    """
    k = len(fp.slots)
    rs = [None if c is None else c.r for c in cl]
    if any(r is None for r in rs):
        return None
    by_depth = sorted(rs, key=_depth_key)  # type: ignore[arg-type]
    assigned: list = [None] * k
    for pos, i in enumerate(fp.depth_order):
        assigned[i] = by_depth[pos]
    if any(fp.slots[i].r_exact is not None and fp.slots[i].r_exact != assigned[i] for i in range(k)):
        return None  # exact r disagree with every ordering of the claims: per-slot findings say which
    moved = [i for i in range(k) if assigned[i] != rs[i]]
    if not moved:
        return None
    certain = [i for i in moved if fp.slots[i].r_exact is not None or is_embedding(fp, i) or is_postnorm(fp, i)]
    decided = bool(certain) or fp.order_confidence >= ORDER_DECIDES
    for i in moved:
        sv = verdicts[i]
        why = (f"placed at {r_label(assigned[i])} by the measured depth order (order confidence "
               f"{fp.order_confidence:.2f}{'' if decided else f' < {ORDER_DECIDES}: a near-tie'})")
        if decided:
            sv.verdict, sv.why, sv.settle = Verdict.FAIL, why, None
        else:
            sv.why += "; " + why
    if decided:
        for kind in list(kinds):  # one finding says it: the slots are the claimed layers, stored in another order
            kinds[kind] = [i for i in kinds[kind] if i not in moved]
            if not kinds[kind]:
                del kinds[kind]
    src = next(c for c in cl if c is not None)
    return Finding(FindingKind.REORDERED, Severity.FAIL if decided else Severity.WARN, moved,
                   f"file order ≠ depth order: stored slots are [{', '.join(r_label(r) for r in assigned)}], claimed "
                   f"{_labels(rs)} ({src.source.value}: {src.detail})"
                   + ("" if decided else f"; the depth chain is a near-tie (order confidence "
                                         f"{fp.order_confidence:.2f} < {ORDER_DECIDES})"
                                         + (f": settle with {settle_hint(fp)}" if settle_hint(fp) else "")),
                   {"claimed": rs, "corrected": assigned, "order_confidence": fp.order_confidence,
                    "decided": decided})


def _evidence_label(fp: Fingerprint, i: int) -> str | None:
    sf = fp.slots[i]
    if sf.r_exact is not None:
        return r_label(sf.r_exact)
    if sf.role == "embedding":
        return r_label(0)
    if is_postnorm(fp, i):
        return r_label(FINAL_POST)
    return None


def _duplicate_claims(fp: Fingerprint, verdicts: list[SlotVerdict]) -> None:
    """Bit-identical slots are one state: different claims on them cannot both hold."""
    for f in fp.findings:
        if f.kind != "duplicate" or len(f.slots) != 2:
            continue
        a, b = f.slots
        ca, cb = verdicts[a].claim, verdicts[b].claim
        if ca is None or cb is None or ca.r == cb.r:
            continue
        for i, other in ((a, b), (b, a)):
            sv = verdicts[i]
            if sv.verdict is Verdict.CANNOT_TELL:
                sv.why = (f"the same state as slot {other} (claimed {verdicts[other].claim.label}): "  # type: ignore
                          "at most one of the two claims holds")


def _shift(fp: Fingerprint, cl: list[Claim | None]) -> Finding | None:
    """The whole list shifted by one slot: an embedding where the claim starts at a layer, or the reverse."""
    k = len(fp.slots)
    rs = [None if c is None else c.r for c in cl]
    emb = [i for i in range(k) if is_embedding(fp, i)]
    claimed0 = [i for i in range(k) if rs[i] == 0]
    exact = [sf.r_exact for sf in fp.slots]
    known = all(r is not None for r in exact)
    post = [i for i in range(k) if rs[i] == FINAL_POST and is_postnorm(fp, i)]  # bound: not part of the shift
    layer_claims = sorted((r for i, r in enumerate(rs) if r is not None and r != 0 and i not in post),
                          key=_depth_key)
    order = [i for i in fp.depth_order if i not in post]
    corrected: list = [FINAL_POST if i in post else None for i in range(k)]
    if emb and not claimed0 and layer_claims and all(rs[i] is not None for i in emb):
        direction = "forward"
        if known:
            corrected = list(exact)
        else:  # embedding first, then the claimed layers one slot later
            for pos, i in enumerate(order):
                corrected[i] = 0 if pos == 0 else (layer_claims[pos - 1] if pos - 1 < len(layer_claims) else None)
    elif claimed0 and not emb and all(not_embedding(fp, i) for i in claimed0):
        direction = "backward"
        if known:
            corrected = list(exact)
        else:
            for pos, i in enumerate(order):
                corrected[i] = layer_claims[pos] if pos < len(layer_claims) else None
    else:
        return None
    alt = None if known else _ids_off_by_one(fp, rs, post, direction)
    src = next(c for c in cl if c is not None)
    how = "exact r against the reference forward" if known else (
        "the embedding role is measured; the other slots are read one claim along" if direction == "forward" else
        "no slot is an embedding output; the other slots are read one claim back")
    if direction == "forward":
        story = (f"slot {emb[0]} is the embedding output (r = 0) but the claimed list starts at "
                 f"{r_label(layer_claims[0])}: the data holds the embedding and then the claimed layers one slot "
                 "later, so every slot is the layer claimed for the slot before it. This is the Kimi-K2.5 "
                 "EAGLE-3 incident: data [embed, L3, L31, L59] whose draft was served [L3, L31, L59] — the fc was "
                 "trained on the embedding where serving feeds L3, and on each layer where serving feeds the next")
    else:
        story = ("the claimed list starts with the embedding output but no slot is one: the data starts at a layer, "
                 "so every slot is the layer claimed for the slot after it (the reverse of the "
                 "Kimi-K2.5 EAGLE-3 incident, where [embed, L3, L31, L59] was served as [L3, L31, L59])")
    step, shape, kind = (-1 if direction == "forward" else 1), "shifted by one slot", FindingKind.SHIFTED
    pairs = [(e, r) for i, (e, r) in enumerate(zip(exact, rs, strict=True))
             if i not in post and isinstance(r, int) and isinstance(e, int)]
    if known and pairs and all(e == r + step for e, r in pairs):
        # the reference forward decided between the two readings: every slot is its claimed r one off (ids counted
        # from the other end), not each slot the layer claimed for its neighbour
        shape, kind = "off by one", FindingKind.IDS_OFF_BY_ONE
        story = ("every slot is exactly one block " + ("below" if step < 0 else "above")
                 + " its claimed r: the ids are "
                 + ("counted from 1 where the data counts the embedding as 0" if step < 0 else
                    "counted from the embedding where the data starts at a layer")
                 + " (ids off by one, not slots shifted: the reference forward rules out the slot-shift reading)")
    if alt is not None and alt != corrected:  # two readings fit the data: show both, never one as the fix
        if direction == "forward":
            what = (f"slot {emb[0]} is the embedding output (r = 0) but the claimed list starts at "
                    f"{r_label(layer_claims[0])}")
            shifted = ("the embedding and then the claimed layers one slot later, as in the Kimi-K2.5 EAGLE-3 "
                       "incident where [embed, L3, L31, L59] was served as [L3, L31, L59]")
            ids = "every claimed r one too high: ids counted from 1 where the data counts the embedding as 0"
        else:
            what = "the claimed list starts with the embedding output but no slot is one"
            shifted = "each slot the layer claimed for the slot after it"
            ids = "every claimed r one too low: ids counted from the embedding where the data starts at a layer"
        return Finding(FindingKind.SHIFTED, Severity.FAIL, list(range(k)),
                       f"claimed {_labels(rs)} ({src.source.value}: {src.detail}) is off by one: {what}. Two "
                       f"readings fit the data: slots shifted — {_labels(corrected)} ({shifted}); or ids off by "
                       f"one — {_labels(alt)} ({ids}). The data alone cannot tell them apart: --model decides "
                       "(exact r per slot)",
                       {"claimed": rs, "corrected": None, "readings": {"slots shifted": corrected,
                                                                       "ids off by one": alt},
                        "direction": direction, "exact": known})
    return Finding(kind, Severity.FAIL, list(range(k)),
                   f"claimed {_labels(rs)} ({src.source.value}: {src.detail}) is {shape}: {story}. "
                   f"Corrected list: {_labels(corrected)} ({how})",
                   {"claimed": rs, "corrected": corrected, "direction": direction, "exact": known})


def _ids_off_by_one(fp: Fingerprint, rs: list, post: list[int], direction: str) -> list | None:
    """The other reading of a data-only shift: every claimed r one too high (``forward``: the slot claimed L1 is
    the embedding) or one too low (``backward``: the slot claimed ``embed`` is L1), the slots where they are
    claimed. None when the measured roles contradict it (an embedding slot that would read as a layer, a layer
    past the model's last block)."""
    step = -1 if direction == "forward" else 1
    alt: list = []
    for i, r in enumerate(rs):
        if i in post or r == FINAL_POST:
            alt.append(r)
        elif not isinstance(r, int):
            return None
        else:
            alt.append(r + step)
    L = fp.num_layers
    for i, r in enumerate(alt):
        if not isinstance(r, int) or i in post:
            continue
        if r < 0 or (L is not None and r > L) or (is_embedding(fp, i) != (r == 0)):
            return None
    return alt


__all__ = ["judge", "SlotVerdict", "ORDER_DECIDES", "POSTNORM_DECIDES", "SETTLE_EXACT", "SETTLE_IDS", "settle_hint"]
