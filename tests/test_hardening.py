"""Hostile and careless input, class by class: nothing runs, inputs are never written, memory and time per file
are bounded, and every failure is one line naming the file (or a finding), never a traceback.

Each class is exercised with the case that first showed it and with variants of it. Commands run in-process
through ``forensics.cli.main`` (the CLI's own entry point) unless the case needs a real process (memory
limits, signals)."""

from __future__ import annotations

import builtins
import gzip
import hashlib
import json
import os
import pathlib
import struct
import subprocess
import sys
import textwrap

import pytest
import torch

import forensics
from forensics.cli import main as hsf_main

pytestmark = pytest.mark.timeout(120)

T, H = 8, 16
HSF = [sys.executable, "-c", "import sys; from forensics.cli import main; sys.exit(main())"]


def sha(p) -> str:
    return hashlib.sha256(pathlib.Path(p).read_bytes()).hexdigest()


def digests(folder) -> dict[str, str]:
    return {str(p): sha(p) for p in pathlib.Path(folder).rglob("*") if p.is_file()}


def v1(t: int = T, h: int = H, n: int = 2, **kw) -> dict:
    d = {"hidden_states": [torch.randn(t, h) for _ in range(n)], "input_ids": torch.arange(t) % 3}
    d.update(kw)
    return d


def st_bytes(header: dict, data: int = 64) -> bytes:
    b = json.dumps(header).encode()
    return struct.pack("<Q", len(b)) + b + bytes(data)


def one_line_error(err: str, path) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines, "expected an error on stderr"
    assert "Traceback" not in err, err
    assert any(str(path) in ln or os.path.basename(str(path)) in ln for ln in lines), err


def run_cli(args, capsys) -> tuple[int, str, str]:
    code = hsf_main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def run_proc(args, limit_as: int | None = None, timeout: float = 90, **kw) -> subprocess.CompletedProcess:
    """``hsf ARGS`` in a child process, optionally under an address-space limit (bytes)."""
    pre = None
    if limit_as is not None:
        def pre():  # noqa: E306
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(forensics.__file__).parents[1]))
    return subprocess.run([*HSF, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=pre, env=env, **kw)


# ------------------------------------------------------------------------------------------- D1 code
def _evil_tokenizer(folder: pathlib.Path, marker: pathlib.Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "T", "auto_map": {"AutoTokenizer": ["t.T", None]}}))
    (folder / "t.py").write_text(f"import pathlib; pathlib.Path({str(marker)!r}).touch()\n"
                                 "from transformers import PreTrainedTokenizer as T\n")


@pytest.mark.parametrize("where", ["inside", "tokenizer_dir", "outside_abs", "outside_dotdot"])
def test_tokenizer_code_never_runs_and_never_prompts(tmp_path, monkeypatch, capsys, where):
    ds, marker = tmp_path / "evil", tmp_path / "PWNED"
    ds.mkdir()
    torch.save(v1(), ds / "data_0.pt")
    folder = {"inside": ds / "tk", "tokenizer_dir": ds / "tokenizer", "outside_abs": tmp_path / "elsewhere",
              "outside_dotdot": tmp_path / "up"}[where]
    _evil_tokenizer(folder, marker)
    rel = {"inside": "tk", "tokenizer_dir": None, "outside_abs": str(folder), "outside_dotdot": "../up"}[where]
    if rel is not None:
        (ds / "capture.json").write_text(json.dumps({"tokenizer": rel}))
    asked = []
    monkeypatch.setattr(builtins, "input", lambda *a: asked.append(a) or "y")
    before = digests(ds)
    code, out, err = run_cli(["report", ds, "-o", tmp_path / "r.html"], capsys)
    assert not marker.exists(), "the dataset's tokenizer code ran"
    assert asked == [], "transformers prompted for remote code"
    assert (tmp_path / "r.html").stat().st_size > 0, "the report is still written"
    assert "Traceback" not in err
    if where in ("inside", "tokenizer_dir"):  # found, and refused for what it asks: said on one line, as a note
        assert code != 2 and "auto_map" in err  # the report is written and decided without token text
        assert len([ln for ln in err.splitlines() if "auto_map" in ln]) == 1
    assert digests(ds) == before


def test_tokenizer_outside_the_capture_folder_is_not_loaded(tmp_path, sample_data, capsys, monkeypatch):
    """A real, harmless tokenizer named by an absolute path or ``..`` is refused (the path is confined)."""
    import transformers

    loaded = []
    real = transformers.AutoTokenizer.from_pretrained
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained",
                        lambda p, *a, **k: loaded.append((str(p), k)) or real(p, *a, **k))
    ds = tmp_path / "ds"
    ds.mkdir()
    torch.save(v1(), ds / "data_0.pt")
    for rel in (str(sample_data / "tokenizer"), "../../" * 10 + str(sample_data / "tokenizer")[1:]):
        (ds / "capture.json").write_text(json.dumps({"tokenizer": rel}))
        run_cli(["report", ds, "-o", tmp_path / "r.html"], capsys)
    assert all(str(ds) in p for p, _ in loaded), loaded
    assert all(k.get("trust_remote_code") is False for _, k in loaded), loaded


# ------------------------------------------------------------------------------------------- D2/D4 memory
LIMIT = 2 << 30  # the address-space cap for memory cases: torch + numpy alone map ~1.2 GB of it


@pytest.mark.parametrize("L", ["1000000000000", "10000000", "-3", "0", "1e9", "\"12\"", "true"])
def test_absurd_num_hidden_layers_is_rejected_without_allocating(tmp_path, sample_data, L):
    cfg = tmp_path / "t.json"
    cfg.write_text(f'{{"num_hidden_layers": {L}, "hidden_size": 576}}')
    p = run_proc(["audit", "--engine", "sglang", "--data", sample_data / "speculators_v1", "--draft",
                  sample_data / "draft_eagle3", "--target-config", cfg], limit_as=LIMIT, timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    one_line_error(p.stderr, cfg)
    assert "num_hidden_layers" in p.stderr


@pytest.mark.parametrize("L", ["1000000000000", "100001"])
def test_absurd_num_layers_flag_is_rejected(sample_data, capsys, L):
    try:
        code = hsf_main(["audit", "--engine", "sglang", "--data", str(sample_data / "speculators_v1"), "--draft",
                         str(sample_data / "draft_eagle3"), "--num-layers", L])
    except SystemExit as e:
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert "num-layers" in err and "10000" in err


@pytest.mark.parametrize("gib", [1, 3])
def test_gzip_bomb_is_bounded_and_named(tmp_path, gib):
    bomb = tmp_path / "bomb.ckpt.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as g:
        for _ in range(gib * 16):
            g.write(bytes(64 << 20))
    before = sha(bomb)
    p = run_proc(["inspect", bomb], limit_as=LIMIT, timeout=180)
    assert p.returncode == 2, p.stderr[-2000:]
    one_line_error(p.stderr, bomb)
    assert "code" not in p.stderr  # zeros are not code
    assert sha(bomb) == before


def test_gzip_good_capture_still_reads(tmp_path):
    buf = tmp_path / "x.pt"
    torch.save(v1(), buf)
    gz = tmp_path / "data_0.ckpt.gz"
    gz.write_bytes(gzip.compress(buf.read_bytes()))
    cap = forensics.load(gz)
    assert cap.num_tokens == T and torch.equal(cap.slots[0].tensor(), torch.load(buf)["hidden_states"][0])


# ------------------------------------------------------------------------------------------- D3/D16 outputs
def _ds(tmp_path, n=2) -> pathlib.Path:
    ds = tmp_path / "ds"
    ds.mkdir()
    for i in range(n):
        torch.save(v1(), ds / f"data_{i}.pt")
    return ds


@pytest.mark.parametrize("cmd", ["scan", "report"])
def test_output_that_is_an_input_is_refused(tmp_path, capsys, cmd):
    ds = _ds(tmp_path)
    before = digests(ds)
    for target in (ds / "data_1.pt", ds / "data_0.pt"):
        code, out, err = run_cli([cmd, ds, "-o", target], capsys)
        assert code == 2, err
        one_line_error(err, target)
    # a capture that is not among the inputs is protected as well (it sniffs as one)
    other = tmp_path / "other.pt"
    torch.save(v1(), other)
    code, out, err = run_cli([cmd, ds / "data_0.pt", "-o", other], capsys)
    assert code == 2
    # and a hard link / symlink to an input
    os.symlink(ds / "data_0.pt", tmp_path / "link.jsonl")
    code, out, err = run_cli([cmd, ds, "-o", tmp_path / "link.jsonl"], capsys)
    assert code == 2
    assert digests(ds) == before


@pytest.mark.parametrize("cmd", ["scan", "report"])
def test_output_that_is_a_directory_is_refused_before_work(tmp_path, capsys, cmd):
    ds = _ds(tmp_path)
    (tmp_path / "outdir").mkdir()
    code, out, err = run_cli([cmd, ds, "-o", tmp_path / "outdir"], capsys)
    assert code == 2
    one_line_error(err, tmp_path / "outdir")


def test_resume_from_a_binary_file_is_refused(tmp_path, capsys):
    ds = _ds(tmp_path)
    before = digests(ds)
    code, out, err = run_cli(["scan", ds, "--resume", "-o", ds / "data_0.pt"], capsys)
    assert code == 2
    one_line_error(err, ds / "data_0.pt")
    junk = tmp_path / "junk.jsonl"
    junk.write_bytes(bytes(range(256)) * 4)
    code, out, err = run_cli(["scan", ds, "--resume", "-o", junk], capsys)
    assert code == 2
    one_line_error(err, junk)
    assert digests(ds) == before


def test_outputs_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """Every writer goes through one temp-file-and-rename helper: a failure before the rename leaves the
    previous file as it was and no temporary file behind."""
    from forensics.io import output

    out = tmp_path / "r.html"
    out.write_text("previous report")
    with pytest.raises(RuntimeError):
        with output.atomic_output(out) as f:
            f.write("half a report")
            raise RuntimeError("disk full")
    assert out.read_text() == "previous report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]
    with output.atomic_output(out) as f:
        f.write("name bad\udcffname.pt")  # a non-UTF-8 file name never breaks a write
    assert out.read_text() == "name bad\\xffname.pt"
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


# ------------------------------------------------------------------------------------------- D5 hangs
@pytest.mark.timeout(60)
@pytest.mark.parametrize("make", [
    lambda: {"h": torch.zeros(1, 1).expand(2 * 10**8, 4096)},
    lambda: {"hidden_states": [torch.zeros(1, 4096).expand(10**9, 4096)] * 2},
    lambda: {"hidden_states": [torch.zeros(4096).as_strided((10**8, 4096), (0, 1))] * 2},
    lambda: {"hidden_state": torch.zeros(1, 1, 1).expand(1, 10**9, 4096),
             "aux_hidden_state": torch.zeros(1, 1, 1).expand(1, 10**9, 3 * 4096)},
])
def test_expanded_views_are_refused_fast(tmp_path, capsys, make):
    p = tmp_path / "stride0.pt"
    torch.save(make(), p)
    code, out, err = run_cli(["inspect", p], capsys)
    assert code == 2
    one_line_error(err, p)
    assert "stor" in err


def test_legit_views_still_read(tmp_path):
    base = torch.randn(T, 3 * H)
    p = tmp_path / "data_0.pt"
    torch.save({"hidden_state": base[:, :H].unsqueeze(0), "aux_hidden_state": base.unsqueeze(0),
                "input_ids": torch.arange(T), "loss_mask": torch.ones(T)}, p)
    cap = forensics.load(p)
    assert cap.num_tokens == T


# ------------------------------------------------------------------------------------------- D6 orphans
def _live_descendants(pid: int) -> list:
    import psutil

    try:
        return [c for c in psutil.Process(pid).children(recursive=True) if c.status() != psutil.STATUS_ZOMBIE]
    except psutil.NoSuchProcess:
        return []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_killing_scan_leaves_no_process(tmp_path, sig):
    import signal

    import psutil

    ds = tmp_path / "big"
    ds.mkdir()
    for i in range(40):
        torch.save(v1(t=256, h=256, n=4), ds / f"data_{i}.pt")
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(forensics.__file__).parents[1]))
    proc = subprocess.Popen([*HSF, "scan", str(ds), "-o", str(tmp_path / "s.jsonl"), "--fingerprint", "all",
                             "--no-progress", "-j", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, start_new_session=True)
    import time

    deadline = time.monotonic() + 60
    kids: list = []
    while time.monotonic() < deadline and len(kids) < 2:
        kids = _live_descendants(proc.pid)
        time.sleep(0.2)
    assert kids, "scan started no worker"
    every = {k.pid for k in kids}
    os.kill(proc.pid, getattr(signal, sig))
    _, err = proc.communicate(timeout=20)  # EOF on its pipes: no descendant holds them
    time.sleep(0.5)
    alive = [p for p in every if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive, alive
    if sig == "SIGTERM":
        assert b"interrupted" in err and proc.returncode != 0


def test_scan_file_time_budget(tmp_path, monkeypatch):
    from forensics.analysis.scan import workers

    ds = _ds(tmp_path, 3)
    monkeypatch.setenv("HSF_SCAN_TEST_SLEEP_ON", "data_1.pt")
    for n in (0, 1):  # in this process, and in a pool worker
        res = forensics.scan(ds, workers=n, fingerprint=False, file_seconds=2)
        errs = [r for r in res.rows if r.get("error")]
        assert len(errs) == 1 and "data_1.pt" in errs[0]["error"] and "time budget" in errs[0]["error"], errs
        assert res.summary["files"] == 3 and workers is not None


# ------------------------------------------------------------------------------------------- D7 lock
def test_two_scans_on_one_output_cannot_both_write(tmp_path):
    import fcntl

    ds = _ds(tmp_path, 2)
    out = tmp_path / "same.jsonl"
    out.write_text("")
    with open(out, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        p = run_proc(["scan", ds, "-o", out, "--no-progress", "-j", "0"])
    assert p.returncode == 2
    assert "another" in p.stderr and str(out) in p.stderr
    assert out.read_text() == ""


# ------------------------------------------------------------------------------------------- D8 numbers
@pytest.mark.parametrize("value", [1e38, 3e38, -2e38])
def test_huge_finite_values_give_right_norms(tmp_path, value):
    t = torch.full((T, H), value)
    p = tmp_path / "big.pt"
    torch.save({"hidden_states": [t, torch.randn(T, H)]}, p)
    s = forensics.summarize(p).slots[0]
    want = abs(value) * H ** 0.5  # float64 reference
    assert s.norm.median == pytest.approx(want, rel=1e-5)
    assert s.norm.mean == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("value", [1e38, 1e20])
def test_values_whose_squares_overflow_are_a_finding(tmp_path, capsys, value):
    p = tmp_path / "big.pt"
    torch.save({"hidden_states": [torch.full((T, H), value), torch.randn(T, H)]}, p)
    code, out, err = run_cli(["fingerprint", "--json", p], capsys)
    assert "Traceback" not in err
    kinds = [f["kind"] for f in json.loads(out)["files"][0]["findings"]]
    assert "overflow" in kinds and code == 1


def test_denormals_are_not_all_zeros(tmp_path):
    p = tmp_path / "tiny.pt"
    torch.save({"hidden_states": [torch.full((T, H), 1e-40), torch.randn(T, H)]}, p)
    s = forensics.summarize(p).slots[0]
    assert s.norm.median > 0
    assert s.norm.median == pytest.approx(float(torch.tensor(1e-40).item()) * H ** 0.5, rel=1e-3)
    assert not getattr(s, "all_zero", False)


# ------------------------------------------------------------------------------------------- D9 resume
def test_resume_retries_error_rows(tmp_path, monkeypatch):
    """A failure may be transient (a worker killed for memory; a permission fixed with chmod, which leaves
    mtime alone): --resume reads such files again and ends as a fresh scan would."""
    ds = _ds(tmp_path, 3)
    out = tmp_path / "s.jsonl"
    monkeypatch.setenv("HSF_SCAN_TEST_DIE_ON", "data_1.pt")
    first = forensics.scan(ds, workers=1, out=out, fingerprint=False)
    assert first.summary["errors"] == 1
    monkeypatch.delenv("HSF_SCAN_TEST_DIE_ON")
    again = forensics.scan(ds, workers=0, out=out, resume=True, fingerprint=False)
    assert again.summary["errors"] == 0 and again.timing["resumed_files"] == 2
    if os.geteuid() != 0:  # root reads a chmod 000 file
        (ds / "data_2.pt").chmod(0)
        assert forensics.scan(ds, workers=0, out=out, fingerprint=False).summary["errors"] == 1
        (ds / "data_2.pt").chmod(0o644)
        assert forensics.scan(ds, workers=0, out=out, resume=True, fingerprint=False).summary["errors"] == 0


# ------------------------------------------------------------------------------------------- D10 probe
@pytest.mark.parametrize("args", [["--samples", "-1"], ["--samples", "0"], ["--topk", "0"], ["--topk", "-2"]])
def test_probe_rejects_nonsense_arguments(sample_data, capsys, args):
    try:
        code = hsf_main(["probe", "--draft", str(sample_data / "draft_eagle3"), "--data",
                         str(sample_data / "speculators_v1"), *args])
    except SystemExit as e:
        code = e.code
    assert code == 2
    assert args[0] in capsys.readouterr().err


def _nan_copy(src: pathlib.Path, dst: pathlib.Path, fill: float | None = None, ids=None) -> None:
    import shutil

    shutil.copytree(src, dst)
    for p in sorted(dst.glob("data_*.pt")):
        d = torch.load(p)
        d["hidden_states"] = [torch.full_like(h, float("nan") if fill is None else fill) for h in d["hidden_states"]]
        if ids is not None:
            d["input_ids"] = torch.full_like(d["input_ids"], ids)
        torch.save(d, p)


@pytest.mark.parametrize("fill,ids", [(None, None), (1e38, None), (0.5, -100)])
def test_probe_on_data_without_signal_cannot_tell(tmp_path, sample_data, capsys, fill, ids):
    data = tmp_path / "data"
    _nan_copy(sample_data / "speculators_v1", data, fill, ids)
    code, out, err = run_cli(["probe", "--draft", sample_data / "draft_eagle3", "--data", data, "--samples", "2"],
                             capsys)
    assert code == 2 and "best" not in out, (code, out)
    assert "cannot tell" in err or "vocabulary" in err, err


@pytest.mark.parametrize("L", [-3, 0])
def test_audit_rejects_non_positive_layers(tmp_path, sample_data, capsys, L):
    cfg = tmp_path / "t.json"
    cfg.write_text(json.dumps({"num_hidden_layers": L, "hidden_size": 576}))
    code, out, err = run_cli(["audit", "--engine", "sglang", "--data", sample_data / "speculators_v1", "--draft",
                              sample_data / "draft_eagle3", "--target-config", cfg], capsys)
    assert code == 2
    one_line_error(err, cfg)


# ------------------------------------------------------------------------------------------- D11 nesting
DEEP = "[" * 100000 + "]" * 100000


@pytest.mark.parametrize("side", ["data_config.json", "capture.json"])
def test_deep_sidecar_is_ignored(tmp_path, capsys, side):
    ds = tmp_path / "deep"
    ds.mkdir()
    torch.save(v1(), ds / "data_0.pt")
    (ds / side).write_text(DEEP)
    for cmd in (["inspect", ds], ["fingerprint", ds]):
        code, out, err = run_cli(cmd, capsys)
        assert code in (0, 1) and "Traceback" not in err, err
    res = forensics.scan(ds, workers=0, fingerprint=False)
    assert res.summary["errors"] == 0


def test_deep_safetensors_header_is_one_error(tmp_path, capsys):
    b = ('{"a":' * 50000 + "1" + "}" * 50000).encode()
    p = tmp_path / "deep.safetensors"
    p.write_bytes(struct.pack("<Q", len(b)) + b)
    code, out, err = run_cli(["inspect", p], capsys)
    assert code == 2
    one_line_error(err, p)


def test_deep_draft_and_target_config_are_one_error(tmp_path, sample_data, capsys):
    import shutil

    draft = tmp_path / "draft"
    shutil.copytree(sample_data / "draft_eagle3", draft)
    (draft / "config.json").write_text(DEEP)
    code, out, err = run_cli(["fingerprint", sample_data / "speculators_v1" / "data_0.pt", "--draft", draft,
                                 "--trainer", "speculators"], capsys)
    assert code == 2
    one_line_error(err, draft / "config.json")
    cfg = tmp_path / "t.json"
    cfg.write_text('{"a":' * 50000 + "1" + "}" * 50000)
    code, out, err = run_cli(["audit", "--engine", "sglang", "--data", sample_data / "speculators_v1", "--draft",
                              sample_data / "draft_eagle3", "--target-config", cfg], capsys)
    assert code == 2
    one_line_error(err, cfg)


def _deep_json_readers(tmp_path):
    """Every reader of a JSON file a user or a dataset supplies, with the file it reads."""
    from forensics.io.formats._io import load_json
    from forensics.models import shards, stream, target
    from forensics.models.draft_config import load_json_object

    folder = tmp_path / "model"
    folder.mkdir()
    deep = '{"a":' * 50000 + "1" + "}" * 50000
    for n in ("config.json", "model.safetensors.index.json"):
        (folder / n).write_text(deep)
    (folder / "chat.json").write_text(DEEP)
    b = deep.encode()
    (folder / "h.safetensors").write_bytes(struct.pack("<Q", len(b)) + b)
    return [
        (lambda: load_json(str(folder / "config.json")), folder / "config.json"),
        (lambda: load_json_object(str(folder / "config.json")), folder / "config.json"),
        (lambda: target.config_facts(str(folder)), folder / "config.json"),
        (lambda: stream._load_config(str(folder)), folder / "config.json"),
        (lambda: shards.shard_index(str(folder)), folder / "model.safetensors.index.json"),
        (lambda: shards.read_header(str(folder / "h.safetensors")), folder / "h.safetensors"),
    ]


def test_deep_json_is_one_error_in_every_reader(tmp_path):
    for read, path in _deep_json_readers(tmp_path):
        with pytest.raises(forensics.ForensicsError) as e:
            read()
        assert e.value.path == str(path), (str(e.value), path)
        assert "\n" not in str(e.value)


# ------------------------------------------------------------------------------------------- D12 headers
@pytest.mark.parametrize("entry", [
    {"dtype": "F32", "shape": [4, 4], "data_offsets": ["0", "64"]},
    {"dtype": "F32", "data_offsets": [0, 64]},
    {"dtype": "F32", "shape": 16, "data_offsets": [0, 64]},
    {"dtype": "F32", "shape": [4, -4], "data_offsets": [0, 64]},
    {"dtype": "F32", "shape": [4, 4.5], "data_offsets": [0, 64]},
    {"dtype": 7, "shape": [4, 4], "data_offsets": [0, 64]},
    {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64, 3]},
    {"dtype": "F32", "shape": [4, 4], "data_offsets": [-64, 0]},
    {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 32]},
    {"dtype": "F32", "shape": [10**12, 10**12], "data_offsets": [0, 64]},
    {"dtype": "F32", "shape": [True, 16], "data_offsets": [0, 64]},
    "not a dict",
])
@pytest.mark.parametrize("key", ["x", "hidden_states"])
def test_untyped_safetensors_header_fields(tmp_path, capsys, entry, key):
    p = tmp_path / "bad.safetensors"
    p.write_bytes(st_bytes({key: entry}))
    code, out, err = run_cli(["inspect", p], capsys)
    assert code == 2
    one_line_error(err, p)


# ------------------------------------------------------------------------------------------- D13 fp8/mixed
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_states_are_read_or_refused_the_same_everywhere(tmp_path, capsys, dtype):
    from safetensors.torch import save_file

    t = torch.randn(16, 8)
    torch.save({"hidden_states": [t.to(dtype), (2 * t).to(dtype)]}, tmp_path / "fp8.pt")
    save_file({"hidden_states": torch.stack([t, 2 * t], 1).to(dtype)}, tmp_path / "fp8.safetensors")
    codes = []
    for f in ("fp8.pt", "fp8.safetensors"):
        for cmd in ("inspect", "fingerprint"):
            code, out, err = run_cli([cmd, tmp_path / f], capsys)
            assert "Traceback" not in err
            codes.append(code)
    assert len({c == 2 for c in codes}) == 1, codes


def test_mixed_hidden_sizes_are_one_error(tmp_path, capsys):
    p = tmp_path / "mixedH.pt"
    torch.save({"hidden_states": [torch.randn(16, 64), torch.randn(16, 32)]}, p)
    for cmd in ("inspect", "fingerprint"):
        code, out, err = run_cli([cmd, p], capsys)
        assert code == 2
        one_line_error(err, p)
        assert "32" in err and "64" in err


# ------------------------------------------------------------------------------------------- D14 token ids
def _wordlevel(folder: pathlib.Path) -> None:
    folder.mkdir(parents=True)
    (folder / "tokenizer.json").write_text(json.dumps(
        {"version": "1.0", "model": {"type": "WordLevel", "vocab": {"a": 0, "[UNK]": 1}, "unk_token": "[UNK]"},
         "pre_tokenizer": {"type": "Whitespace"}, "added_tokens": [], "normalizer": None, "post_processor": None,
         "decoder": None, "truncation": None, "padding": None}))


@pytest.mark.parametrize("bad", [-100, -7, 2**32, 10**9, 2])
def test_report_survives_token_ids_outside_the_tokenizer(tmp_path, capsys, bad):
    ds = tmp_path / "tokneg"
    _wordlevel(ds / "tokenizer")
    torch.save({"hidden_states": [torch.randn(T, H)] * 2, "input_ids": torch.tensor([0] * (T - 1) + [bad])},
               ds / "data_0.pt")
    out = tmp_path / "r.html"
    code, _, err = run_cli(["report", ds, "-o", out], capsys)
    assert "Traceback" not in err and code != 2, err
    html = out.read_text()
    assert f"&lt;id·{bad}&gt;" in html or f"&lt;id {bad}&gt;" in html  # spaces are shown as · in token text


# ------------------------------------------------------------------------------------------- D15 names
def test_non_utf8_file_names(tmp_path, capsys):
    d = os.fsencode(str(tmp_path))
    with open(d + b"/bad\xffname.pt", "wb") as f:
        torch.save(v1(), f)
    name = os.fsdecode(d + b"/bad\xffname.pt")
    code, out, err = run_cli(["inspect", name], capsys)
    assert code == 0, err
    code, out, err = run_cli(["report", name, "-o", tmp_path / "b.html"], capsys)
    assert code != 2 and "Traceback" not in err, err
    html = (tmp_path / "b.html").read_text()
    assert "bad\\xffname.pt" in html
    res = forensics.scan(tmp_path, workers=0, fingerprint=False)
    assert res.summary["errors"] == 0


# ------------------------------------------------------------------------------------------- D17 one line
def test_control_characters_in_names_stay_on_one_line(tmp_path, capsys):
    p = tmp_path / "evil\nname.pt: not a torch checkpoint"
    p.write_bytes(b"junk" * 10)
    code, out, err = run_cli(["inspect", p], capsys)
    assert code == 2
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1, err
    assert "\\n" in err


def test_no_library_warnings_on_stderr(tmp_path):
    p = tmp_path / "data_0.pt"
    with open(p, "wb") as f:
        torch.save(v1(), f, _use_new_zipfile_serialization=False)
    proc = run_proc(["inspect", p])
    assert proc.returncode == 0 and "Warning" not in proc.stderr, proc.stderr


def test_fingerprint_errors_go_to_stderr(tmp_path, capsys):
    p = tmp_path / "junk.pt"
    p.write_bytes(b"junk" * 10)
    code, out, err = run_cli(["fingerprint", p], capsys)
    assert code == 2 and str(p) in err and str(p) not in out


def test_multiline_exception_text_is_joined(tmp_path, capsys):
    ds = tmp_path / "ds"
    ds.mkdir()
    torch.save(v1(), ds / "data_0.pt")
    (ds / "tokenizer").mkdir()
    (ds / "tokenizer" / "tokenizer.json").write_text("{broken")
    code, out, err = run_cli(["report", ds, "-o", tmp_path / "r.html"], capsys)
    assert "Traceback" not in err
    for ln in err.splitlines():
        assert ln.startswith("hsf") or not ln.strip(), err


_ = textwrap
