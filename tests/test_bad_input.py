"""Bad input: each case gives one clear ForensicsError naming the file (exit 2 from ``hsf inspect``, message on
stderr and in the JSON ``error``, never a traceback), nothing in a pickle runs, and no input file changes."""

from __future__ import annotations

import builtins
import gzip
import hashlib
import io
import json
import os
import pickle
import struct
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

import forensics
from forensics.cli import main as hsf_main

T, H = 9, 16
MARKER_NAME = "PWNED"


class Evil:
    """A pickle payload that would create a marker file if anything unpickled it without weights_only."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def good_v1(n_slots: int = 3, t: int = T) -> dict:
    return {"input_ids": torch.arange(t), "loss_mask": torch.ones(t, dtype=torch.long),
            "hidden_states": [torch.randn(t, H).to(torch.bfloat16) for _ in range(n_slots)]}


def torch_bytes(obj, legacy: bool = False) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=not legacy)
    return buf.getvalue()


def safetensors_bytes(tensors: dict, tmp_path) -> bytes:
    p = tmp_path / "_tmp.safetensors"
    save_file(tensors, p)
    b = p.read_bytes()
    p.unlink()
    return b


def build_cases(tmp_path) -> dict[str, tuple[str, str]]:
    """name -> (file path, regex the error must contain). Every file is written here, before any reading."""
    d = tmp_path / "bad"
    d.mkdir()
    marker = str(tmp_path / MARKER_NAME)
    cases: dict[str, tuple[bytes, str, str]] = {}
    ok_zip = torch_bytes(good_v1())
    ok_legacy = torch_bytes(good_v1(), legacy=True)
    ok_st = safetensors_bytes({"hidden_states": torch.randn(T, 3, H), "token_ids": torch.arange(T)}, tmp_path)
    cases["truncated_zip"] = (ok_zip[: len(ok_zip) // 2], "data_0.pt", "truncated")
    cases["truncated_legacy"] = (ok_legacy[: len(ok_legacy) - 40], "data_1.pt", "truncated")
    cases["truncated_gz"] = (gzip.compress(ok_zip)[:300], "data_2.ckpt.gz", "corrupt gzip")
    cases["truncated_safetensors"] = (ok_st[: len(ok_st) - 100], "hs_0.safetensors", "truncated")
    cases["text_named_pt"] = (b"this is not a checkpoint\n" * 4, "notes.pt", "not a torch checkpoint")
    cases["empty_file"] = (b"", "empty.pt", "empty file")
    cases["evil_zip"] = (torch_bytes({"hidden_states": [Evil(marker)]}), "evil_0.pt", "refused.*nothing was executed")
    cases["evil_legacy"] = (torch_bytes({"x": Evil(marker)}, legacy=True), "evil_1.pt", "refused")
    cases["evil_raw_pickle"] = (pickle.dumps(Evil(marker), protocol=2), "evil_2.pt", "refused")
    cases["evil_gz"] = (gzip.compress(torch_bytes(Evil(marker))), "evil_3.ckpt.gz", "refused")
    header = b'{"hidden_states": {"dtype": "F32", "shape": [9, 16], "data_offsets": [0, 576]'  # unterminated JSON
    cases["corrupt_st_json"] = (struct.pack("<Q", len(header)) + header + b"\0" * 576, "c_0.safetensors",
                                "corrupt safetensors header")
    cases["corrupt_st_length"] = (struct.pack("<Q", 10**7) + b'{"a": 1}', "c_1.safetensors",
                                  "corrupt safetensors header")
    header = json.dumps({"x": {"dtype": "F32", "shape": [9, 16], "data_offsets": [0, 576]}}).encode()
    cases["corrupt_st_offsets"] = (struct.pack("<Q", len(header)) + header + b"\0" * 100, "c_2.safetensors",
                                   "offsets .* exceed")
    cases["empty_hidden_states"] = (torch_bytes({"input_ids": torch.arange(T), "hidden_states": []}), "e_0.pt",
                                    "empty list")
    ragged = good_v1()
    ragged["hidden_states"][1] = torch.randn(T + 3, H).to(torch.bfloat16)
    cases["ragged"] = (torch_bytes(ragged), "r_0.pt", r"ragged sequence lengths.*hidden_states\[1\]=\[12, 16\]")
    # input_ids longer than the rows is readable (a row_count finding, tests/test_rows.py), not bad input
    ints = good_v1()
    ints["hidden_states"] = [torch.randint(0, 100, (T, H)) for _ in range(3)]
    cases["integer_v1"] = (torch_bytes(ints), "i_0.pt", "floating point.*int64")
    cases["integer_safetensors"] = (safetensors_bytes({"h": torch.randint(0, 9, (T, H), dtype=torch.int32)},
                                                      tmp_path), "i_1.safetensors", "no floating-point.*I32")
    cases["integer_generic_pt"] = (torch_bytes(torch.randint(0, 9, (T, H))), "i_2.pt", "no floating-point")
    cases["zero_length_v1"] = (torch_bytes(good_v1(t=0)), "z_0.pt", "zero-length sequence")
    cases["zero_length_safetensors"] = (safetensors_bytes({"hidden_states": torch.zeros(0, 3, H),
                                                           "token_ids": torch.zeros(0, dtype=torch.long)}, tmp_path),
                                        "z_1.safetensors", "zero-length")
    batch = good_v1()
    batch["hidden_states"] = [torch.randn(2, T, H) for _ in range(3)]
    cases["batch3d_v1"] = (torch_bytes(batch), "b_0.pt", "batch of 2 sequences")
    # a bare 3-D stack without token ids: [k, T, H] or [T, k, H] (or a batch); nothing decides, so one error
    cases["batch3d_generic"] = (torch_bytes(torch.randn(4, T, H)), "b_1.pt", "cannot tell which axis")
    cases["batch3d_safetensors"] = (safetensors_bytes({"x": torch.randn(2, T, H)}, tmp_path), "b_2.safetensors",
                                    "cannot tell which axis")
    cases["not_a_capture"] = (torch_bytes({"step": 3, "lr": 0.1}), "s_0.pt", "no reader recognises")
    out = {}
    for name, (data, fname, pattern) in cases.items():
        p = d / fname
        p.write_bytes(data)
        out[name] = (str(p), pattern)
    return out


@pytest.fixture
def cases(tmp_path):
    return build_cases(tmp_path)


def sha256(path: str) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture
def open_spy(monkeypatch):
    """Record the mode of every Python-level open of a file (builtins.open / io.open / os.open)."""
    seen: list[tuple[str, str]] = []
    real_open, real_os_open = builtins.open, os.open

    def spy_open(file, mode="r", *a, **k):
        seen.append((str(file), mode))
        return real_open(file, mode, *a, **k)

    def spy_os_open(path, flags, *a, **k):
        seen.append((str(path), "w" if flags & (os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_TRUNC) else "r"))
        return real_os_open(path, flags, *a, **k)

    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(io, "open", spy_open)
    monkeypatch.setattr(os, "open", spy_os_open)
    return seen


def _case_names() -> list[str]:
    import pathlib
    import tempfile

    with tempfile.TemporaryDirectory() as t:
        return list(build_cases(pathlib.Path(t)))


CASE_NAMES = _case_names()


@pytest.mark.parametrize("name", CASE_NAMES)
def test_bad_input_is_one_clear_error(cases, name, tmp_path, open_spy):
    path, pattern = cases[name]
    before = sha256(path)
    with pytest.raises(forensics.ForensicsError, match=pattern) as ei:
        forensics.summarize(path)
    err = ei.value
    assert str(err).startswith(path) and err.path == path  # names the file
    assert "Traceback" not in str(err)
    assert not (tmp_path / MARKER_NAME).exists(), "a pickle payload ran"
    assert sha256(path) == before
    assert all(m in ("r", "rb") for f, m in open_spy if os.path.basename(f) == os.path.basename(path)), open_spy


def test_malicious_pickle_never_runs_even_via_cli(cases, tmp_path, capsys):
    paths = [cases[n][0] for n in ("evil_zip", "evil_legacy", "evil_raw_pickle", "evil_gz")]
    code = hsf_main(["inspect", "--json", *paths])
    out, err = capsys.readouterr()
    assert code == 2
    doc = json.loads(out)
    assert [e["path"] for e in doc["files"]] == paths
    assert all("refused" in e["error"] and e["slots"] == [] for e in doc["files"])
    assert err.count("refused") == 4
    assert not (tmp_path / MARKER_NAME).exists()


def test_cli_exit_2_json_errors_and_no_traceback(cases, capsys):
    paths = [p for p, _ in cases.values()]
    before = {p: sha256(p) for p in paths}
    code = hsf_main(["inspect", "--json", *paths])
    out, err = capsys.readouterr()
    assert code == 2
    doc = json.loads(out)
    assert len(doc["files"]) == len(paths)
    for e, (name, (p, _)) in zip(doc["files"], cases.items(), strict=True):
        assert e["path"] == p and e["error"] and p in e["error"], name
        assert e["format"] is None and e["slots"] == []
        assert p in err
    assert "Traceback" not in err and "Traceback" not in out
    assert {p: sha256(p) for p in paths} == before


def test_cli_text_mode_reports_on_stderr(cases, capsys):
    path, _ = cases["text_named_pt"]
    assert hsf_main(["inspect", path]) == 2
    out, err = capsys.readouterr()
    assert f"{path}: not a torch checkpoint" in err and out.strip() == ""


def test_real_console_script_has_no_traceback(cases, tmp_path):
    """The installed entry point end to end: good + bad files together, exit 2, bad ones on stderr."""
    good = tmp_path / "good" / "data_0.pt"
    good.parent.mkdir()
    torch.save(good_v1(), good)
    bad = [cases[n][0] for n in ("truncated_zip", "evil_zip", "corrupt_st_json", "ragged", "batch3d_v1")]
    proc = subprocess.run([sys.executable, "-m", "forensics.cli", "inspect", str(good), *bad],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert "speculators-v1" in proc.stdout and str(good) in proc.stdout
    for p in bad:
        assert p in proc.stderr
    assert not (tmp_path / MARKER_NAME).exists()


def test_missing_path_and_empty_directory(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code = hsf_main(["inspect", "--json", str(tmp_path / "nope.pt"), str(tmp_path / "empty")])
    doc = json.loads(capsys.readouterr().out)
    assert code == 2
    assert "no such file" in doc["files"][0]["error"]
    assert "no capture files found" in doc["files"][1]["error"]


def test_nan_inf_are_findings_not_errors(tmp_path, capsys):
    d = good_v1()
    h = d["hidden_states"][1]
    h[2, 5] = float("nan")
    h[4, 0] = float("inf")
    h[4, 1] = float("-inf")
    path = tmp_path / "data_0.pt"
    torch.save(d, path)
    before = sha256(str(path))
    code = hsf_main(["inspect", "--json", str(path)])
    entry = json.loads(capsys.readouterr().out)["files"][0]
    assert code == 1 and entry["error"] is None  # a FAIL finding (exit 1), not unreadable input (exit 2)
    nf = next(f for f in entry["findings"] if f["kind"] == "nonfinite")
    assert nf["slots"] == [1] and nf["evidence"]["rows"] == [[2, 2], [4, 4]]
    s = entry["slots"][1]
    assert s["nonfinite"] == {"nan": 1, "inf": 2, "nan_positions": [2], "inf_positions": [4]}
    assert entry["slots"][0]["nonfinite"]["nan"] == 0
    assert s["norm"]["n"] == T - 2  # the two non-finite token norms are left out of the summary
    assert sha256(str(path)) == before


def test_good_files_are_mapped_private_and_unchanged(tmp_path, open_spy):
    """Lazy reads map the file copy-on-write/read-only: nothing written through a slot reaches the file."""
    torch.save(good_v1(), tmp_path / "data_0.pt")
    save_file({"hidden_states": torch.randn(T, 3, H), "token_ids": torch.arange(T)}, tmp_path / "hs_0.safetensors")
    buf = io.BytesIO()
    torch.save({"hidden_state": torch.randn(1, T, H), "aux_hidden_state": torch.randn(1, T, 3 * H),
                "input_ids": torch.arange(T), "loss_mask": torch.ones(T)}, buf)
    (tmp_path / "data_1.ckpt.gz").write_bytes(gzip.compress(buf.getvalue()))
    paths = [str(tmp_path / n) for n in ("data_0.pt", "hs_0.safetensors", "data_1.ckpt.gz")]
    before = {p: sha256(p) for p in paths}
    open_spy.clear()
    caps = [forensics.load(p) for p in paths]
    for c in caps:
        forensics.summarize(c)
        c.slots[0].tensor()  # keep the mappings alive while /proc/self/maps is read
    maps = [line.split() for line in open("/proc/self/maps") if str(tmp_path) in line]
    assert maps, "expected mmap-backed slots"
    assert all(m[1].endswith("p") for m in maps), maps  # private mappings: writes never reach the file
    assert all(m in ("r", "rb") for f, m in open_spy if f in paths), open_spy
    assert {p: sha256(p) for p in paths} == before


def test_the_malicious_payload_is_live(tmp_path):
    """Control: the same payload does run under plain pickle, so the 'nothing ran' assertions have teeth."""
    marker = tmp_path / "control"
    pickle.loads(pickle.dumps(Evil(str(marker)), protocol=2))
    assert marker.exists()
