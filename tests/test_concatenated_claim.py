"""A slot that is k layers side by side (``[T, k·H]``, EAGLE-3's concatenated aux states) under a claim of one layer.

The slot is built here from the real SmolLM2 ladder in ``sample_data``: ``cat([L3, L16, L28], -1)``, 1728 = 3 × 576
wide, so the truth is known. With ``--model`` the model's hidden size is known and the width alone excludes any
one-layer claim: FAIL, with the arithmetic. From the data alone the ``concatenated`` rule is a WARN and the claim
stays CANNOT TELL (the rule reads repeated massive-activation dims; it was measured on one model's corpus only).
"""

from __future__ import annotations

import json

import pytest
import torch

from forensics.cli import main
from forensics.findings import FindingKind


@pytest.fixture(scope="module")
def wide(tmp_path_factory, sample_data):
    from safetensors.torch import load_file, save_file

    t = load_file(str(sample_data / "ladder" / "capture_0.safetensors"))
    aux = torch.cat([t["slot_3.L3"], t["slot_16.L16"], t["slot_28.L28"]], -1).contiguous()
    path = tmp_path_factory.mktemp("concat") / "aux.safetensors"
    save_file({"input_ids": t["input_ids"], "aux": aux}, str(path))
    return str(path)


def _json(argv, capsys):
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def test_data_only_a_one_layer_claim_stays_cannot_tell(wide, capsys):
    code, doc = _json(["fingerprint", wide, "--layers", "16", "--json"], capsys)
    f = doc["files"][0]
    assert (code, f["verdict"]) == (3, "cannot tell")
    assert [(x["kind"], x["severity"]) for x in f["findings"] if x["kind"] == "concatenated"] == [
        ("concatenated", "warn")]


def test_the_training_data_finding_has_its_kind():
    """The audit names every capture finding ``data_<kind>``: a concatenated slot in the training data was a
    ValueError traceback (no ``data_concatenated`` kind)."""
    assert FindingKind.CONCATENATED.on_training_data() is FindingKind.DATA_CONCATENATED


def test_audit_of_concatenated_training_data_is_no_traceback(wide, capsys):
    code = main(["audit", "--data", wide, "--draft", "sample_data/draft_eagle3", "--engine", "sglang",
                 "--trainer", "specforge"])
    out = capsys.readouterr()
    assert code in (0, 1, 3) and "Traceback" not in out.err and "data_concatenated" in out.out


@pytest.mark.model
def test_with_the_model_the_width_excludes_a_one_layer_claim(wide, capsys):
    code, doc = _json(["fingerprint", wide, "--layers", "16", "--model", "default", "--json"], capsys)
    f = doc["files"][0]
    fails = [x for x in f["findings"] if x["kind"] == "concatenated"]
    assert (code, f["verdict"], [x["severity"] for x in fails]) == (1, "fail", ["fail"])
    ev = fails[0]["evidence"]
    assert (ev["width"], ev["k"], ev["hidden_size"], ev["claimed"]) == (1728, 3, 576, ["L16"])
    assert f["slots"][0]["verdict"] == "fail" and "1728 = 3 × 576" in f["slots"][0]["verdict_why"]
    assert "three layers concatenated, claimed one (L16)" in f["slots"][0]["verdict_why"]
    # nothing claimed: the capture as stored cannot be checked against the model: one line, exit 2, how to re-save
    code = main(["fingerprint", wide, "--model", "default"])
    got = capsys.readouterr()
    assert code == 2 and "is 3 × 576" in got.err and "[T, 3, H]" in got.err
