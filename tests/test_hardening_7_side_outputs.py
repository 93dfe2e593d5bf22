"""``-o`` never replaces a file an input is read with: a dataset's side files (capture.json, data_config.json,
stamps.jsonl), a draft's config.json, the --ids file. Before, only capture-named files and the positional inputs
were protected: ``hsf report ds -o ds/data_config.json`` rewrote the dataset's layer ids as HTML."""

from __future__ import annotations

import hashlib
import pathlib
import shutil

import pytest
from cli_tools import one_line, run_cli

import forensics

pytestmark = pytest.mark.timeout(180)
SAMPLE = pathlib.Path(forensics.__file__).parents[1] / "sample_data"


def _digests(*files):
    return [hashlib.sha256(pathlib.Path(f).read_bytes()).hexdigest() for f in files]


@pytest.fixture
def ds(tmp_path):
    d = tmp_path / "ds"
    d.mkdir()
    for n in ("data_0.pt", "capture.json", "data_config.json", "sample_lengths.json"):
        shutil.copy(SAMPLE / "speculators_v1" / n, d / n)
    return d


@pytest.mark.parametrize("cmd", ["scan", "report"])
@pytest.mark.parametrize("side", ["capture.json", "data_config.json", "sample_lengths.json"])
@pytest.mark.parametrize("given", ["folder", "file"])
def test_a_side_file_of_the_input_is_not_an_output(ds, capsys, cmd, side, given):
    before = _digests(*sorted(ds.iterdir()))
    src = ds if given == "folder" else ds / "data_0.pt"
    code, _, err = run_cli([cmd, src, "-o", ds / side, *(["--no-progress"] if cmd == "scan" else [])], capsys)
    assert "side file" in one_line(code, err, side)
    assert _digests(*sorted(ds.iterdir())) == before


def test_a_new_stamps_file_beside_an_input_is_refused(ds, capsys):
    code, _, err = run_cli(["scan", ds / "data_0.pt", "-o", ds / "stamps.jsonl", "--no-progress"], capsys)
    one_line(code, err, "stamps.jsonl")
    assert not (ds / "stamps.jsonl").exists()


def test_report_does_not_write_over_the_draft_config(ds, tmp_path, capsys):
    draft = tmp_path / "draft"
    shutil.copytree(SAMPLE / "draft_eagle3", draft)
    before = _digests(draft / "config.json")
    code, _, err = run_cli(["report", ds / "data_0.pt", "--draft", draft, "--engine", "vllm", "--trainer",
                            "speculators-v1", "-o", draft / "config.json"], capsys)
    one_line(code, err, "config.json")
    assert _digests(draft / "config.json") == before


def test_report_does_not_write_over_its_ids_file(ds, tmp_path, capsys):
    ids = tmp_path / "ids.txt"
    ids.write_text("1 2 3\n")
    code, _, err = run_cli(["report", ds / "data_0.pt", "--ids", ids, "-o", ids], capsys)
    assert "one of the inputs" in one_line(code, err, "ids.txt")
    assert ids.read_text() == "1 2 3\n"


def test_report_save_in_python_refuses_a_side_file(ds):
    rep = forensics.report(str(ds / "data_0.pt"))
    before = _digests(ds / "capture.json")
    with pytest.raises(forensics.ForensicsError, match="side file"):
        rep.save(ds / "capture.json")
    assert _digests(ds / "capture.json") == before


def test_a_scan_file_beside_the_data_is_still_allowed(ds, capsys):
    code, _, _ = run_cli(["scan", ds, "-o", ds / "scan.jsonl", "--no-progress", "--workers", "0"], capsys)
    assert code in (0, 3) and (ds / "scan.jsonl").stat().st_size > 0
