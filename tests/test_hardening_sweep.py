"""Hardening round 3, the sweep: variants of the reference classes this project had not tried (a different
command, file format or API path than the reproduction), as a hostile user would run them.

What every case checks is the reference's rule: one line and the documented exit code, no traceback, nothing
blocks, no input changed, and in the Python API one ``ForensicsError`` naming the argument. The model-folder
variants (N1, N2, the FIFO shards and configs) are in ``test_hardening_models.py``; the SIGBUS ones in
``test_hardening_mapped.py``.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import pytest

import forensics
from forensics.analysis.stamp import stamp, verify
from forensics.cli import main as hsf_main
from forensics.errors import ForensicsError

pytestmark = pytest.mark.timeout(300)
V1 = "speculators_v1"


def run_cli(args, capsys) -> tuple[int, str, str]:
    code = hsf_main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def one_error(err: str, needle: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture(autouse=True)
def _wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")


@pytest.fixture
def copy(sample_data, tmp_path):
    def make(name: str) -> pathlib.Path:
        out = tmp_path / name
        shutil.copytree(sample_data / name, out)
        return out
    return make


# ------------------------------------------------------------------- N14 through fingerprint (not only scan/stamp)
@pytest.mark.parametrize("value, why", [(-1, "1 to 10000"), (10**12, "1 to 10000"), ("30", "whole number"),
                                        (True, "whole number"), (2.5, "whole number"), (0, "1 to 10000")])
def test_fingerprint_num_layers_is_validated_at_the_boundary(sample_data, value, why):
    with pytest.raises(ForensicsError, match=why) as e:
        forensics.fingerprint(str(sample_data / V1 / "data_0.pt"), num_layers=value)
    assert "num_layers" in str(e.value)


@pytest.mark.parametrize("value, why", [([-5, 10**20, 3, 4], "r = -5 is not a layer"), (7, "must be a string"),
                                        ([0, float("nan"), 3, 4], "not an r value")])
def test_fingerprint_layers_are_validated_at_the_boundary(sample_data, value, why):
    with pytest.raises(ForensicsError, match=why):
        forensics.fingerprint(str(sample_data / V1 / "data_0.pt"), layers=value)


def test_stamp_and_verify_api_refuse_wrong_types(copy):
    ds = copy(V1)
    with pytest.raises(ForensicsError, match="layers must be a string"):
        stamp(ds, layers=123)
    for bad in (None, 123):
        with pytest.raises(ForensicsError, match="dataset must be a path"):
            verify(bad)
    assert not (ds / "stamps.jsonl").exists()  # nothing written by a refused call


# ---------------------------------------------------------------------------- N8 FIFOs in other roles
def test_fifo_as_draft_config_and_as_ids_never_blocks(sample_data, tmp_path, capsys):
    cfg = tmp_path / "draft_config.json"
    os.mkfifo(cfg)
    code, _, err = run_cli(["audit", "--data", sample_data / "speculators", "--draft", cfg, "--engine", "vllm",
                            "--num-layers", "30"], capsys)
    assert code == 2 and "not a regular file" in one_error(err, str(cfg))
    folder = tmp_path / "draft"
    folder.mkdir()
    os.mkfifo(folder / "config.json")
    code, _, err = run_cli(["audit", "--data", sample_data / "speculators", "--draft", folder, "--engine", "vllm",
                            "--num-layers", "30"], capsys)
    assert code == 2 and one_error(err, str(folder))
    ids = tmp_path / "ids.pt"
    os.mkfifo(ids)
    code, _, err = run_cli(["fingerprint", sample_data / V1 / "data_0.pt", "--ids", ids], capsys)
    assert code == 2 and one_error(err, str(ids))


def test_fifo_sidecars_are_ignored_or_refused_never_opened(copy, tmp_path, capsys):
    ds = copy(V1)
    (ds / "capture.json").unlink()
    os.mkfifo(ds / "capture.json")  # a side file: treated as absent (side files never make data unreadable)
    code, _, err = run_cli(["fingerprint", ds], capsys)
    assert code in (0, 1, 3) and "Traceback" not in err
    os.mkfifo(ds / "stamps.jsonl")  # where stamps go: refused, nothing written
    code, out, _ = run_cli(["stamp", ds], capsys)
    assert code == 2 and "NOT stamped" in out and "nothing was changed" in out
    code, out, err = run_cli(["verify", ds], capsys)  # read: no stamps there, every file unstamped
    assert code == 3 and "Traceback" not in err
    assert stat_is_fifo(ds / "stamps.jsonl")


def stat_is_fifo(p: pathlib.Path) -> bool:
    import stat

    return stat.S_ISFIFO(os.lstat(p).st_mode)


# ----------------------------------------------------------------------- N3 / N11 a full device as -o
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("command", ["report", "scan"])
def test_output_to_a_full_device_is_one_line(sample_data, capsys, command):
    extra = ["--no-progress", "-j", "0"] if command == "scan" else []
    code, _, err = run_cli([command, sample_data / V1, "-o", "/dev/full", *extra], capsys)
    assert code == 2 and "No space left on device" in one_error(err, "cannot write /dev/full")
    assert os.path.exists("/dev/full") and not os.path.isfile("/dev/full")


# ------------------------------------------------------------------ N10 stamps with odd but typed values
def _restamp(ds: pathlib.Path, edit) -> pathlib.Path:
    from safetensors import safe_open
    from safetensors.torch import save_file

    stamp(ds)
    p = ds / "hidden_states" / "hs_0.safetensors"
    with safe_open(str(p), "pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    rec = json.loads(meta["hsf.stamp"])
    edit(rec)
    save_file(tensors, str(p), metadata={**meta, "hsf.stamp": json.dumps(rec)})
    return p


@pytest.mark.parametrize("case, edit, codes", [
    ("norm_q NaN", lambda r: r["slots"][0].update(norm_q=[float("nan")] * 5), (0,)),
    ("shape 1e30", lambda r: r["slots"][0].update(shape=[10**30, 5]), (1,)),
    ("layer_ids of dicts", lambda r: r.update(layer_ids=[{"a": 1}] * 3, embed_rows={"token_ids": "x"}), (0,)),
    ("tokens.n 1e40", lambda r: r.update(tokens={"n": 10**40, "checksum": "0" * 16}), (1,)),
])
def test_odd_stamp_values_give_a_verdict_in_verify_and_report(copy, tmp_path, capsys, case, edit, codes):
    ds = copy("speculators")
    _restamp(ds, edit)
    code, out, err = run_cli(["verify", ds, "--json"], capsys)
    assert code in codes and "Traceback" not in err, (case, err)
    assert json.loads(out)["verdict"] in ("pass", "fail")
    code, _, err = run_cli(["report", ds, "-o", tmp_path / "r.html"], capsys)
    assert code in (0, 1, 3) and "Traceback" not in err and (tmp_path / "r.html").exists(), (case, err)


# --------------------------------------------------------------- N13 a garbage file among stamped ones
def test_verify_gives_every_other_file_its_verdict_when_one_is_garbage(copy, capsys):
    ds = copy(V1)
    stamp(ds)
    (ds / "data_1.pt").write_bytes(b"PK\x03\x04 not a zip at all")
    code, out, err = run_cli(["verify", ds], capsys)
    assert code == 1 and "Traceback" not in err
    rows = [ln for ln in out.splitlines() if "data_" in ln]
    assert any("data_1.pt" in r and "FAIL" in r for r in rows)
    assert sum(r.lstrip().startswith("ok") for r in rows) == len(list(ds.glob("data_*.pt"))) - 1


# ------------------------------------------------------------------ N4 capture into another tool's folder
@pytest.mark.parametrize("fmt, name", [("speculators-v1", "data_0.pt"),
                                       ("speculators", "hidden_states/hs_0.safetensors"),
                                       ("speculators-v1", "data_config.json"), ("specforge", "stamps.jsonl")])
def test_capture_never_replaces_a_file_it_did_not_write(tmp_path, capsys, fmt, name):
    """S16-b's variant through --out: no capture.json, but a file where capture would write (refused before the
    model is loaded; the foreign file keeps its bytes)."""
    text = tmp_path / "t.txt"
    text.write_text("The quick brown fox.")
    out = tmp_path / "out"
    foreign = out / name
    foreign.parent.mkdir(parents=True)
    foreign.write_bytes(b"another tool's file")
    code, _, err = run_cli(["capture", "--text", text, "--out", out, "--format", fmt, "--no-progress"], capsys)
    assert code == 2 and "would replace" in one_error(err, str(out))
    assert foreign.read_bytes() == b"another tool's file" and not (out / "capture.json").exists()


def test_capture_model_default_is_the_packaged_model(tmp_path, capsys, monkeypatch):
    """``--model default`` names the packaged SmolLM2 in capture too (it was 'default: not found')."""
    import forensics.models.target as target

    seen = []

    def fake(path=None, *a, **k):
        seen.append(path)
        raise ForensicsError("stop here", path=path)

    monkeypatch.setattr(target, "load_model", fake)
    text = tmp_path / "t.txt"
    text.write_text("The quick brown fox.")
    code, _, err = run_cli(["capture", "--model", "default", "--text", text, "--out", tmp_path / "o", "--no-progress"],
                           capsys)
    assert code == 2 and seen == [target.default_model_path()], (seen, err)
