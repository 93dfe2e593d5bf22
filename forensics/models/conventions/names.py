"""The conventions registry's vocabulary: system and family names, version timelines, config-key access, drafter
family detection, defaults, and the result types (``EngineCapture``, ``IdPlan``, ``TrainerView``).

Every function here takes a system's canonical name (``forensics.models.conventions.system`` resolves a name
once); ``forensics.models.conventions`` re-exports what other layers use.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from forensics.errors import ForensicsError
from forensics.models.conventions import rules
from forensics.models.conventions.rules import DSPARK_KEY, FAMILIES

ENGINES = ("sglang", "vllm", "llama.cpp", "tokenspeed", "trtllm", "atlas")
TRAINERS = ("speculators-v1", "speculators", "specforge")  # trainers whose stored data layout is known
ID_TRAINERS = ("speculators", "speculators-legacy", "specforge", "modelopt", "modelopt-vllm", "nemo-automodel",
               "eagle")
SYSTEMS = ("speculators-legacy", "speculators", "sglang", "vllm", "specforge", "eagle", "llama.cpp",
           "tokenspeed", "trtllm", "atlas", "modelopt", "modelopt-vllm", "nemo-automodel")
ALIASES = {
    "speculators-v1": "speculators-legacy", "speculators-legacy": "speculators-legacy",
    "legacy": "speculators-legacy", "speculators-current": "speculators", "speculators-v2": "speculators",
    "speculators": "speculators", "speculators-online": "speculators", "speculators-offline": "speculators",
    "speculators-hybrid": "speculators", "sglang": "sglang", "vllm": "vllm", "specforge": "specforge",
    "eagle": "eagle", "eagle3": "eagle", "safeailab": "eagle", "llama.cpp": "llama.cpp", "llamacpp": "llama.cpp",
    "llama-cpp": "llama.cpp", "tokenspeed": "tokenspeed", "trtllm": "trtllm", "tensorrt-llm": "trtllm",
    "tensorrt_llm": "trtllm", "modelopt": "modelopt", "model-optimizer": "modelopt", "modelopt-hf": "modelopt",
    "modelopt-trtllm": "modelopt", "modelopt-vllm": "modelopt-vllm", "model-optimizer-vllm": "modelopt-vllm",
    "nemo-automodel": "nemo-automodel",
    "automodel": "nemo-automodel", "nemo": "nemo-automodel", "atlas": "atlas",
}

SGLANG_PLUS1_PR = 25454  # sgl-project/sglang#25454: +1 only when ids[0] == 1 (DeepSeek/Kimi path)
VLLM_MIXIN_PR = 36063  # vllm-project/vllm#36063: EagleModelMixin, ids 0 and L reachable
VLLM_DFLASH_PR = 40727  # vllm-project/vllm#40727: DFlash target_layer_ids + 1
VLLM_DEEPSEEK_FINAL_PR = 46973  # vllm-project/vllm#46973: DeepSeek-V2 family can capture id L
LLAMACPP_IDS_PR = 25794  # ggml-org/llama.cpp#25794: eagle_aux_hidden_state_layer_ids read (top level)
LLAMACPP_NESTED_PR = 27040  # ggml-org/llama.cpp#27040: nested fallback (closed upstream when read)
TOKENSPEED_IDS_PR = 526  # lightseekorg/tokenspeed#526: capture layers from the draft config
ATLAS_OFFSET_PR = 394  # Avarok-Cybersecurity/atlas#394: DFlash -1 capture offset removed
TIMELINES: dict[str, tuple[int, ...]] = {
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
    prs = TIMELINES.get(system)
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


def has_pr(version: str, pr: int) -> bool:
    """Whether the canonical version includes PR ``pr`` (``any``: the newest state)."""
    if version == "any":
        return True
    kind, num = version.split("-")
    return int(num) > pr or (int(num) == pr and kind == "post")


def versions(system: str) -> list[str]:
    """Every canonical version of a system's timeline, oldest first (``["any"]`` without a timeline)."""
    prs = TIMELINES.get(system) or ()
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
    family = canonical_family(family)
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
    if not has_pr(version, SGLANG_PLUS1_PR) or arch != "deepseek":
        return True
    return bool(ids) and ids[0] == 1


def int_ids(ids) -> list[int]:
    """The ids as ints, or a ForensicsError naming the bad values (bool and float are not layer ids)."""
    bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, int)]
    if bad:
        raise ForensicsError(f"layer ids must be integers, found {bad!r} in {list(ids)!r}")
    return [int(i) for i in ids]


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
