"""Training side of the wiring audit: what the draft's fc consumed (r per slice, stored order) and its target.

r per slot comes from the data first: the fingerprint's exact r (with a reference model), else its label
(the declared layers placed by *measured* depth order), else its role (embedding / post-norm), else the
declaration (``capture.json`` / ``data_config.json``), else, with a warning, the draft config read in the
trainer's numbering. The trainer's view (``conventions.trainer_view``) then cuts fc inputs and target.
"""

from __future__ import annotations

import os
from typing import Any

from forensics.analysis.audit.parts import TrainedSide
from forensics.analysis.claims import capture_claims, draft_ids_r
from forensics.analysis.fingerprint.verdicts import is_postnorm
from forensics.errors import ForensicsError
from forensics.findings import Finding, FindingKind, Severity, Verdict
from forensics.io.capture import Capture
from forensics.io.formats import iter_files, load
from forensics.layers import FINAL_POST, parse_layer_list, parse_r, r_label
from forensics.models import conventions as cv


def first_capture(data: Any) -> Capture:
    if isinstance(data, Capture):
        return data
    files = list(iter_files(os.fspath(data)))
    if not files:
        raise ForensicsError("no capture files found", path=os.fspath(data))
    return load(files[0])


STRONG_ROLES = ("embedding", "final_postnorm")  # roles a fingerprint names without a reference model
_FP_CACHE: list = []  # [(capture, model, stamp_check, result)]: one entry, held by identity (ids can be reused
# after GC)


def fingerprint_slots(cap: Capture, model: Any = None, stamp_check: bool = True
                      ) -> tuple[list[dict] | None, list[Finding]]:
    """Per-slot {r_exact, label, role, confidence, decided_by} from ``forensics.fingerprint`` plus its
    findings (``data_<kind>``; a ``stamp_*`` finding keeps its kind: it is about the file, not the data's
    meaning); ``(None, [])`` when the fingerprint module is not installed."""
    if _FP_CACHE and _FP_CACHE[0][0] is cap and _FP_CACHE[0][1] is model and _FP_CACHE[0][2] == stamp_check:
        return _FP_CACHE[0][3]
    try:
        from forensics.analysis.fingerprint.core import fingerprint  # noqa: PLC0415 - optional: else config only
    except ImportError:
        return None, []
    fp = fingerprint(cap, model=model, num_layers=cap.num_layers, stamp_check=stamp_check)

    whole = next((f.kind for f in fp.findings if f.kind in ("shifted", "reordered") and f.is_fail), None)
    slots = [{"r_exact": s.r_exact, "label": s.label, "role": s.role, "confidence": s.confidence,
              "decided_by": s.decided_by, "verdict": None if s.verdict is None else s.verdict.value,
              "verdict_why": s.verdict_why, "certain_post": is_postnorm(fp, s.index), "whole_list": whole}
             for s in fp.slots]
    found = [Finding(f.kind if f.kind.value.startswith("stamp_") else f.kind.on_training_data(), f.severity,
                     f.slots, f"training data: {f.message}",
                     {**f.evidence, "source": "fingerprint"}) for f in fp.findings]
    _FP_CACHE[:] = [(cap, model, stamp_check, (slots, found))]  # one entry: captures are large and short-lived
    return slots, found


KNOWN = ("exact", "measured", "declared", "layout")  # r statuses a verdict may rest on ("claimed": unproven)


def slot_rs(cap: Capture, use_fingerprint: bool = True, model: Any = None, stamp_check: bool = True
            ) -> tuple[list, list[str], list[Finding], list[str]]:
    """r of every slot, where it came from, findings, and its status (``KNOWN`` or ``claimed``/``unknown``).

    With the fingerprint (default), only evidence makes an r known: the exact r (``--model``), or a certain
    role (embedding, post-norm, the normalised final pre-norm state). A claim the data neither supports nor
    excludes stays ``claimed`` (its r is shown, no verdict rests on it); a claim the data excludes is dropped
    (``unknown`` unless the role names the slot) with a ``declared_vs_data`` fail. Without the fingerprint
    (``use_fingerprint=False``, ``--no-fingerprint``) every declaration is trusted as ``declared``.
    """
    claims = capture_claims(cap, cap.num_layers)
    declared = claims.rs if claims is not None else [None] * len(cap.slots)
    fps, findings = fingerprint_slots(cap, model, stamp_check) if use_fingerprint else (None, [])
    findings = list(findings)
    rs: list = []
    src: list[str] = []
    status: list[str] = []
    for i, d in enumerate(declared):
        f = fps[i] if fps and i < len(fps) else None
        if f is None:
            rs.append(d)
            src.append("declared" if d is not None else "unknown")
            status.append("declared" if d is not None else "unknown")
            continue
        role_r = 0 if f["role"] == "embedding" else FINAL_POST if f.get("certain_post") else None
        if f.get("r_exact") is not None:
            r, how, st = f["r_exact"], "fingerprint (exact)", "exact"
        elif f.get("verdict") == Verdict.PASS.value:
            r, how, st = d, f"fingerprint ({f.get('verdict_why')})", "measured"
        elif role_r is not None:
            r, how, st = role_r, f"fingerprint (role {f['role']})", "measured"
        elif f.get("verdict") == Verdict.FAIL.value and f.get("label") and f.get("whole_list") == "reordered":
            r, how, st = parse_r(f["label"]), "fingerprint (the declared layers placed by measured depth order)", \
                "measured"
        elif f.get("verdict") == Verdict.CANNOT_TELL.value:
            r, how, st = d, "declared; the data neither confirms nor excludes it (--model settles it)", "claimed"
        else:
            r, how, st = None, "unknown (the data alone cannot name this slot)", "unknown"
        if d is not None and f.get("verdict") == Verdict.FAIL.value:
            findings.append(Finding(FindingKind.DECLARED_VS_DATA, Severity.FAIL, [i],
                                    f"slot {i} is declared {r_label(d)} but the data says "
                                    f"{r_label(r) if r is not None else 'otherwise'}: {f.get('verdict_why')}",
                                    {"slot": i, "declared": d, "measured": r, "role": f.get("role"),
                                     "confidence": f.get("confidence")}))
        rs.append(r)
        src.append(how)
        status.append(st)
    return rs, src, findings, status


def training_side(data: Any, trainer: cv.System | None, draft_info, L: int | None, use_fingerprint: bool,
                  model: Any, served_given: bool = False, stamp_check: bool = True
                  ) -> tuple[TrainedSide, list[Finding], Capture | None]:
    """What the draft's fc consumed (r per slice, in stored order) and what its target was; the training capture
    read (None for a declared layout or no data)."""
    findings: list[Finding] = []
    cap = None
    if data is None:
        if draft_info is None or trainer is None:
            return TrainedSide(), findings, None
        # No data: read the ids the draft config records, in the trainer's numbering.
        fc = _ids_as_trained(trainer, draft_info, L) if L is not None else None
        if fc is None:
            return TrainedSide(), findings, None
        return TrainedSide(fc_r=fc, source=f"draft config ids read in {trainer.given}'s numbering",
                           slot_source=["draft config"] * len(fc), fc_status=["config"] * len(fc),
                           basis="config"), findings, None
    if isinstance(data, (list, tuple)) and all(isinstance(x, (int, str)) for x in data):
        rs = parse_layer_list(list(data), "trained layout") or []  # a typo is bad input: one line, exit 2
        src, roles, status = ["layout"] * len(data), None, ["layout"] * len(data)
        source = "declared layout"
    else:
        cap = first_capture(data)
        rs, src, fps, status = slot_rs(cap, use_fingerprint, model, stamp_check)
        findings += fps
        roles = [f["role"] for f in (fingerprint_slots(cap, model, stamp_check)[0] or [])] if use_fingerprint \
            else []
        source = f"{cap.format} capture {cap.path}"
        native = cv.of_format(cap.format)
        if trainer and native and trainer != native:
            findings.append(Finding(FindingKind.TRAINER_VS_FORMAT, Severity.WARN, [],
                                    f"--trainer {trainer.given} but the data is in {cap.format} format, which "
                                    f"{native.data_format} reads; check which trainer consumed it",
                                    {"trainer": trainer.given, "format": cap.format}))
        trainer = trainer or native
    if trainer is None:
        raise ForensicsError("the trainer is needed to know which slots fed the fc: pass --trainer "
                             f"({', '.join(cv.TRAINERS)})")
    view = trainer.trainer_view(len(rs))
    fc = [rs[i] for i in view.fc_slots]
    open_ = [k for k, i in enumerate(view.fc_slots) if status[i] not in KNOWN]
    if open_ and cap is not None and use_fingerprint:
        guess = _ids_as_trained(trainer, draft_info, L) if draft_info is not None and L is not None else None
        findings.append(Finding(FindingKind.UNKNOWN_SLICES, Severity.INFO, [view.fc_slots[k] for k in open_],
                                f"the data alone cannot name the r of fc slice(s) {open_} "
                                + (f"(the draft config says {[r_label(r) for r in guess]} under {view.trainer}'s "
                                   "numbering, but that is the claim being checked, not evidence) " if guess else "")
                                + ("— run with --model default (or the target model), or " if model is None else
                                   "— the reference model matched no state for them: check that --model is the "
                                   "target the data was captured from, or ")
                                + ("serve the training prompts themselves (only same-token rows of a served capture "
                                   "confirm a layer)" if served_given else
                                   "compare a served capture on the same prompts (--served)"),
                                {"slices": open_, "config_r": guess}))
    if any(r is None for r in fc) and draft_info is not None and L is not None and not use_fingerprint:
        assumed = _ids_as_trained(trainer, draft_info, L)
        if assumed is not None and len(assumed) == len(fc):
            findings.append(Finding(FindingKind.ASSUMED_FROM_CONFIG, Severity.WARN, [],
                                    f"the data declares no layers for fc slot(s) "
                                    f"{[i for i, r in enumerate(fc) if r is None]}; assumed r = {assumed} from the "
                                    f"draft config under {view.trainer}'s numbering. "
                                    "Pass --model for an exact, data-based answer", {"assumed_r": assumed}))
            for i, r in enumerate(assumed):
                if fc[i] is None:
                    fc[i], src[view.fc_slots[i]] = r, "draft config (trainer numbering)"
                    rs[view.fc_slots[i]], status[view.fc_slots[i]] = r, "declared"
    target = rs[view.target_slot] if view.target_slot is not None else None
    out = TrainedSide(fc_r=fc, target_r=target, source=source, slot_source=src, trainer=view.trainer,
                      view=view.source, target_norm=view.target_norm, slots_r=rs, slots_status=status,
                      fc_status=[status[i] for i in view.fc_slots],
                      target_status=status[view.target_slot] if view.target_slot is not None else None,
                      roles=roles if cap is not None else None, basis="data")
    ints = [r for r in fc if isinstance(r, int)]
    if len(ints) == len(fc) and ints != sorted(ints):
        findings.append(Finding(FindingKind.ORDER, Severity.FAIL, [],
                                f"training fed the fc r = {[r_label(r) for r in fc]}, not in ascending order; "
                                "SGLang and vLLM always concatenate in ascending layer order",
                                {"fc_r": fc}))
    repeated = _repeated(fc)
    if repeated:  # only named r repeat: two unknown slices are not the same layer
        findings.append(Finding(FindingKind.DUPLICATE, Severity.WARN, [],
                                f"the fc inputs repeat {', '.join(r_label(r) for r in repeated)}: "
                                f"{[r_label(r) for r in fc]}", {"fc_r": fc, "repeated": repeated}))
    if FINAL_POST in fc:
        findings.append(Finding(FindingKind.POSTNORM_AUX, Severity.FAIL, [],
                                "a post-norm final state is fed to the fc; "
                                "engines capture pre-norm states only", {"fc_r": fc}))
    findings += _target_findings(view, target, L, status[view.target_slot] if view.target_slot is not None else None)
    return out, findings, cap


def _repeated(rs: list) -> list:
    """The r that occur more than once in ``rs``, in first-seen order; None (unknown) never repeats.

    >>> _repeated([0, None, None]), _repeated([2, 24, 24])
    ([], [24])
    """
    seen: set = set()
    out: list = []
    for r in rs:
        if r is None:
            continue
        if r in seen and r not in out:
            out.append(r)
        seen.add(r)
    return out


def _ids_as_trained(trainer: cv.System, info, L: int) -> list | None:
    """The r a draft config's ids mean to the trainer that wrote them (``forensics.analysis.claims.draft_ids_r``,
    the one reader every command uses); None when the config has none or the trainer would refuse them."""
    try:
        d = draft_ids_r(trainer, info, L)
    except ForensicsError:  # an id list the trainer would refuse: no assumption
        return None
    return None if d is None else list(d.r)


def _target_findings(view, target, L: int | None, status: str | None = None) -> list[Finding]:
    if target is None:
        return []
    ev = {"target_r": target, "num_layers": L, "trainer": view.trainer, "wants": view.target_norm,
          "status": status}
    if view.target_norm == "pre":  # speculators applies verifier_norm itself (speculators#313)
        if target == FINAL_POST:
            return [Finding(FindingKind.TARGET_POSTNORM, Severity.FAIL, [], "the training target is post-norm but "
                            f"{view.trainer} applies the final norm itself (speculators#313): normed twice", ev)]
        if L is not None and isinstance(target, int) and target < L:  # r > L: audit's layers_beyond_L says why
            return [Finding(FindingKind.TARGET_NOT_FINAL, Severity.FAIL, [],
                            f"the training target was r = {target} ({r_label(target)}), not r = {L} (last block, "
                            f"pre-norm): lm_head(norm(·)) of it is a logit lens {L - target} block(s) early, not "
                            f"the model's next-token distribution; regenerate the last slot at r = {L}"
                            + (" (the data's own record says so; --model confirms the r)" if status == "claimed"
                               else ""), ev)]
    elif view.target_norm == "post":  # SpecForge target head is lm_head only
        if target != FINAL_POST:
            return [Finding(FindingKind.TARGET_PRENORM, Severity.FAIL, [],
                            f"the training target is {r_label(target)} but "
                            "SpecForge applies lm_head only and needs the post-norm final state", ev)]
    return []
