"""A file that cannot be read against ``--model`` beside good files: its own outcome word, ``unreadable``, in every
view; never a FAIL because of it, never a PASS beside it; exit 2.

The folder: a real SmolLM2-135M capture from ``sample_data`` (its sidecars declare ``[embed, L3, L16, L28]``, the
layers ``hsf capture`` saved, so with ``--model`` every slot passes) and a speculators-v1 file of another model: the
same token ids and loss mask with four random 64-wide bf16 slots (SmolLM2 is 576 wide), which no forward of SmolLM2
can give.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch

import forensics
from forensics.cli import main

pytestmark = pytest.mark.model
GOOD = ("data_0.pt", "data_config.json", "capture.json", "sample_lengths.json")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, sample_data):
    folder = tmp_path_factory.mktemp("mixed")
    for name in GOOD:
        shutil.copy(sample_data / "speculators_v1" / name, folder / name)
    real = torch.load(folder / "data_0.pt", weights_only=True)
    ids = real["input_ids"]
    g = torch.Generator().manual_seed(0)
    hs = [(torch.randn(ids.numel(), 64, generator=g) * s).to(torch.bfloat16) for s in (0.05, 1.0, 3.0, 10.0)]
    torch.save({"input_ids": ids, "loss_mask": real["loss_mask"], "hidden_states": hs}, folder / "other_model.pt")
    return folder


def _json(argv, capsys):
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def test_the_good_file_alone_passes(mixed, capsys):
    """The reference the mixed runs are read against: the real capture by itself, every declared layer right."""
    code, doc = _json(["report", str(mixed / "data_0.pt"), "--model", "default", "-o", str(mixed.parent / "g.html"),
                       "--json"], capsys)
    assert (code, doc["verdict"], doc["verdicts"]["pass"], doc["unreadable"]) == (0, "pass", 4, 0)


def test_report_says_unreadable_not_fail(mixed, tmp_path, capsys):
    from forensics.analysis.report import report as analyse
    from forensics.views.report.core import Report

    res = analyse([str(mixed)], model="default")
    by = {f.rel.split("/")[-1]: f for f in res.files}
    assert by["other_model.pt"].mismatch is not None and "64" in by["other_model.pt"].error
    assert (by["other_model.pt"].outcome, by["data_0.pt"].outcome) == ("unreadable", "pass")
    assert res.counts["fail"] == 0 and res.counts["unreadable"] == 1 and res.counts["pass"] == 4
    assert (res.verdict.value, res.exit_code(), res.overall) == ("cannot tell", 2, "unreadable")
    html = Report.of(res).html
    start = html.index('<section id="verdicts">')
    verdicts = html[start:html.index("</section>", start)]
    assert "b-fail" not in verdicts  # no FAIL badge anywhere in the verdict block
    row = re.search(r'<tr class="frow">.*?other_model\.pt.*?</tr>', verdicts, re.S)
    assert row is not None and 'class="badge b-unreadable">unreadable<' in row.group(0)
    assert 'id="verdict-sentence">UNREADABLE: 1 input could not be read' in html
    code, doc = _json(["report", str(mixed), "--model", "default", "-o", str(tmp_path / "r.html"), "--json"], capsys)
    assert (code, doc["verdict"], doc["overall"], doc["verdicts"]["fail"], doc["verdicts"]["unreadable"]) == \
        (2, "cannot tell", "unreadable", 0, 1)
    code = main(["report", str(mixed), "--model", "default", "-o", str(tmp_path / "r.html")])
    out = capsys.readouterr().out
    assert code == 2 and out.startswith("UNREADABLE: 1 input could not be read") and "FAIL" not in out


def test_fingerprint_inspect_and_scan_of_the_mixed_folder(mixed, capsys):
    code, doc = _json(["fingerprint", str(mixed), "--model", "default", "--json"], capsys)
    words = {e["path"].rsplit("/", 1)[-1]: e.get("outcome") for e in doc["files"]}
    assert (code, doc["verdict"], words) == (2, "cannot tell", {"data_0.pt": "pass", "other_model.pt": "unreadable"})
    code = main(["fingerprint", str(mixed), "--model", "default"])
    out = capsys.readouterr().out
    assert code == 2 and out.startswith("2 files: 1 PASS, 1 unreadable") and "FAIL" not in out
    # without --model both files are read: inspect and scan judge their data (the scan names the mixed hidden sizes,
    # a fact of the dataset, with the file)
    code, doc = _json(["inspect", str(mixed), "--json"], capsys)
    assert code == 0 and not any(e.get("error") for e in doc["files"])
    code, doc = _json(["scan", str(mixed), "--workers", "0", "--json", "-o", str(mixed.parent / "s.jsonl")], capsys)
    kinds = {(a["kind"], a["file"].rsplit("/", 1)[-1]) for a in doc["anomalies"]}
    assert ("hidden_size", "other_model.pt") in kinds and not any(k == "unreadable" for k, _ in kinds)


def test_the_explorer_lists_the_file_as_unreadable(mixed):
    pytest.importorskip("anywidget")
    w = forensics.explore(str(mixed), model="default").wait(600)
    words = {f["name"].rsplit("/", 1)[-1]: f["verdict"] for f in w.files}
    assert words == {"data_0.pt": "pass", "other_model.pt": "unreadable"}
