"""A dataset whose tokenizer folder is broken or absent: the report shows token ids instead of text, says so once
(naming the folder and why), and exits by its verdict, as the same data with no tokenizer folder at all does."""

from __future__ import annotations

import json
import shutil

import pytest

from forensics.cli import main

FILES = ("data_0.pt", "data_config.json", "capture.json")


@pytest.fixture
def dataset(tmp_path, sample_data):
    ds = tmp_path / "ds"
    ds.mkdir()
    for name in FILES:
        shutil.copy(sample_data / "speculators_v1" / name, ds / name)
    return ds  # capture.json names "../tokenizer": tmp_path / "tokenizer"


def _report(ds, out, capsys) -> tuple[int, dict, str]:
    code = main(["report", str(ds), "-o", str(out), "--json"])
    got = capsys.readouterr()
    return code, json.loads(got.out), got.err


def test_a_working_tokenizer_and_a_broken_one_give_the_same_verdict_and_exit(dataset, tmp_path, sample_data, capsys):
    shutil.copytree(sample_data / "tokenizer", tmp_path / "tokenizer")
    code, good, err = _report(dataset, tmp_path / "good.html", capsys)
    assert code in (0, 1, 3) and not err.strip()  # the truth for this data: decided, nothing unreadable
    (tmp_path / "tokenizer" / "tokenizer.json").write_text("{not json")
    (tmp_path / "tokenizer" / "tokenizer_config.json").write_text("{}")
    from forensics.io import tokenizer as tk

    tk._CACHE.clear()  # the folder's first load was cached
    code_b, broken, err = _report(dataset, tmp_path / "broken.html", capsys)
    assert (code_b, broken["verdict"], broken["verdicts"]) == (code, good["verdict"], good["verdicts"])
    lines = err.strip().splitlines()
    assert len([x for x in lines if "note: tokenizer" in x]) == 1 and "error" not in err, err
    assert str(tmp_path / "tokenizer") in err.replace("\n    ", " ") and "token ids are shown" in err.replace(
        "\n    ", " ")
    page = (tmp_path / "broken.html").read_text()
    assert '<section id="notes">' in page and '<section id="errors">' not in page


def test_a_tokenizer_folder_named_but_absent_is_a_note(dataset, tmp_path, capsys):
    from forensics.analysis.report import report as analyse

    res = analyse([str(dataset)])
    assert res.errors == [] and res.files[0].tokens is None
    assert [n.where for n in res.notes] == ["tokenizer"] and "'../tokenizer': absent" in res.notes[0].message
    assert res.exit_code() == {"pass": 0, "fail": 1, "cannot tell": 3}[res.verdict.value]  # by the verdict, not 2
