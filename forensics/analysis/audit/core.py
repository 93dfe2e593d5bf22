"""Wiring audit: does the serving engine feed an EAGLE-3 draft the hidden states it was trained on?

Training side: the data's slots (what they *are*: fingerprinted r/role override what sidecars declare),
cut by the trainer's view (fc inputs in stored order, then the target). Serving side: what the engine
captures from the draft config (``forensics.models.conventions.compute.engine_capture``), or, config-free, what a
capture of the served states shows (``--served``). Both in r; slice k of the fc is compared directly.

Verdict: ``match`` / ``mismatch`` (wiring only; training-target and vocab-map problems are findings) /
``cannot-tell`` (with the reason). The fix comes from ``conventions.from_r``: the id list, the key, and
where to write it, for the engine and version given.

Example:
    >>> res = audit(data=["embed", "L3", "L31", "L59"], draft="kimi-draft/", engine="sglang",
    ...             engine_version="pre-25454", trainer="speculators-v1",
    ...             target_config="kimi/config.json")                     # doctest: +SKIP
    >>> res.wiring, res.fix.ids                                           # doctest: +SKIP
    ('mismatch', [-1, 2, 30])
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, cast

from forensics.analysis.audit.parts import AuditContext, AuditSlice, Fix, ServedSide, TrainedSide
from forensics.analysis.audit.served import compare_served
from forensics.analysis.audit.training import _repeated, first_capture, training_side
from forensics.display import render
from forensics.errors import ForensicsError
from forensics.findings import Finding, FindingKind, Severity, Verdict, exit_code
from forensics.io import limits
from forensics.jsonable import data_frame, json_safe
from forensics.layers import r_label
from forensics.models import conventions as cv
from forensics.models.conventions.rules import CONFIG_RULES
from forensics.models.draft_config import load_json_object, read_draft, sub_dict
from forensics.models.target import Target
from forensics.models.target import target_facts as model_facts  # the model's; this module's reads a config

WIRING_KINDS = {FindingKind.SLICES, FindingKind.IDS_IGNORED_KEY, FindingKind.IDS_MISSING,
                FindingKind.ENGINE_CANNOT_CAPTURE, FindingKind.FC_WIDTH, FindingKind.ORDER, FindingKind.AUX_DISABLED,
                FindingKind.SERVED_DATA, FindingKind.HIDDEN_SIZE, FindingKind.CONFIG_VS_SERVED, FindingKind.DUPLICATE,
                FindingKind.IDS_INCLUDE_LAST}


@dataclass
class AuditResult:
    """Verdict, the slot-by-slot table, findings with evidence, and the fix.

    ``wiring`` is the wiring word (``match`` / ``mismatch`` / ``cannot-tell``: the fc slices alone); ``verdict``
    is the one verdict (``pass`` / ``fail`` / ``cannot tell``) every view, the JSON and the exit code read.
    """

    wiring: str
    reason: str
    slices: list[AuditSlice]
    findings: list[Finding]
    fix: Fix | None
    trained: TrainedSide
    served: ServedSide
    context: AuditContext
    settle: str | None = None  # what would settle a CANNOT TELL, or give the fix that unknown slices withhold

    @property
    def outcome(self) -> Verdict:
        """The wiring verdict in the one vocabulary: match → PASS, mismatch → FAIL, cannot-tell → CANNOT TELL."""
        return {"match": Verdict.PASS, "mismatch": Verdict.FAIL}.get(self.wiring, Verdict.CANNOT_TELL)

    def exit_code(self) -> int:
        """``forensics.findings.exit_code`` of this audit: a fail finding is exit 1 even when the wiring matches."""
        return exit_code(self.findings, [self.outcome])

    @property
    def verdict(self) -> Verdict:
        """The one verdict every view states and the exit code reads: FAIL on a mismatch or a fail finding,
        CANNOT TELL when the wiring is undecided and nothing fails, else PASS (``outcome`` is the wiring alone)."""
        return {1: Verdict.FAIL, 3: Verdict.CANNOT_TELL}.get(self.exit_code(), Verdict.PASS)

    @property
    def decision(self) -> Verdict:
        """The same as :attr:`verdict` (kept for callers written before ``verdict`` took the common vocabulary)."""
        return self.verdict

    def to_dataframe(self) -> Any:
        """One row per fc input slice (``pandas.DataFrame``; pandas is the ``dataframe`` extra): the r training fed
        it and how that is known, the r serving feeds it, whether they agree (None: cannot tell), and the id the fix
        writes for it."""
        fix = self.fix.ids if self.fix is not None and self.fix.ids is not None else None
        return data_frame([{"slice": sl.slice, "trained_r": sl.trained_r, "trained": _r_label(sl.trained_r),
                            "trained_status": sl.trained_status, "served_r": sl.served_r,
                            "served": _r_label(sl.served_r), "ok": sl.ok,
                            "fix_id": fix[sl.slice] if fix is not None and sl.slice < len(fix) else None,
                            "wiring": self.wiring} for sl in self.slices])

    def to_dict(self) -> dict:
        """JSON-safe (NaN/inf → None, numpy → Python): the ``hsf audit --json`` document."""
        return json_safe({"verdict": self.verdict.value, "wiring": self.wiring,
                          "outcome": self.verdict.value, "reason": self.reason,
                          "slices": [s.to_dict() for s in self.slices],
                          "findings": [f.to_dict() for f in self.findings],
                          "fix": None if self.fix is None else self.fix.to_dict(),
                          "trained": self.trained.to_dict(), "served": self.served.to_dict(),
                          "context": self.context.to_dict(),
                          "settle": self.settle})

    def __repr__(self) -> str:
        return render(self, "line")

    def _repr_html_(self) -> str:
        return render(self, "html")

    def text(self) -> str:
        """The multi-line report ``hsf audit`` prints."""
        return render(self, "text")

    def explain(self) -> str:
        """The report with every finding's evidence (the numbers behind the verdict)."""
        return render(self, "explain")


def target_facts(target_config: Any) -> dict:
    """num_layers, hidden_size, arch family and vocab of the target, from its HF config.json (a folder,
    a file, or a dict); multimodal configs (Kimi-K2.5) keep the decoder under ``text_config``."""
    if target_config is None:
        return {}
    cfg, path = target_config, None
    if not isinstance(cfg, dict):
        path = os.fspath(cfg)
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        cfg = load_json_object(path, "target config")
    text = sub_dict(cfg, "text_config")
    get = lambda k: cfg.get(k) if cfg.get(k) is not None else text.get(k)  # noqa: E731
    archs = list(cfg.get("architectures") or []) + list(text.get("architectures") or [])
    out = {"num_layers": get("num_hidden_layers"), "hidden_size": get("hidden_size"),
           "vocab_size": get("vocab_size"),
           "arch": cv.arch_family(archs, f"{cfg.get('model_type', '')} {text.get('model_type', '')}"),
           "architectures": archs}
    if out["num_layers"] is not None:  # bounded before any per-layer set is built from it
        out["num_layers"] = limits.num_layers(out["num_layers"], path, "target config num_hidden_layers")
    if out["hidden_size"] is not None:
        out["hidden_size"] = limits.hidden_size(out["hidden_size"], path, "target config hidden_size")
    return {k: v for k, v in out.items() if v is not None}


# ---- serving side ----------------------------------------------------------------------------------------


def serving_side(info, engine: cv.System, version: str | None, L: int, H: int | None, arch: str,
                 trained_fc: list | None) -> tuple[ServedSide, list[Finding]]:
    """What ``engine`` captures for this draft, and every config/checkpoint problem on the way."""
    findings: list[Finding] = []
    ec = engine.capture(info.config, L, version, arch)
    findings += _id_list_findings(ec, engine, L, trained_fc)
    sglang = engine.name == "sglang"
    other = cv.TOP_KEY if sglang else cv.NESTED_KEY
    other_ids = info.ids_top if sglang else info.ids_nested
    other_ids = other_ids if isinstance(other_ids, list) else None
    ev = {"key_read": ec.key, "ids_read": ec.ids, "other_key": other, "other_ids": other_ids,
          "default_r": cv.default_r(L)}
    if ec.source == "default" and other_ids:
        lucky = trained_fc is not None and list(trained_fc) == ec.r  # the default happens to be right
        findings.append(Finding(FindingKind.IDS_IGNORED_KEY, Severity.WARN if lucky else Severity.FAIL, [],
                                f"{engine} reads only `{ec.key}`; the ids {list(other_ids)} sit in `{other}`, which "
                                f"{engine} ignores, so it silently falls back to r = {ec.r}", ev))
    elif ec.source == "default":
        findings.append(Finding(FindingKind.IDS_MISSING, Severity.WARN, [],
                                f"the draft config has no ids: {engine} silently uses its default r = {ec.r} "
                                "(vllm#50170)", ev))
    if info.ids_top is not None and info.ids_nested is not None and info.ids_top != info.ids_nested:
        findings.append(Finding(FindingKind.IDS_DISAGREE, Severity.WARN, [],
                                f"top-level ids {info.ids_top} and nested ids {info.ids_nested} disagree; {engine} "
                                f"reads `{ec.key}`, the other engine would read the other list", ev))
    if info.use_aux_hidden_state is False and sglang:
        findings.append(Finding(FindingKind.AUX_DISABLED, Severity.FAIL, [],
                                "eagle_config.use_aux_hidden_state is false: SGLang "
                                "does not feed aux states to the draft", {}))
    for p in ec.problems:
        findings.append(Finding(FindingKind.ENGINE_CANNOT_CAPTURE, Severity.FAIL, [],
                                p, {"ids": ec.ids, "captured_r": ec.r}))
    h = info.target_hidden_size or H
    if H and info.target_hidden_size and info.target_hidden_size != H:
        findings.append(Finding(FindingKind.HIDDEN_SIZE, Severity.FAIL, [], f"the draft expects target hidden size "
                                f"{info.target_hidden_size} but the target has {H}: it was built for another model",
                                {"draft_target_hidden_size": info.target_hidden_size, "target_hidden_size": H}))
    if info.fc_shape and len(info.fc_shape) == 2 and h:
        width = info.fc_shape[1]
        fev = {"fc_shape": list(info.fc_shape), "hidden": h, "served_states": len(ec.r)}
        if width != len(ec.r) * h:
            findings.append(Finding(FindingKind.FC_WIDTH, Severity.FAIL, [],
                                    f"fc.weight is {list(info.fc_shape)}: it takes {width} = {width / h:g}·{h} "
                                    f"inputs, but {engine} concatenates {len(ec.r)} states ({len(ec.r) * h})", fev))
        if trained_fc is not None and width != len(trained_fc) * h:
            findings.append(Finding(FindingKind.FC_VS_DATA, Severity.FAIL, [], f"fc.weight takes {width / h:g} states "
                                    "but the training "
                                    f"data fed {len(trained_fc)}", fev))
        if width == h:
            findings.append(Finding(FindingKind.FC_SKIP, Severity.WARN, [], "fc input width equals the hidden size: "
                                    "SGLang and EAGLE "
                                    "skip the fc silently (sglang#21272)", fev))
    if info.vocab and info.vocab.problems:
        findings.append(Finding(FindingKind.VOCAB_MAPS, Severity.FAIL, [],
                                "; ".join(info.vocab.problems), info.vocab.__dict__))
    if info.name_scheme == "mixed":
        findings.append(Finding(FindingKind.WEIGHT_NAMES, Severity.FAIL, [],
                                "weights mix `layers.0.*` and `midlayer.*` "
                                "names", {}))
    elif sglang and info.name_scheme == "layers.0" and arch != "deepseek":
        findings.append(Finding(FindingKind.WEIGHT_NAMES, Severity.WARN, [],
                                "speculators-style `layers.0.*` names: SGLang's "
                                "llama_eagle3.py (d737979c) skips unmatched names without error; only "
                                "kimi_k25_eagle3.py remaps them to `midlayer.*`. Rename or check the load log",
                                {"scheme": info.name_scheme}))
    served = ServedSide(r=ec.r, source=f"{engine} {ec.version} reading `{ec.key}`"
                        + (f" = {ec.ids}" if ec.ids is not None else " (absent: default)"),
                        engine=engine.name, version=ec.version, arch=arch, key=ec.key, ids=ec.ids,
                        id_source=ec.source, notes=ec.notes, basis="config")
    return served, findings


def _id_list_findings(ec, engine: cv.System, L: int, trained_fc: list | None) -> list[Finding]:
    """The id list as a whole, by the registry's ``CONFIG_RULES``: a repeated id (captured once), and the final
    layer L left among the aux ids where the trainer's fc never took it (``ec``: ``engine_capture``'s answer)."""
    out: list[Finding] = []
    ids = list(ec.ids or []) if ec.source == "config" else []
    try:  # the list's own rule, id by id (None: an id the engine never captures)
        per_id = engine.to_r(ids, L, ec.version, ec.arch, ec.family) if ids else []
    except ForensicsError:  # a numbering the sources do not settle: ids are named without their r
        per_id = [None] * len(ids)
    rep = _repeated(ids)
    rule = CONFIG_RULES["duplicate"]
    if rep and engine.name in rule.engines:
        r_of = dict(zip(ids, per_id, strict=True))
        named = ", ".join(f"id {i}" + (f" (r = {r_label(r_of[i])})" if r_of[i] is not None else "") for i in rep)
        out.append(Finding(FindingKind.DUPLICATE, Severity.FAIL, [],
                           f"`{ec.key}` = {ids} repeats {named}: {engine} captures each layer once, so it feeds "
                           f"{len(ec.r)} states {[r_label(r) for r in ec.r]} to an fc built for {len(ids)}. Fix: "
                           f"{rule.fix} ({rule.source})",
                           {"ids": ids, "repeated_ids": rep, "captured_r": list(ec.r), "rule": rule.rule,
                            "source": rule.source}))
    last = CONFIG_RULES["last_layer_aux"]
    # in r, by the engine's own numbering: vLLM's id L, TensorRT-LLM's id L - 1 (r = id + 1) both name r = L
    if ids and per_id and per_id[-1] == L and L in ec.r and engine.name in last.engines and trained_fc is not None \
            and L not in trained_fc and len(trained_fc) == len(ids) - 1:
        out.append(Finding(FindingKind.IDS_INCLUDE_LAST, Severity.FAIL, [],
                           f"`{ec.key}` = {ids} ends with id {ids[-1]}, the final layer (r = {L}): {engine} "
                           f"{ec.version} serves it (pre-norm) as fc input {len(ids) - 1}, but the fc was trained on "
                           f"{[r_label(r) for r in trained_fc]} (the trainer's target is r = {L}, not an fc input). "
                           f"Fix: {last.fix} ({last.source})",
                           {"ids": ids, "served_r": list(ec.r), "trained_r": list(trained_fc), "rule": last.rule,
                            "source": last.source}))
    return out


# ---- verdict ---------------------------------------------------------------------------------------------


@cv.resolve_names("engine", "trainer")
def audit(data: Any = None, draft: Any = None, engine: cv.SystemName | None = None,
          engine_version: str | None = None,
          trainer: cv.SystemName | None = None, target_config: Any = None, served: Any = None,
          num_layers: int | None = None, hidden_size: int | None = None, arch: str | None = None,
          use_fingerprint: bool = True, model: Any = None, stamp_check: bool = True) -> AuditResult:
    """Audit one draft's wiring. ``data``: capture file/folder, a ``Capture``, or a declared layout such as
    ``["embed", "L3", "L31", "L59"]``; ``draft``: checkpoint folder or config.json; ``served``: a capture
    of what the engine actually fed the draft (config-free check); ``engine``, ``trainer``: any name or alias, or
    a ``System``."""
    eng, tsys = cast("cv.System | None", engine), cast("cv.System | None", trainer)  # resolved on entry
    if eng is not None and not eng.is_engine:
        raise ForensicsError(f"engine must be one of {cv.ENGINES}, found {eng.name!r}")
    facts = target_facts(target_config)
    info = read_draft(draft) if draft is not None else None
    L = limits.num_layers(num_layers, what="num_layers") if num_layers is not None else facts.get("num_layers")
    H = limits.hidden_size(hidden_size, what="hidden_size") if hidden_size is not None else facts.get("hidden_size")
    arch_given = arch is not None or "arch" in facts
    arch = arch or facts.get("arch") or "generic"
    findings: list[Finding] = []
    if L is None and data is not None and not isinstance(data, (list, tuple)):
        L = first_capture(data).num_layers
    if L is None and model is not None:  # --model is the target: its layer count is evidence the user gave
        L = _model_layers(model)
    trained, tf, cap = training_side(data, tsys, info, L, use_fingerprint, model, served is not None,
                                     stamp_check)
    findings += tf
    deep = [r for r in [*(trained.fc_r or []), trained.target_r] if isinstance(r, int) and L and r > L]
    if deep:
        findings.append(Finding(FindingKind.LAYERS_BEYOND_L, Severity.FAIL, [],
                                f"the training data holds r = {deep} but "
                                "the target has "
                                f"L = {L} blocks: the data comes from a deeper model, or L is wrong (check "
                                "--num-layers / --target-config)", {"r": deep, "num_layers": L}))
    if H is None:
        H = (info.target_hidden_size if info else None) or (cap.hidden_size if cap else None)
    if cap is not None and H and cap.hidden_size != H:
        findings.append(Finding(FindingKind.HIDDEN_SIZE, Severity.FAIL, [], f"the training data has hidden size "
                                f"{cap.hidden_size} but "
                                f"the target has {H}: data and target are different models",
                                {"data_hidden_size": cap.hidden_size, "target_hidden_size": H}))
    context = AuditContext(engine=eng.name if eng else None,
                           engine_version=eng.version(engine_version) if eng else None,
                           trainer=trained.trainer or (tsys.given if tsys else None), num_layers=L, hidden_size=H,
                           arch=arch, draft=info.to_dict() if info else None, target=facts)
    served_side = ServedSide()
    if info is not None and eng is not None and L is not None:
        served_side, sf = serving_side(info, eng, engine_version, L, H, arch, trained.fc_r)
        findings += sf
        findings += _assumption_findings(info, eng, engine_version, L, arch, arch_given, served_side.r or [])
    if served is not None:
        data_served, cf = compare_served(data, trained, served, use_fingerprint, model, stamp_check)
        findings += cf
        predicted = served_side.r
        shown = data_served.r or []
        if predicted is not None and shown:  # a served capture with no fc input contradicts no prediction
            differ = _known_differences(predicted, shown)
            if differ:
                findings.append(Finding(FindingKind.CONFIG_VS_SERVED, Severity.FAIL, [],
                                        f"the config predicts served r = {[r_label(r) for r in predicted]} but the "
                                        f"served capture shows {[r_label(r) for r in shown]}",
                                        {"predicted": list(predicted), "served": list(shown), "slices": differ}))
        data_served.config_prediction = predicted
        served_side = data_served
    verdict, reason, slices = _verdict(trained, served_side, findings, info, eng, L, model is not None)
    fc_status = trained.fc_status or ["declared"] * len(trained.fc_r or [])
    known = all(st in KNOWN_TRAINED for st in fc_status)
    fix = _fix(trained.fc_r, served_side, info, eng, engine_version, L, arch) \
        if verdict == "mismatch" and known else None
    no_fc_served = served is not None and served_side.basis == "capture" and not served_side.r  # reason says why
    settle = None if fix is not None or verdict == "match" or known or no_fc_served else \
        _settle(model is not None, served is not None)
    return AuditResult(verdict, reason, slices, findings, fix, trained, served_side, context, settle)


def _fix(fc_r: list | None, served_side: ServedSide, info, eng: cv.System | None, engine_version: str | None,
         L: int | None, arch: str) -> Fix | None:
    """The ids that make ``eng`` serve the trained r ``fc_r`` (a mismatch whose trained slices are all known), with
    what else to change and what blocks it; None when there is no engine, L or fully named fc to plan for."""
    if not (eng and L and fc_r and all(isinstance(r, int) for r in fc_r)):
        return None
    fix = Fix.from_plan(eng.from_r(fc_r, L, engine_version, arch, family=info.family if info is not None else None))
    if info is not None and info.ids_top is not None and info.ids_nested is not None:
        other = cv.NESTED_KEY if fix.where == "top-level" else cv.TOP_KEY
        fix.also = f"make `{other}` agree (or remove it) so the other engine reads the same layers"
    rep = _repeated(fc_r)
    if rep and eng.name in CONFIG_RULES["duplicate"].engines:  # no id list serves one layer twice
        fix.ids, fix.snippet = None, None
        fix.caveat = (f"the fc was trained on {[r_label(r) for r in fc_r]}, "
                      f"which repeats {', '.join(r_label(r) for r in rep)}; {eng} captures each layer once "
                      f"({CONFIG_RULES['duplicate'].source}): retrain on distinct layers")
    if info is not None and fix.ids is not None:  # the right ids are there; only the caveat blocks
        fix.already_set = list((info.ids_nested if fix.where == "nested" else info.ids_top) or []) == list(fix.ids)
    if fix.already_set and fix.caveat is None and served_side.basis == "capture":
        fix.caveat = (f"the config is right, yet the served capture shows r = "
                      f"{[r_label(r) if r is not None else '?' for r in served_side.r or []]}: the server did "
                      f"not serve this config as {eng} {fix.version} reads it; check that it loaded this "
                      "config.json, and its version (--engine-version)")
    return fix


def _model_layers(model: Any) -> int | None:
    """The target's L from ``--model`` (its config, or the model the fingerprint loads anyway: loads are memoised);
    None for a reference that is not a model (a ladder capture)."""
    if not isinstance(model, (str, os.PathLike, Target)):
        return None
    try:
        n = model_facts(model).get("num_layers")
    except (ForensicsError, OSError):
        return None
    return limits.num_layers(n, what="--model num_hidden_layers") if n is not None else None


def _known_differences(predicted: list, shown: list) -> list[int]:
    """Slices where the config's prediction and the served capture name different layers, both known; a
    different count is a difference at every slice past the shorter list. An unknown served r ("?") contradicts
    nothing.

    >>> _known_differences([0, 3, 16], [0, None, None]), _known_differences([0, 3, 16], [0, 4, None])
    ([], [1])
    >>> _known_differences([2, 24], [2, 24, 24])
    [2]
    """
    n = max(len(predicted), len(shown))
    out = []
    for k in range(n):
        if k >= len(predicted) or k >= len(shown):
            out.append(k)
        elif predicted[k] is not None and shown[k] is not None and predicted[k] != shown[k]:
            out.append(k)
    return out


def _assumption_findings(info, engine: cv.System, version: str | None, L: int, arch: str, arch_given: bool,
                         served_r: list) -> list[Finding]:
    """When the engine version or the target architecture was not given and the answer depends on it, say
    what the other readings would serve (the registry's rules differ by version and model file)."""
    versions = [version] if version is not None else \
        sorted({engine.version(f"pre-{p}") for p in engine.timeline} | {engine.version(None)})
    archs = [arch] if arch_given else ["generic", "deepseek"]
    alts = {}
    for v in versions:
        for a in archs:
            r = engine.capture(info.config, L, v, a).r
            if r != served_r:
                alts[f"{engine} {v}, {a} path"] = r
    if not alts:
        return []
    assumed = ", ".join(x for x, given in (("version " + engine.version(version), version is None),
                                           (f"{arch} model path", not arch_given)) if given)
    return [Finding(FindingKind.ASSUMPTION, Severity.WARN, [], f"assumed {assumed}; the served layers depend on it: "
                    + "; ".join(f"{k} would serve r = {v}" for k, v in alts.items())
                    + " (pass --engine-version / --target-config)", {"alternatives": alts})]


KNOWN_TRAINED = ("exact", "measured", "declared", "layout", "config")  # trained r a verdict may rest on
SETTLE = ("run with --model HF_FOLDER (the target model: exact r per slot; --max-memory 1GB streams a target larger "
          "than memory block by block), or compare a served capture on the same prompts (--served)")


SETTLE_WITH_MODEL = ("the reference model (--model) named no layer for these slices: check that it is the target "
                     "the data was captured from, or compare a served capture on the same prompts (--served)")
SAME_PROMPTS = "compare a served capture on the same prompts (--served)"
SAME_PROMPTS_GIVEN = ("serve the training prompts themselves: the --served capture given shares no token ids with "
                      "the training data, and only same-token rows confirm a layer without --model")


def _settle(model_given: bool, served_given: bool = False) -> str:
    """What settles an unknown slice; never asks for what was given (--model, or a served capture: then the same
    prompts, which the given one is not)."""
    text = SETTLE_WITH_MODEL if model_given else SETTLE
    return text.replace(SAME_PROMPTS, SAME_PROMPTS_GIVEN) if served_given else text


def _shift_finding(fc: list, status: list, sr: list) -> Finding | None:
    """The whole list shifted by one slot: training fed the embedding first where serving feeds a layer (the seed's
    Kimi-K2.5 bug), or the reverse. ``corrected`` is the list serving should feed (unknown slices as None)."""
    if not fc or not sr or status[0] not in KNOWN_TRAINED:
        return None
    t0, s0 = fc[0], sr[0]
    if t0 == 0 and isinstance(s0, int) and s0 >= 1:
        story = ("training fed the fc the embedding output (r = 0) first, but serving feeds "
                 f"{r_label(s0)} there: every slice is served the layer of the slice after it. This is the Kimi-K2.5 "
                 "EAGLE-3 incident: data [embed, L3, L31, L59] trained the draft on [embed, L3, L31] while SGLang "
                 "served [L3, L31, L59]")
    elif s0 == 0 and isinstance(t0, int) and t0 >= 1:
        story = (f"serving feeds the embedding output (r = 0) first where training fed {r_label(t0)}: every slice "
                 "is served the layer of the slice before it (the reverse of the Kimi-K2.5 EAGLE-3 incident)")
    else:
        return None
    corrected = list(fc)
    shown = ", ".join("?" if r is None else r_label(r) + ("" if st in KNOWN_TRAINED else "?")
                      for r, st in zip(fc, status, strict=False))
    legend = " (? = declared, not proven by the data)" if "?" in shown else ""
    return Finding(FindingKind.SHIFTED, Severity.FAIL, [],
                   f"the served list {[r_label(r) for r in sr]} is shifted by one "
                   f"slice against training: {story}. Serve instead: [{shown}]{legend}",
                   {"trained": fc, "served": sr, "corrected": corrected, "trained_status": list(status)})


def _verdict(trained: TrainedSide, served: ServedSide, findings: list[Finding], info, engine, L,
             model_given: bool = False) -> tuple[str, str, list[AuditSlice]]:
    fc, sr = trained.fc_r, served.r
    if fc is None:
        return "cannot-tell", "nothing says which layers the draft was trained on (pass --data, or a draft " \
               "config plus --trainer)", []
    if sr is None:
        why = "no served capture and no draft config + engine" if L is not None or info is None else \
            "the target's layer count is unknown (pass --target-config or --num-layers)"
        return "cannot-tell", f"{why}: the serving side is unknown", []
    if not sr and served.basis == "capture":
        return "cannot-tell", ("the served capture holds no fc input (only the model's final state): it cannot "
                               "show what the engine fed the draft; capture the aux states the fc takes"), []
    status = list(trained.fc_status or ["declared"] * len(fc))
    n = max(len(fc), len(sr))
    oks = served.ok
    slices: list[AuditSlice] = []
    for k in range(n):
        t = fc[k] if k < len(fc) else None
        s = sr[k] if k < len(sr) else None
        st = status[k] if k < len(status) else "unknown"
        ok: bool | None
        if oks is not None and k < len(oks):
            ok = None if oks[k] is None else bool(oks[k])  # the served tensors themselves decide
        elif k >= len(fc) or k >= len(sr):
            ok = False  # one side has no slice k: the counts are known on both sides and differ
        elif t is None or s is None:
            ok = False if (t is None) != (s is None) and st in KNOWN_TRAINED else None
        elif st in KNOWN_TRAINED:
            ok = t == s
        else:
            ok = None  # the trained r is only claimed: no verdict rests on it
        slices.append(AuditSlice(slice=k, trained_r=t, served_r=s, ok=ok, trained_status=st))
    bad = [s for s in slices if s.ok is False]
    open_: list[int] = [int(k) for k, s in enumerate(slices) if s.ok is None]
    wiring_errors = [f for f in findings if f.severity is Severity.FAIL and f.kind in WIRING_KINDS]
    if bad:
        shifted = _shift_finding(fc, status, sr)
        pairs = [(s.trained_r, s.served_r) for s in slices]
        ints = [(t, v) for t, v in pairs if isinstance(t, int) and isinstance(v, int)]
        shift = {v - t for t, v in ints} if len(ints) == len(pairs) and not open_ else set()
        if shifted is None and len(shift) == 1 and shift != {0} and len(bad) == len(slices):
            d = shift.pop()
            cause = ("the engine ignored or missed the ids and used its default, whose numbering differs from "
                     "the trainer's (see ids_missing / ids_ignored_key)" if served.id_source == "default"
                     else "the trainer and the engine number layers differently (vllm#43671, sglang#25454)")
            findings.insert(0, Finding(FindingKind.OFF_BY_ONE if abs(d) == 1 else FindingKind.OFFSET, Severity.FAIL, [],
                                       f"every slice is served {abs(d)} block(s) {'deeper' if d > 0 else 'shallower'} "
                                       f"than trained: {cause}", {"shift": d}))
        findings.insert(0, Finding(FindingKind.SLICES, Severity.FAIL, [],
                                   f"{len(bad)} of {n} fc slices are served a different layer than trained: "
                                   + ", ".join(f"slice {s.slice} trained {r_label(s.trained_r)} served "
                                               f"{r_label(s.served_r)}" for s in bad),
                                   {"slices": [s.to_dict() for s in bad]}))
        if shifted is not None:
            findings.insert(0, shifted)
        pair = f"served {[r_label(r) for r in sr]} but trained on {[r_label(r) for r in fc]}"
        if oks is not None:
            pair = f"the served states differ from the training fc inputs in slice(s) {[s.slice for s in bad]}" \
                   f" ({pair})"
        return "mismatch", pair, slices
    if wiring_errors:
        return "mismatch", wiring_errors[0].message, slices
    if open_:
        claimed = [k for k in open_ if k < len(status) and status[k] == "claimed"]
        why = (f"the trained r of fc slice(s) {claimed} is only declared ({[r_label(fc[k]) for k in claimed]}), "
               "not proven by the data" if claimed else
               f"fc slice(s) {open_} cannot be named from the data or the served capture")
        return "cannot-tell", f"{why}: {_settle(model_given, served.basis == 'capture')}", slices
    return "match", f"every fc slice is served the layer it was trained on: {[r_label(r) for r in fc]}", slices


__all__ = ["audit", "AuditResult", "Finding", "target_facts"]


def _r_label(r: Any) -> str | None:
    return None if r is None else r_label(r)
