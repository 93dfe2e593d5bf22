"""Conventions registry: how each trainer and engine numbers target layers, for every drafter family, in r.

One coordinate (see ``forensics.layers``): ``r = 0`` embedding output, ``r = k`` output of block k
(= HF ``hidden_states[k]``), ``r = L`` last block before the final norm. The rules themselves, each with its
public source, are data in ``forensics.models.convention_rules`` (``RULES``); this module computes with them.

Example:
    >>> to_r("sglang", [2, 30, 58], 61, version="pre-25454")
    [3, 31, 59]
    >>> from_r("sglang", [0, 3, 31], 61, version="pre-25454").ids
    [-1, 2, 30]
    >>> to_r("vllm", None, 80)            # no ids in the draft config: the engine's default
    [2, 40, 77]
    >>> to_r("vllm", [7, 14, 21], 28, family="dflash")   # DFlash ids name block outputs (vllm#40727)
    [8, 15, 22]

Systems (``SYSTEMS``; aliases in ``ALIASES``): engines ``vllm``, ``sglang``, ``llama.cpp``, ``tokenspeed``,
``trtllm`` (TensorRT-LLM serving a Model-Optimizer export), ``atlas``; trainers ``speculators`` (online,
offline and hybrid modes share one numbering), ``speculators-legacy`` (alias ``speculators-v1``),
``specforge``, ``modelopt``, ``nemo-automodel``, ``eagle`` (SafeAILab). Families: ``FAMILIES`` (EAGLE-3,
EAGLE-3.1, P-EAGLE, DFlash, DSpark, MTP).

Versions (``version=``), a point on the system's PR timeline; ``None`` means the newest state known:
- sglang: ``pre-25454`` (aliases ``sglang<25454``, ``<25454``, ``before-25454``, ``old``) or ``post-25454``.
- vllm: ``pre-36063`` (old capture loop), ``post-36063`` (``EagleModelMixin`` in Llama-family models),
  ``post-40727`` (DFlash ids + 1), ``post-46973`` (= ``latest``: DeepSeek/Kimi can capture id L too).
- llama.cpp: ``pre-25794`` (hard-coded layers), ``post-25794`` (top-level ids), ``post-27040`` (a build with
  the nested-key fallback of llama.cpp#27040, closed upstream when read).
- tokenspeed: ``pre-526`` (hard-coded layers) or ``post-526`` (ids from the draft config).
- atlas: ``pre-394`` (DFlash ids used raw) or ``post-394`` (ids + 1).
Semantic versions (``0.5.3``) are refused with this list: which release first carried each PR is not
pinned in the sources, and a guess would turn into a wrong verdict. :func:`readings` lists what every
version would capture when the version is not given.

Architecture (``arch=``): ``"deepseek"`` for the DeepSeek-V2/V3/Kimi code path, anything else
(or None) for the generic Llama-style path; :func:`arch_family` maps HF ``architectures`` /
``model_type`` to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from forensics.errors import ForensicsError
from forensics.layers import FINAL_POST
from forensics.models import convention_rules as rules
from forensics.models.convention_rules import (
    DFLASH_KEY,
    DSPARK_KEY,
    EAGLE_FAMILIES,
    FAMILIES,
    FIRST_ID,
    IGNORED,
    NESTED_KEY,
    TOP_KEY,
)

ENGINES = ("sglang", "vllm", "llama.cpp", "tokenspeed", "trtllm", "atlas")
TRAINERS = ("speculators-v1", "speculators", "specforge")  # trainers whose stored data layout is known
ID_TRAINERS = ("speculators", "speculators-legacy", "specforge", "modelopt", "nemo-automodel", "eagle")
SYSTEMS = ("speculators-legacy", "speculators", "sglang", "vllm", "specforge", "eagle", "llama.cpp",
           "tokenspeed", "trtllm", "atlas", "modelopt", "nemo-automodel")
ALIASES = {
    "speculators-v1": "speculators-legacy", "speculators-legacy": "speculators-legacy",
    "legacy": "speculators-legacy", "speculators-current": "speculators", "speculators-v2": "speculators",
    "speculators": "speculators", "speculators-online": "speculators", "speculators-offline": "speculators",
    "speculators-hybrid": "speculators", "sglang": "sglang", "vllm": "vllm", "specforge": "specforge",
    "eagle": "eagle", "eagle3": "eagle", "safeailab": "eagle", "llama.cpp": "llama.cpp", "llamacpp": "llama.cpp",
    "llama-cpp": "llama.cpp", "tokenspeed": "tokenspeed", "trtllm": "trtllm", "tensorrt-llm": "trtllm",
    "tensorrt_llm": "trtllm", "modelopt": "modelopt", "model-optimizer": "modelopt", "nemo-automodel": "nemo-automodel",
    "automodel": "nemo-automodel", "nemo": "nemo-automodel", "atlas": "atlas",
}
__all__ = ["FAMILIES", "ENGINES", "TRAINERS", "SYSTEMS", "NESTED_KEY", "TOP_KEY", "DFLASH_KEY", "DSPARK_KEY",
           "to_r", "from_r", "engine_capture", "reachable_r", "readings", "detect_family", "trainer_view"]

SGLANG_PLUS1_PR = 25454  # sgl-project/sglang#25454: +1 only when ids[0] == 1 (DeepSeek/Kimi path)
VLLM_MIXIN_PR = 36063  # vllm-project/vllm#36063: EagleModelMixin, ids 0 and L reachable
VLLM_DFLASH_PR = 40727  # vllm-project/vllm#40727: DFlash target_layer_ids + 1
VLLM_DEEPSEEK_FINAL_PR = 46973  # vllm-project/vllm#46973: DeepSeek-V2 family can capture id L
LLAMACPP_IDS_PR = 25794  # ggml-org/llama.cpp#25794: eagle_aux_hidden_state_layer_ids read (top level)
LLAMACPP_NESTED_PR = 27040  # ggml-org/llama.cpp#27040: nested fallback (closed upstream when read)
TOKENSPEED_IDS_PR = 526  # lightseekorg/tokenspeed#526: capture layers from the draft config
ATLAS_OFFSET_PR = 394  # Avarok-Cybersecurity/atlas#394: DFlash -1 capture offset removed
_TIMELINES: dict[str, tuple[int, ...]] = {
    "sglang": (SGLANG_PLUS1_PR,), "vllm": (VLLM_MIXIN_PR, VLLM_DFLASH_PR, VLLM_DEEPSEEK_FINAL_PR),
    "llama.cpp": (LLAMACPP_IDS_PR, LLAMACPP_NESTED_PR), "tokenspeed": (TOKENSPEED_IDS_PR,),
    "atlas": (ATLAS_OFFSET_PR,), "trtllm": ()}
# the newest *merged* state when no version is given (llama.cpp#27040 was closed unmerged)
_LATEST = {"llama.cpp": f"post-{LLAMACPP_IDS_PR}"}
_OLDEST = ("old", "oldest", "legacy")
_NEWEST = ("latest", "main", "new", "newest", "current", "nightly", "any")
DEEPSEEK_ARCH_PATTERNS = ("deepseek", "kimi")
_FAMILY_ALIASES = {"eagle3": "eagle3", "eagle-3": "eagle3", "eagle3.1": "eagle3.1", "eagle-3.1": "eagle3.1",
                   "eagle31": "eagle3.1", "p-eagle": "p-eagle", "peagle": "p-eagle", "dflash": "dflash",
                   "dspark": "dspark", "mtp": "mtp", "nextn": "mtp"}


def canonical_system(system: str) -> str:
    """The registry name of a system (``speculators-v1`` → ``speculators-legacy``)."""
    s = str(system or "").strip().lower()
    if s not in ALIASES:
        raise ForensicsError(f"unknown system {system!r}; expected one of {sorted(set(ALIASES))}")
    return ALIASES[s]


def parse_version(system: str, version: str | None) -> str:
    """Canonical version string: ``pre-<PR>``/``post-<PR>`` on the system's timeline (see module doc)."""
    system = canonical_system(system)
    prs = _TIMELINES.get(system)
    if not prs:
        return "any"  # trainers, EAGLE, TensorRT-LLM: no version-dependent rule in the sources
    if version is None or str(version).strip().lower() in _NEWEST:
        return _LATEST.get(system, f"post-{prs[-1]}")
    v = str(version).strip().lower().replace(" ", "")
    if v in _OLDEST:
        return f"pre-{prs[0]}"
    v = re.sub(rf"^{re.escape(system)}[-_@]?", "", v)
    m = re.fullmatch(r"(pre|before|<|post|after|>=|>)-?#?(\d+)", v)
    if not m or int(m.group(2)) not in prs:
        accepted = ", ".join([f"pre-{p}, post-{p}" for p in prs] + ["latest", "old"])
        raise ForensicsError(
            f"{system} version {version!r} not understood; accepted: {accepted} (also written "
            f"{system}<PR / >=PR). Semantic versions are not mapped: the release that first carried each "
            "PR is not pinned in the sources.")
    pr = int(m.group(2))
    if m.group(1) in ("pre", "before", "<"):
        i = prs.index(pr)
        return f"pre-{prs[0]}" if i == 0 else f"post-{prs[i - 1]}"
    return f"post-{pr}"


def _has(version: str, pr: int) -> bool:
    """Whether the canonical version includes PR ``pr`` (``any``: the newest state)."""
    if version == "any":
        return True
    kind, num = version.split("-")
    return int(num) > pr or (int(num) == pr and kind == "post")


def versions(system: str) -> list[str]:
    """Every canonical version of a system's timeline, oldest first (``["any"]`` without a timeline)."""
    system = canonical_system(system)
    prs = _TIMELINES.get(system) or ()
    return [f"pre-{prs[0]}"] + [f"post-{p}" for p in prs] if prs else ["any"]


def canonical_family(family: str | None) -> str:
    """The registry name of a drafter family (``None`` → ``eagle3``)."""
    if family is None:
        return "eagle3"
    f = str(family).strip().lower()
    if f not in _FAMILY_ALIASES:
        raise ForensicsError(f"unknown drafter family {family!r}; expected one of {list(FAMILIES)}")
    return _FAMILY_ALIASES[f]


def get_key(config: dict, key: str):
    """The value at a dotted key of a parsed config.json (``eagle_config.x``), or None."""
    node = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def detect_family(config: dict) -> str:
    """The drafter family a draft config.json belongs to, from its own keys and names.

    DFlash: a ``dflash_config`` (z-lab / vLLM) or a DFlash architecture; DSpark: ``dspark_target_layer_ids``
    (vLLM, DeepSeek-V4); P-EAGLE: ``parallel_drafting`` or a PEagle class (vllm#41826); EAGLE-3.1: the fc
    norms of the 3.1 defaults (speculators#670, #692); MTP: an MTP/NextN architecture; else EAGLE-3.
    """
    names = " ".join(str(x) for x in [config.get("speculators_model_type", ""), config.get("model_type", ""),
                                      *(config.get("architectures") or [])]).lower()
    if isinstance(config.get("dflash_config"), dict) or "dflash" in names:
        return "dflash"
    if DSPARK_KEY in config or "dspark" in names:
        return "dspark"
    if config.get("parallel_drafting") or "peagle" in names or "p-eagle" in names:
        return "p-eagle"
    if "mtp" in names or "nextn" in names:
        return "mtp"
    if config.get("fc_norm") or config.get("norm_before_fc") or "eagle3.1" in names or "eagle31" in names:
        return "eagle3.1"
    return "eagle3"


def rule_for(system: str, family: str | None = None, version: str | None = None) -> rules.Rule:
    """The registry rule a system applies to a family's ids at a canonical version."""
    system, family = canonical_system(system), canonical_family(family)
    v = parse_version(system, version)
    found = rules.rules_for(system, family, v)
    if not found:
        known = sorted({r.family for r in rules.rules_for(system)})
        raise ForensicsError(f"no known rule for {family} ids in {system} (known families: {known})")
    return found[0]


def dflash_default_ids(num_layers: int, num_draft_layers: int) -> list[int]:
    """DFlash's default target ids (z-lab ``build_target_layer_ids``, also SGLang ``dflash_utils.py``): one id
    per draft layer, spread evenly over blocks 1..L-3 (the block's output is used: r = id + 1)."""
    L, n = int(num_layers), max(1, int(num_draft_layers))
    if n == 1:
        return [L // 2]
    span = (L - 3) - 1
    return [int(round(1 + i * span / (n - 1))) for i in range(n)]


def arch_family(architectures=None, model_type: str | None = None) -> str:
    """``"deepseek"`` for DeepSeek-V2/V3 and Kimi targets (SGLang ``kimi_k25.py`` imports
    ``DeepseekV3ForCausalLM``; vLLM Kimi wraps ``DeepseekV2ForCausalLM``), else ``"generic"``."""
    names = [model_type or ""] + list(architectures or [])
    return "deepseek" if any(p in str(n).lower() for n in names for p in DEEPSEEK_ARCH_PATTERNS) else "generic"


def default_r(num_layers: int) -> list[int]:
    """The canonical default r = {2, L//2, L−3}: vLLM ``get_eagle3_aux_hidden_state_layers``, SGLang with
    no ids (``set_eagle3_layers_to_capture(None)``), SpecForge ``[1, L//2−1, L−4]`` + SGLang's +1, and
    SafeAILab/EAGLE's hard-coded capture (``modeling_llama_kv.py``)."""
    return [2, num_layers // 2, num_layers - 3]


def sglang_plus_one(ids: list[int], version: str, arch: str | None) -> bool:
    """Whether SGLang adds 1 to config ids. Before sglang#25454 always (``set_eagle3_layers_to_capture``:
    "for the ith layer, it takes the output of the (i-1)th layer"); after it, on the DeepSeek/Kimi path,
    only when ``ids[0] == 1`` ("Disambiguate by the first id"); other model files keep the +1."""
    if not _has(version, SGLANG_PLUS1_PR) or arch != "deepseek":
        return True
    return bool(ids) and ids[0] == 1


def int_ids(ids) -> list[int]:
    """The ids as ints, or a ForensicsError naming the bad values (bool and float are not layer ids)."""
    bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, int)]
    if bad:
        raise ForensicsError(f"layer ids must be integers, found {bad!r} in {list(ids)!r}")
    return [int(i) for i in ids]


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
    system = canonical_system(system)
    family = canonical_family(family)
    L = int(num_layers)
    if family not in EAGLE_FAMILIES or system not in _LEGACY_SYSTEMS:
        return _rule_to_r(rule_for(system, family, version), ids, L, arch, num_draft_layers)
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


def _rule_to_r(rule: rules.Rule, ids, L: int, arch: str | None, num_draft_layers: int | None
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
    plus = (1 if ids and ids[0] == 1 else 0) if rule.offset == FIRST_ID else int(rule.offset)
    lo, hi = _reach(rule, L)
    return [i + plus if lo <= i + plus <= hi else None for i in ids]


def _reach(rule: rules.Rule, L: int) -> tuple[int, int]:
    """The r range a rule's ``reach`` text states (``"1..L-1"`` → (1, L-1)); unknown → (0, L)."""
    m = re.match(r"\s*(\d+)\.\.L(-1)?", rule.reach)
    if not m:
        return 0, L
    return int(m.group(1)), L - (1 if m.group(2) else 0)


def readings(system: str, ids: list[int] | None, num_layers: int, family: str | None = None,
             arch: str | None = None, num_draft_layers: int | None = None) -> dict[str, list]:
    """What every known version (and, where the sources do not settle the numbering, every numbering) of a
    system makes of ``ids``: ``{"vllm post-46973": [2, 15, 27], ...}``. The audit lists these instead of
    picking one when the version is not given."""
    system, family = canonical_system(system), canonical_family(family)
    out: dict[str, list] = {}
    for v in versions(system):
        for rule in rules.rules_for(system, family, None if v == "any" else v)[:1]:
            label = f"{system} {v}" if v != "any" else system
            if rule.offset is None:
                for plus in (0, 1):
                    trial = rules.Rule(**{**rule.__dict__, "offset": plus})
                    out[f"{label} if r = id{' + 1' if plus else ''}"] = _rule_to_r(trial, ids, int(num_layers), arch,
                                                                                  num_draft_layers)
            elif family in EAGLE_FAMILIES and system in _LEGACY_SYSTEMS and system != "eagle":
                if system == "sglang" and arch is None:
                    for a in ("generic", "deepseek"):
                        out[f"{label}, {a} path"] = to_r(system, ids, num_layers, v, a, family)
                else:
                    out[label] = to_r(system, ids, num_layers, None if v == "any" else v, arch, family)
            else:
                out[label] = _rule_to_r(rule, ids, int(num_layers), arch, num_draft_layers)
    return out


@dataclass
class EngineCapture:
    """What an engine captures from a draft config: the key it reads, the ids, r in concat order."""

    engine: str
    version: str
    arch: str
    key: str  # the config key the engine reads
    ids: list[int] | None  # what it found there (None: absent or empty → default)
    source: str  # "config" | "default"
    r: list[Any]  # captured r (ints; "final_post" for HF-style captures) in the engine's concat (ascending) order
    dropped: list[int] = field(default_factory=list)  # ids that never match a layer
    problems: list[str] = field(default_factory=list)  # would crash / need a patch
    notes: list[str] = field(default_factory=list)
    family: str = "eagle3"
    readings: dict[str, list] = field(default_factory=dict)  # other possible r when the rule is unsettled


def reachable_r(engine: str, num_layers: int, version: str | None = None, arch: str | None = None
                ) -> tuple[set[int], dict[int, str]]:
    """The r an engine can capture without a code change, and why the others need one."""
    engine = canonical_system(engine)
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
        mixin = _has(v, VLLM_MIXIN_PR)
        deepseek_final = _has(v, VLLM_DEEPSEEK_FINAL_PR)
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
        lo, hi = _reach(rule, L)
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
    registry rule (``convention_rules.RULES``); ``family`` defaults to :func:`detect_family`.
    """
    family = canonical_family(family or detect_family(config))
    if family not in EAGLE_FAMILIES or canonical_system(engine) not in ("sglang", "vllm"):
        return _rule_capture(engine, config, num_layers, version, arch or "generic", family)
    engine = canonical_system(engine)
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
                     + (" (sglang#25454: +1 only when the first id is 1)" if _has(v, SGLANG_PLUS1_PR)
                        and arch == "deepseek" else ""))
    if dropped:
        problems.append(f"ids {dropped} match no layer in {engine} {v}: fewer states than ids are captured")
    if list(ids) != sorted(ids):
        notes.append(f"ids {ids} are not ascending; {engine} concatenates in layer order r = {captured}")
    return EngineCapture(engine, v, arch, key, ids, "config", captured, dropped, problems, notes)


def _read_ids(config: dict, keys: tuple[str, ...]) -> tuple[str | None, object]:
    """(key, value) of the first key present in the config, else (None, None)."""
    for k in keys:
        v = get_key(config, k)
        if v is not None:
            return k, v
    return None, None


def _rule_capture(engine: str, config: dict, num_layers: int, version: str | None, arch: str,
                  family: str) -> EngineCapture:
    """engine_capture for every (engine, family) the registry holds beyond EAGLE-3 in SGLang/vLLM."""
    engine = canonical_system(engine)
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
    key, ids = _read_ids(config, rule.keys)
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
        alts = readings(engine, ids, L, family, arch, n_draft)
        per_id = next(iter(alts.values()))
        notes.append(f"{engine} {family} numbering is not settled by the sources ({rule.source}): "
                     + "; ".join(f"{k} → r = {x}" for k, x in alts.items()))
    else:
        per_id = _rule_to_r(rule, ids, L, arch, n_draft)
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


@dataclass
class IdPlan:
    """The id list that makes a system capture given r, where to write it, and what to watch for."""

    system: str
    version: str
    r: list[int]
    ids: list[int] | None  # None when impossible
    key: str | None
    where: str | None  # "nested" | "top-level" | None
    caveat: str | None = None

    family: str = "eagle3"

    @property
    def snippet(self) -> dict | None:
        """The config.json fragment to write: the ids under their (possibly dotted) key."""
        if self.ids is None or not self.key or self.where not in ("nested", "top-level"):
            return None
        out: dict = {}
        node = out
        parts = self.key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = list(self.ids)
        return out

    def apply(self, config: dict) -> dict:
        """A copy of ``config`` with the ids written where this plan says (the input is not modified)."""
        import copy

        out = copy.deepcopy(config)
        if self.ids is None or not self.key:
            return out
        node = out
        parts = self.key.split(".")
        for p in parts[:-1]:
            if not isinstance(node.get(p), dict):
                node[p] = {}
            node = node[p]
        node[parts[-1]] = list(self.ids)
        return out

    def to_dict(self) -> dict:
        return {"ids": self.ids, "key": self.key, "where": self.where, "engine": self.system,
                "version": self.version, "r": self.r, "caveat": self.caveat, "family": self.family,
                "snippet": self.snippet}


def from_r(system: str, rs: list[int], num_layers: int, version: str | None = None,
           arch: str | None = None, family: str | None = None) -> IdPlan:
    """The ids to write so ``system`` captures r = ``rs`` (inverse of :func:`to_r`), or why it can't."""
    system = canonical_system(system)
    family = canonical_family(family)
    if family not in EAGLE_FAMILIES or system not in _LEGACY_SYSTEMS:
        return _rule_from_r(system, rs, num_layers, version, arch, family)
    v = parse_version(system, version)
    arch = arch or "generic"
    L = int(num_layers)
    rs = [int(r) for r in rs]
    caveats: list[str] = []
    if system in ("sglang", "vllm") and rs != sorted(rs):
        return IdPlan(system, v, rs, None, None, None,
                      f"the draft was trained on r = {rs}, not in ascending order; {system} always "
                      "concatenates in ascending layer order, so no id list reproduces it: reorder the "
                      "training slots (and retrain) or patch the engine's concat order")
    if system == "sglang":
        ok, why = reachable_r("sglang", L, v, arch)
        hard = [r for r in rs if r not in ok and r != 0]
        if hard:
            return IdPlan(system, v, rs, None, NESTED_KEY, "nested", "; ".join(why.get(r, f"r={r} out of range")
                                                                       for r in hard))
        if 0 in rs:
            caveats.append(why[0])
        if not (_has(v, SGLANG_PLUS1_PR) and arch == "deepseek"):
            ids = [r - 1 for r in rs]  # unconditional +1 (pre-#25454, or a non-DeepSeek model file)
        else:
            ids = list(rs)  # post-#25454 DeepSeek/Kimi path: raw ids unless the first is 1
            if ids and ids[0] == 1:
                if len(ids) == 1:
                    return IdPlan(system, v, rs, None, NESTED_KEY, "nested",
                                  "r = [1] alone cannot be written after sglang#25454 (first id 1 gets +1)")
                ids = ids[1:] + ids[:1]  # first id must not be 1; capture order is still ascending
                caveats.append("ids reordered so the first id is not 1 (sglang#25454 adds +1 only when "
                               "the first id is 1); SGLang still concatenates in ascending layer order")
        return IdPlan(system, v, rs, ids, NESTED_KEY, "nested", "; ".join(caveats) or None)
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


def _rule_from_r(system: str, rs: list, num_layers: int, version: str | None, arch: str | None,
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
    lo, hi = _reach(rule, L)
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


@dataclass
class TrainerView:
    """Which stored slots a trainer feeds the draft's fc (in stored order) and which one is the target."""

    trainer: str
    fc_slots: list[int]
    target_slot: int | None
    target_norm: str  # "pre" (speculators applies verifier_norm itself) | "post" (SpecForge: lm_head only)
    source: str


def trainer_view(trainer: str, num_slots: int) -> TrainerView:
    """speculators v1 ``standardize_data_v1``: ``cat(list[:-1])`` in stored order + ``list[-1]`` pre-norm
    target (speculators#143, #313); current ``ArrowDataset``: ``[:, :-1]`` + ``[:, -1]`` (speculators#353);
    SpecForge ``normalize_offline_sample``: ``aux_hidden_state`` + post-norm ``hidden_state`` (§5.2)."""
    t = str(trainer).strip().lower()
    if t in ("speculators-v1", "speculators-legacy", "legacy"):
        return TrainerView("speculators-v1", list(range(num_slots - 1)), num_slots - 1, "pre",
                           "speculators standardize_data_v1 (speculators#143; target normed since #313)")
    if t in ("speculators", "speculators-current", "speculators-v2"):
        return TrainerView("speculators", list(range(num_slots - 1)), num_slots - 1, "pre",
                           "speculators ArrowDataset._get_raw_data (speculators#353; #313 verifier_norm)")
    if t == "specforge":
        return TrainerView("specforge", list(range(num_slots - 1)), num_slots - 1, "post",
                           "SpecForge normalize_offline_sample (aux_hidden_state + post-norm hidden_state)")
    raise ForensicsError(f"unknown trainer {trainer!r}; expected one of {TRAINERS}")
