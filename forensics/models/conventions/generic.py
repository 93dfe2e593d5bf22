"""The registry's generic path: every (system, family) pair whose rule is data in ``rules`` rather than the
hand-written EAGLE-3 code of SGLang and vLLM in ``compute``: id → r, the default when no ids are given, what an
engine captures from a draft config, and the ids that make it capture given r.
"""

from __future__ import annotations

import re
from typing import Any

from forensics.errors import ForensicsError
from forensics.layers import FINAL_POST
from forensics.models.conventions import rules
from forensics.models.conventions.names import (
    EngineCapture,
    IdPlan,
    default_r,
    dflash_default_ids,
    get_key,
    int_ids,
    parse_version,
    rule_for,
    versions,
)
from forensics.models.conventions.rules import FIRST_ID, IGNORED


def rule_default_r(rule: rules.Rule, num_layers: int, num_draft_layers: int | None = None) -> list[int] | None:
    """r a rule's system captures when the config has no ids (None: no default, or none the sources state)."""
    L = int(num_layers)
    if rule.default == rules.DEFAULT_DFLASH:
        n = num_draft_layers or 1
        return [i + 1 for i in dflash_default_ids(L, n)]
    if rule.default == rules.DEFAULT_NONE:
        return [L] if not rule.keys and rule.family == "mtp" else None
    if rule.default == "canonical + L":
        return default_r(L) + [L]
    if rule.default == "[2, L//2, L-3, L-1] (+1)":  # speculators legacy generator
        return [3, L // 2 + 1, L - 2, L]
    if rule.default in (rules.DEFAULT_CANONICAL, "[1, L//2-1, L-4] (+1)"):  # output-of ids + 1 = canonical r
        return list(default_r(L))
    return None


def rule_to_r(rule: rules.Rule, ids, L: int, arch: str | None, num_draft_layers: int | None
               ) -> list[Any]:
    if rule.offset == IGNORED or ids is None or not rule.keys:
        default = rule_default_r(rule, L, num_draft_layers)
        if default is None:
            raise ForensicsError(f"{rule.system} has no stated default for {rule.family} ids ({rule.source}); "
                                 "pass the ids")
        return default
    if rule.offset is None:
        raise ForensicsError(f"{rule.system} {rule.family} ids: the numbering is not settled by the sources "
                             f"({rule.source}); use readings() for the possible r")
    ids = int_ids(ids)
    if rule.system == "nemo-automodel" and rule.family == "dspark":
        # HF offset-1 (Automodel#3083): id -1 is HF hidden_states[0] (embedding), id L-1 HF's last entry,
        # which HF takes after the final norm.
        return [0 if i == -1 else FINAL_POST if i == L - 1 else i + 1 if 0 <= i < L - 1 else None for i in ids]
    if rule.system == "trtllm":
        # SaveHiddenStatesDecodingConfig: "Use -1 to indicate the final post-norm hidden state"
        lo, hi = reach(rule, L)
        return [FINAL_POST if i == -1 else i + 1 if lo <= i + 1 <= hi else None for i in ids]
    plus = (1 if ids and ids[0] == 1 else 0) if rule.offset == FIRST_ID else int(rule.offset)
    lo, hi = reach(rule, L)
    return [i + plus if lo <= i + plus <= hi else None for i in ids]


def reach(rule: rules.Rule, L: int) -> tuple[int, int]:
    """The r range a rule's ``reach`` text states (``"1..L-1"`` → (1, L-1)); unknown → (0, L)."""
    m = re.match(r"\s*(\d+)\.\.L(-1)?", rule.reach)
    if not m:
        return 0, L
    return int(m.group(1)), L - (1 if m.group(2) else 0)


def rule_readings(system: str, family: str, ids, L: int, arch: str | None, num_draft_layers: int | None,
                  versions_: list[str]) -> dict[str, list]:
    """What each version's registry rule makes of ``ids``; a rule that does not settle its numbering gives both
    readings (r = id and r = id + 1)."""
    out: dict[str, list] = {}
    for v in versions_:
        for rule in rules.rules_for(system, family, None if v == "any" else v)[:1]:
            label = f"{system} {v}" if v != "any" else system
            if rule.offset is None:
                for plus in (0, 1):
                    trial = rules.Rule(**{**rule.__dict__, "offset": plus})
                    out[f"{label} if r = id{' + 1' if plus else ''}"] = rule_to_r(trial, ids, L, arch,
                                                                                  num_draft_layers)
            else:
                out[label] = rule_to_r(rule, ids, L, arch, num_draft_layers)
    return out


def read_ids(config: dict, keys: tuple[str, ...]) -> tuple[str | None, object]:
    """(key, value) of the first key present in the config, else (None, None)."""
    for k in keys:
        v = get_key(config, k)
        if v is not None:
            return k, v
    return None, None


def rule_capture(engine: str, config: dict, num_layers: int, version: str | None, arch: str,
                  family: str) -> EngineCapture:
    """engine_capture for every (engine, family) the registry holds beyond EAGLE-3 in SGLang/vLLM."""
    v = parse_version(engine, version)
    rule = rule_for(engine, family, v)
    L = int(num_layers)
    n_draft = config.get("num_hidden_layers") if isinstance(config.get("num_hidden_layers"), int) else None
    key_text = " or ".join(rule.keys) or "(none)"
    notes: list[str] = []
    problems: list[str] = []
    if not rule.keys:
        r = rule_default_r(rule, L, n_draft) or []
        why = ("hard-coded capture: the draft config's ids are ignored" if rule.offset == IGNORED
               else f"{family} reads no id list")
        return EngineCapture(engine, v, arch, key_text, None, "default", sorted(set(r)), [], [],
                             [f"{engine} {v}: {why}; r = {r} ({rule.source})"], family)
    key, ids = read_ids(config, rule.keys)
    if ids is not None and not isinstance(ids, (list, tuple)):
        problems.append(f"{key} is {type(ids).__name__}, not a list; the engine falls back or fails")
        ids = None
    if ids is None:
        dr = rule_default_r(rule, L, n_draft)
        if dr is None:
            return EngineCapture(engine, v, arch, key_text, None, "default", [], [], problems + [
                f"no ids under {key_text} and {engine} has no {family} default: the draft cannot be served"],
                notes, family)
        return EngineCapture(engine, v, arch, key_text, None, "default", sorted(set(dr)), [], problems,
                             [f"no ids under {key_text}: default r = {dr}, no warning"], family)
    try:
        ids = int_ids(ids)
    except ForensicsError as e:
        return EngineCapture(engine, v, arch, key or key_text, list(ids), "config", [], [],
                             problems + [f"{e.message}: {engine} fails to load the draft"], notes, family)
    alts: dict[str, list] = {}
    if rule.offset is None:  # the sources do not settle the numbering: every reading, none picked
        alts = rule_readings(engine, family, ids, L, arch, n_draft, versions(engine))
        per_id = next(iter(alts.values()))
        notes.append(f"{engine} {family} numbering is not settled by the sources ({rule.source}): "
                     + "; ".join(f"{k} → r = {x}" for k, x in alts.items()))
    else:
        per_id = rule_to_r(rule, ids, L, arch, n_draft)
    dropped = [i for i, r in zip(ids, per_id, strict=True) if r is None]
    captured = sorted({r for r in per_id if isinstance(r, int)}) + [r for r in per_id if isinstance(r, str)]
    if dropped:
        problems.append(f"ids {dropped} match no layer in {engine} {v} ({rule.meaning()}, reachable r "
                        f"{rule.reach}): fewer states than ids are captured")
    if rule.offset == FIRST_ID:
        notes.append(f"{engine} {v} reads ids {ids} as {'id + 1' if ids and ids[0] == 1 else 'raw layer index'} "
                     f"(first-id rule, {rule.source})")
    if list(ids) != sorted(ids):
        notes.append(f"ids {ids} are not ascending; {engine} concatenates in layer order r = {captured}")
    return EngineCapture(engine, v, arch, key or key_text, ids, "config", captured, dropped, problems, notes,
                         family, alts)


def rule_from_r(system: str, rs: list, num_layers: int, version: str | None, arch: str | None,
                 family: str) -> IdPlan:
    """from_r for every (system, family) the registry holds beyond EAGLE-3 in the original six systems."""
    v = parse_version(system, version)
    rule = rule_for(system, family, v)
    L = int(num_layers)
    key = rule.keys[0] if rule.keys else None
    where = None if key is None else "nested" if "." in key else "top-level"
    plan = lambda ids, caveat=None: IdPlan(system, v, list(rs), ids, key, where, caveat, family)  # noqa: E731
    if any(not isinstance(r, int) for r in rs):
        return plan(None, f"r = {rs} holds a post-norm state; {system} captures pre-norm states only")
    if rule.offset == IGNORED or not rule.keys:
        default = rule_default_r(rule, L)
        if default is not None and sorted(rs) == sorted(default):
            return plan(None, f"{system} {v} captures r = {default} whatever the config says: already right")
        return plan(None, f"{system} {v} ignores the draft's ids and captures r = {default} ({rule.source}); "
                    f"r = {rs} needs a newer {system} or a code change")
    if rs != sorted(rs):
        return plan(None, f"the draft was trained on r = {rs}, not in ascending order; {system} concatenates in "
                    "ascending layer order, so no id list reproduces it")
    lo, hi = reach(rule, L)
    if any(not lo <= r <= hi for r in rs):
        return plan(None, f"{system} {v} captures r in {rule.reach} only ({rule.source}); r = {rs} is outside")
    if rule.offset is None:
        return plan(None, f"the {system} {family} numbering is not settled by the sources ({rule.source}): write "
                    f"{[r - 1 for r in rs]} if it reads ids as block outputs (r = id + 1), {list(rs)} if as block "
                    "inputs (r = id); check one served capture with `hsf audit --served`")
    if rule.offset == FIRST_ID:
        ids = list(rs)
        caveat = None
        if ids and ids[0] == 1:
            if len(ids) == 1:
                return plan(None, f"r = [1] alone cannot be written under the first-id rule ({rule.source})")
            ids = ids[1:] + ids[:1]
            caveat = f"ids reordered so the first id is not 1 (first-id rule, {rule.source})"
        return plan(ids, caveat)
    return plan([r - int(rule.offset) for r in rs])
