"""``hsf report --model`` runs its wiring audit with every piece of evidence it was given (issue 24).

Ground truth by hand: ``sample_data/speculators_v1`` trained the fc on r = [0, 3, 16] (its ``capture.json``);
``sample_data/draft_eagle3`` records top-level ids [0, 3, 16], which SGLang ignores (it reads only the nested
key) and replaces with its default r = [2, 15, 27] (``[2, L//2, L-3]``, L = 30). The fix writes the nested ids
SGLang reads as r = id + 1: [-1, 2, 15].
"""

from __future__ import annotations

import json

import pytest

from forensics.cli import main


@pytest.mark.model
def test_report_with_model_gives_the_audits_exact_verdict_and_fix(sample_data, tmp_path, capsys):
    args = ["--model", "default", "--draft", str(sample_data / "draft_eagle3"), "--engine", "sglang", "--json"]
    code = main(["report", str(sample_data), "-o", str(tmp_path / "r.html"), *args])
    rep = json.loads(capsys.readouterr().out)
    assert code == 1 and rep["verdict"] == "fail"
    assert rep["audit"] == "mismatch" and rep["audit_exit_code"] == 1
    assert rep["audit_fix"]["ids"] == [-1, 2, 15] and rep["audit_fix"]["r"] == [0, 3, 16]
    assert rep["audit_fix"]["key"] == "eagle_config.eagle_aux_hidden_state_layer_ids"
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "run with --model" not in html  # the model was given: nothing asks for it
    code_a = main(["audit", "--data", str(sample_data / "speculators_v1"), *args])
    aud = json.loads(capsys.readouterr().out)
    assert (code_a, aud["verdict"], aud["fix"]) == (rep["audit_exit_code"], rep["audit"], rep["audit_fix"])
