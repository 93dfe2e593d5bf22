"""Round-trip tests for every capture format: files are built here, independently of the readers, with the
exact keys/shapes each trainer writes, and every slot must equal the original."""

from __future__ import annotations

import gzip
import io
import json
import os

import pytest
import torch
from safetensors.torch import save_file

import forensics
from forensics.io.formats import iter_files

T, H = 17, 24


def states(k: int, t: int = T, h: int = H, seed: int = 0, dtype=torch.bfloat16) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(t, h, generator=g) * (i + 1)).to(dtype) for i in range(k)]


def ids(t: int = T) -> torch.Tensor:
    return torch.arange(100, 100 + t, dtype=torch.long)


def mask(t: int = T) -> torch.Tensor:
    m = torch.ones(t, dtype=torch.long)
    m[: t // 3] = 0
    return m


def assert_slots(cap, expected: list[torch.Tensor]) -> None:
    assert len(cap.slots) == len(expected)
    for slot, ref in zip(cap.slots, expected, strict=True):
        got = slot.tensor()
        assert slot.shape == tuple(ref.shape)
        assert got.dtype == ref.dtype and slot.dtype == ref.dtype
        assert torch.equal(got, ref), slot.name
    assert [s.index for s in cap.slots] == list(range(len(expected)))


# --- speculators legacy v1: data_{i}.pt = {input_ids, hidden_states: list[[seq, H]], loss_mask} -----------

def test_speculators_v1_round_trip(tmp_path):
    hs = states(4)
    path = tmp_path / "data_0.pt"
    torch.save({"input_ids": ids(), "hidden_states": hs, "loss_mask": mask()}, path)
    cap = forensics.load(path)
    assert cap.format == "speculators-v1"
    assert_slots(cap, hs)
    assert torch.equal(cap.input_ids, ids()) and torch.equal(cap.loss_mask, mask())
    assert [s.name for s in cap.slots] == [f"hidden_states[{i}]" for i in range(4)]
    assert cap.slots[-1].claimed == "target" and cap.slots[0].claimed == "aux[0]"
    assert cap.declared_r is None and cap.num_tokens == T and cap.hidden_size == H
    assert cap.provenance.size_bytes == os.path.getsize(path)


def test_speculators_v1_data_config_declares_r_id_plus_1(tmp_path):
    hs = states(4)
    torch.save({"input_ids": ids(), "hidden_states": hs, "loss_mask": mask()}, tmp_path / "data_0.pt")
    # DataGenerationConfig's data_config.json; legacy generator default ids [2, L//2, L-3, L-1] for L=30
    (tmp_path / "data_config.json").write_text(json.dumps(
        {"hidden_states": {"layer_ids": [2, 15, 27, 29]}, "model": {"hidden_size": H},
         "format": {"file_pattern": "data_{idx}.pt"}}))
    cap = forensics.load(tmp_path / "data_0.pt")
    assert cap.declared_layers == [2, 15, 27, 29]
    assert cap.declared_convention == "speculators-legacy"
    assert cap.declared_r == [3, 16, 28, 30]  # captured after block id: r = id + 1
    assert_slots(cap, hs)


def test_data_config_with_wrong_count_is_a_note_not_a_guess(tmp_path):
    torch.save({"input_ids": ids(), "hidden_states": states(4), "loss_mask": mask()}, tmp_path / "data_0.pt")
    (tmp_path / "data_config.json").write_text(json.dumps({"hidden_states": {"layer_ids": [2, 15, 27]}}))
    cap = forensics.load(tmp_path / "data_0.pt")
    assert cap.declared_r is None
    assert any("4 slots" in n for n in cap.provenance.notes)


def test_capture_json_sidecar_sets_r(tmp_path):
    hs = states(4)
    torch.save({"input_ids": ids(), "hidden_states": hs}, tmp_path / "data_0.pt")
    (tmp_path / "capture.json").write_text(json.dumps({"r": [0, 3, 16, "final_post"], "num_layers": 30}))
    cap = forensics.load(tmp_path / "data_0.pt")
    assert cap.declared_r == [0, 3, 16, "final_post"]
    assert cap.num_layers == 30


def test_leading_batch_dim_of_one_is_squeezed(tmp_path):
    hs = states(3)
    torch.save({"input_ids": ids()[None], "hidden_states": [h[None] for h in hs], "loss_mask": mask()[None]},
               tmp_path / "data_0.pt")
    cap = forensics.load(tmp_path / "data_0.pt")
    assert_slots(cap, hs)
    assert cap.input_ids.shape == (T,)


def test_legacy_non_zip_torch_save(tmp_path):
    hs = states(3)
    torch.save({"input_ids": ids(), "hidden_states": hs, "loss_mask": mask()}, tmp_path / "data_0.pt",
               _use_new_zipfile_serialization=False)
    cap = forensics.load(tmp_path / "data_0.pt")
    assert cap.format == "speculators-v1"
    assert_slots(cap, hs)


# --- speculators v0: {input_ids, loss_mask, hidden_state [seq, 3H], target [seq, H]} ----------------------

def test_speculators_v0_round_trip(tmp_path):
    aux, target = states(3), states(1, seed=1)[0]
    torch.save({"input_ids": ids(), "loss_mask": mask(), "hidden_state": torch.cat(aux, dim=-1), "target": target},
               tmp_path / "data_0.pt")
    cap = forensics.load(tmp_path / "data_0.pt")
    assert cap.format == "speculators-v0"
    assert_slots(cap, aux + [target])
    assert cap.slots[-1].claimed == "target"
    assert cap.slots[1].name == f"hidden_state[:, {H}:{2 * H}]"


# --- speculators current: hidden_states/hs_{i}.safetensors = {hidden_states [seq, k, H], token_ids} -------

def test_speculators_current_seq_k_h(tmp_path):
    hs = states(4)
    d = tmp_path / "hidden_states"
    d.mkdir()
    save_file({"hidden_states": torch.stack(hs, dim=1), "token_ids": ids()}, d / "hs_0.safetensors")
    cap = forensics.load(d / "hs_0.safetensors")
    assert cap.format == "speculators"
    assert cap.provenance.layout.startswith("[seq, k, H]")
    assert_slots(cap, hs)
    assert torch.equal(cap.input_ids, ids())
    assert cap.slots[-1].claimed == "target"


def test_speculators_current_k_seq_h_is_detected_from_token_axis(tmp_path):
    hs = states(4)  # vLLM ExampleHiddenStatesConnector @806715ec: torch.stack(hidden_states, dim=0)
    save_file({"hidden_states": torch.stack(hs, dim=0), "token_ids": ids()}, tmp_path / "hs_0.safetensors")
    cap = forensics.load(tmp_path / "hs_0.safetensors")
    assert cap.format == "vllm-connector"  # outside a speculators dataset: the connector's own file, no target claim
    assert all(s.claimed is None for s in cap.slots)
    assert cap.provenance.layout.startswith("[k, seq, H]")
    assert_slots(cap, hs)


def test_speculators_current_with_batch_dim(tmp_path):
    hs = states(3)
    d = tmp_path / "hidden_states"
    d.mkdir()
    save_file({"hidden_states": torch.stack(hs, dim=1)[None], "token_ids": ids()}, d / "hs_0.safetensors")
    cap = forensics.load(d / "hs_0.safetensors")
    assert cap.format == "speculators"
    assert_slots(cap, hs)


def test_speculators_current_capture_json_in_parent(tmp_path):
    hs = states(4)
    d = tmp_path / "hidden_states"
    d.mkdir()
    save_file({"hidden_states": torch.stack(hs, dim=1), "token_ids": ids()}, d / "hs_0.safetensors")
    (tmp_path / "capture.json").write_text(json.dumps({"r": [2, 15, 27, 30], "num_layers": 30}))
    cap = forensics.load(d / "hs_0.safetensors")
    assert cap.declared_r == [2, 15, 27, 30]


def test_speculators_current_token_count_mismatch_is_read_with_the_longer_axis_as_tokens(tmp_path):
    """ids ≠ rows is readable content that is wrong (analysis.rows: row_count), in either stack order."""
    hs = torch.stack(states(3), dim=1)
    save_file({"hidden_states": hs, "token_ids": ids(T + 2)}, tmp_path / "hs_0.safetensors")
    cap = forensics.load(tmp_path / "hs_0.safetensors")
    assert len(cap.slots) == 3 and cap.num_tokens == T and not cap.ids_match_rows
    assert torch.equal(cap.slots[1].tensor(), hs[:, 1])
    save_file({"hidden_states": hs.transpose(0, 1).contiguous(), "token_ids": ids(T - 2)},
              tmp_path / "hs_1.safetensors")
    cap = forensics.load(tmp_path / "hs_1.safetensors")
    assert len(cap.slots) == 3 and cap.num_tokens == T and torch.equal(cap.slots[2].tensor(), hs[:, 2])


# --- SpecForge: rows_*/data_{i}.ckpt[.gz] = {input_ids, loss_mask, hidden_state [1,seq,H], aux [1,seq,3H]} ---

def specforge_obj(aux, final):
    return {"input_ids": ids(), "loss_mask": mask(), "hidden_state": final[None],
            "aux_hidden_state": torch.cat(aux, dim=-1)[None]}


@pytest.mark.parametrize("gz", [False, True])
def test_specforge_round_trip(tmp_path, gz):
    aux, final = states(3), states(1, seed=2)[0]
    d = tmp_path / "rows_0-2000"
    d.mkdir()
    if gz:
        buf = io.BytesIO()
        torch.save(specforge_obj(aux, final), buf)
        path = d / "data_0.ckpt.gz"
        path.write_bytes(gzip.compress(buf.getvalue()))
    else:
        path = d / "data_0.ckpt"
        torch.save(specforge_obj(aux, final), path)
    cap = forensics.load(path)
    assert cap.format == "specforge"
    assert_slots(cap, aux + [final])  # 3 aux slices in stored order, then the final hidden_state
    assert cap.slots[-1].claimed == "final_post"
    assert [s.claimed for s in cap.slots[:3]] == ["aux[0]", "aux[1]", "aux[2]"]
    assert torch.equal(cap.input_ids, ids())
    assert list(iter_files(tmp_path)) == [str(path)]


# --- EAGLE-1/2 ge_data: data_{i}.ckpt = {input_ids, hidden_state (post-norm last), loss_mask} ------------

def test_eagle_round_trip(tmp_path):
    h = states(1)[0]
    torch.save({"input_ids": ids()[None], "hidden_state": h[None], "loss_mask": mask()[None]}, tmp_path / "data_0.ckpt")
    cap = forensics.load(tmp_path / "data_0.ckpt")
    assert cap.format == "eagle"
    assert_slots(cap, [h])
    assert cap.slots[0].claimed == "final_post"


# --- generic: .pt (tensor / list / dict) and safetensors --------------------------------------------------

def test_generic_pt_single_tensor(tmp_path):
    h = states(1, dtype=torch.float32)[0]
    torch.save(h[None], tmp_path / "x.pt")
    cap = forensics.load(tmp_path / "x.pt")
    assert cap.format == "generic"
    assert_slots(cap, [h])


def test_generic_pt_list_of_tensors(tmp_path):
    hs = states(3, dtype=torch.float16)
    torch.save(hs, tmp_path / "x.pt")  # e.g. a saved HF output_hidden_states tuple
    cap = forensics.load(tmp_path / "x.pt")
    assert cap.format == "generic"
    assert_slots(cap, hs)
    assert [s.name for s in cap.slots] == ["[0]", "[1]", "[2]"]


def test_generic_pt_dict(tmp_path):
    hs = states(2)
    torch.save({"layer_3": hs[0], "layer_16": hs[1], "input_ids": ids(), "scores": torch.ones(T)}, tmp_path / "x.pt")
    cap = forensics.load(tmp_path / "x.pt")
    assert cap.format == "generic"
    assert_slots(cap, hs)
    assert [s.key for s in cap.slots] == ["layer_3", "layer_16"]
    assert torch.equal(cap.input_ids, ids())
    assert any("scores" in n for n in cap.provenance.notes)


def test_generic_safetensors(tmp_path):
    hs = states(3)
    save_file({"layer_2": hs[0], "layer_10": hs[2][None], "layer_3": hs[1], "input_ids": ids()},
              tmp_path / "x.safetensors")
    cap = forensics.load(tmp_path / "x.safetensors")
    assert cap.format == "generic"
    assert [s.key for s in cap.slots] == ["layer_2", "layer_3", "layer_10"]  # natural order
    assert_slots(cap, [hs[0], hs[1], hs[2]])
    assert torch.equal(cap.input_ids, ids())


def test_generic_safetensors_single_batched_hidden_states(tmp_path):
    h = states(1)[0]
    save_file({"hidden_states": h[None]}, tmp_path / "x.safetensors")  # [1, seq, H], not a [seq, k, H] stack
    cap = forensics.load(tmp_path / "x.safetensors")
    assert_slots(cap, [h])


# --- detection is by content, not by name ----------------------------------------------------------------

def test_detection_by_content_not_name(tmp_path):
    aux, final = states(3), states(1, seed=2)[0]
    torch.save(specforge_obj(aux, final), tmp_path / "misnamed.safetensors")
    assert forensics.load(tmp_path / "misnamed.safetensors").format == "specforge"
    save_file({"hidden_states": torch.stack(aux, dim=1), "token_ids": ids()}, tmp_path / "misnamed.pt")
    assert forensics.load(tmp_path / "misnamed.pt").format == "vllm-connector"


def test_slots_are_lazy_views_not_copies(tmp_path):
    hs = states(2)
    torch.save({"input_ids": ids(), "hidden_states": hs}, tmp_path / "data_0.pt")
    cap = forensics.load(tmp_path / "data_0.pt")
    a, b = cap.slots[0].tensor(), cap.slots[0].tensor()
    assert a.data_ptr() == b.data_ptr()  # the mmap-backed tensor itself, not a fresh copy each call
    assert a.dtype == torch.bfloat16  # never upcast


def test_iter_files_natural_order_skips_side_files(tmp_path):
    for i in (10, 2, 1):
        torch.save({"hidden_states": states(2)}, tmp_path / f"data_{i}.pt")
    torch.save(torch.ones(5), tmp_path / "token_freq.pt")
    (tmp_path / "data_config.json").write_text("{}")
    names = [os.path.basename(p) for p in iter_files(tmp_path)]
    assert names == ["data_1.pt", "data_2.pt", "data_10.pt"]
