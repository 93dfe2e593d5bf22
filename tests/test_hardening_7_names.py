"""A file name's bidirectional-text controls (U+202E and kin) are escaped in every text line, as control characters
are: raw, ``x\\u202egnp.pt`` shows on a terminal as ``xtp.png`` (the "Trojan Source" trick, CVE-2021-42574)."""

from __future__ import annotations

import pytest
import torch
from cli_tools import one_line, run_cli

from forensics.errors import ForensicsError, escape

pytestmark = pytest.mark.timeout(120)
BIDI = ["\u202e", "\u202d", "\u202a", "\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200f", "\u061c"]


@pytest.mark.parametrize("ch", BIDI)
def test_escape_writes_bidi_controls_as_escapes(ch):
    out = escape(f"x{ch}gnp.pt")
    assert ch not in out and out == f"x\\u{ord(ch):04x}gnp.pt"


def test_ordinary_non_ascii_names_are_kept():
    assert escape("données_中文.pt") == "données_中文.pt"


def test_inspect_and_errors_show_the_override_escaped(tmp_path, capsys):
    f = tmp_path / "x\u202egnp.pt"
    torch.save({"hidden_states": [torch.randn(8, 16) for _ in range(2)], "input_ids": torch.arange(8)}, f)
    code, out, err = run_cli(["inspect", f], capsys)
    assert code == 0 and "\u202e" not in out + err and "x\\u202egnp.pt" in out
    bad = tmp_path / "y\u202etp.pt"
    bad.write_bytes(b"not a capture")
    code, out, err = run_cli(["inspect", bad], capsys)
    assert "\u202e" not in one_line(code, err, "y\\u202etp.pt")
    assert "\u202e" not in str(ForensicsError("m", path=str(bad)))
