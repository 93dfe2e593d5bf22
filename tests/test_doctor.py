"""The pre-flight doctor: a trainer invocation and a draft config, no data. Each silent default the 2026
incidents show is a finding; values worked out by hand from each system's rule."""

from __future__ import annotations

import json

import pytest

from forensics.analysis.audit.doctor import preflight
from forensics.cli import main

L = 30


def draft(tmp_path, cfg):
    d = tmp_path / "draft"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def kinds(res):
    return {f.kind for f in res.findings}


def test_speculators_ids_as_given_and_served_by_vllm_match(tmp_path):
    d = draft(tmp_path, {"eagle_aux_hidden_state_layer_ids": [2, 15, 27]})
    res = preflight(d, "vllm", trainer="speculators", target_layer_ids=[2, 15, 27], include_last_layer=True,
                    num_layers=L)
    assert res.wiring == "match" and res.trained.fc_r == [2, 15, 27]


def test_training_ids_that_include_the_final_layer_are_an_error(tmp_path):
    d = draft(tmp_path, {"eagle_aux_hidden_state_layer_ids": [2, 15, 27, 30]})
    res = preflight(d, "vllm", trainer="speculators", target_layer_ids=[2, 15, 27, 30], num_layers=L)
    assert "trainer_ids_include_last" in kinds(res)


def test_a_trainer_invoked_without_ids_falls_back_silently_and_the_doctor_says_so(tmp_path):
    d = draft(tmp_path, {"eagle_aux_hidden_state_layer_ids": [3, 16, 28]})
    res = preflight(d, "vllm", trainer="speculators", num_layers=L)
    f = next(f for f in res.findings if f.kind == "trainer_ids_missing")
    assert f.evidence["default_r"] == [2, 15, 27]
    assert res.wiring == "mismatch"  # trained on the default, served the config's [3, 16, 28]


def test_trainer_ids_that_differ_from_the_config_are_flagged(tmp_path):
    d = draft(tmp_path, {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 14, 26]}})
    res = preflight(d, "sglang", engine_version="pre-25454", trainer="specforge", target_layer_ids=[2, 15, 27],
                    num_layers=L)
    assert "trainer_ids_vs_config" in kinds(res)
    assert res.trained.fc_r == [3, 16, 28] and res.served.r == [2, 15, 27] and res.wiring == "mismatch"


def test_specforge_needs_three_ids(tmp_path):
    d = draft(tmp_path, {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 7, 14, 21, 26]}})
    res = preflight(d, "sglang", trainer="specforge", target_layer_ids=[1, 7, 14, 21, 26], num_layers=L)
    assert "trainer_ids_invalid" in kinds(res)


def test_layer_count_is_needed(tmp_path):
    from forensics.errors import ForensicsError

    with pytest.raises(ForensicsError, match="layer count"):
        preflight(draft(tmp_path, {}), "vllm")


def test_cli_preflight_exit_codes(tmp_path, capsys):
    d = draft(tmp_path, {"dflash_config": {"target_layer_ids": [1, 38, 78]}, "num_hidden_layers": 3})
    code = main(["audit", "--draft", d, "--engine", "vllm", "--engine-version", "latest",
                 "--trained-layout", "L2,L39,L78", "--num-layers", "78"])
    out = capsys.readouterr().out
    assert code == 1 and "id_is_count" in out and '{"dflash_config": {"target_layer_ids": [1, 38, 77]}}' in out
    assert main(["audit", "--draft", d, "--engine", "vllm", "--trainer", "speculators", "--target-layer-ids", "x",
                 "--num-layers", "78"]) == 2
    code = main(["audit", "--draft", d, "--engine", "vllm", "--trained-layout", "L2,L39,L78", "--num-layers", "78"])
    assert code == 1  # every vLLM version misreads [1, 38, 78]: raw before #40727, 78 + 1 > L after
    (tmp_path / "draft" / "config.json").write_text(json.dumps({"dflash_config": {"target_layer_ids": [1, 38, 77]}}))
    code = main(["audit", "--draft", d, "--engine", "vllm", "--trained-layout", "L2,L39,L78", "--num-layers", "78"])
    assert code == 3  # no version: right after vllm#40727 (+ 1), wrong before it (raw)


def test_a_family_the_engine_has_no_rule_for_is_cannot_tell_not_a_guess(tmp_path):
    d = draft(tmp_path, {"dspark_target_layer_ids": [40, 41, 42]})
    res = preflight(d, "llama.cpp", trained_layout=["L41", "L42", "L43"], num_layers=43)
    assert res.wiring == "cannot-tell" and "no known rule" in res.reason
    assert preflight(d, "vllm", trained_layout=["L41", "L42", "L43"], num_layers=43).wiring == "match"


@pytest.mark.parametrize("cfg", [{"eagle_aux_hidden_state_layer_ids": "2,15"}, {"eagle_config": [1, 2]},
                                 {"dflash_config": "x"}, {"eagle_aux_hidden_state_layer_ids": [True, 2]},
                                 {"speculators_model_type": "mtp"}, {"dspark_target_layer_ids": [-5, 100]}])
@pytest.mark.parametrize("engine", ["vllm", "sglang", "llama.cpp", "tokenspeed", "trtllm", "atlas"])
def test_malformed_or_unusual_configs_give_a_verdict_or_one_line_error(tmp_path, cfg, engine):
    from forensics.errors import ForensicsError

    try:
        res = preflight(draft(tmp_path, cfg), engine, trained_layout=["L2", "L15", "L27"], num_layers=L)
    except ForensicsError as e:
        assert "\n" not in str(e)
        return
    assert res.wiring in ("match", "mismatch", "cannot-tell") and res.text()
