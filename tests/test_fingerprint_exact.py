"""Exact mode against the real SmolLM2 model: every ladder slot gets its true r (adjacent layers and
final_post included), off-by-one labels are caught, embeddings are checked row-by-row through
safetensors ``get_slice``, and a committed ladder capture serves as the reference without the model."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import forensics
from forensics.analysis.fingerprint.core import fingerprint
from forensics.analysis.fingerprint.exact import LADDER_MATCH_COS, LADDER_MATCH_REL
from forensics.io.capture import Capture, Provenance, Slot
from forensics.layers import FINAL_POST


def _mem_capture(tensors: list, ids) -> Capture:
    slots = [Slot(index=i, name=f"s{i}", key="x", shape=tuple(t.shape), dtype=t.dtype, getter=(lambda t=t: t))
             for i, t in enumerate(tensors)]
    return Capture(slots=slots, input_ids=ids, loss_mask=None,
                   provenance=Provenance(path="<memory>", format="generic", size_bytes=0))


def _sub(cap: Capture, idx: list[int]) -> Capture:
    slots = [dataclasses.replace(cap.slots[i], index=j, declared_r=None) for j, i in enumerate(idx)]
    return Capture(slots=slots, input_ids=cap.input_ids, loss_mask=cap.loss_mask, provenance=cap.provenance, meta={})


@pytest.fixture(scope="session")
def ladder(sample_data):
    return forensics.load(sample_data / "ladder" / "capture_0.safetensors")


@pytest.fixture(scope="session")
def ladder_fp(ladder, smollm2):
    return fingerprint(ladder, model=smollm2[0])


def test_every_ladder_slot_gets_its_true_r(ladder, ladder_fp):
    truth = [s.declared_r for s in ladder.slots]
    assert truth == list(range(31)) + [FINAL_POST]
    assert [s.r_exact for s in ladder_fp.slots] == truth
    assert ladder_fp.num_layers == 30 and ladder_fp.findings == []
    assert ladder_fp.slots[30].role == "final_prenorm" and ladder_fp.slots[31].role == "final_postnorm"
    # adjacent layers are separated by a wide margin: best ≈ bf16 rounding, runner-up far above the threshold
    for x in ladder_fp.exact.slots:
        m = x.ladder
        assert m["best_cos"] >= LADDER_MATCH_COS and m["best_rel"] <= LADDER_MATCH_REL
        assert m["runner_up_rel"] > 4 * LADDER_MATCH_REL and m["best_rel"] < 0.01  # bf16 storage only
    assert ladder_fp.exact.slots[0].embedding["equal_rows"] == ladder.num_tokens
    assert ladder_fp.exact.slots[31].postnorm["verdict"]
    assert not ladder_fp.exact.slots[30].postnorm["verdict"]


def test_off_by_one_labels_flagged(sample_data, smollm2):
    """Legacy ids [-1, 2, 15, 27] misread as r: exact mode finds [0, 3, 16, 28] and flags off-by-one."""
    fp = fingerprint(sample_data / "speculators_v1" / "data_3.pt", layers=[0, 2, 15, 27], model=smollm2[0])
    assert [s.r_exact for s in fp.slots] == [0, 3, 16, 28]
    off = [f for f in fp.findings if f.kind == "off_by_one"]
    assert sorted(s for f in off for s in f.slots) == [1, 2, 3]
    # the message reads as English: "is claimed L2 (...) but equals L3 of the reference forward", never "is equals"
    assert all("but equals L" in f.message and "is equals" not in f.message for f in off), [f.message for f in off]
    d = json.loads(json.dumps(fp.to_dict(), allow_nan=False))
    assert [s["r_exact"] for s in d["slots"]] == [0, 3, 16, 28]


def test_specforge_final_post_by_gamma(sample_data, smollm2):
    fp = fingerprint(sample_data / "specforge" / "rows_0-2000" / "data_0.ckpt", model=smollm2[0])
    assert [s.r_exact for s in fp.slots] == [2, 15, 27, FINAL_POST]
    assert fp.findings == []


def test_safetensors_checkpoint_reads_only_rows(sample_data, smollm2, tmp_path):
    """A weights-only checkpoint (no config): embedding rows via get_slice and γ; no ladder to run."""
    from safetensors.torch import save_file

    model = smollm2[0]
    save_file({"model.embed_tokens.weight": model.get_input_embeddings().weight.detach().contiguous(),
               "model.norm.weight": model.model.norm.weight.detach().contiguous()},
              str(tmp_path / "model.safetensors"))
    cap = forensics.load(sample_data / "specforge" / "rows_0-2000" / "data_0.ckpt")
    v1 = forensics.load(sample_data / "speculators_v1" / "data_1.pt")
    fp = fingerprint(v1, model=str(tmp_path / "model.safetensors"))
    assert [s.r_exact for s in fp.slots] == [0, None, None, None]
    fp2 = fingerprint(cap, model=str(tmp_path))
    assert [s.r_exact for s in fp2.slots] == [None, None, None, FINAL_POST]


def test_committed_ladder_as_reference(ladder, sample_data):
    """No model: the committed ladder (same input_ids) is the reference; adjacent slots resolved."""
    pick = [13, 12, 31, 30, 1]
    fp = fingerprint(_sub(ladder, pick), model=str(sample_data / "ladder" / "capture_0.safetensors"))
    assert [s.r_exact for s in fp.slots] == [13, 12, FINAL_POST, 30, 1]
    assert fp.depth_order == [4, 1, 0, 3, 2]
    other = forensics.load(sample_data / "speculators_v1" / "data_0.pt")
    with pytest.raises(forensics.ForensicsError, match="input_ids"):
        fingerprint(other, model=ladder)


def test_cli_exact_default_model(sample_data, smollm2, capsys):
    from forensics.cli import main

    path = sample_data / "speculators" / "hidden_states" / "hs_0.safetensors"
    assert main(["fingerprint", str(path), "--model", "default", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [s["r_exact"] for s in doc["files"][0]["slots"]] == [2, 15, 27, 30]
    assert doc["files"][0]["slots"][3]["role"] == "final_prenorm"


def test_states_of_another_model_match_nothing(sample_data, smollm2):
    """Scaled states (a stand-in for other weights): no r claimed, a no_reference_match finding, and the
    data-only order is kept."""
    cap = forensics.load(sample_data / "speculators_v1" / "data_0.pt")
    scaled = [(s.tensor().float() * 1.5).to(s.dtype) for s in cap.slots]
    fp = fingerprint(_mem_capture(scaled, cap.input_ids), model=smollm2[0])
    assert [s.r_exact for s in fp.slots] == [None] * 4
    miss = [f for f in fp.findings if f.kind == "no_reference_match"]
    assert miss and miss[0].slots == [0, 1, 2, 3]
    assert fp.depth_order == [0, 1, 2, 3] and fp.slots[0].role == "embedding"
    lm = next(e for e in fp.slots[2].evidence if e.signal == "ladder_match")
    assert "same direction as L16" in lm.verdict and "×1.5" in lm.verdict
    lens = [next(e for e in s.evidence if e.signal == "logit_lens") for s in fp.slots]
    assert lens[3].value > lens[2].value >= lens[0].value  # the logit lens rises with depth


def test_bf16_forward_still_matches(ladder, smollm2):
    """States from a bf16 forward (other numerics than the fp32 reference) still get their r."""
    from forensics.models.target import ladder as run_ladder

    with torch.autocast("cpu", dtype=torch.bfloat16):
        states = run_ladder(smollm2[0], ladder.input_ids)
    rs = [1, 12, 13, 29, 30, FINAL_POST]
    fp = fingerprint(_mem_capture([states[r].to(torch.bfloat16) for r in rs], ladder.input_ids), model=smollm2[0])
    assert [s.r_exact for s in fp.slots] == rs


def test_exact_off_by_one_ids_is_not_told_as_a_slot_shift(sample_data, smollm2):
    """[embed, L3, L16, L28] claimed as ids 1,4,17,29: the reference forward shows every slot one block below its
    claim (ids off by one), which refutes the slot-shift story ([embed, L1, L4, L17]); the message must say so."""
    fp = fingerprint(sample_data / "speculators_v1" / "data_0.pt", layers=[1, 4, 17, 29], model=smollm2[0])
    assert [s.r_exact for s in fp.slots] == [0, 3, 16, 28]
    assert not [f for f in fp.findings if f.kind == "shifted"]  # its own kind: JSON consumers read the kind
    sh = [f for f in fp.findings if f.kind == "ids_off_by_one"]
    assert len(sh) == 1 and sh[0].evidence["corrected"] == [0, 3, 16, 28]
    assert "ids off by one" in sh[0].message and "Kimi" not in sh[0].message, sh[0].message
