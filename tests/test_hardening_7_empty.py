"""A file that splits into no sample (a ``[0, T]`` batch, an empty record list) is one error line naming the file,
never a pass over nothing (fingerprint said "pass" with no file checked) nor an internal error (scan's IndexError)."""

from __future__ import annotations

import json

import pytest
import torch
from cli_tools import one_line, run_cli

import forensics
from forensics.errors import ForensicsError

pytestmark = pytest.mark.timeout(120)


def _empty_batch(tmp_path):
    f = tmp_path / "b0.pt"
    torch.save({"hidden_states": [torch.randn(0, 8, 16)] * 3, "attention_mask": torch.ones(0, 8)}, f)
    return f


@pytest.mark.parametrize("cmd", ["fingerprint", "inspect", "report"])
def test_an_empty_batch_is_one_line(tmp_path, capsys, cmd):
    f = _empty_batch(tmp_path)
    extra = ["-o", str(tmp_path / "r.html")] if cmd == "report" else []
    code, _, err = run_cli([cmd, f, *extra], capsys)
    assert "0 samples" in one_line(code, err, str(f))


def test_scan_of_an_empty_batch_is_an_unreadable_row_not_an_internal_error(tmp_path, capsys):
    f = _empty_batch(tmp_path)
    out = tmp_path / "s.jsonl"
    code, _, _ = run_cli(["scan", f, "-o", out, "--workers", "0", "--no-progress"], capsys)
    row = json.loads(out.read_text().splitlines()[0])
    assert code == 2 and "internal error" not in row["error"] and "0 samples" in row["error"], row


def test_an_empty_record_list_is_refused(tmp_path):
    f = tmp_path / "recs.pt"
    torch.save([], f)
    with pytest.raises(ForensicsError):
        forensics.load_all(str(f))


def test_an_empty_batch_in_memory_is_refused():
    with pytest.raises(ForensicsError, match="0 samples"):
        forensics.as_captures([torch.randn(0, 8, 16)] * 2, attention_mask=torch.ones(0, 8))
