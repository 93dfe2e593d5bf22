"""The two config scenarios of issue 24, decided by the registry's ``CONFIG_RULES`` with their public sources.

Expected values worked out by hand from the engines' capture loops (``forensics.models.conventions.rules``):
vLLM reads the top-level ids as r = id and captures each block index once (membership test), in ascending
order; since vllm#36063 id L (the last block's pre-norm output) is captured too. speculators trains the fc on
its ids *without* the final layer L that ``--include-last-layer`` appends for the data (speculators#839).
L = 30, H = 576 (SmolLM2 shape); the fc takes 3 states.
"""

from __future__ import annotations

import json

from test_draft_config import make_draft, speculators_config

from forensics.analysis.audit.core import audit
from forensics.analysis.audit.doctor import preflight
from forensics.cli import main
from forensics.findings import FindingKind
from forensics.models.conventions.rules import CONFIG_RULES


def _draft(tmp_path, ids):
    return make_draft(tmp_path / "draft", speculators_config(ids, 576, V=49152, Vd=8192), H=576, V=49152, Vd=8192)


def _kinds(res):
    return [f.kind for f in res.findings]


def test_rules_cite_public_sources():
    assert set(CONFIG_RULES) == {"duplicate", "last_layer_aux"}
    assert all(r.source.startswith("https://github.com/") and r.rule and r.fix for r in CONFIG_RULES.values())


def test_duplicate_ids_fail_naming_the_layer_with_the_fix(tmp_path, capsys):
    draft = _draft(tmp_path, [2, 24, 24])
    res = audit(data=["L2", "L15", "L27", "L30"], trainer="speculators", draft=draft, engine="vllm", num_layers=30)
    dup = [f for f in res.findings if f.kind is FindingKind.DUPLICATE]
    assert len(dup) == 1 and dup[0].is_fail
    assert dup[0].evidence["repeated_ids"] == [24] and dup[0].evidence["captured_r"] == [2, 24]
    assert "id 24" in dup[0].message and CONFIG_RULES["duplicate"].source in dup[0].message
    assert res.wiring == "mismatch" and res.fix.ids == [2, 15, 27]  # the trained layers, r = id
    # data-free pre-flight: one `duplicate` (not also `ids_duplicate` for the same list), FAIL, exit 1
    pre = preflight(draft=draft, engine="vllm", num_layers=30)
    assert _kinds(pre).count(FindingKind.DUPLICATE) == 1 and FindingKind.IDS_DUPLICATE not in _kinds(pre)
    assert main(["audit", "--draft", draft, "--engine", "vllm", "--num-layers", "30", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert any(f["kind"] == "duplicate" and f["severity"] == "fail" for f in doc["findings"])


def test_duplicate_trained_layers_have_no_id_fix(tmp_path):
    """The trainer read the same repeated ids: no id list makes vLLM serve one layer twice."""
    res = audit(trainer="speculators", draft=_draft(tmp_path, [2, 24, 24]), engine="vllm", num_layers=30)
    assert res.wiring == "mismatch"
    assert res.fix.ids is None and "retrain" in res.fix.caveat


def test_last_layer_among_aux_ids_under_vllm_is_a_mismatch_with_the_fix(tmp_path, capsys):
    draft = _draft(tmp_path, [2, 15, 27, 30])
    res = audit(trainer="speculators", draft=draft, engine="vllm", num_layers=30)
    assert res.trained.fc_r == [2, 15, 27]  # speculators#839: L is the target, not an fc input
    assert res.served.r == [2, 15, 27, 30]  # vLLM (post-#36063) serves the final boundary
    assert res.wiring == "mismatch" and FindingKind.IDS_INCLUDE_LAST in _kinds(res)
    assert res.fix.ids == [2, 15, 27] and not res.fix.already_set
    # the trainer invocation, version not given: the same fix is right in every vLLM version
    code = main(["audit", "--draft", draft, "--engine", "vllm", "--num-layers", "30", "--trainer", "speculators",
                 "--target-layer-ids", "2,15,27", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["wiring"] == "mismatch" and doc["fix"]["ids"] == [2, 15, 27]


def test_last_layer_the_fc_was_built_for_is_served_as_trained(tmp_path):
    """fc width 4 states: the fc did take L (no rule drops it), and vLLM serves it: no include-last finding."""
    draft = make_draft(tmp_path / "d4", speculators_config([2, 15, 27, 30], 576, V=49152, Vd=8192), H=576, k=4,
                       V=49152, Vd=8192)
    res = audit(trainer="speculators", draft=draft, engine="vllm", num_layers=30, engine_version="post-46973")
    assert res.trained.fc_r == [2, 15, 27, 30] and res.wiring == "match"
    assert FindingKind.IDS_INCLUDE_LAST not in _kinds(res)


def test_duplicate_nested_ids_under_sglang(tmp_path):
    """SGLang (generic model file) reads the nested ids as r = id + 1: [1, 23, 23] captures r = [2, 24] once each."""
    from test_draft_config import sglang_config

    draft = make_draft(tmp_path / "sg", sglang_config([1, 23, 23], 576, V=49152, Vd=8192), H=576, V=49152, Vd=8192)
    res = audit(data=["L2", "L15", "L27", "L30"], trainer="speculators", draft=draft, engine="sglang", num_layers=30)
    dup = next(f for f in res.findings if f.kind is FindingKind.DUPLICATE)
    assert dup.evidence["captured_r"] == [2, 24] and "id 23 (r = L24)" in dup.message
    assert res.wiring == "mismatch" and res.fix.ids == [1, 14, 26]
