"""A one-sample ``[T]`` attention mask is checked and applied as a batch's ``[B, T]`` one is: before, it was ignored,
so pad rows were judged as tokens and an all-zero, too-long or additive mask passed without a word."""

from __future__ import annotations

import pytest
import torch
from cli_tools import one_line, run_cli

import forensics

pytestmark = pytest.mark.timeout(120)


def _save(tmp_path, mask, name="one.pt"):
    g = torch.Generator().manual_seed(0)
    f = tmp_path / name
    torch.save({"hidden_states": [torch.randn(8, 16, generator=g) for _ in range(3)], "input_ids": torch.arange(8),
                "attention_mask": mask}, f)
    return f


@pytest.mark.parametrize("mask, words", [
    (torch.zeros(8, dtype=torch.long), "no real token"),
    (torch.ones(12, dtype=torch.long), "shape [12]"),
    (torch.full((8,), 0.5), "other than 0 and 1"),
    (torch.tensor([0.0] * 4 + [float("-inf")] * 4), "other than 0 and 1"),
])
def test_a_bad_one_sample_mask_is_one_line(tmp_path, capsys, mask, words):
    f = _save(tmp_path, mask)
    code, _, err = run_cli(["inspect", f], capsys)
    assert words in one_line(code, err, str(f))


def test_a_one_sample_mask_cuts_its_pad_rows(tmp_path):
    f = _save(tmp_path, torch.tensor([1, 1, 1, 1, 1, 0, 0, 0]))
    cap = forensics.load(str(f))
    assert cap.num_tokens == 5 and cap.input_ids.tolist() == [0, 1, 2, 3, 4]
    assert any("3 pad rows removed" in n for n in cap.provenance.notes), cap.provenance.notes
    ref = torch.load(f)["hidden_states"][1][:5]
    assert torch.equal(cap.slots[1].tensor(), ref)


def test_a_one_sample_mask_given_in_memory_is_applied():
    hs = [torch.randn(6, 8), torch.randn(6, 8)]
    caps = forensics.as_captures(hs, input_ids=torch.arange(6), attention_mask=torch.tensor([0, 0, 1, 1, 1, 1]))
    assert len(caps) == 1 and caps[0].num_tokens == 4


def test_an_all_ones_mask_changes_nothing(tmp_path):
    f = _save(tmp_path, torch.ones(8, dtype=torch.long))
    assert forensics.load(str(f)).num_tokens == 8
