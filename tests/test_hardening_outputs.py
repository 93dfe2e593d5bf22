"""Hardening round 3, part 2: outputs, stamps, Parquet scans, special files and the API boundary.

Classes N3, N4, N5, N8, N10 (stamps, Parquet names), N11, N12, N13, N14 and N6's token text and capture prefix of
the third hardening round: each with its reproduction and variants. What every case checks: no
input or foreign file changed, no traceback, one line and the documented exit code, no rows lost. Ground truth is
the committed real captures (``sample_data``) and values computed here independently (the raw bytes, float64).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import stat
import struct
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import forensics
from forensics.analysis.stamp import stamp, verify
from forensics.cli import main as hsf_main
from forensics.errors import ForensicsError
from forensics.io import stamp_store as store
from forensics.io import stamps as st

pytestmark = pytest.mark.timeout(300)

HSF = [sys.executable, "-c", "import sys; from forensics.cli import main; sys.exit(main())"]
HS = "hidden_states/hs_0.safetensors"
ROOT = os.geteuid() == 0


def sha(p) -> str:
    return hashlib.sha256(pathlib.Path(p).read_bytes()).hexdigest()


def digests(folder) -> dict[str, str]:
    return {str(p): sha(p) for p in pathlib.Path(folder).rglob("*") if p.is_file() and not p.is_symlink()}


def run_cli(args, capsys) -> tuple[int, str, str]:
    code = hsf_main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def no_traceback(err: str) -> None:
    assert "Traceback" not in err and "Error:" not in err.split(":", 1)[0], err


def run_proc(args, fsize: int | None = None, timeout: float = 240, **kw) -> subprocess.CompletedProcess:
    """``hsf ARGS`` in a child process, optionally under a file-size limit (``ulimit -f``, bytes)."""
    pre = None
    if fsize is not None:
        def pre():  # noqa: E306
            import resource

            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(forensics.__file__).parents[1]), COLUMNS="300")
    return subprocess.run([*HSF, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=pre, env=env, **kw)


@pytest.fixture(autouse=True)
def _wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # the console folds to the terminal; keep each file on one line


@pytest.fixture
def copy(sample_data, tmp_path):
    def make(name: str, dst: str | None = None) -> pathlib.Path:
        out = tmp_path / (dst or name)
        shutil.copytree(sample_data / name, out)
        return out
    return make


def small_v1(folder: pathlib.Path, n: int = 3, t: int = 8, h: int = 16) -> pathlib.Path:
    """``n`` small speculators-v1 files (4 slots of growing norm), for cases about files, not values."""
    folder.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    for i in range(n):
        torch.save({"hidden_states": [torch.randn(t, h, generator=g) * (k + 1) for k in range(4)],
                    "input_ids": torch.arange(t) + i}, folder / f"data_{i}.pt")
    return folder


# ---------------------------------------------------------------------------------------------- N3 outputs
@pytest.mark.skipif(not ROOT, reason="mknod needs root")
def test_report_to_a_character_device_writes_through_and_keeps_the_device(copy, tmp_path, capsys):
    ds = copy("speculators")
    null = tmp_path / "null"
    os.mknod(null, 0o644 | stat.S_IFCHR, os.makedev(1, 3))  # a twin of /dev/null
    code, out, err = run_cli(["report", ds, "-o", null], capsys)
    assert code == 3, err
    assert stat.S_ISCHR(os.lstat(null).st_mode)  # still the device, not a regular file
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".null")]  # no temporary left beside it


def test_report_to_a_symlink_writes_its_target_and_keeps_the_link(copy, tmp_path, capsys):
    ds = copy("speculators")
    target = tmp_path / "real_target.html"
    target.write_text("old")
    link = tmp_path / "published.html"
    link.symlink_to(target.name)
    code, _, err = run_cli(["report", ds, "-o", link], capsys)
    assert code == 3, err
    assert link.is_symlink() and os.readlink(link) == target.name
    assert target.read_text().startswith("<!DOCTYPE html>") or "<html" in target.read_text()[:500]
    dangling = tmp_path / "dangling.html"
    dangling.symlink_to("nowhere/x.html")
    code, _, err = run_cli(["report", ds, "-o", dangling], capsys)
    assert code == 2 and "dangling" in err and len(err.strip().splitlines()) == 1
    assert dangling.is_symlink() and not (tmp_path / "nowhere").exists()


def test_report_to_a_fifo_with_a_reader_streams_and_without_one_is_refused(copy, tmp_path, capsys):
    ds = copy("speculators")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code, _, err = run_cli(["report", ds, "-o", fifo], capsys)  # nobody reads it: refused, never blocks
    assert code == 2 and "no process is reading this FIFO" in err and len(err.strip().splitlines()) == 1
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))  # noqa: SIM115
    reader.start()
    import time

    time.sleep(0.3)
    code, _, err = run_cli(["report", ds, "-o", fifo], capsys)
    reader.join(60)
    assert code == 3, err
    assert b"<html" in got[0][:2000] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_report_and_scan_to_stdout(copy, tmp_path):
    ds = copy("speculators")
    p = run_proc(["report", ds, "-o", "-", "-q"])
    assert p.returncode == 3 and "<html" in p.stdout[:2000] and "Traceback" not in p.stderr
    p = run_proc(["scan", ds, "-o", "/dev/stdout", "--no-progress", "-j", "0"])  # a pipe: written through
    rows = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    assert p.returncode in (0, 3) and len(rows) == 1 and rows[0]["path"].endswith("hs_0.safetensors"), p.stderr
    p = run_proc(["scan", ds, "-o", "-", "--resume", "--no-progress"])
    assert p.returncode == 2 and "regular file" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.skipif(not ROOT, reason="mknod needs root")
def test_scan_jsonl_to_a_character_device_and_a_fifo(copy, tmp_path, capsys):
    ds = copy("speculators")
    null = tmp_path / "null"
    os.mknod(null, 0o644 | stat.S_IFCHR, os.makedev(1, 3))
    code, _, err = run_cli(["scan", ds, "-o", null, "--no-progress", "-j", "0"], capsys)
    assert code in (0, 3) and "Traceback" not in err and stat.S_ISCHR(os.lstat(null).st_mode)
    fifo = tmp_path / "rows"
    os.mkfifo(fifo)
    code, _, err = run_cli(["scan", ds, "-o", fifo, "--no-progress", "-j", "0"], capsys)
    assert code == 2 and "no process is reading" in err and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_output_targets_that_are_refused():
    from forensics.io.output import output_target

    assert output_target("/dev/null") == ("through", "/dev/null")
    with pytest.raises(ForensicsError, match="directory"):
        output_target("/tmp")
    import socket

    d = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"hsf-sock-{os.getpid()}"
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(d))
        with pytest.raises(ForensicsError, match="socket"):
            output_target(d)
    finally:
        s.close()
        d.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------- N4 foreign files
def _spark_table(folder: pathlib.Path) -> dict[str, str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir()
    for i in range(2):
        pq.write_table(pa.table({"x": [i]}), folder / f"part-0000{i}-3f1c2a-c000.snappy.parquet")
    (folder / "_SUCCESS").write_bytes(b"")
    return digests(folder)


def test_parquet_scan_into_a_spark_table_is_refused_and_deletes_nothing(copy, tmp_path, capsys):
    ds = copy("speculators")
    table = tmp_path / "SPARK_TABLE"
    before = _spark_table(table)
    code, _, err = run_cli(["scan", ds, "--format", "parquet", "-o", table, "--no-progress", "-j", "0"], capsys)
    assert code == 2 and "not an hsf scan" in err and len(err.strip().splitlines()) == 1, err
    assert digests(table) == before and sorted(os.listdir(table)) == sorted(
        ["part-00000-3f1c2a-c000.snappy.parquet", "part-00001-3f1c2a-c000.snappy.parquet", "_SUCCESS"])


def test_parquet_scan_removes_only_its_own_parts(copy, tmp_path, capsys):
    ds = copy("speculators")
    out = tmp_path / "scan.parquet"
    assert run_cli(["scan", ds, "-o", out, "--no-progress", "-j", "0"], capsys)[0] in (0, 3)
    assert (out / ".hsf-scan").is_file() and (out / "part-000000.parquet").is_file()
    foreign = out / "part-00000-3f1c2a-c000.snappy.parquet"  # someone else's file, placed in hsf's folder
    foreign.write_bytes(b"not ours")
    assert run_cli(["scan", ds, "-o", out, "--no-progress", "-j", "0"], capsys)[0] in (0, 3)
    assert foreign.read_bytes() == b"not ours"
    legacy = tmp_path / "legacy.parquet"  # a folder an earlier hsf wrote (hsf's parts only, no marker): adopted
    legacy.mkdir()
    shutil.copy(out / "part-000000.parquet", legacy / "part-000000.parquet")
    assert run_cli(["scan", ds, "-o", legacy, "--no-progress", "-j", "0"], capsys)[0] in (0, 3)
    assert sorted(os.listdir(legacy)) == [".hsf-scan", "part-000000.parquet"]


# ------------------------------------------------------------------------------ N5 checksum blind spots
def _tampers(a: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The round-3 tamper kinds on a ``[tokens, hidden]`` integer view of a slot (bf16: int16, fp32: int32),
    each a copy. Elements per 8-byte word: 4 (bf16) or 2 (fp32); a lane is an element's place in its word."""
    per = 8 // a.itemsize
    rows, h = a.shape
    out = {}
    x = a.copy()
    r = rng.integers(rows)
    w = x[r].view("<u8")
    i, j = rng.choice(len(w), 2, replace=False)
    while w[i] == w[j]:
        i, j = rng.choice(len(w), 2, replace=False)
    w[[i, j]] = w[[j, i]]
    out["A word swap"] = x
    x = a.copy()
    x[:] = np.concatenate([a[:, h // 2:], a[:, :h // 2]], axis=1)
    out["B halves of H swapped in every row"] = x
    x = a.copy()
    lane = rng.integers(per)
    cand = np.arange(lane, h, per)
    p, q = rng.choice(cand, 2, replace=False)
    while x[r, p] == x[r, q]:
        p, q = rng.choice(cand, 2, replace=False)
    x[r, [p, q]] = x[r, [q, p]]
    out["C same-lane swap"] = x
    x = a.copy()
    p, q = rng.choice(np.arange(per - 1, h, per), 2, replace=False)
    sign = np.array(1 << (8 * a.itemsize - 1), dtype=np.uint64).astype(a.dtype)
    x[r, p] ^= sign
    x[r, q] ^= sign
    out["D paired top-lane sign flips"] = x
    x = a.copy()
    p, q = rng.choice(cand, 2, replace=False)
    x[r, p] += 1
    x[r, q] -= 1
    out["E +1/-1 ulp pair in one lane"] = x
    return out


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_the_v2_checksum_catches_every_round3_tamper_kind_the_v1_checksum_missed(sample_data, dtype):
    """20 tampered copies per kind of a real slot: the old word-sum checksum passes every one (so each copy is
    a true blind-spot case, computed independently), the new one fails every one."""
    from forensics.io.formats import load

    t = load(sample_data / "speculators" / HS).slots[1].tensor()
    t = t if dtype == "bf16" else t.float()
    a = st._int_array(t.contiguous())
    base_v1, base_v2 = st.checksum_v1(a), st.checksum(a)
    rng = np.random.default_rng(0)
    for _ in range(20):
        for kind, x in _tampers(a, rng).items():
            assert not np.array_equal(x, a), kind
            assert st.checksum_v1(x) == base_v1, f"{kind} is not a v1 blind spot"
            assert st.checksum(x) != base_v2, f"{kind} passed the v2 checksum"


def test_the_checksum_is_exact_whatever_the_kernel(sample_data):
    """The int8 product and the float64 fallback give the same integers; extreme bytes do not saturate."""
    from forensics.io.formats import load

    a = st._int_array(load(sample_data / "speculators" / HS).slots[2].tensor().contiguous())
    b = a.view(np.int8)
    w = st.mix_weights(b.shape[1])
    assert w.min() >= -st.MIX_MAX_WEIGHT and w.max() <= st.MIX_MAX_WEIGHT and (w != 0).all()
    want = b.astype(np.int64) @ w.astype(np.int64)  # the definition, in int64
    assert np.array_equal(st.row_mix(a), want) and np.array_equal(st.row_mix_reference(b, w), want)
    for fill in (-128, 127):
        x = np.full((3, 4096), fill, np.int8)
        assert np.array_equal(st.row_mix(x), x.astype(np.int64) @ st.mix_weights(4096).astype(np.int64))
    wide = np.random.default_rng(1).integers(-128, 128, (2, st.MIX_MAX_ROW_BYTES + 40), dtype=np.int8)
    flipped = wide.copy()
    flipped[:, [5, st.MIX_MAX_ROW_BYTES + 5]] = flipped[:, [st.MIX_MAX_ROW_BYTES + 5, 5]]
    assert st.checksum(wide) != st.checksum(flipped) or np.array_equal(wide, flipped)


def _rewrite_stack(path, fn):
    from safetensors.torch import load_file, save_file

    meta = store.safetensors_header(str(path))["__metadata__"]
    t = load_file(str(path))
    t["hidden_states"] = fn(t["hidden_states"]).contiguous()
    save_file(t, str(path), metadata=meta)


def test_verify_fails_a_tensor_parallel_gather_in_the_wrong_rank_order(copy, capsys):
    ds = copy("speculators")
    assert run_cli(["stamp", ds], capsys)[0] == 0
    h = 576

    def swap_halves(hs):
        out = hs.clone()
        out[:, 2] = torch.cat([hs[:, 2, h // 2:], hs[:, 2, :h // 2]], dim=-1)
        return out

    _rewrite_stack(ds / HS, swap_halves)
    code, out, err = run_cli(["verify", ds], capsys)
    assert code == 1 and "FAIL" in out and "slot 2" in out, out + err


def test_a_copied_file_does_not_verify_and_a_moved_dataset_does(copy, tmp_path, capsys):
    ds = small_v1(tmp_path / "ds", n=2)
    st_ds = tmp_path / "st"
    (st_ds / "hidden_states").mkdir(parents=True)
    from safetensors.torch import save_file

    for i in range(2):
        save_file({"hidden_states": torch.randn(6, 4, 16).to(torch.bfloat16), "token_ids": torch.arange(6)},
                  str(st_ds / "hidden_states" / f"hs_{i}.safetensors"))
    for folder in (ds, st_ds):
        assert run_cli(["stamp", folder], capsys)[0] == 0
    shutil.copy(st_ds / "hidden_states" / "hs_1.safetensors", st_ds / "hidden_states" / "hs_0.safetensors")
    code, out, _ = run_cli(["verify", st_ds], capsys)
    assert code == 1 and "made for hidden_states/hs_1.safetensors" in out
    moved = tmp_path / "elsewhere" / "renamed_ds"
    moved.parent.mkdir()
    shutil.move(ds, moved)  # a whole dataset moved: its files are where their stamps say, relative to it
    assert run_cli(["verify", moved], capsys)[0] == 0


def test_verify_checksum_speed_is_within_1_5x_of_the_v1_checksum(sample_data):
    """Same slot, interleaved timings (this machine is shared): the v2 mix within 1.5x of the v1 word sums."""
    import time

    from forensics.io.formats import load

    t = load(sample_data / "speculators" / HS).slots[1].tensor()
    a = st._int_array(torch.cat([t] * 64).contiguous())  # ~5 MB
    best = {"v1": float("inf"), "v2": float("inf")}
    for _ in range(7):
        for name, fn in (("v1", st.checksum_v1), ("v2", st.checksum)):
            t0 = time.perf_counter()
            fn(a)
            best[name] = min(best[name], time.perf_counter() - t0)
    assert best["v2"] <= 1.5 * best["v1"] + 2e-3, best


# ------------------------------------------------------------------------ N5 storage, links, concurrency
def test_pt_stamps_go_to_stamps_jsonl_and_capture_json_is_never_written(copy, capsys):
    ds = copy("speculators_v1")
    before = sha(ds / "capture.json")
    assert run_cli(["stamp", ds], capsys)[0] == 0
    assert sha(ds / "capture.json") == before
    lines = (ds / "stamps.jsonl").read_text().splitlines()
    assert len(lines) == 5 and all(len(x) < 4000 for x in lines)  # compact: one line per file
    assert run_cli(["stamp", ds], capsys)[0] == 0  # re-stamped: a later line wins, verify still passes
    assert run_cli(["verify", ds], capsys)[0] == 0


def test_stamps_jsonl_index_scales_and_a_torn_line_is_skipped(copy, tmp_path):
    ds = copy("speculators_v1")
    stamp(ds)
    side = ds / "stamps.jsonl"
    good = side.read_text().splitlines()
    with open(side, "w") as f:  # 20,000 other files' stamps before ours, then a torn line
        rec = json.loads(good[0])["stamp"]
        for i in range(20_000):
            f.write(json.dumps({"path": f"other/data_{i}.pt", "stamp": rec}, separators=(",", ":")) + "\n")
        f.write("\n".join(good) + "\n")
        f.write('{"path": "data_0.pt", "stamp": {"vers')  # a stamper killed mid-line
    import time

    t0 = time.perf_counter()
    assert verify(ds).verdict == "pass"
    assert time.perf_counter() - t0 < 60
    assert store.read_stamp(str(ds / "data_3.pt"))["file"] == "data_3.pt"


def test_concurrent_stamps_sharing_one_sidecar_lose_no_update(tmp_path):
    ds = small_v1(tmp_path / "SHARED", n=6)
    (ds / "capture.json").write_text(json.dumps({"tool": "x"}))
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(forensics.__file__).parents[1]))
    procs = [subprocess.Popen([*HSF, "stamp", str(ds / f"data_{i}.pt")], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env) for i in range(6)]
    codes = [p.wait(240) for p in procs]
    assert codes == [0] * 6, [p.stderr.read() for p in procs]
    res = verify(ds)
    assert res.verdict == "pass", [(f.path, f.status) for f in res.files]
    assert len((ds / "stamps.jsonl").read_text().splitlines()) == 6


def test_links_and_read_only_files_are_refused_and_the_rest_stamped(copy, tmp_path, capsys):
    ds = copy("speculators")
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    real = ds / HS
    shutil.move(real, store_dir / "blob.safetensors")
    os.symlink(store_dir / "blob.safetensors", real)  # an HF-cache-style link
    second = ds / "hidden_states" / "hs_1.safetensors"
    shutil.copy(store_dir / "blob.safetensors", second)
    os.link(second, tmp_path / "hardlink.safetensors")
    third = ds / "hidden_states" / "hs_2.safetensors"
    shutil.copy(store_dir / "blob.safetensors", third)
    third.chmod(0o444)
    fourth = ds / "hidden_states" / "hs_3.safetensors"
    shutil.copy(store_dir / "blob.safetensors", fourth)
    before = digests(tmp_path)
    code, out, err = run_cli(["stamp", ds], capsys)
    assert code == 2 and "Traceback" not in err
    assert "3 NOT stamped" in out and "symbolic link" in out and "hard links" in out and "read-only" in out
    after = digests(tmp_path)
    assert real.is_symlink() and os.stat(second).st_nlink == 2
    changed = {p for p in after if after[p] != before.get(p)}
    assert changed == {str(fourth)}  # exactly the one file the output says was stamped
    assert "hs_3.safetensors: [" in out


def test_a_failure_half_way_keeps_what_was_stamped_and_says_so(copy, monkeypatch, capsys):
    """An immutable file in the middle (its rename refused): the files before and after it are stamped, the
    pending torch-file stamps are written, and the output names the one file left unchanged."""
    import errno

    ds = copy("speculators")
    for i in (1, 2):
        shutil.copy(ds / HS, ds / "hidden_states" / f"hs_{i}.safetensors")
    small_v1(ds / "torch_part", n=2)
    middle = ds / "hidden_states" / "hs_1.safetensors"
    before = sha(middle)
    real_replace = os.replace

    def replace(a, b):
        if str(b) == str(middle):
            raise OSError(errno.EPERM, "Operation not permitted")
        return real_replace(a, b)

    monkeypatch.setattr(os, "replace", replace)
    code, out, err = run_cli(["stamp", ds], capsys)
    assert code == 2 and "Traceback" not in err
    assert "4 file(s) stamped, 1 NOT stamped" in out and "NOT stamped hidden_states/hs_1.safetensors" in \
        " ".join(out.split()) or "hs_1.safetensors: cannot stamp: Operation not permitted" in out, out
    assert sha(middle) == before and sorted(os.listdir(middle.parent)) == [f"hs_{i}.safetensors" for i in range(3)]
    monkeypatch.setattr(os, "replace", real_replace)
    res = verify(ds)
    assert {pathlib.Path(f.path).name: f.status for f in res.files} == {
        "hs_0.safetensors": "ok", "hs_1.safetensors": "unstamped", "hs_2.safetensors": "ok", "data_0.pt": "ok",
        "data_1.pt": "ok"}


def test_an_old_version1_stamp_is_read_and_said_to_be_weaker(copy, capsys):
    ds = copy("speculators_v1")
    stamp(ds)
    side = ds / "stamps.jsonl"
    from forensics.io.formats import load

    legacy = {}
    for line in side.read_text().splitlines():
        doc = json.loads(line)
        rec = doc["stamp"]
        cap = load(ds / doc["path"])
        rec["version"] = 1
        rec.pop("file")
        for s, slot in zip(rec["slots"], cap.slots, strict=True):
            s["checksum"] = st.checksum_v1(slot.tensor())
        legacy[doc["path"]] = rec
    side.unlink()
    cap_json = json.loads((ds / "capture.json").read_text())
    (ds / "capture.json").write_text(json.dumps({**cap_json, "stamps": legacy}))
    code, out, _ = run_cli(["verify", ds], capsys)
    assert code == 0 and "version-1 stamp" in out


# -------------------------------------------------------------------------- N10 malformed stamps (S04)
def _valid_stamp(sample_data) -> dict:
    from forensics.io.formats import load

    cap = load(sample_data / "speculators" / HS)
    return st.record_for_states([s.tensor() for s in cap.slots], [2, 15, 27, 30], cap.input_ids,
                                fmt="speculators", producer="x", convention=None, layer_ids=None, model="m",
                                num_layers=30, tool_version="0", file=HS)


MALFORMED = {
    "slots an int": lambda d: {**d, "slots": 4},
    "slots a string": lambda d: {**d, "slots": "four"},
    "slots of nulls": lambda d: {**d, "slots": [None] * 4},
    "shape an int": lambda d: {**d, "slots": [{**s, "shape": 71} for s in d["slots"]]},
    "label an int": lambda d: {**d, "slots": [{**s, "label": 3} for s in d["slots"]]},
    "norm_q strings": lambda d: {**d, "slots": [{**s, "norm_q": ["a"] * 5} for s in d["slots"]]},
    "norm_q too short": lambda d: {**d, "slots": [{**s, "norm_q": [1.0]} for s in d["slots"]]},
    "tokens a list": lambda d: {**d, "tokens": [1, 2]},
    "target a string": lambda d: {**d, "target": "SmolLM2"},
    "version a string": lambda d: {**d, "version": "2"},
    "file an int": lambda d: {**d, "file": 3},
    "a list": lambda d: [d],
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_stamps_are_an_error_row_and_other_files_keep_their_verdict(sample_data, copy, case, capsys):
    from safetensors.torch import load_file, save_file

    ds = copy("speculators")
    shutil.copy(ds / HS, ds / "hidden_states" / "hs_1.safetensors")
    stamp(ds)
    bad = MALFORMED[case](_valid_stamp(sample_data))
    save_file(load_file(str(ds / HS)), str(ds / HS), metadata={st.STAMP_KEY: json.dumps(bad)})
    code, out, err = run_cli(["verify", ds], capsys)
    assert code == 1 and "Traceback" not in err
    lines = {"/".join(ln.split()[1].rstrip(":").split("/")[-2:]): ln.split()[0] for ln in out.splitlines()
             if ln.startswith("  ")}
    assert lines == {"hidden_states/hs_0.safetensors": "FAIL", "hidden_states/hs_1.safetensors": "ok"}, out
    assert "malformed stamp" in out
    from forensics.analysis.stamp import stamp_status
    from forensics.views.stamp import summary

    s = stamp_status(str(ds / HS))
    assert s["status"] == "error" and summary(s["stamp"]) is None


def test_malformed_stamp_lines_and_metadata_containers(copy, tmp_path, capsys):
    ds = small_v1(tmp_path / "ds", n=2)
    stamp(ds)
    lines = (ds / "stamps.jsonl").read_text().splitlines()
    doc = json.loads(lines[0])
    doc["stamp"]["slots"] = "x"
    (ds / "stamps.jsonl").write_text(json.dumps(doc) + "\n" + lines[1] + "\n")
    res = verify(ds)
    assert [f.status for f in res.files] == ["error", "ok"] and "malformed stamp in stamps.jsonl" in \
        res.files[0].message
    st_file = tmp_path / "meta_list.safetensors"  # __metadata__ a list: not a dict of strings
    from safetensors.torch import save

    blob = save({"hidden_states": torch.zeros(2, 2, 4)})
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header["__metadata__"] = ["x"]
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    st_file.write_bytes(struct.pack("<Q", len(hb)) + hb + blob[8 + n:])
    code, out, err = run_cli(["verify", st_file], capsys)
    assert code in (1, 2) and "Traceback" not in err


# ---------------------------------------------------------------- N13 runs that stop half-way (verify)
def test_verify_gives_a_verdict_for_every_file_when_one_is_truncated(tmp_path, capsys):
    ds = small_v1(tmp_path / "ds", n=4)
    stamp(ds)
    raw = (ds / "data_2.pt").read_bytes()
    (ds / "data_2.pt").write_bytes(raw[: len(raw) // 2])
    code, out, err = run_cli(["verify", ds], capsys)
    assert code == 1 and "Traceback" not in err
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("  ")]
    assert [r[0] for r in rows] == ["ok", "ok", "FAIL", "ok"] and "data_2.pt" in rows[2][1]


# -------------------------------------------------------------------------- N8 FIFOs never block
def test_a_fifo_named_like_a_capture_is_skipped_or_refused(tmp_path, capsys):
    ds = small_v1(tmp_path / "ds", n=2)
    os.mkfifo(ds / "data_9.pt")
    stamp(ds)
    for cmd in (["verify", ds], ["inspect", ds / "data_0.pt"], ["stamp", ds], ["scan", ds, "-j", "0",
                                                                             "--no-progress"]):
        code, out, err = run_cli(cmd, capsys)
        assert code in (0, 1, 3) and "data_9" not in out + err, (cmd, out, err)
    for cmd in (["inspect", ds / "data_9.pt"], ["verify", ds / "data_9.pt"], ["fingerprint", ds / "data_9.pt"]):
        code, out, err = run_cli(cmd, capsys)
        assert code == 2 and "not a regular file" in err and len(err.strip().splitlines()) == 1, (cmd, err)


# ------------------------------------------------------------------------------- N11 full disk, size limits
FSIZE = 6000  # bytes: a scan row of the sample files is ~1-3 KB, so a few rows fit and then the limit hits


def test_scan_jsonl_over_the_file_size_limit_keeps_whole_rows(tmp_path):
    ds = small_v1(tmp_path / "ds", n=12)
    out = tmp_path / "rows.jsonl"
    p = run_proc(["scan", ds, "-o", out, "-j", "0", "--no-progress"], fsize=FSIZE)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert f"cannot write {out}" in p.stderr and "File too large" in p.stderr
    text = out.read_text()
    assert text.endswith("\n") or text == ""
    rows = [json.loads(x) for x in text.splitlines()]  # every kept row is whole
    assert 0 < len(rows) < 12
    p = run_proc(["scan", ds, "-o", out, "-j", "0", "--no-progress", "--resume"])  # and resumes to the end
    assert p.returncode in (0, 1, 3) and len(out.read_text().splitlines()) == 12


def test_report_and_parquet_and_stamp_over_the_file_size_limit(copy, tmp_path):
    ds = copy("speculators")
    report = tmp_path / "r.html"
    report.write_text("old report")
    p = run_proc(["report", ds, "-o", report], fsize=20_000)
    assert p.returncode == 2 and f"cannot write {report}: File too large" in p.stderr, p.stderr
    assert report.read_text() == "old report" and sorted(os.listdir(tmp_path)) == ["r.html", "speculators"]
    ds2 = small_v1(tmp_path / "ds2", n=3)
    pq_out = tmp_path / "scan.parquet"
    p = run_proc(["scan", ds2, "--format", "parquet", "-o", pq_out, "-j", "0", "--no-progress"], fsize=3000)
    assert p.returncode == 2 and "cannot write" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not [n for n in os.listdir(pq_out) if n.endswith(".tmp")]
    before = sha(ds / HS)
    p = run_proc(["stamp", ds], fsize=2000)
    assert p.returncode == 2 and "NOT stamped" in p.stdout and "File too large" in p.stdout, p.stdout + p.stderr
    assert sha(ds / HS) == before and sorted(os.listdir(ds / "hidden_states")) == ["hs_0.safetensors"]


# ----------------------------------------------------- N10 non-UTF-8 names in Parquet, N12 one record set
def test_parquet_scan_with_a_non_utf8_name_writes_every_row_and_resumes(tmp_path, capsys):
    import pyarrow.parquet as pq

    ds = small_v1(tmp_path / "ds", n=2)
    bad = os.path.join(os.fsencode(ds), b"bad\xffname.pt")
    shutil.copy(ds / "data_0.pt", bad.decode("utf-8", "surrogateescape"))
    out = tmp_path / "scan.parquet"
    code, _, err = run_cli(["scan", ds, "--format", "parquet", "-o", out, "-j", "0", "--no-progress"], capsys)
    assert code in (0, 1, 3) and "Traceback" not in err, err
    t = pq.read_table(out).to_pandas()
    assert t.path.nunique() == 3 and any(p.endswith("bad\\xffname.pt") for p in t.path)
    code, _, err = run_cli(["scan", ds, "--format", "parquet", "-o", out, "-j", "0", "--no-progress",
                            "--resume"], capsys)
    assert code in (0, 1, 3) and "Traceback" not in err
    assert pq.read_table(out).to_pandas().groupby("path").size().to_dict() == {p: 4 for p in t.path.unique()}


def test_a_resumed_parquet_scan_leaves_one_record_set_per_file(tmp_path, capsys):
    import pyarrow.parquet as pq

    ds = small_v1(tmp_path / "ds", n=3)
    good = (ds / "data_1.pt").read_bytes()
    (ds / "data_1.pt").write_bytes(good[:100])  # unreadable in the first run: an error record
    out = tmp_path / "scan.parquet"
    run_cli(["scan", ds, "--format", "parquet", "-o", out, "-j", "0", "--no-progress"], capsys)
    t = pq.read_table(out).to_pandas()
    assert t[t.path.str.endswith("data_1.pt")].error.notna().all()
    (ds / "data_1.pt").write_bytes(good)  # fixed; then a changed file too
    torch.save({"hidden_states": [torch.randn(9, 16) for _ in range(4)], "input_ids": torch.arange(9)},
               ds / "data_2.pt")
    code, out_text, err = run_cli(["scan", ds, "--format", "parquet", "-o", out, "-j", "0", "--no-progress",
                                   "--resume"], capsys)
    assert "Traceback" not in err
    t = pq.read_table(out).to_pandas()
    sizes = t.groupby("path").size().to_dict()
    assert sorted(sizes.values()) == [4, 4, 4] and t.error.isna().all()
    assert (t[t.path.str.endswith("data_2.pt")].num_tokens == 9).all()


def test_a_resumed_jsonl_scan_leaves_one_row_per_file(tmp_path, capsys):
    ds = small_v1(tmp_path / "ds", n=3)
    good = (ds / "data_1.pt").read_bytes()
    (ds / "data_1.pt").write_bytes(good[:100])
    out = tmp_path / "scan.jsonl"
    run_cli(["scan", ds, "-o", out, "-j", "0", "--no-progress"], capsys)
    (ds / "data_1.pt").write_bytes(good)
    run_cli(["scan", ds, "-o", out, "-j", "0", "--no-progress", "--resume"], capsys)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted(pathlib.Path(r["path"]).name for r in rows) == ["data_0.pt", "data_1.pt", "data_2.pt"]
    assert all(r["error"] is None for r in rows)


# ------------------------------------------------------------------------- N6 token text, capture prefix
def test_report_token_text_is_cut(monkeypatch):
    from forensics.analysis import report as verdicts  # where the report reads token text

    class Tok:
        def __len__(self):
            return 10

        def decode(self, ids, skip_special_tokens=False):
            return "x" * 2_000_000 if ids[0] == 3 else "ab"

    monkeypatch.setattr("forensics.analysis.report.find_tokenizer", lambda path, meta: "tok")  # the names it calls
    monkeypatch.setattr("forensics.analysis.report.load_tokenizer", lambda folder: (Tok(), None))

    class Cap:
        input_ids = torch.tensor([3] * 1000 + [1])
        path, meta = "x.pt", {}

    text = verdicts.load_tokens(Cap(), [])
    assert len(text) == 1001 and text[-1] == "ab"
    assert text[0] == "x" * verdicts.TOKEN_TEXT_CHARS + f"…(+{2_000_000 - verdicts.TOKEN_TEXT_CHARS:,} chars)"
    assert max(map(len, text)) <= verdicts.TOKEN_TEXT_CHARS + len("…(+2,000,000 chars)")  # each token bounded


def test_capture_tokenizes_a_bounded_prefix(tmp_path):
    from forensics.models import recorder

    seen: list[int] = []

    class Tok:
        chat_template = None

        def __call__(self, text, add_special_tokens=False, return_offsets_mapping=True):
            seen.append(len(text))
            words = text.split(" ")
            ids, offs, pos = [], [], 0
            for w in words:
                ids.append(len(w))
                offs.append((pos, pos + len(w)))
                pos += len(w) + 1
            return {"input_ids": ids, "offset_mapping": offs}

    big = tmp_path / "big.txt"
    big.write_text("word " * 2_000_000)  # 10 MB
    s = recorder.tokenize(Tok(), str(big), chat=False, max_tokens=256)
    assert len(s.input_ids) == 256 and s.truncated_from is not None
    assert max(seen) <= recorder.PREFIX_CHARS_PER_TOKEN * 256 * 2
    whole = Tok()(big.read_text())["input_ids"][:256]
    assert s.input_ids == whole  # the prefix's first tokens are the whole text's
    short = tmp_path / "short.txt"
    short.write_text("a " * 10 + "x" * 40_000)  # a long last word: the prefix grows until it is whole
    s = recorder.tokenize(Tok(), str(short), chat=False, max_tokens=11)
    assert s.input_ids == [1] * 10 + [40_000]


# ---------------------------------------------------------------------------------- N14 API boundary
def test_the_api_validates_its_arguments_in_one_line(sample_data, tmp_path):
    from forensics.io.capture import Capture

    cap = forensics.load(sample_data / "speculators" / HS)

    def with_slot(t):
        import copy as cp

        from forensics.io.capture import Provenance

        c = cp.copy(cap)
        c.provenance = Provenance(path="<in memory>", format="in-memory", size_bytes=0)
        s0 = cp.copy(cap.slots[0])
        s0.shape, s0.dtype, s0.getter = tuple(t.shape), t.dtype, (lambda: t)
        c.slots = [s0] + cap.slots[1:]
        return c

    assert isinstance(cap, Capture)
    bad = {
        "int64 slot": with_slot(torch.zeros(71, 576, dtype=torch.int64)),
        "bool slot": with_slot(torch.zeros(71, 576, dtype=torch.bool)),
        "complex slot": with_slot(torch.zeros(71, 576, dtype=torch.complex64)),
        "1-D slot": with_slot(torch.zeros(71)),
        "fp8 slot": with_slot(torch.zeros(71, 576).to(torch.float8_e4m3fn)),
    }
    for name, c in bad.items():
        with pytest.raises(ForensicsError) as e:
            forensics.summarize(c)
        assert "\n" not in str(e.value), name
    import copy as cp

    c = cp.copy(cap)
    c.input_ids = torch.zeros(5, dtype=torch.long)  # rows != ids is readable: a row_count finding, not an error
    assert forensics.summarize(c).capture.num_tokens == 71
    from forensics.analysis.rows import check_rows

    assert [f.evidence["tokens"] for f in check_rows(c).findings if f.kind == "row_count"] == [5]
    with pytest.raises(ForensicsError):
        forensics.summarize(123)
    with pytest.raises(ForensicsError, match="sample must be at least 1"):
        forensics.scan(sample_data / "speculators", sample=-3, workers=0)
    with pytest.raises(ForensicsError, match="whole number"):
        stamp(tmp_path, num_layers="30")
    with pytest.raises(ForensicsError, match="not a layer"):
        stamp(tmp_path, layers=[-5, 10**20])
    with pytest.raises(ForensicsError, match="must be 1 to"):
        stamp(tmp_path, num_layers=10**12)
    with pytest.raises(ForensicsError, match="must be a path"):
        verify(123)
