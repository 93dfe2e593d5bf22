"""Conventions registry: how each trainer and engine numbers target layers, for every drafter family, in r.

One coordinate (see ``forensics.layers``): ``r = 0`` embedding output, ``r = k`` output of block k
(= HF ``hidden_states[k]``), ``r = L`` last block before the final norm. The rules themselves, each with its
public source, are data in ``rules`` (``RULES``); ``names`` holds the vocabulary (names, timelines, result
types), ``compute`` the hand-written EAGLE-3 code of the six original systems, ``generic`` every other rule, and
``system`` the face: :func:`system` resolves a name once into a :class:`System` whose methods compute, and
:func:`resolve_names` marks the parameters of a public verb that take a name (resolved once, on entry).

Example:
    >>> sglang = system("SGLang")       # resolved once: canonical name, aliases, kind, PR timeline, rules
    >>> sglang.name, sglang.kind, sglang.timeline
    ('sglang', 'engine', (25454,))
    >>> sglang.to_r([2, 30, 58], 61, version="pre-25454")
    [3, 31, 59]
    >>> sglang.from_r([0, 3, 31], 61, version="pre-25454").ids
    [-1, 2, 30]
    >>> system("vllm").to_r(None, 80)            # no ids in the draft config: the engine's default
    [2, 40, 77]
    >>> system("vllm").to_r([7, 14, 21], 28, family="dflash")   # DFlash ids name block outputs (vllm#40727)
    [8, 15, 22]

Systems (``SYSTEMS``; aliases in ``ALIASES``, or ``System.aliases``): engines ``vllm``, ``sglang``, ``llama.cpp``,
``tokenspeed``, ``trtllm`` (TensorRT-LLM serving a Model-Optimizer export), ``atlas``; trainers ``speculators`` (online,
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

from forensics.models.conventions.generic import rule_default_r, rule_readings
from forensics.models.conventions.names import (
    ALIASES,
    ATLAS_OFFSET_PR,
    DEEPSEEK_ARCH_PATTERNS,
    ENGINES,
    ID_TRAINERS,
    LLAMACPP_IDS_PR,
    LLAMACPP_NESTED_PR,
    SGLANG_PLUS1_PR,
    SYSTEMS,
    TOKENSPEED_IDS_PR,
    TRAINERS,
    VLLM_DEEPSEEK_FINAL_PR,
    VLLM_DFLASH_PR,
    VLLM_MIXIN_PR,
    EngineCapture,
    IdPlan,
    TrainerView,
    arch_family,
    canonical_family,
    default_r,
    detect_family,
    dflash_default_ids,
    get_key,
    int_ids,
    sglang_plus_one,
)
from forensics.models.conventions.rules import (
    CONFIG_RULES,
    DFLASH_KEY,
    DSPARK_KEY,
    EAGLE_FAMILIES,
    FAMILIES,
    FAMILY_KEYS,
    FIRST_ID,
    IGNORED,
    NESTED_KEY,
    RULES,
    TOP_KEY,
    Rule,
)
from forensics.models.conventions.system import (
    ALL,
    SGLANG,
    SPECFORGE,
    SPECULATORS,
    VLLM,
    System,
    SystemName,
    of_format,
    resolve_names,
    system,
)

__all__ = ["system", "System", "SystemName", "resolve_names", "of_format", "ALL", "VLLM", "SGLANG",
           "SPECULATORS", "SPECFORGE", "FAMILIES", "ENGINES", "TRAINERS", "ID_TRAINERS", "SYSTEMS", "ALIASES",
           "NESTED_KEY",
           "TOP_KEY", "DFLASH_KEY", "DSPARK_KEY", "EAGLE_FAMILIES", "FAMILY_KEYS", "FIRST_ID", "IGNORED", "RULES",
           "CONFIG_RULES", "Rule", "DEEPSEEK_ARCH_PATTERNS", "SGLANG_PLUS1_PR", "VLLM_MIXIN_PR", "VLLM_DFLASH_PR",
           "VLLM_DEEPSEEK_FINAL_PR", "LLAMACPP_IDS_PR", "LLAMACPP_NESTED_PR", "TOKENSPEED_IDS_PR", "ATLAS_OFFSET_PR",
           "EngineCapture", "IdPlan", "TrainerView", "rule_readings", "rule_default_r", "detect_family",
           "canonical_family", "get_key", "dflash_default_ids", "default_r", "arch_family", "sglang_plus_one",
           "int_ids"]
