"""The 2026 engine dump formats, each built from its public source's field names with real SmolLM2 states produced by
plain transformers: TensorRT-LLM SaveState record lists, Model-Optimizer per-conversation dicts, vLLM connector
safetensors, SGLang ``return_hidden_states`` JSON. Each format's own claims (TensorRT-LLM's and SGLang's post-norm
final) are checked by exact mode; a shifted claim FAILs.

The r the test expects are the indices it took from transformers' tuple (``hidden_states[k]`` = r = k, the last
entry = the post-norm final), computed here independently of the readers.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

import forensics
from forensics.cli import main
from forensics.errors import ForensicsError
from forensics.layers import FINAL_POST

L = 30
TRT_IDS = (1, L // 2 - 1, L - 4)  # TensorRT-LLM's default eagle3 layers: captured after block id, r = id + 1
TRT_R = [i + 1 for i in TRT_IDS]  # [2, 15, 27]


def _synthetic(T=10, H=8, k=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(T, H, generator=g) for _ in range(k)], torch.randn(T, H, generator=g)


# ----------------------------------------------------------------------------------- reading, no model
def test_trtllm_records_and_final_claim(tmp_path):
    aux, final = _synthetic()
    recs = [{"id": i + 1, "input_ids": torch.arange(10) + i, "hidden_state": final + i,
             "aux_hidden_states": torch.cat(aux, dim=-1)} for i in range(3)]
    torch.save(recs, tmp_path / "data_20.pt")
    cap = forensics.load(tmp_path / "data_20.pt")
    assert cap.format == "trtllm" and cap.meta["records"] == 3 and cap.provenance.record == 0
    assert [s.claimed for s in cap.slots] == ["aux[0]", "aux[1]", "aux[2]", FINAL_POST]
    for s, t in zip(cap.slots, [*aux, final], strict=True):
        assert torch.equal(s.tensor(), t)
    two = forensics.load(f"{tmp_path / 'data_20.pt'}#2")
    assert two.provenance.record == 2 and torch.equal(two.slots[-1].tensor(), final + 2)
    assert torch.equal(two.input_ids, torch.arange(10) + 2)
    with pytest.raises(ForensicsError, match="record 5 does not exist.*3 records"):
        forensics.load(tmp_path / "data_20.pt", record=5)


def test_trtllm_features_with_the_final_columns_keep_one_copy(tmp_path):
    aux, final = _synthetic()
    torch.save([{"id": 1, "input_ids": torch.arange(10), "hidden_state": final,
                 "hidden_state_features": torch.cat([*aux, final], dim=-1)}], tmp_path / "data_1.pt")
    cap = forensics.load(tmp_path / "data_1.pt")
    assert len(cap.slots) == 4 and cap.slots[-1].name == "hidden_state"
    assert any("stored twice" in n for n in cap.provenance.notes)


def test_modelopt_dumper_decides_the_claim(tmp_path):
    aux, final = _synthetic()
    obj = {"input_ids": torch.arange(10), "hidden_states": final, "aux_hidden_states": torch.cat(aux, dim=-1),
           "conversation_id": 7}
    torch.save(obj, tmp_path / "7.pt")
    cap = forensics.load(tmp_path / "7.pt")
    assert cap.format == "modelopt" and cap.meta["conversation_id"] == 7
    assert cap.slots[-1].claimed is None  # the HF dumper's file does not say which dumper wrote it
    assert any("does not name its dumper" in n for n in cap.provenance.notes)
    torch.save({**obj, "dumper": "hf"}, tmp_path / "8.pt")
    assert forensics.load(tmp_path / "8.pt").slots[-1].claimed == FINAL_POST


def test_vllm_connector_outside_a_dataset_claims_nothing(tmp_path):
    aux, _ = _synthetic()
    save_file({"hidden_states": torch.stack(aux, dim=1), "token_ids": torch.arange(10)}, tmp_path / "req-1.safetensors")
    cap = forensics.load(tmp_path / "req-1.safetensors")
    assert cap.format == "vllm-connector" and all(s.claimed is None for s in cap.slots)


def test_sglang_json_rows(tmp_path):
    _, final = _synthetic(T=6)
    rows = final.tolist()
    doc = [{"text": "x", "input_ids": list(range(5)), "output_ids": [9],
            "meta_info": {"hidden_states": [rows[:5], rows[5]], "prompt_tokens": 5}},
           {"text": "y", "meta_info": {"hidden_states": [rows[:3]]}}]
    (tmp_path / "out.json").write_text(json.dumps(doc))
    cap = forensics.load(tmp_path / "out.json")
    assert cap.format == "sglang" and cap.meta["records"] == 2
    assert torch.equal(cap.slots[0].tensor(), final) and cap.input_ids.tolist() == [0, 1, 2, 3, 4, 9]
    assert cap.slots[0].claimed == FINAL_POST
    second = forensics.load(tmp_path / "out.json", record=1)
    assert second.num_tokens == 3 and second.input_ids is None
    (tmp_path / "bad.json").write_text(json.dumps({"meta_info": {"hidden_states": [[1.0, "a"]]}}))
    with pytest.raises(ForensicsError, match="bad.json"):
        forensics.load(tmp_path / "bad.json")


# -------------------------------------------------------------------------- real states, exact mode
@pytest.fixture(scope="module")
def real(smollm2, tmp_path_factory, sample_data):
    model, tok = smollm2
    d = tmp_path_factory.mktemp("engines")
    texts = [(sample_data / "texts" / n).read_text() for n in ("english_rivers.txt", "english_lighthouse.txt")]
    outs = []
    for text in texts:
        ids = tok(text, return_tensors="pt").input_ids[0, :48]
        with torch.no_grad():
            hs = model(ids[None], output_hidden_states=True).hidden_states
        outs.append((ids, [h[0] for h in hs]))
    # TensorRT-LLM SaveHiddenStatesDrafter: a list of {id, input_ids, hidden_state, aux_hidden_states}
    torch.save([{"id": i + 1, "input_ids": ids, "hidden_state": hs[-1],
                 "aux_hidden_states": torch.cat([hs[r] for r in TRT_R], dim=-1)} for i, (ids, hs) in enumerate(outs)],
               d / "data_2.pt")
    ids, hs = outs[0]
    # Model-Optimizer compute_hidden_states_hf.py: aux from hidden_states[2, N//2, N-3], final hidden_states[-1]
    torch.save({"input_ids": ids, "hidden_states": hs[-1], "aux_hidden_states": torch.cat([hs[2], hs[15], hs[27]], -1),
                "conversation_id": 0}, d / "0.pt")
    # vLLM ExampleHiddenStatesConnector: hidden_states [T, k, H], token_ids [T]
    save_file({"hidden_states": torch.stack([hs[r] for r in (3, 16, 28)], dim=1).contiguous(), "token_ids": ids},
              d / "req.safetensors")
    # SGLang return_hidden_states: prompt block then one row per generated token
    rows = hs[-1].tolist()
    (d / "sglang.json").write_text(json.dumps({"input_ids": ids.tolist(),
                                               "meta_info": {"hidden_states": [rows[:-1], rows[-1]]}}))
    return d


def _docs(args, capsys):
    code = main(["fingerprint", *args, "--model", "default", "--json", "-q"])
    return code, json.loads(capsys.readouterr().out)["files"]


def test_trtllm_every_record_exact(real, capsys):
    code, docs = _docs([str(real / "data_2.pt")], capsys)
    assert code == 0 and len(docs) == 2  # each record is a sample
    assert [d["path"].rsplit("#", 1)[1] for d in docs] == ["0", "1"]
    for d in docs:
        assert [s["r_exact"] for s in d["slots"]] == [*TRT_R, FINAL_POST]
        assert d["verdict"] == "pass"  # the format's claim: hidden_state is the post-norm final


def test_trtllm_shifted_claim_fails(real, capsys):
    code, docs = _docs([f"{real / 'data_2.pt'}#1", "--layers", f"{TRT_IDS[0]},{TRT_IDS[1]},{TRT_IDS[2]},final_post"],
                       capsys)
    assert code == 1 and docs[0]["verdict"] == "fail"


@pytest.mark.parametrize("name,want", [("0.pt", [2, 15, 27, FINAL_POST]), ("req.safetensors", [3, 16, 28]),
                                       ("sglang.json", [FINAL_POST])])
def test_engine_dump_exact(real, name, want, capsys):
    code, docs = _docs([str(real / name)], capsys)
    assert code == 0
    assert [s["r_exact"] for s in docs[0]["slots"]] == want


def test_identified_headline(real, capsys):
    assert main(["fingerprint", str(real / "0.pt"), "--model", "default", "-q"]) == 0
    assert capsys.readouterr().out.startswith("IDENTIFIED [L2, L15, L27, final_post] (exact")
