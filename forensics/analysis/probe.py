"""Probe: run a trained EAGLE-3 draft on capture data under candidate wirings and rank them by acceptance.

The seed's decisive experiment as a function: the same draft scored 34.1 % next-token accuracy fed
``cat([L3, L31, L59])`` and 76.9 % fed ``cat([embed, L3, L31])``. For every candidate wiring
(:class:`~forensics.analysis.probe_wirings.Wiring`: slots by r, norm stage, concat order, row pairing) the
draft drafts greedy chains of ``steps`` tokens from every position as EAGLE-3 serves it
(:func:`forensics.models.draft.draft_chain`: step 0 from the target's states with speculators'
``shift_batch`` pairing, steps ≥ 1 from the draft's own output state). A drafted token is accepted while it
equals the **verifier's own prediction** ``argmax lm_head(norm(r=L))`` at that position when a model is
given (the draft's training target, speculators#313), else the **actual next token**
(``ProbeResult.target`` says which). Each wiring gets per-position acceptance, the mean acceptance length
with a t interval over sequences (:mod:`forensics.analysis.acceptance`) and the step-0 top-1 agreement
(= position-0 acceptance). A one-token-shift and a random-wiring control are scored alongside; the verdict
(``ProbeResult.verdict``) is decided here once and read by every view and the exit code.

Teacher forcing: the capture holds one text, so the verifier's prediction at a later chain position is
the one it makes after the text's own tokens, which equals the chained one whenever the text is the
verifier's greedy output (exact there; an estimate elsewhere — kekzl/imp#1839 found teacher-forced and
served acceptance within 1 pp).

Example:
    >>> res = probe("sample_data/draft_eagle3", "sample_data/speculators_v1", model="default")  # doctest: +SKIP
    >>> res.best.label, res.verdict.value                                                      # doctest: +SKIP
    ('embed+L3+L16', 'pass')
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from forensics.analysis.acceptance import DRAFT_COST, length_interval, ratio_interval, speedup, units
from forensics.analysis.claims import draft_ids_r
from forensics.analysis.fingerprint.core import fingerprint
from forensics.analysis.probe_chain import TARGET_NEXT, TARGET_VERIFIER, Tally, score_file, slot_refs
from forensics.analysis.probe_wirings import (
    MAX_CANDIDATES,
    Candidates,
    Wiring,
    auto_candidates,
    candidate_lists,
    controls,
    merge,
    parse_candidates,
    variants,
    wiring_label,
)
from forensics.analysis.stamp import check_in_read
from forensics.display import render
from forensics.errors import ForensicsError
from forensics.findings import Finding, FindingKind, Severity, Verdict
from forensics.io.capture import Capture
from forensics.io.formats import iter_files, load
from forensics.jsonable import data_frame
from forensics.layers import FINAL_POST, r_label
from forensics.models import conventions as cv
from forensics.models.draft import Draft, load_draft
from forensics.models.verifier import open_verifier

if TYPE_CHECKING:  # pragma: no cover
    from forensics.models.verifier import Verifier

TOPK = 5  # top-k agreement: the verifier's token among the draft's k best guesses
STEPS = 3  # draft tokens per chain (vLLM's acceptance tests pin k = 3)
Z95 = 1.96  # Wilson interval z for the top-1 agreement's 95 % CI
MIN_POSITIONS = 200  # fewer scored positions than this: warn that the ranking is noisy
# Acceptance length at or below which a draft is dead: a draft that drafts nothing scores 1.0; TensorRT-LLM's
# acceptance references (#18905) note a drafter whose slots collapse scoring 1.09 with every accuracy gate green,
# while correctly wired EAGLE-3 drafts there score 2.03 (Qwen3-4B) to 2.89 (GPT-OSS).
COLLAPSED_LENGTH = 1.1
ENGINE_PLANS = ((cv.VLLM, None), (cv.SGLANG, "pre-25454"), (cv.SGLANG, "post-25454"), (cv.SPECULATORS, None),
                (cv.SPECFORGE, None))
KIND_DECLARED_BEATEN = FindingKind.PROBE_DECLARED_BEATEN
KIND_SERVED_BEATEN = FindingKind.PROBE_SERVED_BEATEN
KIND_NEAR_CONTROLS = FindingKind.PROBE_NEAR_CONTROLS
KIND_TIE = FindingKind.PROBE_TIE
KIND_FEW_POSITIONS = FindingKind.PROBE_FEW_POSITIONS
KIND_NO_INTERVAL = FindingKind.PROBE_NO_INTERVAL
KIND_VOCAB = FindingKind.PROBE_VOCAB_MISMATCH
KIND_NO_ENGINE_IDS = FindingKind.PROBE_NO_ENGINE_IDS
KIND_COLLAPSED = FindingKind.DRAFT_COLLAPSED


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion ``k / n``."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


@dataclass
class ProbeRow:
    """One scored wiring (or control): agreement at step 0 and acceptance along the chain.

    ``acceptance[j]``: the share of starting positions whose first ``j + 1`` drafted tokens were all
    accepted (``acceptance[0] == top1``); ``acceptance_length = 1 + Σ acceptance`` in ``[1, steps + 1]``.
    """

    wiring: list
    label: str
    tags: list[str]
    top1: float
    top1_ci: list[float]
    topk: float
    n: int
    correct: int
    acceptance: list[float]
    acceptance_length: float
    acceptance_length_ci: list[float] | None
    control: str | None = None
    norm: str = "pre-norm"
    order: str = "[emb, h]"
    pairing: str = "previous-token"

    def to_dict(self) -> dict:
        return {"wiring": list(self.wiring), "label": self.label, "tags": list(self.tags), "top1": self.top1,
                "top1_ci": list(self.top1_ci), "topk": self.topk, "n": self.n, "correct": self.correct,
                "acceptance": list(self.acceptance), "acceptance_length": self.acceptance_length,
                "acceptance_length_ci": None if self.acceptance_length_ci is None else list(self.acceptance_length_ci),
                "control": self.control, "norm": self.norm, "order": self.order, "pairing": self.pairing}


@dataclass
class ServedCost:
    """The wiring the engine would feed (``--engine``) against the best one: acceptance and speed-up.

    ``speedup = τ / (1 + steps · draft_cost)`` (:func:`forensics.analysis.acceptance.speedup`); ``ratio`` is
    served / best. ``wiring`` is None (and ``why`` says so) when the served wiring cannot be scored.
    """

    engine: str
    version: str | None
    wiring: list | None
    label: str | None
    acceptance_length: float | None
    best_label: str
    best_acceptance_length: float
    steps: int
    draft_cost: float
    speedup_served: float | None
    speedup_best: float
    ratio: float | None
    why: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class ProbeResult:
    """Ranked wirings (``rows``: candidates best first, then the controls), the verdict and its findings."""

    draft: dict
    rows: list[ProbeRow]
    target: str  # "verifier" | "next_token"
    target_source: str
    embed_source: str
    files: list[str]
    positions: int
    num_layers: int | None
    verdict: Verdict
    findings: list[Finding] = field(default_factory=list)
    topk: int = TOPK
    steps: int = STEPS
    ci_unit: str = "sequence"
    units: int = 0
    served: ServedCost | None = None
    ids_per_engine: dict | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def candidates(self) -> list[ProbeRow]:
        return [r for r in self.rows if r.control is None]

    @property
    def controls(self) -> list[ProbeRow]:
        return [r for r in self.rows if r.control is not None]

    @property
    def best(self) -> ProbeRow | None:
        c = self.candidates
        return c[0] if c else None

    @property
    def declared(self) -> ProbeRow | None:
        return next((r for r in self.candidates if "declared" in r.tags), None)

    @property
    def clear_winner(self) -> bool:
        """The best wiring is clearly above the runner-up and the controls (no tie, no near-controls finding)."""
        return bool(self.candidates) and not any(f.kind in (KIND_TIE, KIND_NEAR_CONTROLS, KIND_NO_INTERVAL)
                                                 for f in self.findings)

    @property
    def warnings(self) -> list[str]:
        return [f.message for f in self.findings if f.severity is not Severity.INFO]

    def to_dataframe(self) -> Any:
        """One row per wiring scored (``pandas.DataFrame``; pandas is the ``dataframe`` extra), best candidate first,
        then the controls: its rank, label, tags, top-1 agreement and its interval, top-k, acceptance length and its
        interval, and what kind of control it is."""
        rows = []
        for i, r in enumerate(self.rows):
            lo, hi = (list(r.top1_ci) + [None, None])[:2]
            alo, ahi = (list(r.acceptance_length_ci or []) + [None, None])[:2]
            rows.append({"rank": i + 1 if r.control is None else None, "wiring": r.label, "refs": list(r.wiring),
                         "tags": ", ".join(r.tags), "control": r.control, "top1": r.top1, "top1_low": lo,
                         "top1_high": hi, "topk": r.topk, "n": r.n, "acceptance_length": r.acceptance_length,
                         "acceptance_length_low": alo, "acceptance_length_high": ahi, "norm": r.norm,
                         "order": r.order, "pairing": r.pairing})
        return data_frame(rows)

    def to_dict(self) -> dict:
        best = self.best
        return {"verdict": self.verdict.value, "findings": [f.to_dict() for f in self.findings],
                "draft": self.draft, "target": self.target, "target_source": self.target_source,
                "embed_source": self.embed_source, "files": self.files, "positions": self.positions,
                "num_layers": self.num_layers, "topk": self.topk, "steps": self.steps, "ci_unit": self.ci_unit,
                "units": self.units, "rows": [r.to_dict() for r in self.rows],
                "best": best.to_dict() if best else None, "clear_winner": self.clear_winner,
                "served": self.served.to_dict() if self.served else None, "ids_per_engine": self.ids_per_engine,
                "warnings": self.warnings, "notes": self.notes}

    def __repr__(self) -> str:
        return render(self, "text")

    def explain(self) -> str:
        """The ranking with the notes behind it (how the declared wiring was read, skipped files)."""
        return render(self, "explain")

    def _repr_html_(self) -> str:
        return render(self, "html")


# ------------------------------------------------------------------------------ helpers --

def _captures(data) -> list[Capture]:
    if isinstance(data, Capture):
        return [data]
    if isinstance(data, (list, tuple)):
        return [c for d in data for c in _captures(d)]
    files = list(iter_files(os.fspath(data)))
    if not files:
        raise ForensicsError("no capture files found", path=os.fspath(data))
    return [load(f) for f in files]


def _named_by_reference(caps: list[Capture], model: Any, exact_r: list | None) -> list[Capture]:
    """``caps`` with every slot the data declares no r for named by the reference forward instead (``exact_r``: per
    capture, each slot's exact r or None, as the report's fingerprints found them; else, with a model given by
    name or path, the exact fingerprint of each such capture). A capture saved without layer ids
    (``{input_ids, hidden_states}``) was scored as ``slot0+slot1+…``, and the served wiring it holds was said
    missing. Copies: the callers' captures are left as they are."""
    todo = [i for i, c in enumerate(caps) if any(s.declared_r is None for s in c.slots)]
    if not todo:
        return caps
    if exact_r is None:
        if not isinstance(model, (str, os.PathLike)):  # a loaded model or Verifier: no second forward here
            return caps
        exact_r = [None] * len(caps)
        for i in todo:
            fp = fingerprint(caps[i], model=model, stamp_check=False)
            exact_r[i] = [sf.r_exact for sf in fp.slots]
    out = list(caps)
    for i in todo:
        rs = exact_r[i] if i < len(exact_r) else None
        if rs is None or len(rs) != len(caps[i].slots):
            continue
        slots = [s if s.declared_r is not None or r is None else replace(s, declared_r=r)
                 for s, r in zip(caps[i].slots, rs, strict=True)]
        out[i] = replace(caps[i], slots=slots)
    return out


def _declared_r(d: Draft, L: int | None) -> tuple[list | None, str]:
    if L is None:
        return None, "no L"
    if d.declared_ids is None:
        return cv.default_r(L), "engine default (no ids in the draft config)"
    # the one draft-id reader of every command (forensics.analysis.claims.draft_ids_r): speculators / vLLM
    # top-level ids r = id; SpecForge / SGLang nested ids r = id + 1

    system = "speculators" if d.trainer in ("speculators", "vllm") else "specforge"
    top = system == "speculators"
    info = SimpleNamespace(ids_top=d.declared_ids if top else None, ids_nested=None if top else d.declared_ids,
                           config={})
    try:
        read = draft_ids_r(cv.SPECULATORS if top else cv.SPECFORGE, info, L)
    except ForensicsError:
        return None, "unreadable ids"
    if read is None:
        return None, "unreadable ids"
    rs = read.r
    return (None if any(r is None for r in rs) else list(rs)), f"config ids {d.declared_ids} read as {system}"


def _verifier(model: Any) -> Verifier | None:
    if model is None:
        return None

    return open_verifier(model)


def _ids_per_engine(best: list, L: int | None, arch: str | None) -> tuple[dict | None, list[str]]:
    if L is None:
        return None, ["L (the verifier's layer count) is unknown: no engine ids (pass --model or a capture.json)"]
    if not all(isinstance(r, int) for r in best):
        return None, [f"best wiring {wiring_label(best)} has slots without a declared r: no engine ids"]
    out = {}
    for system, version in ENGINE_PLANS:
        name = system.name if version is None else f"{system} {version}"
        try:
            out[name] = system.from_r(best, L, version=version, arch=arch).to_dict()
        except ForensicsError as e:
            out[name] = {"ids": None, "key": None, "caveat": str(e)}
    return out, []


# -------------------------------------------------------------------------------- probe --

def _check_options(topk: Any, max_samples: Any, steps: Any = STEPS, draft_cost: Any = DRAFT_COST) -> None:
    if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
        raise ForensicsError(f"topk must be a whole number >= 1, got {topk!r}")
    if max_samples is not None and (isinstance(max_samples, bool) or not isinstance(max_samples, int)
                                    or max_samples < 1):
        raise ForensicsError(f"max_samples (--samples) must be a whole number >= 1, got {max_samples!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= 16:
        raise ForensicsError(f"steps (--steps) must be a whole number in [1, 16], got {steps!r}")
    if isinstance(draft_cost, bool) or not isinstance(draft_cost, (int, float)) or not 0 <= draft_cost < 10 \
            or draft_cost != draft_cost:
        raise ForensicsError(f"draft_cost (--draft-cost) must be a number in [0, 10), got {draft_cost!r}")


def _target_context(v: Verifier | None, caps: list[Capture]) -> tuple[int | None, str | None]:
    """The verifier's layer count L and its architecture family (for the engines' id rules)."""
    facts = v.facts if v is not None else None
    L = facts["num_layers"] if facts else next((c.num_layers for c in caps if c.num_layers), None)
    arch = cv.arch_family([facts["architecture"]], facts["model_type"]) if facts else None
    return L, arch


def _served_r(d: Draft, engine: cv.System | None, version: str | None, L: int | None, arch: str | None
              ) -> tuple[list | None, str]:
    """The r list the engine concatenates for this draft (as the audit resolves it), or why there is none."""
    if engine is None:
        return None, ""
    if L is None:
        return None, "L (the verifier's layer count) is unknown: pass --model or a capture.json"
    try:
        ec = engine.capture(d.config, L, version, arch)
    except ForensicsError as e:
        return None, e.message
    if len(ec.r) != d.num_aux:
        return None, (f"{engine.given} captures r = {ec.r} ({len(ec.r)} states) for a draft whose fc takes "
                      f"{d.num_aux}: it would not run")
    return list(ec.r), ""


def _candidate_wirings(d: Draft, caps: list[Capture], candidates: str | list, L: int | None, can_post: bool,
                       served: list | None, engine: str | None) -> tuple[Candidates, list | None, list[str]]:
    """The wirings to score (candidates, then the two controls), the declared wiring (or None), notes."""
    refs = slot_refs(caps[0])
    k = d.num_aux
    declared, declared_how = _declared_r(d, L)
    trainer = cv.of_format(caps[0].format)
    if trainer is not None:
        fc = [refs[i] for i in trainer.trainer_view(len(refs)).fc_slots][:k]
    else:
        fc = [r for r in refs if r != FINAL_POST][:k]
    auto = candidates == "auto"
    cands: Candidates = [(Wiring(w), t) for w, t in auto_candidates(refs, k, declared, fc, L)] if auto \
        else parse_candidates(candidates, refs)
    if not cands:
        raise ForensicsError(f"no candidate wiring of {k} slots can be built from the data's slots "
                             f"{wiring_label(refs)}", path=caps[0].path)
    notes = [f"declared wiring: {declared_how}" + (f" → {wiring_label(declared)}" if declared else "")]
    if declared and Wiring(tuple(declared)) not in dict(cands):
        notes.append(f"declared wiring {wiring_label(declared)} is not available in the data (slots "
                     f"{wiring_label(refs)})")
    anchor = tuple(declared) if declared and Wiring(tuple(declared)) in dict(cands) else cands[0][0].refs
    if served is not None:
        avail = set(refs) | ({FINAL_POST} if can_post else set())
        if all(r in avail for r in served):
            cands = merge(cands, [(Wiring(tuple(served)), [f"served by {engine}"])])
        else:
            notes.append(f"the wiring {engine} serves, {wiring_label(served)}, is not in the data (slots "
                         f"{wiring_label(refs)}): no served-vs-best line")
    if auto:
        cands = merge(cands, variants(anchor, L, can_post or FINAL_POST in refs, refs))
    return cands + controls(anchor), declared, notes


def _skip_reason(cap: Capture, d: Draft, E: Any, cands: Candidates, can_post: bool) -> str | None:
    """Why a capture file cannot be scored (it is skipped with a note), or None."""
    name = os.path.basename(cap.path)
    ids = cap.input_ids
    if ids is None or cap.num_tokens < 3:
        return f"{name}: no input_ids or < 3 tokens"
    if not cap.ids_match_rows:  # rows ≠ ids: which row is which token is not known (analysis.rows: row_count)
        if int(ids.numel()) == cap.num_tokens:  # the loss mask is the odd one out (loss_mask finding)
            n_mask = int(cap.loss_mask.numel()) if cap.loss_mask is not None else 0
            return f"{name}: a loss mask of {n_mask} entries for {cap.num_tokens} tokens"
        return f"{name}: {int(ids.numel())} input_ids for {cap.num_tokens} rows (row_count)"
    ids = ids.reshape(-1).long()
    vocab = int(E.shape[0]) if E is not None else d.target_vocab_size
    if vocab and bool(((ids < 0) | (ids >= vocab)).any()):
        bad = ids[(ids < 0) | (ids >= vocab)]
        return (f"{name}: {int(bad.numel())} input_ids outside the vocabulary [0, {vocab}) (e.g. {int(bad[0])}: "
                "padding such as -100?)")
    crefs = set(slot_refs(cap)) | ({FINAL_POST} if can_post else set())
    if any(r not in crefs for w, _ in cands for r in w.refs):
        return f"{name}: slots {wiring_label(slot_refs(cap))} differ from the first file"
    if cap.hidden_size != d.hidden_size:
        raise ForensicsError(f"capture hidden size {cap.hidden_size} != draft hidden size {d.hidden_size}",
                             path=cap.path)
    return None


def _runs_verifier(cap: Capture, L: int | None) -> bool:
    """Whether the verifier's prediction on ``cap`` needs a forward pass (r = L was not captured)."""
    return L is None or L == 0 or L not in slot_refs(cap)


def _tick(progress: Callable[[int, int], None] | None, done: int, total: int, j: int) -> None:
    if progress is not None:
        progress(done + j, total)


@dataclass
class _Units:
    """Per wiring: accepted tokens and scored positions per unit of the interval."""

    sums: dict[Wiring, tuple[list[float], list[float]]]
    kind: str
    count: int


def _rows(cands: Candidates, tl: Tally, steps: int) -> tuple[list[ProbeRow], _Units]:
    import torch

    first = cands[0][0]
    sizes = [int(t.numel()) for t in tl.ok[first]]
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    idx, kind = units([list(range(o, o + n)) for o, n in zip(offsets, sizes, strict=True)])
    sums: dict[Wiring, tuple[list[float], list[float]]] = {}
    rows: list[ProbeRow] = []
    for w, tags in cands:
        acc, ok, hitk = torch.cat(tl.acc[w]), torch.cat(tl.ok[w]), torch.cat(tl.hitk[w])
        n = int(ok.sum())
        a_u = [float(acc[i].sum()) for i in idx]
        n_u = [float(ok[i].sum()) for i in idx]
        sums[w] = (a_u, n_u)
        rates = [int(((acc > j) & ok).sum()) / n if n else 0.0 for j in range(steps)]
        tau, ci = length_interval(a_u, n_u, steps)
        c1 = int(((acc > 0) & ok).sum())
        rows.append(ProbeRow(wiring=list(w.refs), label=w.label, tags=list(tags), top1=c1 / n if n else 0.0,
                             top1_ci=list(wilson(c1, n)), topk=int(hitk.sum()) / n if n else 0.0, n=n, correct=c1,
                             acceptance=rates, acceptance_length=tau,
                             acceptance_length_ci=list(ci) if ci else None, control=w.control, norm=w.norm,
                             order=w.order, pairing=w.pairing))
    return rows, _Units(sums, kind, len(idx))


def _diff(u: _Units, a: Wiring, b: Wiring) -> tuple[float, tuple[float, float] | None]:
    """Acceptance length of ``a`` minus ``b``, paired over the same units, with its 95 % t interval."""
    (sa, na), (sb, nb) = u.sums[a], u.sums[b]
    ra = [x / n if n else 0.0 for x, n in zip(sa, na, strict=True)]
    rb = [x / n if n else 0.0 for x, n in zip(sb, nb, strict=True)]
    w = [min(n1, n2) for n1, n2 in zip(na, nb, strict=True)]  # a unit one of them scored nothing in: no evidence
    return ratio_interval([(x - y) * n for x, y, n in zip(ra, rb, w, strict=True)], w)


def _fmt_diff(d: float, ci: tuple[float, float] | None) -> str:
    return f"{d:+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else " (no interval)")


def _claims_vs_best(cands: list[ProbeRow], best: ProbeRow, by_label: dict[str, Wiring], u: _Units,
                    served: list | None, engine: str | None, found: list[Finding]) -> bool:
    """The declared and the served wiring against the best one, as findings added to ``found``; True when one of
    them scored no position (then nothing about it is known)."""
    wb = by_label[best.label]
    served_label = Wiring(tuple(served)).label if served is not None else None  # as engines feed: [emb, h], t+1
    unscored = False
    for who, row in (("declared", next((r for r in cands if "declared" in r.tags), None)),
                     ("served", next((r for r in cands if r.label == served_label), None))):
        if row is None or row is best:
            continue
        if row.n == 0:  # every start has a non-finite state in its slots (or is masked): 1.00 is no measurement
            unscored = True
            whose = "the declared wiring" if who == "declared" else f"the wiring {engine} serves"
            found.append(Finding(KIND_FEW_POSITIONS, Severity.WARN, message=(
                f"{whose} {row.label} scored no position (its states are non-finite, or masked, at every start): "
                f"it cannot be compared with {best.label}; check those slots (hsf inspect)"),
                evidence={"wiring": row.wiring, "positions": 0}))
            continue
        d, ci = _diff(u, wb, by_label[row.label])
        if ci is not None and ci[0] > 0:
            kind = KIND_DECLARED_BEATEN if who == "declared" else KIND_SERVED_BEATEN
            whose = "the declared wiring" if who == "declared" else f"the wiring {engine} serves"
            found.append(Finding(kind, Severity.FAIL, message=(
                f"{whose} {row.label} reaches acceptance length {row.acceptance_length:.2f}, clearly below "
                f"{best.label} {best.acceptance_length:.2f} (difference {_fmt_diff(d, ci)}): the draft was likely "
                f"trained on {best.label}"), evidence={"wiring": row.wiring, "best": best.wiring,
                                                       "difference": d, "interval": list(ci)}))
    return unscored


def _decide(rows: list[ProbeRow], by_label: dict[str, Wiring], u: _Units, served: list | None,
            engine: str | None) -> tuple[Verdict, list[Finding]]:
    """The probe's verdict and findings, decided once: the declared (or served) wiring is the claim."""
    cands = [r for r in rows if r.control is None]
    ctrls = [r for r in rows if r.control is not None]
    best, found = cands[0], []
    wb = by_label[best.label]
    if u.count < 2:
        found.append(Finding(KIND_NO_INTERVAL, Severity.WARN, message=(
            f"only {u.count} unit(s) of {u.kind}: no interval for the acceptance length; add samples")))
    unscored = _claims_vs_best(cands, best, by_label, u, served, engine, found)
    near = []
    for c in ctrls:
        if c.n == 0:  # a control built on an unscored wiring measures nothing
            continue
        d, ci = _diff(u, wb, by_label[c.label])
        if ci is None or ci[0] <= 0:
            near.append(f"{c.label} {c.acceptance_length:.2f} (difference {_fmt_diff(d, ci)})")
    collapsed = None if unscored else _collapsed(best, ctrls, u)
    if collapsed is not None:
        found.append(collapsed)
    elif near and u.count >= 2:
        # on a short capture a wide interval is too few samples as much as a weak draft: neither is blamed alone
        why = "the draft, not the wiring, is the problem" if best.n >= MIN_POSITIONS else (
            f"on {best.n} positions (< MIN_POSITIONS = {MIN_POSITIONS}) that can be too few samples as well as a "
            "weak draft: add samples (more or longer captures); if the best stays within the controls, the draft, "
            "not the wiring, is the problem")
        found.append(Finding(KIND_NEAR_CONTROLS, Severity.WARN, message=(
            f"the best wiring {best.label} ({best.acceptance_length:.2f}) is not clearly above the control(s) "
            f"{'; '.join(near)}: {why}")))
    if len(cands) > 1 and u.count >= 2:
        second = cands[1]
        d, ci = _diff(u, wb, by_label[second.label])
        if ci is None or ci[0] <= 0:
            found.append(Finding(KIND_TIE, Severity.WARN, message=(
                f"CANNOT TELL between {best.label} ({best.acceptance_length:.2f}) and {second.label} "
                f"({second.acceptance_length:.2f}): difference {_fmt_diff(d, ci)} (95% t interval over "
                f"{u.count} units of {u.kind}); add samples"),
                evidence={"wirings": [best.label, second.label], "difference": d,
                          "interval": list(ci) if ci else None}))
    if best.n < MIN_POSITIONS:
        found.append(Finding(KIND_FEW_POSITIONS, Severity.WARN,
                             message=f"only {best.n} positions scored (< MIN_POSITIONS = {MIN_POSITIONS})"))
    if any(f.severity is Severity.FAIL for f in found):
        verdict = Verdict.FAIL
    elif unscored or any(f.kind in (KIND_NO_INTERVAL, KIND_NEAR_CONTROLS, KIND_TIE) for f in found):
        verdict = Verdict.CANNOT_TELL
    else:
        verdict = Verdict.PASS
    return verdict, found


def _collapsed(best: ProbeRow, ctrls: list[ProbeRow], u: _Units) -> Finding | None:
    """``draft_collapsed`` (FAIL) when the draft is dead whatever its wiring: the best wiring's whole 95 %
    interval and both controls at acceptance length ``<= COLLAPSED_LENGTH``. The interval, not the point: the
    sample draft (a small working one) scores 1.09–1.32 on single ~100-token files against the next token, with
    intervals reaching 1.16–1.46; a randomly initialised draft scores 1.00 [1.00, 1.01] on the same data."""
    ci = best.acceptance_length_ci
    if not ctrls or ci is None or u.count < 2 or ci[1] > COLLAPSED_LENGTH \
            or any(c.acceptance_length > COLLAPSED_LENGTH for c in ctrls):
        return None
    ctl = ", ".join(f"{c.control} control {c.acceptance_length:.2f}" for c in ctrls)
    return Finding(KIND_COLLAPSED, Severity.FAIL, message=(
        f"the draft is collapsed: its best wiring {best.label} reaches acceptance length "
        f"{best.acceptance_length:.2f} [{ci[0]:.2f}, {ci[1]:.2f}], the {ctl}: all at or below {COLLAPSED_LENGTH} "
        "(a draft that drafts nothing scores 1.0), so no wiring fixes it; check the draft itself (untrained or "
        "diverged, weights that did not load)"),
        evidence={"best": best.wiring, "best_length": best.acceptance_length, "best_interval": list(ci),
                  "controls": {str(c.control): c.acceptance_length for c in ctrls},
                  "threshold": COLLAPSED_LENGTH})


def _served_cost(rows: list[ProbeRow], served: list | None, why: str, engine: str, version: str | None,
                 steps: int, cost: float) -> ServedCost:
    best = next(r for r in rows if r.control is None)
    row = next((r for r in rows if served is not None and r.label == Wiring(tuple(served)).label), None)
    sb = speedup(best.acceptance_length, steps, cost)
    if row is None:
        if not why and served is not None:  # the engine's layers are not all in the capture: say which
            held = {r for x in rows if x.control is None for r in x.wiring}
            missing = [r for r in served if r not in held]
            why = (f"the capture holds no state at {', '.join(r_label(r) for r in missing)}; a capture with "
                   f"them scores it: hsf capture --layers {','.join(str(r) for r in served)}" if missing else
                   f"{wiring_label(served)} is not among the scored wirings (--candidates)")
        return ServedCost(engine, version, served, wiring_label(served) if served else None, None, best.label,
                          best.acceptance_length, steps, cost, None, sb, None, why or "not scored")
    ss = speedup(row.acceptance_length, steps, cost)
    return ServedCost(engine, version, list(served or []), row.label, row.acceptance_length, best.label,
                      best.acceptance_length, steps, cost, ss, sb, ss / sb if sb else None)


@cv.resolve_names("engine")
def probe(draft: str | os.PathLike | Draft, data: Any, candidates: str | list = "auto", model: Any = None,
          topk: int = TOPK, max_samples: int | None = None, use_loss_mask: bool = False,
          progress: Callable[[int, int], None] | None = None, steps: int = STEPS, engine: cv.SystemName | None = None,
          engine_version: str | None = None, draft_cost: float = DRAFT_COST, stamp_check: bool = True,
          exact_r: list | None = None) -> ProbeResult:
    """Rank candidate wirings of ``draft`` by the acceptance length of greedy chain drafting on capture ``data``.

    Args:
        draft: draft folder (speculators ``layers.0.*`` or EAGLE/SGLang/SpecForge ``midlayer.*``) or a Draft.
        data: capture file, folder, Capture or list of them (slots named by r via ``capture.json`` /
            ``data_config.json``).
        candidates: ``"auto"`` (declared, trainer's view, shifts, windows, permutations — at most
            ``MAX_CANDIDATES`` — plus the declared wiring's ``[h, emb]``, ``same-token`` and other-norm-stage
            twins), or wirings as ``"0,3,16;3,16,28"`` / ``[[0, 3, 16], [3, 16, 28]]``. A shift and a random
            control of the declared (else first) wiring are always added.
        model: None, ``"default"`` (packaged SmolLM2), a model path, a loaded model or a
            :class:`~forensics.models.verifier.Verifier`. With a model the target is the verifier's prediction
            (a Llama safetensors checkpoint runs as plain torch, bit-identical to transformers); without, the
            actual next token.
        topk: k of the step-0 top-k agreement. max_samples: use at most this many files.
        use_loss_mask: start chains only at positions whose (shifted) loss mask is set.
        progress: called as ``progress(done, total)`` after each (file, wiring) pair is scored.
        steps: draft tokens per chain (k of the acceptance length, in [1, k + 1]).
        engine, engine_version: the serving engine whose wiring (resolved from the draft config as the audit
            does) is compared with the best, in acceptance length and expected speed-up.
        draft_cost: the draft's cost per token over the target's (the speed-up's cost model).
        stamp_check: check each stamped capture file's stamp against its values (default): a file changed since
            it was stamped is a ``stamp_drift`` FAIL (the probe scored data that is not what was stamped).
        exact_r: per capture of ``data``, each slot's r as exact mode named it (the report passes its
            fingerprints'); a slot the data declares no r for takes it. Without it, a model given by name or
            path names such slots by an exact fingerprint; else they are ``slot{i}``.
    """
    _check_options(topk, max_samples, steps, draft_cost)
    if candidates != "auto":
        candidate_lists(candidates)  # a malformed list is one line before any file is read
    eng = cast("cv.System | None", engine)  # resolved on entry
    name = eng.given if eng is not None else None  # the engine as the caller wrote it, in what the result says
    if engine_version is not None:  # an unknown version is one line, never silently "as if known"
        if eng is None:
            raise ForensicsError("engine_version (--engine-version) needs engine (--engine)")
        eng.version(engine_version)
    d = draft if isinstance(draft, Draft) else load_draft(draft)
    caps = _captures(data)[:max_samples] if max_samples else _captures(data)
    if model is not None:
        caps = _named_by_reference(caps, model, exact_r)
    v = _verifier(model)
    L, arch = _target_context(v, caps)
    can_post = v is not None and L is not None and L in slot_refs(caps[0])
    served, served_why = _served_r(d, eng, engine_version, L, arch)
    cands, declared, notes = _candidate_wirings(d, caps, candidates, L, can_post, served, name)

    tl = Tally()
    E = d.embed
    tl.embed_source = "draft checkpoint" if E is not None else None
    if E is None and v is not None:
        E, tl.embed_source = v.embed, "model"
    total = len(caps) * len(cands)
    whys = [_skip_reason(cap, d, E, cands, can_post) for cap in caps]
    tl.skipped = [why for why in whys if why is not None]
    seqs = {n: cap.input_ids.reshape(-1).long() for n, cap in enumerate(caps)  # one packed verifier run
            if whys[n] is None and cap.input_ids is not None and v is not None and _runs_verifier(cap, L)}
    preds = dict(zip(seqs, v.predictions(list(seqs.values())), strict=True)) if v is not None and seqs else {}
    for n_cap, cap in enumerate(caps):
        if progress is not None:
            progress(n_cap * len(cands), total)
        if whys[n_cap] is not None:
            continue
        tick = partial(_tick, progress, n_cap * len(cands), total)
        score_file(cap, d, E, v, L, preds.get(n_cap), cands, tl, topk, steps, use_loss_mask, tick)
        tl.used.append(cap.path)
    if not tl.used:
        raise ForensicsError("no usable capture file: " + "; ".join(tl.skipped[:5]))
    if not any(bool(o.any()) for w, _ in cands for o in tl.ok[w]):
        raise ForensicsError("cannot tell: no position could be scored (every state or draft output is NaN/Inf, "
                             f"or masked); files {', '.join(os.path.basename(u) for u in tl.used[:3])}")

    rows, u = _rows(cands, tl, steps)
    by_label = {w.label: w for w, _ in cands}
    rows.sort(key=lambda r: (r.control is not None, ["shift", "random"].index(r.control) if r.control else 0,
                             -r.acceptance_length, -r.top1, -r.topk))
    verdict, findings = _decide(rows, by_label, u, served, name)
    if stamp_check:
        for cap in caps:
            sc = check_in_read(cap)
            findings += [] if sc is None else sc.findings
        if any(f.severity is Severity.FAIL for f in findings):
            verdict = Verdict.FAIL
    best = rows[0]
    res_ids, why_no_ids = _ids_per_engine(best.wiring, L, arch)
    findings += [Finding(KIND_NO_ENGINE_IDS, Severity.INFO, message=m) for m in why_no_ids]
    notes += [f"skipped {s}" for s in tl.skipped]
    if E is not None and tl.embed_source == "model" and d.target_vocab_size and E.shape[0] != d.target_vocab_size:
        findings.append(Finding(KIND_VOCAB, Severity.WARN,
                                message=f"model vocab {E.shape[0]} != draft target vocab {d.target_vocab_size}"))
    cost = _served_cost(rows, served, served_why, name, engine_version, steps, draft_cost) if name else None
    return ProbeResult(draft=d.to_dict(), rows=rows, target=tl.target_kind, target_source=tl.target_source or "",
                       embed_source=tl.embed_source or "?", files=tl.used, positions=best.n, num_layers=L,
                       verdict=verdict, findings=findings, topk=topk, steps=steps, ci_unit=u.kind, units=u.count,
                       served=cost, ids_per_engine=res_ids, notes=notes)


__all__ = ["probe", "ProbeResult", "ProbeRow", "ServedCost", "Wiring", "auto_candidates", "wilson", "wiring_label",
           "MAX_CANDIDATES", "TOPK", "STEPS", "TARGET_VERIFIER", "TARGET_NEXT", "DRAFT_COST"]
