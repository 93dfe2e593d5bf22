"""The conventions registry as data: for every engine and trainer, per drafter family and version, which config
key holds the layer ids, what an id means in r, what happens without ids, and the public source of each rule.

``forensics.models.conventions`` computes with these rules (``to_r``, ``from_r``, ``engine_capture``);
``hsf conventions --markdown`` prints them as the table in docs/conventions.md. One coordinate, r (see
``forensics.layers``):
r = 0 embedding output, r = k output of block k (HF ``hidden_states[k]``), r = L last block before the final
norm, ``final_post`` after it.

Offsets: an id ``i`` means r = i + ``offset``. ``FIRST_ID`` is SGLang's post-#25454 rule (+1 only when the
first id is 1); ``IGNORED`` means the system never reads the ids (hard-coded layers); ``None`` means the
sources read do not settle the numbering, and every reading in ``readings`` is possible.

Example:
    >>> [r.system for r in rules_for(family="dspark")][:2]
    ['vllm', 'sglang']
"""

from __future__ import annotations

from dataclasses import dataclass

TOP_KEY = "eagle_aux_hidden_state_layer_ids"
NESTED_KEY = "eagle_config.eagle_aux_hidden_state_layer_ids"
DFLASH_KEY = "dflash_config.target_layer_ids"
DFLASH_TOP_KEY = "target_layer_ids"
SPECULATORS_DFLASH_KEY = "aux_hidden_state_layer_ids"
DSPARK_KEY = "dspark_target_layer_ids"

FAMILIES = ("eagle3", "eagle3.1", "p-eagle", "dflash", "dspark", "mtp")
EAGLE_FAMILIES = ("eagle3", "eagle3.1", "p-eagle")  # one id list, the same keys (vllm#41826 maps P-EAGLE to Eagle3)
FAMILY_KEYS = {  # every key a draft config of the family may hold its ids in (draft_config reads them all)
    "eagle3": (TOP_KEY, NESTED_KEY), "eagle3.1": (TOP_KEY, NESTED_KEY), "p-eagle": (TOP_KEY, NESTED_KEY),
    "dflash": (DFLASH_KEY, DFLASH_TOP_KEY, SPECULATORS_DFLASH_KEY),
    "dspark": (DSPARK_KEY, DFLASH_TOP_KEY, SPECULATORS_DFLASH_KEY),
    "mtp": (),
}
FIRST_ID = "first-id"  # sglang#25454: +1 only when ids[0] == 1
IGNORED = "ignored"  # ids never read: hard-coded capture
DEFAULT_CANONICAL = "canonical"  # r = {2, L//2, L-3}
DEFAULT_DFLASH = "dflash-spread"  # z-lab build_target_layer_ids: ids spread over 1..L-3, one per draft layer
DEFAULT_NONE = "none"


@dataclass(frozen=True)
class Rule:
    """One system's reading of one family's ids, valid for ``versions`` (None: every version)."""

    system: str
    kind: str  # "engine" | "trainer"
    family: str
    keys: tuple[str, ...]  # config keys read, first found wins; () when no id list exists
    offset: int | str | None  # r = id + offset; FIRST_ID; IGNORED; None = not settled by the sources
    default: str  # what an absent id list gives (DEFAULT_*)
    reach: str  # r the system can capture without a patch, as text ("1..L-1", "0..L")
    source: str  # public URL of the rule
    confidence: str  # "code" | "PR" | "derived" | "unknown"
    versions: tuple[str, ...] | None = None  # canonical versions this rule holds for
    note: str = ""

    def meaning(self) -> str:
        """``r = id + 1`` and friends: the id → r rule as one phrase."""
        if self.offset == IGNORED:
            return "ids ignored: hard-coded r = {2, L//2, L-3}"
        if self.offset == FIRST_ID:
            return "r = id + 1 if the first id is 1, else r = id"
        if self.offset is None:
            return "not settled: r = id or r = id + 1"
        if not self.keys:
            return "no ids"
        return "r = id" if self.offset == 0 else f"r = id + {self.offset}"


SG = "https://github.com/sgl-project/sglang/pull/"
VL = "https://github.com/vllm-project/vllm/pull/"
SP = "https://github.com/vllm-project/speculators/"
E = EAGLE_FAMILIES

RULES: tuple[Rule, ...] = (
    # ---- vLLM ------------------------------------------------------------------------------------------------
    *(Rule("vllm", "engine", f, (TOP_KEY,), 0, DEFAULT_CANONICAL, "1..L-1 (0 and L after #36063)", VL + "36063",
           "code", None, "reads only the top-level key (speculators configs via update_eagle3); a nested list is "
           "ignored and the default is used without a warning (vllm#50170)") for f in E),
    Rule("vllm", "engine", "dflash", (DFLASH_KEY,), 0, DEFAULT_DFLASH, "1..L", VL + "40727", "PR",
         ("pre-36063", "post-36063"), "before the DFlash offset fix the ids were used raw"),
    Rule("vllm", "engine", "dflash", (DFLASH_KEY,), 1, DEFAULT_DFLASH, "1..L", VL + "40727", "code",
         ("post-40727", "post-46973"), "get_eagle3_aux_layers_from_config adds 1: DFlash ids name a block's output"),
    Rule("vllm", "engine", "dspark", (DSPARK_KEY,), 1, DEFAULT_NONE, "1..L",
         "https://github.com/vllm-project/vllm/blob/main/tests/v1/spec_decode/test_dspark_aux_layer_ids.py", "code",
         None, "dspark_target_layer_ids name the blocks whose output the drafter consumes"),
    Rule("vllm", "engine", "mtp", (), 0, DEFAULT_NONE, "L (or final_post)", VL + "46973", "derived", None,
         "MTP reads the hidden state the target's forward returns; no id list to misconfigure"),
    # ---- SGLang ----------------------------------------------------------------------------------------------
    *(Rule("sglang", "engine", f, (NESTED_KEY,), 1, DEFAULT_CANONICAL, "1..L-1 (0 needs a patch)", SG + "21274",
           "code", ("pre-25454",), "reads only the nested key; the default [2, L//2, L-3] gets no +1") for f in E),
    *(Rule("sglang", "engine", f, (NESTED_KEY,), FIRST_ID, DEFAULT_CANONICAL, "1..L-1", SG + "25454", "PR",
           ("post-25454",), "DeepSeek/Kimi model files; other model files keep the unconditional +1") for f in E),
    Rule("sglang", "engine", "dflash", (DFLASH_KEY,), 1, DEFAULT_DFLASH, "1..L-1",
         "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/speculative/dflash_utils.py", "code",
         None, "build_target_layer_ids: hidden states after each selected block; the capture hook adds 1"),
    Rule("sglang", "engine", "dspark", (DSPARK_KEY,), 1, DEFAULT_NONE, "1..L-1",
         "https://github.com/NVIDIA-NeMo/Automodel/pull/3083", "derived", None,
         "ids -1 and L-1 (HF offset-1: embedding, final) have no SGLang capture point"),
    Rule("sglang", "engine", "mtp", (), 0, DEFAULT_NONE, "L (or final_post)", SG + "25454", "derived", None,
         "MTP/NextN reads the target's returned hidden state; no id list"),
    # ---- llama.cpp -------------------------------------------------------------------------------------------
    *(Rule("llama.cpp", "engine", f, (), IGNORED, DEFAULT_CANONICAL, "1..L-1",
           "https://github.com/ggml-org/llama.cpp/pull/18039", "PR", ("pre-25794",),
           "conversion computes [2, L//2, L-3] from the target and ignores the draft's ids") for f in E),
    *(Rule("llama.cpp", "engine", f, (TOP_KEY,), 0, DEFAULT_CANONICAL, "1..L (L via the nextn path)",
           "https://github.com/ggml-org/llama.cpp/pull/25794", "PR", ("post-25794",),
           "top-level key only: nested EAGLE-3.1 ids fall back to [2, L//2, L-3] silently (llama.cpp#27040, closed "
           "unmerged when read)") for f in E),
    *(Rule("llama.cpp", "engine", f, (TOP_KEY, NESTED_KEY), 0, DEFAULT_CANONICAL, "1..L",
           "https://github.com/ggml-org/llama.cpp/pull/27040", "PR", ("post-27040",),
           "a build carrying the nested-key fallback of llama.cpp#27040") for f in E),
    Rule("llama.cpp", "engine", "dflash", (DFLASH_KEY,), None, DEFAULT_DFLASH, "1..L",
         "https://github.com/charlie12345/ROCmFPX/issues/44", "unknown", None,
         "forks shift taps with LLAMA_DFLASH_TARGET_LAYER_OFFSET; the mainline numbering is not in the sources"),
    # ---- tokenspeed ------------------------------------------------------------------------------------------
    *(Rule("tokenspeed", "engine", f, (), IGNORED, DEFAULT_CANONICAL, "1..L-1",
           "https://github.com/lightseekorg/tokenspeed/pull/526", "PR", ("pre-526",),
           "capture layers hard-coded to [2, L//2, L-3]; the draft config ignored") for f in E),
    *(Rule("tokenspeed", "engine", f, (NESTED_KEY, TOP_KEY), FIRST_ID, DEFAULT_CANONICAL, "1..L",
           "https://github.com/lightseekorg/tokenspeed/pull/526", "derived", ("post-526",),
           "nested or top-level ids; both drafts in the PR's table ([1,17,32] unchanged, [24,30,36] with the "
           "final block's output) fit the first-id rule; an empty list must not fall back") for f in E),
    # ---- TensorRT-LLM ------------------------------------------------------------------------------------------
    *(Rule("trtllm", "engine", f, (TOP_KEY,), 1, DEFAULT_CANONICAL, "1..L (-1: final_post)",
           "https://github.com/NVIDIA/TensorRT-LLM/blob/001e67005b4f64b69b0045456870be48ab7b2cf0/tensorrt_llm/_torch/"
           "speculative/eagle3.py", "code", None,
           "captures after block id (maybe_capture_hidden_states at the end of the decoder layer): r = id + 1; "
           "eagle3_layers_to_capture defaults to (1, N//2-1, N-4) = r {2, L//2, L-3}; -1 is the final post-norm "
           "state (SaveHiddenStatesDecodingConfig)") for f in E),
    # ---- atlas (Avarok-Cybersecurity/atlas) -----------------------------------------------------------------
    Rule("atlas", "engine", "dflash", (DFLASH_KEY,), 0, DEFAULT_DFLASH, "1..L",
         "https://github.com/Avarok-Cybersecurity/atlas/pull/394", "PR", ("pre-394",),
         "a -1 capture offset cancelled DFlash's output-of numbering"),
    Rule("atlas", "engine", "dflash", (DFLASH_KEY,), 1, DEFAULT_DFLASH, "1..L",
         "https://github.com/Avarok-Cybersecurity/atlas/pull/394", "PR", ("post-394",),
         "offset removed: ids name block outputs (mean accepted 5.56 -> 6.61 on a 27B DFlash)"),
    # ---- trainers --------------------------------------------------------------------------------------------
    *(Rule("speculators", "trainer", f, (TOP_KEY,), 0, "canonical + L", "0..L", SP + "pull/839", "code", None,
           "online/offline/hybrid all capture through vLLM extract_hidden_states; launch_vllm.py "
           "--include-last-layer appends L (the target); training gets the ids without it") for f in E),
    Rule("speculators", "trainer", "dflash", (SPECULATORS_DFLASH_KEY,), 0, DEFAULT_NONE, "0..L",
         SP + "blob/main/src/speculators/convert/dflash/converter.py", "code", None,
         "speculators numbering (r = id); the z-lab converter writes target_layer_ids + 1"),
    Rule("speculators", "trainer", "dspark", (SPECULATORS_DFLASH_KEY,), 0, DEFAULT_NONE, "0..L",
         SP + "blob/main/src/speculators/models/dspark/config.py", "derived", None,
         "the DSpark config extends speculators' DFlash config (same key, same numbering)"),
    Rule("speculators", "trainer", "mtp", (), 0, DEFAULT_NONE, "L",
         SP + "blob/main/src/speculators/models/mtp/core.py", "code", None,
         "MTP uses only the verifier's last hidden state (r = L, normed in training)"),
    *(Rule("speculators-v1", "trainer", f, (), 1, "[2, L//2, L-3, L-1] (+1)", "1..L", SP + "pull/379", "code",
           None, "legacy VllmHiddenStatesGenerator captured after block id; ids only in data_config.json")
      for f in ("eagle3",)),
    *(Rule("specforge", "trainer", f, (NESTED_KEY,), 1, "[1, L//2-1, L-4] (+1)", "1..L",
           "https://github.com/sgl-project/SpecForge/pull/240", "code", None,
           "resolve_eagle_capture_layers: exactly 3 ids >= 0, output-of-block numbering") for f in E),
    Rule("specforge", "trainer", "dflash", (DFLASH_KEY,), 1, DEFAULT_DFLASH, "1..L",
         "https://github.com/microsoft/onnxruntime-genai/pull/2538", "PR", None,
         "SpecForge DFlash ids name block outputs (taps at id + 1)"),
    Rule("specforge", "trainer", "dspark", (DSPARK_KEY,), 1, DEFAULT_NONE, "1..L",
         "https://github.com/NVIDIA-NeMo/Automodel/pull/3083", "derived", None, "as DFlash"),
    *(Rule("modelopt", "trainer", f, (TOP_KEY,), 1, "[1, L//2-1, L-4] (+1)", "1..L",
           "https://github.com/NVIDIA/Model-Optimizer/blob/a2fbac7bad8ab446d3f8783dadb0c3366eb0ad73/examples/"
           "speculative_decoding/collect_hidden_states/compute_hidden_states_hf.py", "code", None,
           "HF and TensorRT-LLM dumpers: 0-based output-of-block ids (HF hidden_states[id + 1]), post-norm final; "
           "capture order [aux..., final] not enforced (Model-Optimizer#1509)") for f in E),
    *(Rule("modelopt-vllm", "trainer", f, (TOP_KEY,), 0, DEFAULT_NONE, "0..L",
           "https://github.com/NVIDIA/Model-Optimizer/blob/a2fbac7bad8ab446d3f8783dadb0c3366eb0ad73/examples/"
           "speculative_decoding/collect_hidden_states/compute_hidden_states_vllm.py", "code", None,
           "the vLLM dumper passes the same ids to vLLM extract_hidden_states (r = id) and stores the pre-norm "
           "final r = L: one layer apart from the HF dumper for the same --aux-layers") for f in E),
    *(Rule("nemo-automodel", "trainer", f, (TOP_KEY,), 0, DEFAULT_CANONICAL, "0..L",
           "https://docs.nvidia.com/nemo/automodel/nemo-automodel/nemo_automodel/components/speculative/eagle/"
           "vllm_runner", "derived", None, "EAGLE-3 capture through vLLM extract_hidden_states") for f in E),
    Rule("nemo-automodel", "trainer", "dspark", (DFLASH_TOP_KEY,), 1, "ids spread over 1..L-1 (+1)", "0..L",
         "https://github.com/NVIDIA-NeMo/Automodel/pull/3083", "PR", None,
         "HF offset-1: id -1 is the embedding, id L-1 HF's post-norm last state"),
    Rule("eagle", "trainer", "eagle3", (), IGNORED, DEFAULT_CANONICAL, "1..L-1",
         "https://github.com/SafeAILab/EAGLE/issues/239", "code", None, "SafeAILab/EAGLE hard-codes its capture"),
)


@dataclass(frozen=True)
class ConfigRule:
    """A rule about a draft config's id list as a whole (not one id's numbering), with its public source."""

    name: str
    engines: tuple[str, ...]
    rule: str
    fix: str
    source: str


CONFIG_RULES: dict[str, ConfigRule] = {r.name: r for r in (
    ConfigRule("duplicate", ("vllm", "sglang", "llama.cpp", "tokenspeed", "trtllm", "atlas"),
               "the capture loop tests each block index for membership in the aux-id set (vLLM "
               "`if idx in self.aux_hidden_state_layers`, SGLang `layers_to_capture`): a repeated id is captured "
               "once, so the engine concatenates fewer states than the fc takes (a shape error, or the fc reads "
               "the wrong width when padded); read in vLLM's and SGLang's code, and the registry models every other "
               "engine's capture the same way (one state per captured layer, in layer order)",
               "list one distinct id per fc slice: the layers the fc was trained on",
               "https://github.com/NVIDIA-NeMo/Automodel/pull/2256"),
    ConfigRule("last_layer_aux", ("vllm", "llama.cpp", "tokenspeed", "trtllm", "atlas"),
               "speculators generates data with the final layer L appended to the ids (launch_vllm.py "
               "--include-last-layer: the training target) and trains the fc on the ids without it; a draft config "
               "whose aux ids still end with the final layer makes every engine whose capture reaches r = L (vLLM "
               "EagleModelMixin since vllm#36063; llama.cpp's nextn path, tokenspeed#526, TensorRT-LLM's "
               "capture after the last block, atlas DFlash since atlas#394, each by its registry rule) serve the "
               "final pre-norm boundary as one more fc input",
               "drop the final layer from the aux ids: write the ids the fc was trained on",
               "https://github.com/vllm-project/speculators/pull/839"),
)}


def rules_for(system: str | None = None, family: str | None = None, version: str | None = None) -> list[Rule]:
    """The rules matching a system, family and canonical version (None: any)."""
    return [r for r in RULES if (system is None or r.system == system) and (family is None or r.family == family)
            and (version is None or r.versions is None or version in r.versions)]
