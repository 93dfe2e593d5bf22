"""A file named ``a\\nb.pt`` (a newline is legal in a POSIX file name): every command that prints the name in text
prints it on one line, escaped (``a\\\\nb.pt``), so no row of a view is split into two."""

from __future__ import annotations

import shutil

import pytest
import torch

from forensics.cli import main


def shown_name(name: str) -> str:
    """The expected form, written out here: Python's escape of each control character (``repr`` without quotes)."""
    return "".join(repr(c)[1:-1] if ord(c) < 32 else c for c in name)

NAMES = ("a\nb.pt", "c\rd\te.pt", "w\nx.pt")  # a real capture, the same capture, another hidden size


@pytest.fixture
def folder(tmp_path, sample_data):
    ds = tmp_path / "ds"
    ds.mkdir()
    src = sample_data / "speculators_v1"
    shutil.copy(src / "data_0.pt", ds / NAMES[0])
    shutil.copy(src / "data_1.pt", ds / NAMES[1])
    shutil.copy(src / "data_0.pt", ds / "plain.pt")
    real = torch.load(src / "data_2.pt", weights_only=True)  # a 64-wide copy: the scan names it in an anomaly
    g = torch.Generator().manual_seed(0)
    hs = [(torch.randn(real["input_ids"].numel(), 64, generator=g) * s).to(torch.bfloat16) for s in (0.1, 1, 5, 9)]
    torch.save({"input_ids": real["input_ids"], "loss_mask": real["loss_mask"], "hidden_states": hs}, ds / NAMES[2])
    (ds / "broken\n.pt").write_bytes(b"not a capture")  # an unreadable file: its error line names it
    return ds


def _lines(argv, capsys) -> tuple[int, str]:
    code = main(argv)
    got = capsys.readouterr()
    return code, got.out + got.err


def _check(out: str, names) -> None:
    for name in names:
        assert name not in out, repr(name)  # never raw: a control character in a name never reaches the terminal
    assert any(shown_name(n) in out for n in names), out  # the names are there, escaped


def test_shown_name_escapes_every_control_character():
    from forensics.views.format import shown_name as helper

    for name in ("a\nb.pt", "c\rd\te.pt", "ok/‖x‖ — é.pt", "\x1b[2J.pt"):
        assert helper(name) == shown_name(name)


def test_every_command_prints_a_newline_name_on_one_line(folder, tmp_path, capsys):
    d = str(folder)
    all_names = (*NAMES, "broken\n.pt")
    for argv in (["inspect", d], ["fingerprint", d], ["fingerprint", d, "-v"],
                 ["scan", d, "--workers", "0", "-o", str(tmp_path / "s.jsonl")],
                 ["report", d, "-o", str(tmp_path / "r.html")]):
        code, out = _lines(argv, capsys)
        assert code == 2, (argv, out)  # the broken file: exit 2 beside the others
        _check(out, all_names)
    code, out = _lines(["fingerprint", str(folder / NAMES[0]), "--layers", "3,16,28,30"], capsys)
    assert code == 1 and "a\\nb.pt: speculators-v1" in out  # a FAIL (shifted) whose head names the file
    _check(out, NAMES[:1])
    code, out = _lines(["scan", d, "--workers", "0", "-o", str(tmp_path / "s2.jsonl")], capsys)
    assert "hidden_size: " in out and shown_name(str(folder / NAMES[2])) in out  # the anomaly's message names it
    (folder / "broken\n.pt").unlink()
    code, out = _lines(["stamp", d], capsys)
    assert code == 0, out
    _check(out, NAMES)
    code, out = _lines(["verify", d], capsys)
    assert code == 0, out
    _check(out, NAMES)
    code, out = _lines(["audit", "--data", str(folder / NAMES[0]), "--draft", "sample_data/draft_eagle3",
                        "--engine", "sglang"], capsys)
    assert code in (0, 1, 3), out
    assert "\n" + "b.pt" not in out and "\r" not in out
