"""Tests of `hsf scan` (forensics.analysis.scan.core) and the mergeable sketches (forensics.analysis.scan.sketch).

References are computed independently here: per-token norms in float64 straight from the saved
tensors, numpy float64 quantiles/mean/std, and the known defects planted in a small mixed directory.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os

import numpy as np
import pytest
import torch

from forensics.analysis.scan.core import read_rows, scan
from forensics.analysis.scan.sketch import SKETCH_REL_ERROR, ExactSum, LogHistogram, Moments

T, H, V, L = 48, 24, 8, 30  # tokens, hidden, vocab, layers of the synthetic residual-stream ladder


def _ladder(g, rs=(0, 3, 16, 28)):
    """A small residual stream: embedding lookup (repeated ids give identical rows), then each block adds
    a little noise (norms grow with depth), a sink on token 0 from block 2 on; optionally final_post."""
    ids = torch.randint(0, V, (T,), generator=g)
    x = torch.randn(V, H, generator=g)[ids]
    out = {0: x}
    for k in range(1, L + 1):
        x = x + torch.randn(T, H, generator=g) * (0.25 + k / 60)
        if k == 2:
            x[0] *= 20
        out[k] = x
    out["final_post"] = x / x.pow(2).mean(-1, keepdim=True).sqrt() * 0.5 * (1 + 0.1 * torch.randn(H, generator=g))
    return ids, [out[r].to(torch.bfloat16) for r in rs]


def make_mixed(root) -> dict:
    """A directory of every supported layout plus planted defects; returns {basename: kinds it must raise}."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    os.makedirs(root / "v1")

    def v1(name, edit=None, extra_ids=0):
        ids, hs = _ladder(g)
        if edit:
            edit(hs)
        torch.save({"input_ids": torch.cat([ids, ids[:extra_ids]]), "loss_mask": torch.ones(T + extra_ids),
                    "hidden_states": hs}, root / "v1" / name)

    for i in range(10):
        v1(f"data_{i}.pt")
    v1("data_10.pt", lambda hs: hs[2].__setitem__((5, 3), float("nan")))
    v1("data_11.pt", lambda hs: hs.__setitem__(slice(1, 3), [hs[2], hs[1]]))
    v1("data_12.pt", extra_ids=3)
    v1("data_13.pt", lambda hs: hs.__setitem__(3, hs[2].clone()))
    blob = (root / "v1" / "data_0.pt").read_bytes()
    (root / "v1" / "data_14.pt").write_bytes(blob[: len(blob) // 2])
    os.makedirs(root / "hidden_states")
    for i in range(3):
        ids, hs = _ladder(g, (2, 15, 27, 30))
        save_file({"hidden_states": torch.stack(hs, 1).contiguous(), "token_ids": ids},
                  str(root / "hidden_states" / f"hs_{i}.safetensors"))
    os.makedirs(root / "rows_0-10")
    for i in range(3):
        ids, hs = _ladder(g, (2, 15, 27, "final_post"))
        buf = io.BytesIO()
        torch.save({"input_ids": ids, "loss_mask": torch.ones(T), "aux_hidden_state": torch.cat(hs[:3], 1)[None],
                    "hidden_state": hs[3][None]}, buf)
        with gzip.open(root / "rows_0-10" / f"data_{i}.ckpt.gz", "wb") as f:
            f.write(buf.getvalue())
    return {"data_10.pt": {"nonfinite"}, "data_11.pt": {"order"}, "data_12.pt": {"row_count"},
            "data_13.pt": {"duplicate"}, "data_14.pt": {"unreadable"}}


@pytest.fixture(scope="session")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed")
    return root, make_mixed(root)


@pytest.fixture(scope="session")
def reference(mixed):
    """An uninterrupted in-process scan: the reference every other path must reproduce."""
    return scan(mixed[0], workers=0)


def _strip(rows):
    return [{k: v for k, v in r.items() if k != "elapsed"} for r in rows]


def _norms64(path, fmt):
    """Per-slot float64 token norms, read independently of the toolkit's readers."""
    if fmt == "speculators":
        from safetensors.torch import load_file

        hs = load_file(path)["hidden_states"]
        slots = [hs[:, i] for i in range(hs.shape[1])]
    elif fmt == "specforge":
        with gzip.open(path, "rb") as f:
            d = torch.load(io.BytesIO(f.read()), weights_only=True)
        aux = d["aux_hidden_state"][0]
        slots = [aux[:, i * H:(i + 1) * H] for i in range(aux.shape[1] // H)] + [d["hidden_state"][0]]
    else:
        slots = torch.load(path, weights_only=True)["hidden_states"]
    return [s.double().norm(dim=-1).numpy() for s in slots]


def test_mixed_directory_every_defect_found_rest_summarised(mixed, reference):
    root, expected = mixed
    res = reference
    found: dict[str, set] = {}
    for a in res.anomalies:
        found.setdefault(os.path.basename(a.file), set()).add(a.kind)
    assert set(found) == set(expected)  # the planted files, and no clean file
    for name, kinds in expected.items():
        assert kinds <= found[name], name
    assert "outlier_norm" in found["data_11.pt"]  # swapped slots: both medians far from the dataset's
    if res.rows[0]["basis"] == "fingerprint":
        assert "role" in found["data_11.pt"]
    assert res.summary["files"] == 21 and res.summary["errors"] == 1  # ids ≠ rows is a row_count finding
    groups = res.summary["groups"]
    assert {k: g["files"] for k, g in groups.items()} == {"speculators-v1": 14, "speculators": 3, "specforge": 3}
    assert groups["speculators-v1"]["majority"]["norm_order"] == {"value": [0, 1, 2, 3], "files": 13, "of": 14}
    rows = {os.path.basename(r["path"]): r for r in res.rows}
    assert rows["data_12.pt"]["error"] is None and rows["data_14.pt"]["error_kind"] == "unreadable"
    assert rows["data_10.pt"]["slots"][2]["nan"] == 1

    # dataset per-slot distributions against float64 norms of every token of every readable file
    for fmt, g in groups.items():
        per_slot = [[] for _ in range(g["num_slots"])]
        for r in res.rows:
            if r["format"] == fmt and not r["error"]:
                for i, x in enumerate(_norms64(r["path"], fmt)):
                    per_slot[i].append(x[np.isfinite(x)])
        for sl, xs in zip(g["slots"], per_slot, strict=True):
            x = np.concatenate(xs)
            assert sl["tokens"] == x.size
            # token norms are float32 in the toolkit: agreement to float32 rounding, not better
            assert sl["mean"] == pytest.approx(x.mean(), rel=1e-6)
            assert sl["std"] == pytest.approx(x.std(), rel=1e-5)
            for key, q in (("p05", 0.05), ("median", 0.5), ("p95", 0.95)):
                assert abs(sl[key] / np.quantile(x, q) - 1) <= SKETCH_REL_ERROR + 1e-6, (fmt, sl["index"], key)


@pytest.mark.parametrize("fingerprint", [False, 4])
def test_cheap_checks_find_every_defect_without_fingerprinting_every_file(mixed, fingerprint):
    root, expected = mixed
    res = scan(root, workers=0, fingerprint=fingerprint)
    found: dict[str, set] = {}
    for a in res.anomalies:
        found.setdefault(os.path.basename(a.file), set()).add(a.kind)
    # ids ≠ rows (data_12) is a row_count finding of the row checks: a stats-only row carries it once every scan
    # row runs analysis.rows (issue 22, scan part)
    assert set(found) <= set(expected) and set(expected) - set(found) <= {"data_12.pt"}
    for name, kinds in expected.items():
        assert name not in found or kinds <= found[name], name
    basis = [r["basis"] for r in res.rows if not r["error"]]
    assert ("fingerprint" in basis) == bool(fingerprint) and "stats" in basis


def test_sketch_quantiles_within_documented_bin_error():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.lognormal(3, 1.5, 20_000), rng.uniform(0.5, 2, 3), [0.0, 0.0], rng.lognormal(8, 0.1, 50)])
    whole = LogHistogram()
    whole.add(x)
    qs = [0.0, 0.001, 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99, 0.999, 1.0]
    est = whole.quantile(qs)
    ref = np.quantile(x, qs)
    for q, e, r in zip(qs, est, ref, strict=True):
        assert abs(e - r) <= SKETCH_REL_ERROR * abs(r) + 1e-12, q
    # merging chunks in any order gives the identical sketch
    parts = np.array_split(rng.permutation(x), 7)
    a, b = LogHistogram(), LogHistogram()
    for p in parts:
        h = LogHistogram()
        h.add(p)
        a.merge(LogHistogram.from_dict(json.loads(json.dumps(h.to_dict()))))
    for p in reversed(parts):
        h = LogHistogram()
        h.add(p)
        b.merge(h)
    assert np.array_equal(a.counts, whole.counts) and np.array_equal(b.counts, whole.counts)
    assert a.quantile(qs) == est and (a.min, a.max, a.zero) == (x.min(), x.max(), 2)
    assert math.isnan(LogHistogram().quantile(0.5))


def test_moments_exact_and_order_free():
    rng = np.random.default_rng(2)
    x = (rng.lognormal(5, 0.01, 50_000)).astype(np.float32)  # tight spread: naive Σx² would cancel badly
    chunks = np.array_split(x, 13)
    fwd, rev = Moments(), Moments()
    for c in chunks:
        fwd.add_sums(*Moments.file_sums(c))
    for c in reversed(chunks):
        rev.add_sums(*Moments.file_sums(c))
    x64 = x.astype(np.float64)
    assert (fwd.mean(), fwd.var()) == (rev.mean(), rev.var())
    assert fwd.mean() == pytest.approx(x64.mean(), rel=1e-14)
    assert fwd.var() == pytest.approx(x64.var(), rel=1e-9)
    s = ExactSum([1e16, 1.0, -1e16, 1e-3])
    assert s.value() == 1.001


def test_pool_rows_equal_in_process_rows(mixed, reference):
    res = scan(mixed[0], workers=2)
    assert _strip(res.rows) == _strip(reference.rows)
    assert res.summary == reference.summary and res.anomalies == reference.anomalies


def test_interrupted_scan_resumes_to_the_uninterrupted_result(mixed, reference, tmp_path):
    out = tmp_path / "scan.jsonl"
    seen = []

    def stop(row):
        seen.append(row["path"])
        if len(seen) == 7:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        scan(mixed[0], workers=2, out=out, on_row=stop)
    kept = list(read_rows(str(out)))
    assert 7 <= len(kept) < 21
    missing = next(r for r in reference.rows if r["path"] not in {k["path"] for k in kept} and not r["error"])
    with open(out, "a") as f:  # a row without its sketch (another version?) is not trusted: rescanned
        f.write(json.dumps({**missing, "sketch": None}) + "\n")
        f.write('{"path": "/torn", "size": 1')  # a process killed mid-write leaves a torn last line
    res = scan(mixed[0], workers=2, out=out, resume=True)
    assert res.timing["resumed_files"] == len(kept)
    assert res.timing["scanned_files"] == 21 - len(kept)
    assert _strip(res.rows) == _strip(reference.rows)
    assert res.summary == reference.summary and res.anomalies == reference.anomalies
    again = scan(mixed[0], workers=2, out=out, resume=True)  # every row comes from the file, except error rows:
    errors = sum(1 for r in reference.rows if r["error"])  # a failure may be transient, so they are read again
    assert errors and again.timing["scanned_files"] == errors and again.summary == reference.summary


def test_killed_worker_costs_only_its_file(mixed, reference, monkeypatch):
    monkeypatch.setenv("HSF_SCAN_TEST_DIE_ON", "v1/data_3.pt")
    res = scan(mixed[0], workers=2)
    rows = {os.path.basename(r["path"]): r for r in res.rows}
    assert "worker process died" in rows["data_3.pt"]["error"]
    others = [r for r in _strip(res.rows) if not r["path"].endswith("v1/data_3.pt")]
    assert others == [r for r in _strip(reference.rows) if not r["path"].endswith("v1/data_3.pt")]


def test_dask_gives_the_same_rows(mixed, reference):
    distributed = pytest.importorskip("distributed")
    res = scan(mixed[0], workers=2, dask="local")  # --dask-local: a LocalCluster of 2 worker processes
    assert _strip(res.rows) == _strip(reference.rows)
    assert res.summary == reference.summary
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        res = scan(mixed[0], dask=c.scheduler_address)  # --dask tcp://…: an existing scheduler
    assert _strip(res.rows) == _strip(reference.rows) and res.anomalies == reference.anomalies


def test_sample_is_deterministic(mixed):
    a, b = scan(mixed[0], workers=0, sample=5), scan(mixed[0], workers=0, sample=5)
    assert [r["path"] for r in a.rows] == [r["path"] for r in b.rows] and len(a.rows) == 5


def test_cli_json_exit_codes_and_resume_needs_out(mixed, tmp_path, capsys):
    from forensics.cli import main

    out = tmp_path / "rows.jsonl"
    assert main(["scan", str(mixed[0]), "--workers", "0", "-o", str(out), "--json"]) == 2  # unreadable files
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["files"] == 21 and "rows" not in doc
    assert len(list(read_rows(str(out)))) == 21
    assert main(["scan", str(mixed[0] / "hidden_states"), "--workers", "0"]) == 0
    assert main(["scan", str(mixed[0]), "--resume"]) == 2
    assert "--resume needs -o" in capsys.readouterr().err


def test_html_escapes_file_names(tmp_path):
    (tmp_path / "x<script>alert(1)<\\script>.pt").write_bytes(b"not a checkpoint")
    res = scan(tmp_path, workers=0)
    html = res._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert res.to_dict()["anomalies"][0]["kind"] == "unreadable"


def test_real_sample_data_scans_clean(sample_data):
    res = scan(sample_data / "speculators_v1", workers=0)
    assert res.anomalies == [] and res.summary["files"] == 5
    g = res.summary["groups"]["speculators-v1"]
    assert g["majority"]["order"]["files"] == 5 and g["num_slots"] == 4
    files = sorted((sample_data / "speculators_v1").glob("data_*.pt"))
    x = np.concatenate([_norms64(str(p), "speculators-v1")[0] for p in files])
    assert g["slots"][0]["mean"] == pytest.approx(x.mean(), rel=1e-6)


def test_real_captures_one_miswired_shard_is_found(sample_data, tmp_path):
    """The seed's failure on real SmolLM2 states: one shard captured as [L3, L16, L28, L30] (the served
    wiring) among files captured as [embed, L3, L16, L28] (the trained one)."""
    import shutil

    import forensics

    src = sample_data / "speculators_v1"
    for name in ("capture.json", "data_config.json"):
        shutil.copy(src / name, tmp_path / name)
    for i in range(10):
        shutil.copy(src / f"data_{i % 5}.pt", tmp_path / f"data_{i}.pt")
    lad = forensics.load(sample_data / "ladder" / "capture_0.safetensors")
    assert [lad.slots[r].declared_r for r in (3, 16, 28, 30)] == [3, 16, 28, 30]
    torch.save({"input_ids": lad.input_ids, "loss_mask": lad.loss_mask,
                "hidden_states": [lad.slots[r].tensor().clone() for r in (3, 16, 28, 30)]}, tmp_path / "data_10.pt")
    res = scan(tmp_path, workers=0)
    assert {os.path.basename(a.file) for a in res.anomalies} == {"data_10.pt"}
    kinds = {a.kind for a in res.anomalies}
    assert "outlier_norm" in kinds and kinds & {"role", "order"}, kinds
    slot0 = [a for a in res.anomalies if a.kind == "outlier_norm" and a.slot == 0]
    assert slot0 and slot0[0].value > 6  # L3 norms (~77) where the embedding (~2.8) belongs


def test_fingerprint_choice_spreads_n_files():
    from forensics.analysis.scan.core import fingerprint_choice

    assert sum(map(fingerprint_choice(1000, 64), range(1000))) == 63  # every 16th file (⌈1000/64⌉)
    assert all(map(fingerprint_choice(10, 64), range(10))) and all(map(fingerprint_choice(10, True), range(10)))
    assert not any(map(fingerprint_choice(10, False), range(10))) and not any(map(fingerprint_choice(10, 0), range(10)))


def test_whole_dataset_miswired_is_reported_dataset_wide(sample_data, tmp_path, capsys):
    """Every file stored [embed, L16, L3, L28] while capture.json says [embed, L3, L16, L28]: no file
    differs from the majority, so the finding must surface at dataset level (and fail the CLI)."""
    import shutil

    from forensics.cli import main

    src = sample_data / "speculators_v1"
    shutil.copy(src / "capture.json", tmp_path / "capture.json")
    for i in range(5):
        d = torch.load(src / f"data_{i}.pt", weights_only=True)
        hs = d["hidden_states"]
        d["hidden_states"] = [hs[0], hs[2], hs[1], hs[3]]
        torch.save(d, tmp_path / f"data_{i}.pt")
    res = scan(tmp_path, workers=0)
    assert res.anomalies == [] and not res.ok
    (wide,) = res.summary["dataset_findings"]
    assert (wide["kind"], wide["files"], wide["of"]) == ("reordered", 5, 5)
    assert "dataset-wide: reordered" in repr(res) and "hsf-scan-findings" in res._repr_html_()
    assert main(["scan", str(tmp_path), "--workers", "0", "--no-progress"]) == 1
    capsys.readouterr()


def test_unguarded_script_works(mixed, tmp_path):
    """``scan()`` at the top level of a script without ``if __name__ == "__main__"``: workers must not
    re-run the script (they would die and every file would become an error row)."""
    import subprocess
    import sys

    script = tmp_path / "quick.py"
    script.write_text("import forensics\n"
                      f"r = forensics.scan({str(mixed[0] / 'hidden_states')!r}, workers=2, fingerprint=False)\n"
                      "print('errors', r.summary['errors'], r.summary['files'])\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "errors 0 3" in out.stdout and "bootstrapping" not in out.stderr


# ------------------------------------------------------------------------------------------ Parquet rows
def _records(out):
    import pyarrow.parquet as pq

    return pq.read_table(str(out)).to_pylist()


def test_parquet_records_are_typed_and_equal_the_json_rows(mixed, reference, tmp_path):
    """One typed record per file × slot (one for an unreadable file); its columns equal the JSON row's
    fields; the summary and anomalies equal the JSON Lines scan's; rows read back equal too."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from forensics.layers import r_label

    out = tmp_path / "scan.parquet"
    res = scan(mixed[0], workers=0, out=out)  # .parquet: the format follows the name
    assert out.is_dir() and res.summary == reference.summary and res.anomalies == reference.anomalies
    assert _strip(res.rows) == _strip(reference.rows)
    schema = pq.read_schema(next(out.glob("part-*.parquet")))
    assert schema.field("slot").type == pa.int32() and schema.field("token0_norm").type == pa.float64()
    assert schema.field("sinks").type == pa.list_(pa.int32()) and schema.field("nan").type == pa.int64()
    recs = _records(out)
    rows = {r["path"]: r for r in reference.rows}
    assert len(recs) == sum(max(1, len(r["slots"])) for r in rows.values())
    for rec in recs:
        row = rows[rec["path"]]
        assert (rec["size"], rec["mtime_ns"], rec["format"], rec["error"]) == \
            (row["size"], row["mtime_ns"], row["format"], row["error"])
        if rec["slot"] is None:
            assert row["error"] and not row["slots"]
            continue
        s = row["slots"][rec["slot"]]
        assert (rec["role"], rec["label"], rec["r_claimed"], rec["nan"], rec["inf"], rec["sinks"]) == \
            (s["role"], s["label"], s["declared"], s["nan"], s["inf"], s["sinks"])
        assert (rec["norm_median"], rec["token0_norm"], rec["num_sinks"]) == \
            (s["norm"]["median"], s["first"], s["num_sinks"])
        assert rec["r_exact"] == (None if s["r_exact"] is None else r_label(s["r_exact"]))
        kinds = {f["kind"] for f in row["findings"] if not f["slots"] or s["index"] in f["slots"]}
        assert set(rec["anomaly_kinds"]) == kinds
    assert {"duplicate"} <= {k for rec in recs for k in rec["anomaly_kinds"] or ()}  # data_13's planted copy


def test_parquet_scan_killed_with_sigkill_resumes_to_the_uninterrupted_result(mixed, reference, tmp_path):
    """A scan SIGKILLed after some parts were written: complete parts survive (no torn part is read), the
    resumed scan rescans only the rest, and its summary equals the uninterrupted one; no file twice."""
    import signal
    import subprocess
    import sys

    out = tmp_path / "scan.parquet"
    script = (
        "import os, signal\n"
        "from forensics.analysis.scan import sinks\n"
        "from forensics.analysis.scan.core import scan\n"
        "sinks.PARQUET_PART_FILES, sinks.PARQUET_PART_SECONDS = 2, 1e9\n"
        "seen = []\n"
        "def cb(row):\n"
        "    seen.append(row)\n"
        "    if len(seen) == 7:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        f"scan({str(mixed[0])!r}, workers=0, out={str(out)!r}, on_row=cb)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    kept = {r["path"] for r in read_rows(str(out))}
    assert len(kept) == 6  # three whole parts of 2 files; the 7th row was pending when the process was killed
    with open(out / ".part-000099.parquet.tmp", "wb") as f:  # a part being written at the kill: ignored
        f.write(b"PAR1 torn")
    res = scan(mixed[0], workers=2, out=out, resume=True)
    assert res.timing["resumed_files"] == len(kept) and res.timing["scanned_files"] == 21 - len(kept)
    assert res.summary == reference.summary and res.anomalies == reference.anomalies
    assert _strip(res.rows) == _strip(reference.rows)
    recs = _records(out)
    assert len({(r["path"], r["slot"]) for r in recs}) == len(recs)  # no file × slot written twice
    assert not list(out.glob(".part-*.tmp"))


def test_cli_parquet_query_slot_two_token0_above_1000(sample_data, tmp_path):
    """The query in docs/commands.md: which files have slot 2 with a token-0 norm above 1000 (pandas on the parts)."""
    import pandas as pd

    from forensics.cli import main

    out = tmp_path / "rows"
    main(["scan", str(sample_data / "speculators_v1"), "--format", "parquet", "-o", str(out), "--workers", "0",
          "--no-progress"])
    t = pd.read_parquet(out)
    hits = sorted(t[(t.slot == 2) & (t.token0_norm > 1000)].path.unique())
    want = sorted(str(p) for p in (sample_data / "speculators_v1").glob("data_*.pt")
                  if float(torch.load(p, weights_only=True)["hidden_states"][2][0].double().norm()) > 1000)
    assert hits == want and want


def test_the_progress_bar_starts_with_the_first_file_not_the_start_up(tmp_path, monkeypatch):
    """The bar is drawn when the first file is done: the start-up before it (a pool's workers importing torch,
    seconds) is not in the bar nor in its rate, so the bar moves from its first frame."""
    import time

    from forensics.analysis.scan import core

    for k in range(3):
        torch.save({"input_ids": torch.arange(20), "hidden_states": torch.randn(2, 20, 8)}, tmp_path / f"d_{k}.pt")
    t0 = time.perf_counter()
    made: list[tuple[float, int]] = []
    startup = 0.4

    inline = core.run_inline

    def slow_start(batches, opts):
        time.sleep(startup)  # what a pool's start-up costs before its first file
        yield from inline(batches, opts)

    monkeypatch.setattr(core, "run_inline", slow_start)

    class Bar:
        def __init__(self, initial):
            self.n = initial

        def set_postfix_str(self, *a, **k):
            pass

        def update(self, k):
            self.n += k

        def close(self):
            made.append((-1.0, self.n))

    def bar(total, initial, enabled):
        made.append((time.perf_counter() - t0, initial))
        return Bar(initial)

    monkeypatch.setattr(core, "_progress", bar)
    res = scan(str(tmp_path), workers=0, progress=True)
    assert res.summary["files"] == 3
    (t_made, initial), (_, final) = made
    assert t_made >= startup and initial == 0 and final == 3, made
