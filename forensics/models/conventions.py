"""Conventions registry: how each EAGLE-3 trainer and engine numbers target layers, converted to r.

One coordinate (see ``forensics.capture``): ``r = 0`` embedding output, ``r = k`` output of block k
(= HF ``hidden_states[k]``), ``r = L`` last block before the final norm. Every rule below cites its
source: the PR or issue number and the file in that project.

Example:
    >>> to_r("sglang", [2, 30, 58], 61, version="pre-25454")
    [3, 31, 59]
    >>> from_r("sglang", [0, 3, 31], 61, version="pre-25454").ids
    [-1, 2, 30]
    >>> to_r("vllm", None, 80)            # no ids in the draft config: the engine's default
    [2, 40, 77]

Systems (``SYSTEMS``; aliases in ``ALIASES``): ``speculators-legacy`` (alias ``speculators-v1``),
``speculators`` (current), ``sglang``, ``vllm``, ``specforge``, ``eagle``.

Versions (``version=``), a point on the system's PR timeline; ``None`` means the newest state known:
- sglang: ``pre-25454`` (aliases ``sglang<25454``, ``<25454``, ``before-25454``, ``old``) or
  ``post-25454`` (aliases ``sglang>=25454``, ``>=25454``, ``after-25454``, ``latest``, ``main``).
- vllm: ``pre-36063`` (old capture loop), ``post-36063`` (= ``pre-46973``: ``EagleModelMixin`` in
  Llama-family models), ``post-46973`` (= ``latest``: also DeepSeek/Kimi can capture id L).
Semantic versions (``0.5.3``) are refused with this list: which release first carried each PR is not
pinned in the reference, and a guess would turn into a wrong verdict.

Architecture (``arch=``): ``"deepseek"`` for the DeepSeek-V2/V3/Kimi code path, anything else
(or None) for the generic Llama-style path; :func:`arch_family` maps HF ``architectures`` /
``model_type`` to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from forensics.errors import ForensicsError
from forensics.models.draft_config import sub_dict

SYSTEMS = ("speculators-legacy", "speculators", "sglang", "vllm", "specforge", "eagle")
ENGINES = ("sglang", "vllm")
TRAINERS = ("speculators-v1", "speculators", "specforge")
ALIASES = {
    "speculators-v1": "speculators-legacy", "speculators-legacy": "speculators-legacy",
    "legacy": "speculators-legacy", "speculators-current": "speculators", "speculators-v2": "speculators",
    "speculators": "speculators", "sglang": "sglang", "vllm": "vllm", "specforge": "specforge",
    "eagle": "eagle", "eagle3": "eagle", "safeailab": "eagle",
}

NESTED_KEY = "eagle_config.eagle_aux_hidden_state_layer_ids"
TOP_KEY = "eagle_aux_hidden_state_layer_ids"

SGLANG_PLUS1_PR = 25454  # sgl-project/sglang#25454: +1 only when ids[0] == 1 (DeepSeek/Kimi path)
VLLM_MIXIN_PR = 36063  # vllm-project/vllm#36063: EagleModelMixin, ids 0 and L reachable
VLLM_DEEPSEEK_FINAL_PR = 46973  # vllm-project/vllm#46973: DeepSeek-V2 family can capture id L
_TIMELINES = {"sglang": (SGLANG_PLUS1_PR,), "vllm": (VLLM_MIXIN_PR, VLLM_DEEPSEEK_FINAL_PR)}
_OLDEST = ("old", "oldest", "legacy")
_NEWEST = ("latest", "main", "new", "newest", "current", "nightly", "any")
DEEPSEEK_ARCH_PATTERNS = ("deepseek", "kimi")


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
    if prs is None:
        return "any"  # trainers and EAGLE: no version-dependent rule in the reference
    if version is None or str(version).strip().lower() in _NEWEST:
        return f"post-{prs[-1]}"
    v = str(version).strip().lower().replace(" ", "")
    if v in _OLDEST:
        return f"pre-{prs[0]}"
    v = re.sub(rf"^{system}[-_@]?", "", v)
    m = re.fullmatch(r"(pre|before|<|post|after|>=|>)-?#?(\d+)", v)
    if not m or int(m.group(2)) not in prs:
        accepted = ", ".join([f"pre-{p}, post-{p}" for p in prs] + ["latest", "old"])
        raise ForensicsError(
            f"{system} version {version!r} not understood; accepted: {accepted} (also written "
            f"{system}<PR / >=PR). Semantic versions are not mapped: the release that first carried each "
            "PR is not pinned in the reference.")
    pr = int(m.group(2))
    if m.group(1) in ("pre", "before", "<"):
        i = prs.index(pr)
        return f"pre-{prs[0]}" if i == 0 else f"post-{prs[i - 1]}"
    return f"post-{pr}"


def _has(version: str, pr: int) -> bool:
    """Whether the canonical version includes PR ``pr``."""
    kind, num = version.split("-")
    return int(num) > pr or (int(num) == pr and kind == "post")


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


def to_r(system: str, ids: list[int] | None, num_layers: int, version: str | None = None,
         arch: str | None = None) -> list[int | None]:
    """r of every id, in the order given; ``None`` for an id the system never captures.

    ``ids=None`` means no ids configured: the system's default (for engines the silent fallback).
    The order is the list's; engines concatenate in ascending layer order (see :func:`engine_capture`).
    """
    system = canonical_system(system)
    L = int(num_layers)
    if ids is None:
        if system == "speculators-legacy":  # VllmHiddenStatesGenerator default [2, L//2, L-3, L-1]
            return [3, L // 2 + 1, L - 2, L]
        if system == "speculators":  # scripts/launch_vllm.py default + --include-last-layer
            return [*default_r(L), L]
        return [*default_r(L)]
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
        # a layer index outside 0..L-1 never matches. Index 0 is the embedding (needs a patch).
        return [i + plus if 0 <= i + plus <= L - 1 else None for i in ids]
    if system == "eagle":
        raise ForensicsError("SafeAILab/EAGLE has no id list: its capture is hard-coded to "
                             f"r = {default_r(L)} (eagle/model/modeling_llama_kv.py); pass ids=None")
    raise AssertionError(system)  # pragma: no cover


@dataclass
class EngineCapture:
    """What an engine captures from a draft config: the key it reads, the ids, r in concat order."""

    engine: str
    version: str
    arch: str
    key: str  # the config key the engine reads
    ids: list[int] | None  # what it found there (None: absent or empty → default)
    source: str  # "config" | "default"
    r: list[int]  # captured r in the engine's concat order (ascending layer order)
    dropped: list[int] = field(default_factory=list)  # ids that never match a layer
    problems: list[str] = field(default_factory=list)  # would crash / need a patch
    notes: list[str] = field(default_factory=list)


def reachable_r(engine: str, num_layers: int, version: str | None = None, arch: str | None = None
                ) -> tuple[set[int], dict[int, str]]:
    """The r an engine can capture without a code change, and why the others need one."""
    engine = canonical_system(engine)
    L = int(num_layers)
    why: dict[int, str] = {}
    if engine == "sglang":
        # Capture happens before block i for i in 0..L-1; r = L is never reached. At i = 0
        # residual is None in stock LlamaModel/DeepseekV2Model: hidden_states + residual raises a
        # TypeError, so the embedding needs a patch.
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
    raise ForensicsError(f"{engine} is not a serving engine; expected one of {ENGINES}")


def engine_capture(engine: str, config: dict, num_layers: int, version: str | None = None,
                   arch: str | None = None) -> EngineCapture:
    """What ``engine`` captures for a draft ``config`` (parsed config.json) on an L-layer target.

    SGLang reads only the nested key (``spec_aux_hidden_state.py`` ``resolve_spec_aux_hidden_state_config``
    @ e6123ca2); vLLM only the top-level key (``eagle3_utils.py`` ``get_eagle3_aux_layers_from_config``
    @ da844450, speculators configs via ``update_eagle3``). Both concatenate in layer-loop
    (ascending) order whatever the list order.
    """
    engine = canonical_system(engine)
    v = parse_version(engine, version)
    arch = arch or "generic"
    if engine == "sglang":
        key = NESTED_KEY
        ec = sub_dict(config, "eagle_config")
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
        r_default = default_r(num_layers)  # SGLang: `if layer_ids is None` -> default, no +1
        return EngineCapture(engine, v, arch, key, None, "default", sorted(set(r_default)), [], problems,
                             notes + [f"no ids under {key}: default r = {r_default}, no warning (vllm#50170 asks "
                                      "for one)"])
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
    for r in captured:
        if r not in ok and r in why:
            problems.append(why[r])
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

    def to_dict(self) -> dict:
        return {"ids": self.ids, "key": self.key, "where": self.where, "engine": self.system,
                "version": self.version, "r": self.r, "caveat": self.caveat}


def from_r(system: str, rs: list[int], num_layers: int, version: str | None = None,
           arch: str | None = None) -> IdPlan:
    """The ids to write so ``system`` captures r = ``rs`` (inverse of :func:`to_r`), or why it can't."""
    system = canonical_system(system)
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
        is_default = rs == default_r(L)
        return IdPlan(system, v, rs, None, None, None,
                      None if is_default else f"SafeAILab/EAGLE is hard-coded to r = {default_r(L)}; "
                      f"r = {rs} needs a code change")
    raise AssertionError(system)  # pragma: no cover


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
    SpecForge ``normalize_offline_sample``: ``aux_hidden_state`` + post-norm ``hidden_state``."""
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
