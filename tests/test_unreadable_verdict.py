"""An unreadable input never leaves a command's one verdict at "pass" (exit 2 beside it, the verdict not green).

A consumer that reads only ``verdict`` of ``--json`` must not act on a pass over a file that was not read."""

from __future__ import annotations

import json

from forensics.cli import main as hsf_main
from forensics.findings import Verdict, decide

SAMPLE = "sample_data/speculators_v1/data_0.pt"


def _json(capsys, argv: list[str]) -> tuple[int, dict]:
    code = hsf_main(argv)
    return code, json.loads(capsys.readouterr().out)


def test_decide_keeps_a_fail_and_never_passes_beside_an_unreadable_input():
    assert decide([], [Verdict.PASS]) is Verdict.PASS
    assert decide([], [Verdict.PASS], unreadable=True) is Verdict.CANNOT_TELL
    assert decide([{"severity": "fail"}], [], unreadable=True) is Verdict.FAIL
    assert decide([], ["cannot tell"], unreadable=True) is Verdict.CANNOT_TELL


def test_inspect_and_fingerprint_json_with_an_unreadable_file(tmp_path, capsys):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"junk")
    code, alone = _json(capsys, ["inspect", SAMPLE, "--json"])
    assert code == 0 and alone["verdict"] == "pass"  # the readable file by itself passes its statistics
    for cmd in ("inspect", "fingerprint"):
        code, both = _json(capsys, [cmd, SAMPLE, str(bad), "--json"])
        assert code == 2 and both["verdict"] != "pass", cmd
        assert [bool(f.get("error")) for f in both["files"]].count(True) == 1
        code, only = _json(capsys, [cmd, str(bad), "--json"])
        assert code == 2 and only["verdict"] == "cannot tell", cmd
