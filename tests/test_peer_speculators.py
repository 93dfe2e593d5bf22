"""Peer check: speculators' own data readers see in our sample data what our readers claim.

speculators (the trainer, PyPI 0.9.0, installed --no-deps) is the reference: its ``ArrowDataset`` feeds the
draft ``hidden_states = hs[:, :-1].flatten(1)`` (fc input) and ``verifier_last_hidden_states = hs[:, -1]``
(target) from ``hidden_states/hs_{i}.safetensors`` (speculators#353), after ``check_hidden_states`` on
generated files. Our reader claims: slots in stored order, the last one the target. The legacy v1 reader
``standardize_data_v1`` (``cat(list[:-1])`` + ``list[-1]``, speculators#143) is no longer in 0.9.0; its test
runs only where an installed speculators still ships it.
"""

from __future__ import annotations

import pytest
import torch

import forensics

speculators_data = pytest.importorskip(
    "speculators.train.data", reason="speculators is not importable (pip install --no-deps speculators==0.9.0 "
    "hs-connectors==0.9.0 plus datasets/loguru/pydantic-settings/openai/aiohttp)")


@pytest.fixture(scope="module")
def arrow_sample(sample_data):
    """The committed sample_data/speculators folder exactly as `hsf capture --format speculators` wrote it:
    the Arrow dataset (input_ids, loss_mask, seq_len) beside hidden_states/hs_0.safetensors."""
    folder = sample_data / "speculators"
    if not (folder / "dataset_info.json").is_file():
        pytest.skip("sample_data/speculators has no Arrow dataset")
    cap = forensics.load(folder / "hidden_states" / "hs_0.safetensors")  # + its capture.json
    before = sorted(p.name for p in folder.rglob("*"))
    yield folder, cap
    assert sorted(p.name for p in folder.rglob("*")) == before, "speculators wrote into the sample folder"


def test_arrow_dataset_reads_our_slots_as_fc_input_and_target(arrow_sample):
    data, cap = arrow_sample
    ds = speculators_data.ArrowDataset(max_len=4096, datapath=str(data), on_missing="raise")
    raw = ds._get_raw_data(0)
    assert isinstance(raw, dict), f"speculators could not read the sample: {raw!r}"
    slots = [s.tensor() for s in cap.slots]
    assert len(slots) == 4 and [s.declared_r for s in cap.slots] == [2, 15, 27, 30]
    # bit-identical: same file, same dtype, no arithmetic on either side
    assert torch.equal(raw["hidden_states"], torch.cat(slots[:-1], dim=-1))
    assert torch.equal(raw["verifier_last_hidden_states"], slots[-1])
    assert torch.equal(raw["input_ids"], cap.input_ids)
    assert raw["hidden_states"].shape == (cap.num_tokens, 3 * cap.hidden_size)


def test_check_hidden_states_accepts_hs_0_and_rejects_wrong_tokens(sample_data):
    from safetensors.torch import load_file
    from speculators.data_generation.offline import check_hidden_states

    path = sample_data / "speculators" / "hidden_states" / "hs_0.safetensors"
    payload = load_file(str(path))
    cap = forensics.load(path)
    check_hidden_states(payload, cap.input_ids.tolist())  # raises on any mismatch
    with pytest.raises(ValueError):
        check_hidden_states(payload, cap.input_ids.tolist()[:-1])


def test_legacy_v1_reader_if_shipped(sample_data):
    fn = getattr(speculators_data, "standardize_data_v1", None)
    if fn is None:
        pytest.skip("speculators 0.9.0 no longer ships standardize_data_v1 (the legacy data_{i}.pt reader)")
    path = sample_data / "speculators_v1" / "data_0.pt"
    raw = fn(torch.load(path, weights_only=True))
    slots = [s.tensor() for s in forensics.load(path).slots]
    assert torch.equal(raw["hidden_states"], torch.cat(slots[:-1], dim=-1))
    assert torch.equal(raw["verifier_last_hidden_states"], slots[-1])
