"""Unknown is not a contradiction (issue 24): the audit compares only what is known on both sides.

Every tensor is a real SmolLM2 state with its r known from how it was captured (``sample_data/README.md``):
the ladder holds every r of one text (``chat_ladder.json``), ``speculators_v1/data_0.pt`` holds
``[0, 3, 16, 28]`` of another (``chat_capital.json``). The training data here is ``[0, 3, 16, 30]`` of the
ladder text, stored *without* a sidecar, so from the data alone only slot 0 (the embedding) has a known r.
The draft config (``eagle_aux_hidden_state_layer_ids = [0, 3, 16]``) is read by vLLM as r = id. The two chat
texts share their first 24 tokens (the chat template's system prompt): a served capture on "other text" here
starts after them, so nothing is joined on tokens.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from test_draft_config import make_draft, speculators_config

from forensics import load
from forensics.analysis.audit.core import _known_differences, audit
from forensics.analysis.audit.training import _repeated
from forensics.cli import main

TRAINED = [0, 3, 16]  # fc inputs; slot 3 (r = 30) is the speculators-v1 target
SHARED = 24  # tokens the two chat samples share (the system prompt)


@pytest.fixture(scope="module")
def setup(sample_data, tmp_path_factory):
    t = tmp_path_factory.mktemp("unknowns")
    lad = load(sample_data / "ladder" / "capture_0.safetensors")
    by_r = dict(zip(lad.declared_r, lad.slots, strict=True))
    train = t / "train"
    train.mkdir()
    torch.save({"input_ids": lad.input_ids, "hidden_states": [by_r[r].tensor().clone() for r in (0, 3, 16, 30)],
                "loss_mask": torch.ones_like(lad.input_ids)}, train / "data_0.pt")  # no capture.json
    other = load(sample_data / "speculators_v1" / "data_0.pt")  # [0, 3, 16, 28] of another text

    def served(name, slots, ids):
        """vLLM ExampleHiddenStatesConnector layout: hidden_states [k, seq, H] + token_ids [seq]."""
        hs = torch.stack([s.tensor() for s in slots], dim=0).contiguous()
        save_file({"hidden_states": hs, "token_ids": ids.to(torch.int64).contiguous()}, str(t / name))
        return str(t / name)

    draft = make_draft(t / "draft", speculators_config(TRAINED, 576, V=49152, Vd=8192), H=576, V=49152, Vd=8192)
    cut = [type("S", (), {"tensor": (lambda s=s: s.tensor()[SHARED:])}) for s in other.slots]
    return {"train": str(train), "draft": draft, "dir": t, "served": served,
            "same": served("same.safetensors", [by_r[0], by_r[3], by_r[16]], lad.input_ids),
            "other": served("other.safetensors", cut[0:3], other.input_ids[SHARED:])}


def _audit(setup, served, **kw):
    return audit(data=setup["train"], draft=setup["draft"], engine="vllm", num_layers=30, served=setup[served],
                 **kw)


def _kinds(res):
    return {f.kind for f in res.findings}


def test_helpers_compare_known_only():
    assert _repeated([0, None, None]) == [] and _repeated([2, 24, 24]) == [24]
    assert _known_differences([0, 3, 16], [0, None, None]) == []
    assert _known_differences([0, 3, 16], [0, 4, None]) == [1]
    assert _known_differences([0, 3], [0, 3, 16]) == [2]


def test_unknown_served_other_text_is_cannot_tell_not_mismatch(setup, capsys):
    res = _audit(setup, "other")
    assert res.served.joined_tokens == 0  # other text: nothing joined on tokens
    assert [s.trained_r for s in res.slices] == [0, None, None]  # the data alone names the embedding only
    assert res.wiring == "cannot-tell", res.reason
    assert [s.ok for s in res.slices][1:] == [None, None]
    assert "config_vs_served" not in _kinds(res) and "duplicate" not in _kinds(res)
    assert not [f for f in res.findings if f.is_fail]
    assert main(["audit", "--data", setup["train"], "--draft", setup["draft"], "--engine", "vllm", "--num-layers",
                 "30", "--served", setup["other"], "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["wiring"] == "cannot-tell"


def test_unknown_served_same_tokens_matches_on_the_tensors(setup):
    """Same tokens: the served rows are the trained rows (cosine ≥ 0.999): the wiring is right even though no
    layer is named, and the config's prediction is not contradicted by an unnamed served state."""
    res = _audit(setup, "same")
    assert res.wiring == "match", res.reason
    assert [s.ok for s in res.slices] == [True, True, True]
    assert "config_vs_served" not in _kinds(res) and "duplicate" not in _kinds(res)
    assert res.exit_code() == 0


@pytest.mark.model
def test_model_names_served_slots_exactly(setup, smollm2, sample_data):
    """--model: the served capture has token ids, so its slots get an exact r like the training data's. The
    served states are computed here by the model on a raw text the training data does not hold."""
    from forensics.models.recorder import slot_states, tokenize

    model, tok = smollm2
    sample = tokenize(tok, str(sample_data / "texts" / "english_rivers.txt"), False, 256)
    ids = torch.tensor(sample.input_ids)
    states = slot_states(model, sample.input_ids, [0, 3, 16, 28], "bf16")
    slot = [type("S", (), {"tensor": (lambda t=t: t)}) for t in states]
    setup["good"] = setup["served"]("good.safetensors", slot[0:3], ids)
    setup["other_shifted"] = setup["served"]("bad.safetensors", slot[1:4], ids)
    res = _audit(setup, "good", model="default")
    assert res.wiring == "match", res.reason
    assert [s.served_r for s in res.slices] == TRAINED and [s.trained_r for s in res.slices] == TRAINED
    assert "--model" not in res.reason and (res.settle is None or "--model HF_FOLDER" not in res.settle)
    bad = _audit(setup, "other_shifted", model="default")
    assert bad.wiring == "mismatch"
    assert [s.served_r for s in bad.slices] == [3, 16, 28]
    assert bad.fix is None or bad.fix.ids == TRAINED
