"""A stamps.jsonl is indexed whole once per process (each scan worker too): a sparse one (holes: 8 GiB that cost
nothing to make) or one past MAX_STAMPS_BYTES is refused at once with the stamp_unreadable error, instead of
being read to its end (21 s for 8 GiB of holes, per process)."""

from __future__ import annotations

import pathlib
import shutil
import time

import pytest
from cli_tools import run_cli

import forensics
from forensics.io import stamp_store

pytestmark = pytest.mark.timeout(120)
SAMPLE = pathlib.Path(forensics.__file__).parents[1] / "sample_data"


@pytest.fixture
def stamped(tmp_path, capsys):
    d = tmp_path / "ds"
    d.mkdir()
    for n in ("data_0.pt", "data_1.pt", "capture.json", "data_config.json"):
        shutil.copy(SAMPLE / "speculators_v1" / n, d / n)
    code, _, _ = run_cli(["stamp", d], capsys)
    assert code == 0 and (d / "stamps.jsonl").is_file()
    return d


def test_a_sparse_stamps_file_is_refused_at_once(stamped, capsys):
    side = stamped / "stamps.jsonl"
    with open(side, "r+b") as f:
        f.truncate(4 << 30)  # the real stamps first, then 4 GiB of holes
    t = time.monotonic()
    code, out, err = run_cli(["verify", stamped], capsys)
    assert time.monotonic() - t < 20
    assert code == 1 and "sparse" in out and "Traceback" not in err, (out, err)


def test_a_stamps_file_past_the_limit_is_refused(stamped, capsys, monkeypatch):
    monkeypatch.setattr(stamp_store, "MAX_STAMPS_BYTES", 100)
    code, out, _ = run_cli(["verify", stamped], capsys)
    assert code == 1 and "GiB a stamps file holds" in out


def test_a_real_stamps_file_still_verifies(stamped, capsys):
    code, out, _ = run_cli(["verify", stamped], capsys)
    assert code == 0 and "2/2" in out
