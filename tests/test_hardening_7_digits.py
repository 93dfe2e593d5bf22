"""Numbers read from names are ASCII digits and bounded: ``str.isdigit`` accepts ``²`` (then ``int`` raised a
ValueError traceback: a draft weight ``layers.².x``, ``hsf scan --fingerprint ²``) and ``٣`` (``FILE#٣`` read
sample 3); a draft weight ``layers.99999999999.x`` made the probe list 10^11 blocks' tensor names (memory)."""

from __future__ import annotations

import pathlib
import shutil

import pytest
import torch
from cli_tools import one_line, run_cli

import forensics
from forensics.errors import ForensicsError
from forensics.models.draft import block_count

pytestmark = pytest.mark.timeout(180)
SAMPLE = pathlib.Path(forensics.__file__).parents[1] / "sample_data"


@pytest.mark.parametrize("key, n", [("layers.\u00b2.x", 1), ("layers.\u0663.x", 1), ("layers.0.x", 1),
                                    ("layers.2.x", 3), ("layers.99999999999.x", 1)])
def test_block_count_reads_ascii_indices_only(key, n):
    assert block_count({"layers.0.self_attn.q_proj.weight": None, key: None}) == n


def test_block_count_is_bounded():
    with pytest.raises(ForensicsError, match="not plausible"):
        block_count({"layers.0.a": None, "layers.20000.a": None}, "d")


@pytest.mark.parametrize("key", ["layers.\u00b2.x", "layers.20000.x"])
def test_probe_with_an_odd_weight_name_is_not_a_traceback(tmp_path, capsys, key):
    from safetensors.torch import load_file, save_file

    d = tmp_path / "draft"
    d.mkdir()
    shutil.copy(SAMPLE / "draft_eagle3" / "config.json", d)
    w = load_file(SAMPLE / "draft_eagle3" / "model.safetensors")
    w[key] = torch.zeros(1)
    save_file(w, d / "model.safetensors")
    code, _, err = run_cli(["probe", "--draft", d, "--data", SAMPLE / "speculators_v1", "--samples", "1"], capsys)
    assert "Traceback" not in err and code in (0, 1, 2, 3), err
    if key.endswith("20000.x"):
        assert "not plausible" in one_line(code, err, str(d))


def test_scan_fingerprint_count_of_a_superscript_is_one_line(tmp_path, capsys):
    code, _, err = run_cli(["scan", SAMPLE / "speculators_v1", "--fingerprint", "\u00b2", "--no-progress"], capsys)
    one_line(code, err, "fingerprint")


def test_a_record_suffix_in_other_digits_is_no_record(tmp_path, capsys):
    f = tmp_path / "b.pt"
    torch.save({"hidden_states": [torch.randn(2, 8, 16)] * 2, "attention_mask": torch.ones(2, 8)}, f)
    assert forensics.load(f"{f}#1").provenance.record == 1
    code, _, err = run_cli(["inspect", f"{f}#\u0661"], capsys)
    assert "no such file" in one_line(code, err, "b.pt")
