"""Row forensics in dataset scans: every scan row carries its row findings (JSON Lines and Parquet), the summary
counts files and rows per kind, on copies of the real SmolLM2 captures in sample_data/ with rows corrupted."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from forensics.analysis.scan.core import scan
from forensics.analysis.scan.summary import affected_rows
from forensics.views.scan import row_line

ZERO = (40, 59)  # inclusive, every slot of data_0.pt (93 tokens): a vllm#46301-shaped zero block


@pytest.fixture(scope="module")
def dataset(sample_data, tmp_path_factory):
    """The five speculators v1 captures; data_0 with rows 40–59 zeroed in every slot, data_3 with NaN at 3 rows
    of slot 2."""
    d = tmp_path_factory.mktemp("rowscan")
    for i in range(5):
        shutil.copy(sample_data / "speculators_v1" / f"data_{i}.pt", d / f"data_{i}.pt")
    x = torch.load(d / "data_0.pt", weights_only=True)
    for h in x["hidden_states"]:
        h[ZERO[0]:ZERO[1] + 1] = 0
    torch.save(x, d / "data_0.pt")
    y = torch.load(d / "data_3.pt", weights_only=True)
    for r in (7, 8, 100):
        y["hidden_states"][2][r, 5] = float("nan")
    torch.save(y, d / "data_3.pt")
    return d


@pytest.fixture(scope="module")
def result(dataset):
    return scan(dataset, workers=0, fingerprint="none", progress=False)


def _row(res, name):
    return next(r for r in res.rows if r["path"].endswith(name))


def test_zero_block_is_in_the_row_with_its_rows(result):
    r = _row(result, "data_0.pt")
    z = [f for f in r["findings"] if f["kind"] == "zero_rows"]
    assert len(z) == 1 and z[0]["severity"] == "fail"
    assert z[0]["evidence"]["rows"] == [list(ZERO)] and z[0]["slots"] == [0, 1, 2, 3]
    assert r["rows"]["kinds"] == ["zero_rows"] and r["rows"]["offset"] == 0
    assert r["rows"]["bad_rows"] == {str(i): [list(ZERO)] for i in range(4)}
    assert r["rows"]["num_rows"] == r["rows"]["num_tokens"] == 93


def test_nan_rows_are_named(result):
    r = _row(result, "data_3.pt")
    assert r["rows"]["bad_rows"] == {"2": [[7, 8], [100, 100]]}
    assert "nonfinite" in r["rows"]["kinds"]
    assert any(a.kind == "nonfinite" and a.file.endswith("data_3.pt") for a in result.anomalies)


def test_clean_files_have_no_row_finding(result):
    for name in ("data_1.pt", "data_2.pt", "data_4.pt"):
        r = _row(result, name)
        assert r["rows"]["kinds"] == [] and r["rows"]["bad_rows"] == {}, name


def test_summary_counts_files_and_rows_per_kind(result):
    rows = result.summary["rows"]
    assert rows["zero_rows"] == {"files": 1, "rows": ZERO[1] - ZERO[0] + 1}
    assert rows["nonfinite"] == {"files": 1, "rows": 3}
    assert set(rows) == {"zero_rows", "nonfinite"}
    assert [a.file.endswith("data_0.pt") for a in result.anomalies if a.kind == "zero_rows"] == [True]
    assert result.exit_code() == 1
    assert "zero_rows in 1 file (20 rows)" in row_line(result.summary)
    assert "zero_rows in 1 file (20 rows)" in repr(result)


def test_affected_rows_from_evidence():
    assert affected_rows({"kind": "foreign_rows", "evidence": {"rows": [[120, 169]]}}, {}) == 50
    assert affected_rows({"kind": "zero_rows", "evidence": {"rows": [[1, 2]], "count": 700, "runs": 40}}, {}) == 700
    assert affected_rows({"kind": "row_count", "evidence": {"rows": 1968, "tokens": 2000, "offset": 32}}, {}) == 32
    assert affected_rows({"kind": "token_shift", "evidence": {"offset": 1}}, {"rows": {"num_rows": 99}}) == 99
    assert affected_rows({"kind": "zero_rows", "evidence": {}}, {}) == 0


def test_parquet_records_carry_the_bad_rows(dataset, result, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "scan.parquet"
    scan(dataset, workers=0, fingerprint="none", progress=False, out=out)
    t = pq.read_table(str(out)).to_pylist()
    z = sorted((r for r in t if r["path"].endswith("data_0.pt")), key=lambda r: r["slot"])
    assert [r["bad_rows"] for r in z] == [[list(ZERO)]] * 4
    assert [r["bad_row_count"] for r in z] == [20] * 4 and all(r["row_kinds"] == ["zero_rows"] for r in z)
    assert all(r["num_rows"] == 93 and r["row_offset"] == 0 for r in z)
    n = {r["slot"]: r for r in t if r["path"].endswith("data_3.pt")}
    assert n[2]["bad_rows"] == [[7, 8], [100, 100]] and n[2]["bad_row_count"] == 3 and n[1]["bad_rows"] == []
    clean = [r for r in t if r["path"].endswith("data_1.pt")]
    assert all(r["bad_rows"] == [] and r["row_kinds"] == [] and r["bad_row_count"] == 0 for r in clean)
    whole = json.loads(next(r["row_json"] for r in z if r["row_json"]))
    assert whole["rows"]["bad_rows"] == _row(result, "data_0.pt")["rows"]["bad_rows"]


def test_row_checks_can_be_left_out(dataset):
    res = scan(dataset, workers=0, fingerprint="none", progress=False, rows=False)
    assert all(r["rows"] is None for r in res.rows)
    assert not any(f["kind"] == "zero_rows" for r in res.rows for f in r["findings"])
    assert "rows" not in res.summary or not res.summary["rows"]
