"""Pre-flight check without data: does the serving engine feed the draft the layers its trainer used?

``hsf audit --draft D --engine E [--engine-version V] [--trained-layout …] [--trainer T --target-layer-ids …]``
reads the draft config and the trainer invocation, converts both to r through the conventions registry, and
warns on every silent default the 2026 incidents show (each finding names its public source):

- no ids where the engine reads them (vllm#50170, sglang#21274): the engine's default, silently;
- ids in a key the engine ignores (llama.cpp#27040: EAGLE-3.1 nests them under ``eagle_config``);
- a last id that is a layer *count*, not an index (speculators#705: ``--include-last-layer`` appended 78);
- ids out of range (ROCmFPX#44: id 48 for 48 blocks);
- fc width vs id count (vllm#48524: DFlash fc sized from the draft depth);
- duplicate ids (Automodel#2256) and ids out of order (Model-Optimizer#1509);
- the trainer invoked with other ids than the draft config records (speculators#379), or without ids at all
  (speculators ``resolve_target_layer_ids`` falls back with a warning), or with the final layer among the
  training ids (speculators#839: training gets the ids "excluding the final layer").

Where the engine version is not given or the sources do not settle a numbering, every reading is listed and
the verdict is CANNOT TELL unless all readings agree.

Example:
    >>> res = preflight(draft="draft/", engine="vllm", trainer="speculators",
    ...                 target_layer_ids=[2, 15, 27], num_layers=30)        # doctest: +SKIP
    >>> res.wiring                                                          # doctest: +SKIP
    'match'
"""

from __future__ import annotations

from typing import Any, cast

from forensics.analysis.audit.core import AuditResult, audit, target_facts
from forensics.analysis.audit.parts import AuditContext, Fix, ServedSide, TrainedSide
from forensics.errors import ForensicsError
from forensics.findings import Finding, FindingKind, Severity
from forensics.layers import FINAL_POST, r_label
from forensics.models import conventions as cv
from forensics.models.draft_config import read_draft

READING_KINDS = {"slices", "off_by_one", "shifted"}  # findings that hold for one reading of the served layers
DOCTOR_WIRING_KINDS = {"id_is_count", "ids_out_of_range", "fc_vs_ids", "ids_duplicate", "ids_order"}
ISSUES = {  # the public case each doctor finding comes from
    "ids_missing": "https://github.com/vllm-project/vllm/pull/50170",
    "ids_ignored_key": "https://github.com/ggml-org/llama.cpp/pull/27040",
    "id_is_count": "https://github.com/vllm-project/speculators/issues/705",
    "ids_out_of_range": "https://github.com/charlie12345/ROCmFPX/issues/44",
    "fc_vs_ids": "https://github.com/vllm-project/vllm/pull/48524",
    "ids_duplicate": "https://github.com/NVIDIA-NeMo/Automodel/pull/2256",
    "ids_order": "https://github.com/NVIDIA/Model-Optimizer/pull/1509",
    "trainer_ids_missing": "https://github.com/vllm-project/speculators/pull/379",
    "trainer_ids_vs_config": "https://github.com/vllm-project/speculators/pull/379",
    "trainer_ids_include_last": "https://github.com/vllm-project/speculators/pull/839",
}


def _f(kind: FindingKind, severity: Severity, message: str, **evidence: Any) -> Finding:
    return Finding(kind, severity, [], f"{message} ({ISSUES[kind]})" if kind in ISSUES else message,
                   {**evidence, "source": ISSUES.get(kind)})


def id_findings(system: cv.System, family: str, ids: list[int] | None, L: int, where: str) -> list[Finding]:
    """What is wrong with an id list in ``system``'s numbering, before any engine reads it."""
    if ids is None:
        return []
    out: list[Finding] = []
    try:
        rule = system.rule(family)
    except ForensicsError:
        return []
    if rule.offset in (cv.IGNORED, None) or not rule.keys:
        return []
    plus = 1 if rule.offset == cv.FIRST_ID and ids and ids[0] == 1 else 0 if rule.offset == cv.FIRST_ID \
        else int(rule.offset)
    if plus == 1 and ids and max(ids) == L:
        out.append(_f(FindingKind.ID_IS_COUNT, Severity.FAIL,
                      f"{where}: id {L} is the layer count, not an index: in {system}'s "
                      f"numbering ({rule.meaning()}) the last block's output is id {L - 1}", ids=ids, num_layers=L))
    bad = [i for i in ids if not 0 <= i + plus <= L and not (plus == 1 and i == L)]
    if bad:
        out.append(_f(FindingKind.IDS_OUT_OF_RANGE, Severity.FAIL,
                      f"{where}: ids {bad} are outside the target's {L} blocks in "
                      f"{system}'s numbering ({rule.meaning()})", ids=ids, num_layers=L))
    if len(set(ids)) != len(ids):
        out.append(_f(FindingKind.IDS_DUPLICATE, Severity.FAIL,
                      f"{where}: ids {ids} repeat a layer; engines that deduplicate "
                      "capture fewer states than the fc takes", ids=ids))
    if list(ids) != sorted(ids):
        out.append(_f(FindingKind.IDS_ORDER, Severity.FAIL,
                      f"{where}: ids {ids} are not ascending; engines concatenate in layer "
                      "order, so the fc slices meet other layers than listed", ids=ids))
    return out


def trainer_fc_r(tsys: cv.System, family: str, ids: list[int] | None, L: int, include_last_layer: bool | None
                 ) -> tuple[list | None, list[Finding]]:
    """The r the fc was trained on, from the trainer's invocation, with its silent-default findings."""
    system, trainer = tsys.name, tsys.given  # (messages echo the name as the user wrote it)
    found: list[Finding] = []
    if ids is None:
        default = tsys.to_r(None, L, family=family)
        if system == "speculators" and len(default) == 4:
            default = default[:-1]  # the appended L is the training target, not an fc input
        found.append(_f(FindingKind.TRAINER_IDS_MISSING, Severity.WARN,
                        f"{trainer} was invoked without --target-layer-ids: it "
                        f"falls back to its default r = {[r_label(r) for r in default]} (and warns only in its "
                        "own log); if the data was generated with other ids, training and data disagree",
                        default_r=default))
        return default, found
    if system == "speculators" and ids and max(ids) == L:
        found.append(_f(FindingKind.TRAINER_IDS_INCLUDE_LAST, Severity.FAIL,
                        f"the training ids {ids} include {L}, the final "
                        "layer; launch_vllm.py --include-last-layer appends it for the data, but training must get "
                        "the ids excluding the final layer, else the target is fed to the fc as an aux state",
                        ids=ids, num_layers=L))
    found += id_findings(tsys, family, ids, L, f"{trainer} --target-layer-ids")
    try:
        rs = tsys.to_r(ids, L, family=family)
    except ForensicsError as e:
        found.append(Finding(FindingKind.TRAINER_IDS_INVALID, Severity.FAIL, [], e.message, {"ids": ids}))
        return None, found
    if include_last_layer and system == "speculators" and rs and rs[-1] == L:
        rs = rs[:-1]
    return rs, found


def config_findings(info, engine: cv.System, family: str, L: int, version: str | None = None,
                    arch: str | None = None) -> list[Finding]:
    """The draft config's ids read in the engine's numbering: count-as-index, range, order, duplicates; ids in
    a key the engine does not read; and the fc width against the id count (vllm#48524)."""
    out: list[Finding] = []
    try:
        rule = engine.rule(family, engine.version(version))
    except ForensicsError as e:
        return [Finding(FindingKind.NO_RULE, Severity.WARN, [], e.message, {})]
    for key, ids in (info.family_ids or {}).items():
        if not (isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)):
            continue
        if key in rule.keys:
            out += id_findings(engine, family, ids, L, f"`{key}` in the draft config")
        elif family not in cv.EAGLE_FAMILIES and not any(cv.get_key(info.config, k) is not None for k in rule.keys):
            out.append(_f(FindingKind.IDS_IGNORED_KEY, Severity.FAIL,
                          f"the ids {ids} sit in `{key}`, which {engine} does "
                          f"not read for {family} (it reads {' or '.join(rule.keys) or 'no key'}): it uses its default",
                          key=key, ids=ids, engine_keys=list(rule.keys)))
    h = info.target_hidden_size or info.hidden_size
    ids = next((v for v in (info.family_ids or {}).values() if isinstance(v, list)), None)
    if info.fc_aux_count is not None and ids is not None and info.fc_aux_count != len(ids):
        out.append(_f(FindingKind.FC_VS_IDS, Severity.FAIL,
                      f"fc.weight takes {info.fc_aux_count} states of width {h} but the "
                      f"config lists {len(ids)} ids {ids}", fc_shape=list(info.fc_shape or []), ids=ids))
    return out


@cv.resolve_names("engine", "trainer")
def preflight(draft: Any, engine: cv.SystemName, engine_version: str | None = None,
              trained_layout: list | None = None,
              trainer: cv.SystemName | None = None, target_layer_ids: list[int] | None = None,
              include_last_layer: bool | None = None, target_config: Any = None, num_layers: int | None = None,
              hidden_size: int | None = None, arch: str | None = None, family: str | None = None) -> AuditResult:
    """The data-free audit: draft config + engine (+ version) + what the trainer was given; ``engine``,
    ``trainer``: any name or alias, or a ``System``."""
    eng, tsys = cast("cv.System | None", engine), cast("cv.System | None", trainer)  # resolved on entry
    if eng is None:
        raise ForensicsError(f"engine must be one of {cv.ENGINES}, found None")
    engine, tname = eng.name, tsys.given if tsys is not None else None  # (tname: as the user wrote it)
    info = read_draft(draft)
    facts = target_facts(target_config)
    L = num_layers or facts.get("num_layers")
    if L is None:
        raise ForensicsError("the target's layer count is needed: pass --target-config or --num-layers")
    arch = arch or facts.get("arch")
    fam = cv.canonical_family(family or info.family)
    findings: list[Finding] = []
    trained_fc = None
    if tsys is not None:
        trained_fc, tf = trainer_fc_r(tsys, fam, target_layer_ids, L, include_last_layer)
        findings += tf
        cfg_ids = _config_ids_for(info, tsys, fam)
        if target_layer_ids is not None and cfg_ids is not None and list(cfg_ids) != list(target_layer_ids):
            findings.append(_f(FindingKind.TRAINER_IDS_VS_CONFIG, Severity.WARN, f"{tname} was invoked with ids "
                               f"{list(target_layer_ids)} but the draft config records {list(cfg_ids)}",
                               trainer_ids=list(target_layer_ids), config_ids=list(cfg_ids)))
    findings += config_findings(info, eng, fam, L, engine_version, arch)
    if trained_layout is not None:
        data, view = list(trained_layout), tsys if tsys is not None and tsys.data_format is not None else None
        if view is None:  # a trainer without a known data layout: the layout lists the fc inputs only
            data, view = data + [r_label(L)], cv.SPECULATORS
    elif trained_fc is not None:
        data, view = [r_label(r) if isinstance(r, int) else r for r in trained_fc] + [r_label(L)], cv.SPECULATORS
    else:
        data, view = None, None
    try:
        res = audit(data=data, draft=draft, engine=eng, engine_version=engine_version, trainer=view,
                    target_config=target_config, num_layers=L, hidden_size=hidden_size, arch=arch,
                    use_fingerprint=False)
    except ForensicsError as e:
        if "no known rule" not in e.message:
            raise
        return AuditResult(wiring="cannot-tell", reason=f"{e.message}: what {engine} serves a {fam} draft is not in "
                           "the sources read", slices=[], findings=findings, fix=None,
                           trained=TrainedSide(fc_r=trained_fc, source="trainer invocation"),
                           served=ServedSide(),
                           context=AuditContext(engine=engine, engine_version=engine_version, family=fam,
                                                num_layers=L, trainer=tname, hidden_size=hidden_size,
                                                arch=arch or "generic", basis="no_rule"))
    fc = res.trained.fc_r
    if trained_layout is not None and trained_fc is not None and fc is not None and list(fc) != list(trained_fc):
        findings.append(Finding(FindingKind.TRAINER_VS_LAYOUT, Severity.FAIL, [], f"the trainer's ids give r = "
                                f"{[r_label(r) for r in trained_fc]} but the trained layout feeds the fc "
                                f"{[r_label(r) for r in fc]}", {"trainer_r": trained_fc, "layout_r": fc}))
    dup_ids = [f.evidence.get("ids") for f in res.findings if f.kind is FindingKind.DUPLICATE]
    findings = [f for f in findings if not (f.kind is FindingKind.IDS_DUPLICATE and f.evidence.get("ids") in dup_ids)]
    res.findings[:0] = findings  # (the audit's `duplicate` already says what a repeated config id does)
    if data is not None and (trained_layout is None or view != tsys):  # the appended L was ours, not the user's
        res.findings = [f for f in res.findings if f.kind not in ("target_not_final", "target_postnorm")]
        res.trained.target_r, res.trained.trainer = None, tname
        res.trained.source = "trainer invocation" if trained_layout is None else "trained layout (fc inputs)"
        res.context.trainer = tname
    served = res.served.r
    if res.wiring == "cannot-tell" and fc and served is not None and len(served) != len(fc) and \
            all(isinstance(r, int) for r in fc):  # every trained slice is known: a count difference is certain
        res.wiring = "mismatch"
        res.reason = (f"{engine} feeds {len(served)} states {[r_label(r) for r in served]} to an fc trained on "
                      f"{len(fc)} {[r_label(r) for r in fc]}")
    if res.wiring == "match" and any(f.severity is Severity.FAIL and f.kind in DOCTOR_WIRING_KINDS for f in findings):
        bad = next(f for f in findings if f.severity is Severity.FAIL and f.kind in DOCTOR_WIRING_KINDS)
        res.wiring, res.reason = "mismatch", bad.message
    if res.wiring == "mismatch" and fc and all(isinstance(r, int) for r in fc):
        plan = eng.from_r(fc, L, engine_version, arch or "generic", fam)
        res.fix = Fix.from_plan(plan, already_set=_already(info, plan))
    _apply_readings(res, info, eng, engine_version, L, arch, fam)
    res.context.family, res.context.basis = fam, "preflight"
    return res


def _already(info, plan) -> bool:
    return plan.ids is not None and plan.key is not None and \
        list(cv.get_key(info.config, plan.key) or []) == list(plan.ids)


def _config_ids_for(info, trainer: cv.System | None, family: str) -> list | None:
    """The ids the draft config records under the key the trainer writes."""
    if trainer is None:
        return None
    try:
        rule = trainer.rule(family)
    except ForensicsError:
        return None
    for k in rule.keys:
        v = (info.family_ids or {}).get(k)
        if isinstance(v, list):
            return v
    return None


def _apply_readings(res: AuditResult, info, eng: cv.System, version: str | None, L: int, arch: str | None,
                    family: str) -> None:
    """Unknown version or unsettled numbering: list every reading; decide only if all readings agree."""
    engine = eng.name
    fc = res.trained.fc_r
    if fc is None or any(not isinstance(r, int) for r in fc):
        return
    alts: dict[str, list] = {}
    for v in ([version] if version is not None else eng.versions()):
        ec = eng.capture(info.config, L, None if v == "any" else v, arch, family)
        label = f"{engine} {ec.version}" if ec.version != "any" else engine
        alts.update({f"{label} ({k.split(' ', 2)[-1]})" if k.startswith(engine) and " if " in k else k: r
                     for k, r in ec.readings.items()} if ec.readings else {label: ec.r})
    if len({tuple(map(str, r)) for r in alts.values()}) <= 1:
        return
    matches = {k: sorted(map(str, r)) == sorted(map(str, fc)) for k, r in alts.items()}
    res.findings.append(_f(FindingKind.READINGS, Severity.WARN,
                           "the served layers depend on what is not given or not settled: "
                           + "; ".join(f"{k} → r = {[r_label(x) for x in r]}" for k, r in alts.items()),
                           readings={k: list(r) for k, r in alts.items()}, match=matches))
    ok = [k for k, m in matches.items() if m]
    config_ids = res.served.ids
    plans = set()
    for v in ([version] if version is not None else eng.versions()):
        ids = eng.from_r(fc, L, None if v == "any" else v, arch or "generic", family).ids
        plans.add(None if ids is None else tuple(ids))
    fix_ids = res.fix.ids if res.fix is not None else None
    if ok and len(ok) < len(matches) and res.wiring == "mismatch" and fix_ids is not None and len(plans) == 1 \
            and None not in plans and config_ids is not None and tuple(fix_ids) != tuple(config_ids):
        # every version is fixed by the same ids, and the config holds others: wrong whatever the version
        # (the versions that serve the trained layers do so only because they drop an id they cannot capture)
        res.reason += (f"; {ok} happen to serve the trained layers, but the same ids {list(fix_ids)} are "
                       f"right for every {engine} version")
        return
    if len(ok) == len(matches):
        res.wiring, res.reason = "match", f"every reading serves the trained r = {[r_label(r) for r in fc]}"
    elif ok:  # the slice comparison above was one reading's: it is not evidence against the wiring
        res.findings = [f for f in res.findings if f.kind not in READING_KINDS]
        res.slices = []
        res.wiring = "cannot-tell"
        res.reason = (f"the served layers depend on the {engine} version or numbering: {ok} serve the trained "
                      f"{[r_label(r) for r in fc]}, the others do not (pass --engine-version, or check one served "
                      "capture with --served)")
        res.fix = None


__all__ = ["preflight", "trainer_fc_r", "id_findings", "config_findings", "FINAL_POST"]
