"""The hand-written EAGLE-3 rules of the six systems read line by line in their code (SGLang's and vLLM's capture
loops, the speculators generators, SpecForge, SafeAILab/EAGLE): id → r, the r each can capture, what an engine
captures from a draft config, and the ids that make it capture given r. Every other (system, family) pair goes
through the registry rules (``generic``). Every function takes a system's canonical name
(``forensics.models.conventions.system`` resolves a name once).
"""

from __future__ import annotations

from typing import Any

from forensics.errors import ForensicsError
from forensics.models.conventions.generic import reach, rule_capture, rule_from_r, rule_readings, rule_to_r
from forensics.models.conventions.names import (
    ENGINES,
    SGLANG_PLUS1_PR,
    VLLM_DEEPSEEK_FINAL_PR,
    VLLM_MIXIN_PR,
    EngineCapture,
    IdPlan,
    canonical_family,
    default_r,
    detect_family,
    has_pr,
    int_ids,
    parse_version,
    rule_for,
    sglang_plus_one,
    versions,
)
from forensics.models.conventions.rules import EAGLE_FAMILIES, NESTED_KEY, TOP_KEY

_LEGACY_SYSTEMS = ("speculators-legacy", "speculators", "vllm", "specforge", "sglang", "eagle")


def to_r(system: str, ids: list[int] | None, num_layers: int, version: str | None = None,
         arch: str | None = None, family: str | None = None, num_draft_layers: int | None = None
         ) -> list[Any]:
    """r of every id, in the order given; ``None`` for an id the system never captures.

    ``ids=None`` means no ids configured: the system's default (for engines the silent fallback).
    The order is the list's; engines concatenate in ascending layer order (see :func:`engine_capture`).
    ``family`` defaults to EAGLE-3; ``num_draft_layers`` sizes DFlash's default. A rule whose numbering the
    sources do not settle raises; :func:`readings` lists its possible readings instead.
    """
    family = canonical_family(family)
    L = int(num_layers)
    if family not in EAGLE_FAMILIES or system not in _LEGACY_SYSTEMS:
        return rule_to_r(rule_for(system, family, version), ids, L, arch, num_draft_layers)
    if ids is None:
        if system == "speculators-legacy":  # VllmHiddenStatesGenerator default [2, L//2, L-3, L-1]
            return [3, L // 2 + 1, L - 2, L]
        if system == "speculators":  # scripts/launch_vllm.py default + --include-last-layer
            return default_r(L) + [L]
        return list(default_r(L))
    ids = int_ids(ids)
    if system == "speculators-legacy":
        # custom_worker.py captures after block id: r = id + 1; ids outside [0, L-1] rejected.
        return [i + 1 if 0 <= i <= L - 1 else None for i in ids]
    if system in ("speculators", "vllm"):
        # vLLM: r = id for EAGLE-3 ids in every version (only DFlash ids get +1, eagle3_utils.py).
        return [i if 0 <= i <= L else None for i in ids]
    if system == "specforge":
        # resolve_eagle_capture_layers: exactly 3 ids >= 0, passed to SGLang's +1 (or an HF forward
        # hook on layers[id]): r = id + 1. Embedding capture impossible.
        if len(ids) != 3 or any(i < 0 for i in ids):
            raise ForensicsError(f"SpecForge requires exactly 3 ids >= 0, found {ids} "
                                 "(specforge/algorithms/model_providers.py resolve_eagle_capture_layers)")
        return [i + 1 if i + 1 <= L else None for i in ids]
    if system == "sglang":
        v = parse_version("sglang", version)
        plus = 1 if sglang_plus_one(ids, v, arch) else 0
        # SGLang's loop runs i = 0..L-1 and captures *before* block i (llama.py / deepseek_v2.py):
        # a layer index outside 0..L-1 never matches. Index 0 is the embedding (needs a patch, §3.4).
        return [i + plus if 0 <= i + plus <= L - 1 else None for i in ids]
    if system == "eagle":
        raise ForensicsError("SafeAILab/EAGLE has no id list: its capture is hard-coded to "
                             f"r = {default_r(L)} (eagle/model/modeling_llama_kv.py); pass ids=None")
    raise AssertionError(system)  # pragma: no cover


def readings(system: str, ids: list[int] | None, num_layers: int, family: str | None = None,
             arch: str | None = None, num_draft_layers: int | None = None) -> dict[str, list]:
    """What every known version (and, where the sources do not settle the numbering, every numbering) of a
    system makes of ``ids``: ``{"vllm post-46973": [2, 15, 27], ...}``. The audit lists these instead of
    picking one when the version is not given."""
    family = canonical_family(family)
    if not (family in EAGLE_FAMILIES and system in _LEGACY_SYSTEMS and system != "eagle"):
        return rule_readings(system, family, ids, int(num_layers), arch, num_draft_layers, versions(system))
    out: dict[str, list] = {}
    for v in versions(system):
        label = f"{system} {v}" if v != "any" else system
        if system == "sglang" and arch is None:
            for a in ("generic", "deepseek"):
                out[f"{label}, {a} path"] = to_r(system, ids, num_layers, v, a, family)
        else:
            out[label] = to_r(system, ids, num_layers, None if v == "any" else v, arch, family)
    return out


def reachable_r(engine: str, num_layers: int, version: str | None = None, arch: str | None = None
                ) -> tuple[set[int], dict[int, str]]:
    """The r an engine can capture without a code change, and why the others need one."""
    L = int(num_layers)
    why: dict[int, str] = {}
    if engine == "sglang":
        # Capture happens before block i for i in 0..L-1 (§3.1); r = L is never reached. At i = 0
        # residual is None in stock LlamaModel/DeepseekV2Model: hidden_states + residual raises a
        # TypeError, so the embedding needs a patch (§3.4).
        why[0] = ("SGLang computes `hidden_states + residual` before block 0 where residual is None "
                  "(TypeError in stock LlamaModel/DeepseekV2Model): capturing the embedding needs a "
                  "patch (`hidden_states + residual if residual is not None else hidden_states`)")
        why[L] = (f"SGLang captures before block i for i < L; the last block's output (r = {L}) is "
                  "never captured")
        return set(range(1, L)), why
    if engine in ("vllm", "speculators"):
        v = parse_version("vllm", version)
        mixin = has_pr(v, VLLM_MIXIN_PR)
        deepseek_final = has_pr(v, VLLM_DEEPSEEK_FINAL_PR)
        ok = set(range(1, L))
        if arch == "deepseek":
            if deepseek_final:  # vllm#46973 migrated DeepSeek-V2 family: id L reachable
                ok.add(L)
            else:
                why[L] = ("vLLM's DeepSeek-V2/Kimi loop before vllm#46973 captures before each block: "
                          f"id {L} matches nothing (vllm#46788, #48151)")
            why[0] = ("vLLM DeepSeek-V2/Kimi: embedding capture (id 0) is unverified even after "
                      "vllm#46973 (old loop: residual None at layer 0)")
        elif mixin:  # vllm#36063 EagleModelMixin: id 0 = embedding, id L = final pre-norm
            ok |= {0, L}
        else:
            why[0] = "vLLM before #36063: id 0 fails (residual is None before layer 0)"
            why[L] = f"vLLM before #36063: id {L} matches no layer (capture before each block)"
        return ok, why
    if engine in ENGINES:
        rule = rule_for(engine, "eagle3", parse_version(engine, version))
        lo, hi = reach(rule, L)
        for r in (0, L):
            if not lo <= r <= hi:
                why[r] = f"{engine}: r = {r} is outside what it captures ({rule.reach}; {rule.source})"
        return set(range(lo, hi + 1)), why
    raise ForensicsError(f"{engine} is not a serving engine; expected one of {ENGINES}")


def engine_capture(engine: str, config: dict, num_layers: int, version: str | None = None,
                   arch: str | None = None, family: str | None = None) -> EngineCapture:
    """What ``engine`` captures for a draft ``config`` (parsed config.json) on an L-layer target.

    SGLang reads only the nested key (``spec_aux_hidden_state.py`` ``resolve_spec_aux_hidden_state_config``
    @ e6123ca2); vLLM only the top-level key (``eagle3_utils.py`` ``get_eagle3_aux_layers_from_config``
    @ da844450, speculators configs via ``update_eagle3``). Both concatenate in layer-loop
    (ascending) order whatever the list order (§3.1, §4.1). Other engines and families follow their
    registry rule (``rules.RULES``); ``family`` defaults to :func:`detect_family`.
    """
    family = canonical_family(family or detect_family(config))
    if family not in EAGLE_FAMILIES or engine not in ("sglang", "vllm"):
        return rule_capture(engine, config, num_layers, version, arch or "generic", family)
    v = parse_version(engine, version)
    arch = arch or "generic"
    if engine == "sglang":
        key = NESTED_KEY
        raw = config.get("eagle_config")
        ec = raw if isinstance(raw, dict) else {}
        ids = ec.get("eagle_aux_hidden_state_layer_ids")
        # An empty nested list is *not* None: SGLang captures nothing (layers_to_capture = []).
        empty_means_default = False
    elif engine == "vllm":
        key = TOP_KEY
        ids = config.get(TOP_KEY)
        # vLLM: `if layer_ids and isinstance(...)` -> an empty list falls back to the default
        # (eagle3_utils.py; tokenspeed#526 review: an empty list must not fall back).
        empty_means_default = True
    else:
        raise ForensicsError(f"{engine} is not a serving engine; expected one of {ENGINES}")
    notes: list[str] = []
    problems: list[str] = []
    if ids is not None and not isinstance(ids, (list, tuple)):
        problems.append(f"{key} is {type(ids).__name__}, not a list; the engine falls back or fails")
        ids = None
    if ids is not None and len(ids) == 0 and empty_means_default:
        notes.append(f"{key} is an empty list; vLLM treats it as absent and uses its default")
        ids = None
    if ids is None:
        r = default_r(num_layers)  # SGLang: `if layer_ids is None` -> default, no +1 (§3.2)
        return EngineCapture(engine, v, arch, key, None, "default", sorted(set(r)), [], problems,
                             notes + [f"no ids under {key}: default r = {r}, no warning (vllm#50170 asks for one)"])
    try:
        ids = int_ids(ids)
    except ForensicsError as e:
        return EngineCapture(engine, v, arch, key, list(ids), "config", [], [], problems + [
            f"{e.message}: {engine} fails to load the draft"], notes)
    per_id = to_r(engine, ids, num_layers, v, arch)
    ok, why = reachable_r(engine, num_layers, v, arch)
    L = int(num_layers)
    # An id for r = L in a capture-before-each-block loop matches nothing (vllm#46788): dropped. An r = 0
    # request crashes (residual None) unless patched: kept, with the problem stated.
    per_id = [None if (r == L and r not in ok) else r for r in per_id]
    dropped = [i for i, r in zip(ids, per_id, strict=True) if r is None]
    captured = sorted({r for r in per_id if r is not None})
    for rr in captured:
        if rr not in ok and rr in why:
            problems.append(why[rr])
    if engine == "sglang":
        plus = sglang_plus_one(ids, v, arch)
        notes.append(f"SGLang {v} ({arch} path) reads ids {ids} as {'id + 1' if plus else 'raw layer index'}"
                     + (" (sglang#25454: +1 only when the first id is 1)" if has_pr(v, SGLANG_PLUS1_PR)
                        and arch == "deepseek" else ""))
    if dropped:
        problems.append(f"ids {dropped} match no layer in {engine} {v}: fewer states than ids are captured")
    if list(ids) != sorted(ids):
        notes.append(f"ids {ids} are not ascending; {engine} concatenates in layer order r = {captured}")
    return EngineCapture(engine, v, arch, key, ids, "config", captured, dropped, problems, notes)


def from_r(system: str, rs: list[int], num_layers: int, version: str | None = None,
           arch: str | None = None, family: str | None = None) -> IdPlan:
    """The ids to write so ``system`` captures r = ``rs`` (inverse of :func:`to_r`), or why it can't."""
    family = canonical_family(family)
    if family not in EAGLE_FAMILIES or system not in _LEGACY_SYSTEMS:
        return rule_from_r(system, rs, num_layers, version, arch, family)
    v = parse_version(system, version)
    arch = arch or "generic"
    L = int(num_layers)
    rs = [int(r) for r in rs]
    if system in ("sglang", "vllm") and rs != sorted(rs):
        return IdPlan(system, v, rs, None, None, None,
                      f"the draft was trained on r = {rs}, not in ascending order; {system} always "
                      "concatenates in ascending layer order, so no id list reproduces it: reorder the "
                      "training slots (and retrain) or patch the engine's concat order")
    if system == "sglang":
        return _sglang_plan(v, rs, L, arch)
    if system in ("vllm", "speculators"):
        ok, why = reachable_r("vllm", L, v, arch)
        bad = [r for r in rs if r not in ok]
        if any(r < 0 or r > L for r in rs):
            return IdPlan(system, v, rs, None, TOP_KEY, "top-level", f"r outside 0..{L}: {rs}")
        caveat = "; ".join(why[r] for r in bad if r in why) or None
        return IdPlan(system, v, rs, list(rs), TOP_KEY, "top-level", caveat)
    if system == "speculators-legacy":
        if any(r < 1 or r > L for r in rs):
            return IdPlan(system, v, rs, None, "data_config.json hidden_states.layer_ids", "data",
                          f"the legacy generator captures r = id + 1 for ids 0..{L - 1}: r in 1..{L} only")
        return IdPlan(system, v, rs, [r - 1 for r in rs], "data_config.json hidden_states.layer_ids", "data")
    if system == "specforge":
        if len(rs) != 3 or any(r < 1 or r > L for r in rs):
            return IdPlan(system, v, rs, None, NESTED_KEY, "nested",
                          f"SpecForge needs exactly 3 ids >= 0 (r = id + 1 in 1..{L}); r = {rs} impossible")
        return IdPlan(system, v, rs, [r - 1 for r in rs], NESTED_KEY, "nested")
    if system == "eagle":
        same = rs == default_r(L)
        return IdPlan(system, v, rs, None, None, None,
                      None if same else f"SafeAILab/EAGLE is hard-coded to r = {default_r(L)}; "
                      f"r = {rs} needs a code change")
    raise AssertionError(system)  # pragma: no cover


def _sglang_plan(v: str, rs: list[int], L: int, arch: str) -> IdPlan:
    """SGLang's EAGLE-3 ids for r = ``rs`` (ascending) at version ``v``: + 1 on every id, except on the
    post-#25454 DeepSeek/Kimi path, where only a first id of 1 gets it."""
    caveats: list[str] = []
    ok, why = reachable_r("sglang", L, v, arch)
    hard = [r for r in rs if r not in ok and r != 0]
    if hard:
        return IdPlan("sglang", v, rs, None, NESTED_KEY, "nested", "; ".join(why.get(r, f"r={r} out of range")
                                                                      for r in hard))
    if 0 in rs:
        caveats.append(why[0])
    if not (has_pr(v, SGLANG_PLUS1_PR) and arch == "deepseek"):
        ids = [r - 1 for r in rs]  # unconditional +1 (pre-#25454, or a non-DeepSeek model file)
    else:
        ids = list(rs)  # post-#25454 DeepSeek/Kimi path: raw ids unless the first is 1
        if ids and ids[0] == 1:
            if len(ids) == 1:
                return IdPlan("sglang", v, rs, None, NESTED_KEY, "nested",
                              "r = [1] alone cannot be written after sglang#25454 (first id 1 gets +1)")
            ids = ids[1:] + ids[:1]  # first id must not be 1; capture order is still ascending
            caveats.append("ids reordered so the first id is not 1 (sglang#25454 adds +1 only when "
                           "the first id is 1); SGLang still concatenates in ascending layer order")
    return IdPlan("sglang", v, rs, ids, NESTED_KEY, "nested", "; ".join(caveats) or None)
