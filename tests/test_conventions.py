"""Tests for forensics.models.conventions: every rule checked against values worked out by hand from the
reference (each rule's PR), plus the to_r ∘ from_r round trip."""

from __future__ import annotations

import itertools

import pytest

from forensics.errors import ForensicsError
from forensics.models import conventions as cv

KIMI_L = 61


@pytest.mark.parametrize("system, ids, version, arch, want", [
    ("speculators-v1", [2, 30, 58, 60], None, None, [3, 31, 59, 61]),  # legacy generator: after the layer
    ("speculators-v1", [-1], None, None, [None]),  # ids outside 0..L-1 rejected: no embedding
    ("speculators", [2, 30, 58, 61], None, None, [2, 30, 58, 61]),  # vLLM ids, last = L
    ("vllm", [2, 30, 58], "pre-36063", None, [2, 30, 58]),
    ("vllm", [0, 62], None, None, [0, None]),
    ("sglang", [2, 30, 58], "pre-25454", "deepseek", [3, 31, 59]),  # the Kimi-K2.5 case
    ("sglang", [-1, 2, 30], "pre-25454", "deepseek", [0, 3, 31]),
    ("sglang", [2, 30, 58], "post-25454", "deepseek", [2, 30, 58]),  # first id != 1: raw
    ("sglang", [1, 29, 57], "post-25454", "deepseek", [2, 30, 58]),  # first id == 1: +1
    ("sglang", [-1, 2, 30], "post-25454", "deepseek", [None, 2, 30]),  # -1 never matches
    ("sglang", [2, 30, 58], "post-25454", "generic", [3, 31, 59]),  # other model files keep +1
    ("sglang", [60], "pre-25454", None, [None]),  # index 61 = L is never reached by the loop
    ("specforge", [1, 29, 57], None, None, [2, 30, 58]),
])
def test_to_r_rules(system, ids, version, arch, want):
    assert cv.system(system).to_r(ids, KIMI_L, version, arch) == want


@pytest.mark.parametrize("system, L, want", [
    ("vllm", 80, [2, 40, 77]), ("sglang", 61, [2, 30, 58]), ("specforge", 30, [2, 15, 27]),
    ("eagle", 32, [2, 16, 29]), ("speculators", 30, [2, 15, 27, 30]),
    ("speculators-v1", 30, [3, 16, 28, 30]),
])
def test_defaults_without_ids(system, L, want):
    assert cv.system(system).to_r(None, L) == want


def test_specforge_needs_exactly_three_non_negative_ids():
    with pytest.raises(ForensicsError, match="exactly 3"):
        cv.system("specforge").to_r([1, 2], 30)
    with pytest.raises(ForensicsError, match="exactly 3"):
        cv.system("specforge").to_r([-1, 2, 3], 30)


@pytest.mark.parametrize("text, want", [
    (None, "post-25454"), ("latest", "post-25454"), ("sglang<25454", "pre-25454"), ("<25454", "pre-25454"),
    ("pre-25454", "pre-25454"), (">=25454", "post-25454"), ("sglang>=#25454", "post-25454"), ("old", "pre-25454"),
])
def test_sglang_versions(text, want):
    assert cv.system("sglang").version(text) == want


@pytest.mark.parametrize("text, want", [
    (None, "post-46973"), ("pre-36063", "pre-36063"), ("pre-46973", "post-40727"), ("pre-40727", "post-36063"),
    ("vllm>=36063", "post-36063"),
])
def test_vllm_versions(text, want):
    assert cv.system("vllm").version(text) == want


@pytest.mark.parametrize("bad", ["0.5.3", "pre-12345", "yesterday"])
def test_unknown_versions_are_refused_with_the_accepted_list(bad):
    with pytest.raises(ForensicsError, match="accepted: pre-25454, post-25454"):
        cv.system("sglang").version(bad)


def test_arch_family():
    assert cv.arch_family(["KimiK25ForConditionalGeneration"]) == "deepseek"
    assert cv.arch_family(["DeepseekV3ForCausalLM"]) == "deepseek"
    assert cv.arch_family(["LlamaForCausalLM"], "llama") == "generic"


def test_sglang_reads_only_the_nested_key_vllm_only_the_top_level():
    top = {"eagle_aux_hidden_state_layer_ids": [0, 3, 16]}
    nested = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 15, 27]}}
    s = cv.system("sglang").capture(top, 30, "pre-25454")
    assert s.source == "default" and s.r == [2, 15, 27] and s.key == cv.NESTED_KEY
    v = cv.system("vllm").capture(nested, 30)
    assert v.source == "default" and v.r == [2, 15, 27] and v.key == cv.TOP_KEY
    s2 = cv.system("sglang").capture(nested, 30, "pre-25454")
    assert s2.source == "config" and s2.r == [3, 16, 28]


def test_empty_lists_sglang_captures_nothing_vllm_falls_back():
    assert cv.system("sglang").capture({"eagle_config": {"eagle_aux_hidden_state_layer_ids": []}}, 30).r == []
    v = cv.system("vllm").capture({"eagle_aux_hidden_state_layer_ids": []}, 30)
    assert v.source == "default" and v.r == [2, 15, 27]


def test_engine_capture_is_ascending_and_reports_uncapturable():
    e = cv.system("sglang").capture({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [30, -1, 2]}},
                          KIMI_L, "pre-25454")
    assert e.r == [0, 3, 31]
    assert any("residual is None" in p for p in e.problems)  # embedding needs a patch
    old = cv.system("vllm").capture({"eagle_aux_hidden_state_layer_ids": [2, 30, 61]}, KIMI_L, "pre-46973",
                            "deepseek")
    assert old.r == [2, 30] and old.dropped == [61] and any("match no layer" in p for p in old.problems)
    new = cv.system("vllm").capture({"eagle_aux_hidden_state_layer_ids": [2, 30, 61]}, KIMI_L, None, "deepseek")
    assert new.problems == []


def test_from_r_kimi_fixes():
    pre = cv.system("sglang").from_r([0, 3, 31], KIMI_L, "pre-25454", "deepseek")
    assert pre.ids == [-1, 2, 30] and pre.where == "nested" and "patch" in pre.caveat
    post = cv.system("sglang").from_r([0, 3, 31], KIMI_L, "post-25454", "deepseek")
    assert post.ids == [0, 3, 31] and "patch" in post.caveat
    v = cv.system("vllm").from_r([0, 3, 31], KIMI_L)
    assert v.ids == [0, 3, 31] and v.where == "top-level" and v.key == cv.TOP_KEY


def test_from_r_impossible_cases_say_why():
    assert cv.system("sglang").from_r([3, 31, 61], KIMI_L, "pre-25454").ids is None  # r = L never captured
    p = cv.system("vllm").from_r([3, 0, 31], KIMI_L)
    assert p.ids is None and "ascending" in p.caveat
    assert cv.system("specforge").from_r([0, 3, 31], KIMI_L).ids is None
    assert cv.system("sglang").from_r([1], KIMI_L, "post-25454", "deepseek").ids is None


@pytest.mark.parametrize("system, version, arch", [
    ("sglang", "pre-25454", "generic"), ("sglang", "post-25454", "generic"), ("sglang", "pre-25454", "deepseek"),
    ("sglang", "post-25454", "deepseek"), ("vllm", None, "generic"), ("vllm", "pre-36063", "generic"),
    ("specforge", None, None), ("speculators-v1", None, None), ("speculators", None, None),
])
def test_round_trip_from_r_then_to_r(system, version, arch):
    L = 12
    for rs in itertools.combinations(range(0, L + 1), 3):
        plan = cv.system(system).from_r(list(rs), L, version, arch)
        if plan.ids is None:
            continue
        got = cv.system(system).to_r(plan.ids, L, version, arch)
        if system in ("sglang", "vllm"):
            got = sorted(got)  # engines concatenate in ascending layer order
        assert got == list(rs), (system, version, arch, rs, plan.ids)


def test_trainer_views():
    v1 = cv.system("speculators-v1").trainer_view(4)
    assert v1.fc_slots == [0, 1, 2] and v1.target_slot == 3 and v1.target_norm == "pre"
    assert cv.system("specforge").trainer_view(4).target_norm == "post"
    with pytest.raises(ForensicsError):
        cv.system("medusa").trainer_view(4)


# ---- the 2026 registry: families, engines, readings (values worked out by hand from each rule's source) ------

@pytest.mark.parametrize("system, ids, L, version, family, want", [
    ("vllm", [1, 9, 17, 25, 33], 36, "post-40727", "dflash", [2, 10, 18, 26, 34]),  # vllm#40727: + 1
    ("vllm", [1, 9, 17, 25, 33], 36, "pre-40727", "dflash", [1, 9, 17, 25, 33]),  # before: raw
    ("vllm", [40, 41, 42], 43, None, "dspark", [41, 42, 43]),  # DeepSeek-V4: the last 3 blocks' outputs
    ("sglang", [1, 17, 33], 36, None, "dflash", [2, 18, 34]),  # dflash_utils: output of each block
    ("sglang", [-1, 15, 29], 30, None, "dspark", [None, 16, None]),  # Automodel#3083: not servable
    ("nemo-automodel", [-1, 15, 29], 30, None, "dspark", [0, 16, "final_post"]),  # HF offset-1
    ("llama.cpp", [1, 21, 40], 43, "pre-25794", "eagle3", [2, 21, 40]),  # llama.cpp#18039: ids ignored
    ("llama.cpp", [24, 30, 36], 36, "post-25794", "eagle3", [24, 30, 36]),  # #25794: r = id, L reachable
    ("tokenspeed", [1, 17, 32], 36, "post-526", "eagle3", [2, 18, 33]),  # first id 1: + 1
    ("tokenspeed", [24, 30, 36], 36, "post-526", "eagle3", [24, 30, 36]),  # first id 24: raw
    ("tokenspeed", [24, 30, 36], 36, "pre-526", "eagle3", [2, 18, 33]),  # hard-coded
    ("atlas", [1, 21, 41, 61], 64, "pre-394", "dflash", [1, 21, 41, 61]),
    ("atlas", [1, 21, 41, 61], 64, "post-394", "dflash", [2, 22, 42, 62]),
    ("modelopt", [1, 39, 76], 80, None, "eagle3", [2, 40, 77]),  # output-of ids (Model-Optimizer#1509)
    ("specforge", [1, 17, 33], 36, None, "dflash", [2, 18, 34]),
    ("vllm", [2, 15, 27], 30, None, "p-eagle", [2, 15, 27]),  # vllm#41826 maps P-EAGLE to Eagle3
])
def test_registry_rules(system, ids, L, version, family, want):
    assert cv.system(system).to_r(ids, L, version, family=family) == want


def test_dflash_default_spreads_one_id_per_draft_layer_over_blocks_1_to_L_minus_3():
    assert cv.dflash_default_ids(36, 5) == [1, 9, 17, 25, 33]  # 1 + i * 32 / 4
    assert cv.dflash_default_ids(36, 3) == [1, 17, 33]
    assert cv.dflash_default_ids(36, 1) == [18]


def test_unsettled_numbering_refuses_to_pick_and_readings_lists_both():
    with pytest.raises(ForensicsError, match="not settled"):
        cv.system("llama.cpp").to_r([1, 21, 40], 43, family="dflash")  # llama.cpp DFlash: still not settled
    got = cv.system("llama.cpp").readings([1, 21, 40], 43, family="dflash")
    assert got["llama.cpp post-25794 if r = id"] == [1, 21, 40]
    assert got["llama.cpp post-25794 if r = id + 1"] == [2, 22, 41]
    plan = cv.system("llama.cpp").from_r([2, 22, 41], 43, family="dflash")
    assert plan.ids is None and "[1, 21, 40]" in plan.caveat and "[2, 22, 41]" in plan.caveat


def test_trtllm_is_settled_capture_after_block_id_and_minus_one_is_final_post():
    # eagle3.py captures at the end of decoder layer id (r = id + 1), default (1, N//2-1, N-4); SaveHiddenStates:
    # "-1 to indicate the final post-norm hidden state"
    assert cv.system("tensorrt-llm").to_r([1, 21, 39, -1], 43) == [2, 22, 40, "final_post"]
    assert cv.system("trtllm").to_r(None, 43) == [2, 21, 40]
    assert cv.system("trtllm").from_r([2, 22, 41], 43).ids == [1, 21, 40]


def test_modelopt_is_split_by_dumper():
    # the same --aux-layers give tensors one layer apart: HF dumper r = id + 1, vLLM dumper r = id
    assert cv.system("modelopt-hf").to_r([1, 15, 26], 30) == [2, 16, 27]
    assert cv.system("modelopt-vllm").to_r([1, 15, 26], 30) == [1, 15, 26]


@pytest.mark.parametrize("config, family", [
    ({"dflash_config": {"target_layer_ids": [1]}}, "dflash"),
    ({"dspark_target_layer_ids": [40, 41, 42]}, "dspark"),
    ({"architectures": ["PEagleDraftModel"]}, "p-eagle"),
    ({"fc_norm": True, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 21, 40]}}, "eagle3.1"),
    ({"eagle_aux_hidden_state_layer_ids": [2, 15, 27]}, "eagle3"),
])
def test_detect_family(config, family):
    assert cv.detect_family(config) == family


def test_fix_snippet_and_apply_use_the_familys_own_key():
    plan = cv.system("vllm").from_r([2, 10, 18], 36, family="dflash")
    assert plan.ids == [1, 9, 17] and plan.snippet == {"dflash_config": {"target_layer_ids": [1, 9, 17]}}
    cfg = {"dflash_config": {"block_size": 16}}
    assert plan.apply(cfg) == {"dflash_config": {"block_size": 16, "target_layer_ids": [1, 9, 17]}}
    assert cfg == {"dflash_config": {"block_size": 16}}  # the input is not modified


def test_every_rule_cites_a_public_url_and_the_docs_table_is_generated_from_the_registry(repo_root):
    from forensics.models.conventions.rules import RULES
    from forensics.views.conventions import MARKDOWN_BEGIN, MARKDOWN_END, markdown

    assert all(r.source.startswith("https://") for r in RULES)
    assert {r.family for r in RULES} == set(cv.FAMILIES)
    assert set(cv.ENGINES) <= {r.system for r in RULES}
    doc = (repo_root / "docs" / "conventions.md").read_text()
    section = doc[doc.index(MARKDOWN_BEGIN):doc.index(MARKDOWN_END) + len(MARKDOWN_END)]
    assert section == markdown(RULES), "docs/conventions.md table is stale: run scripts/readme_conventions.py"
