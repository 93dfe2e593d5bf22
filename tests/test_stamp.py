"""``hsf stamp`` / ``hsf verify``: the round trip on every format, tensors byte-identical, tampering named by slot,
atomic and refusing read-only filesystems, and stamped files still read by speculators 0.9.0 and our readers.

Ground truth is the committed sample data (real SmolLM2 captures written by ``hsf capture``) and its ladder
capture (every r of one text), never what the code printed before.
"""

from __future__ import annotations

import json
import os
import shutil
import struct

import pytest
import torch

from forensics.analysis.stamp import stamp, verify
from forensics.io import stamp_store as store
from forensics.io import stamps as st
from forensics.io.formats import load

FORMATS = {"speculators": "hidden_states/hs_0.safetensors", "speculators_v1": "data_0.pt",
           "specforge": "rows_0-2000/data_0.ckpt", "ladder": "capture_0.safetensors"}


@pytest.fixture
def copy(sample_data, tmp_path):
    def make(name: str):
        dst = tmp_path / name
        shutil.copytree(sample_data / name, dst)
        return dst
    return make


def data_section(path) -> bytes:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        f.seek(8 + n)
        return f.read()


@pytest.mark.parametrize("name", list(FORMATS))
def test_stamp_then_verify_round_trips_and_leaves_the_tensors_byte_identical(copy, name):
    folder = copy(name)
    path = folder / FORMATS[name]
    before = load(path)
    raw_before = path.read_bytes()
    res = stamp(folder, model="SmolLM2-135M-Instruct", num_layers=30)
    assert [f.r for f in res.files][0] == [s.declared_r for s in before.slots]
    if store.is_safetensors(str(path)):
        assert data_section(path) == data_section_bytes(raw_before)  # tensor bytes unchanged
        meta = store.safetensors_header(str(path))["__metadata__"]
        assert all(isinstance(v, str) for v in meta.values()) and st.STAMP_KEY in meta
    else:
        assert path.read_bytes() == raw_before  # torch files are never rewritten: the stamp is in capture.json
    after = load(path)  # this project's reader, unchanged: same slots, same r, same values
    assert [s.declared_r for s in after.slots] == [s.declared_r for s in before.slots]
    for a, b in zip(after.slots, before.slots, strict=True):
        assert torch.equal(a.tensor(), b.tensor())
    out = verify(folder)
    assert out.verdict == "pass" and all(f.status == "ok" for f in out.files)


def data_section_bytes(raw: bytes) -> bytes:
    (n,) = struct.unpack("<Q", raw[:8])
    return raw[8 + n:]


def test_the_stamp_records_identity_and_a_fingerprint(copy):
    folder = copy("speculators_v1")
    stamp(folder, model="SmolLM2-135M-Instruct", num_layers=30, producer="hsf capture 0.1.0")
    rec = store.read_stamp(str(folder / "data_0.pt"))
    cap = load(folder / "data_0.pt")
    assert [s["label"] for s in rec["slots"]] == ["embed", "L3", "L16", "L28"]
    assert rec["target"] == {"model": "SmolLM2-135M-Instruct", "num_layers": 30}
    assert rec["producer"] == "hsf capture 0.1.0" and rec["layer_ids"] is not None
    # norm quantiles, recomputed independently in float64
    t = cap.slots[1].tensor().double()
    norms = t.norm(dim=1).numpy()
    import numpy as np

    want = np.quantile(norms, st.NORM_QUANTILES)
    assert np.allclose(rec["slots"][1]["norm_q"], want, rtol=1e-5)
    # the embedding-row hash covers the first distinct tokens' rows of the embed slot
    assert rec["embed_rows"]["token_ids"] == list(dict.fromkeys(cap.input_ids.tolist()))[:st.EMBED_ROWS]


def _rewrite_speculators(path, fn):
    """Rewrite a speculators hs file's stack through ``fn`` keeping its header metadata (the stamp)."""
    from safetensors.torch import load_file, save_file

    meta = store.safetensors_header(str(path))["__metadata__"]
    t = load_file(str(path))
    t["hidden_states"] = fn(t["hidden_states"]).contiguous()
    save_file(t, str(path), metadata=meta)


def test_swapped_slots_fail_verify_with_both_slots_named(copy):
    folder = copy("speculators")
    path = folder / FORMATS["speculators"]
    stamp(folder)
    _rewrite_speculators(path, lambda hs: hs[:, [0, 2, 1, 3]])
    out = verify(folder)
    assert out.verdict == "fail"
    drift = {d.slot: d for d in out.files[0].drift}
    assert set(drift) == {1, 2}
    assert drift[1].kind == "swapped" and drift[1].looks_like == 2
    assert drift[2].kind == "swapped" and drift[2].looks_like == 1
    assert "slot 1 (stamped L15) now holds what slot 2 (stamped L27) held" in out.files[0].message
    # the result carries the decision as typed findings: one stamp_drift FAIL naming both slots
    assert [(f.kind, f.severity, f.slots) for f in out.findings] == [("stamp_drift", "fail", [1, 2])]
    assert out.exit_code() == 1 and out.to_dict()["findings"][0]["evidence"]["file"] == str(path)


def test_a_slot_from_another_layer_fails_verify_with_the_slot_named(copy, tmp_path):
    """Real data: a generic capture of [embed, L3, L16, L28] cut from the ladder (every r of one text), stamped;
    then slot 2 is replaced by the ladder's L17 of the same tokens."""
    from safetensors.torch import load_file, save_file

    ladder = load_file(str(copy("ladder") / "capture_0.safetensors"))
    pick = {"slot_0.embed": "slot_0.embed", "slot_1.L3": "slot_3.L3", "slot_2.L16": "slot_16.L16",
            "slot_3.L28": "slot_28.L28"}
    folder = tmp_path / "cut"
    folder.mkdir()
    path = folder / "capture_0.safetensors"
    save_file({**{k: ladder[v] for k, v in pick.items()}, "input_ids": ladder["input_ids"]}, str(path))
    stamp(folder, layers="embed,L3,L16,L28")
    assert verify(folder).verdict == "pass"
    meta = store.safetensors_header(str(path))["__metadata__"]
    t = load_file(str(path))
    t["slot_2.L16"] = ladder["slot_17.L17"]
    save_file(t, str(path), metadata=meta)
    out = verify(folder)
    assert out.verdict == "fail" and [d.slot for d in out.files[0].drift] == [2]
    d = out.files[0].drift[0]
    assert d.kind == "changed" and d.looks_like is None and "slot 2 (stamped L16) changed" in d.message


def test_unstamped_files_are_cannot_tell(copy):
    out = verify(copy("speculators_v1"))
    assert out.verdict == "cannot tell" and {f.status for f in out.files} == {"unstamped"}
    # unstamped is nothing to check (INFO), not a failure: the exit code is 3, never 1
    assert {(f.kind, f.severity) for f in out.findings} == {("unstamped", "info")} and out.exit_code() == 3


def test_a_read_only_filesystem_is_refused_before_anything_is_written(copy, monkeypatch):
    folder = copy("speculators")
    path = folder / FORMATS["speculators"]
    raw = path.read_bytes()

    class RO:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(store.os, "statvfs", lambda p: RO())
    res = stamp(folder)
    assert not res.ok and "read-only" in res.failed[0].error and res.failed[0].path == str(path)
    assert path.read_bytes() == raw and sorted(os.listdir(path.parent)) == ["hs_0.safetensors"]


def test_a_failed_rename_leaves_the_original_and_no_temporary_file(copy, monkeypatch):
    import errno

    folder = copy("speculators")
    path = folder / FORMATS["speculators"]
    raw = path.read_bytes()

    def boom(a, b):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(store.os, "replace", boom)
    res = stamp(folder)
    assert not res.ok and "nothing was changed" in res.failed[0].error
    assert path.read_bytes() == raw and sorted(os.listdir(path.parent)) == ["hs_0.safetensors"]


def test_a_malformed_stamp_is_a_one_line_error_naming_the_file(copy):
    from safetensors.torch import load_file, save_file

    folder = copy("speculators")
    path = folder / FORMATS["speculators"]
    save_file(load_file(str(path)), str(path), metadata={st.STAMP_KEY: "{not json"})
    out = verify(folder)
    assert out.files[0].status == "error" and "malformed" in out.files[0].message


def test_stamped_files_still_load_in_speculators(copy):
    """speculators 0.9.0's ArrowDataset and check_hidden_states read the stamped hs file exactly as before."""
    sdata = pytest.importorskip("speculators.train.data")
    from safetensors.torch import load_file
    from speculators.data_generation.offline import check_hidden_states

    folder = copy("speculators")
    path = folder / FORMATS["speculators"]
    before = sdata.ArrowDataset(max_len=4096, datapath=str(folder), on_missing="raise")._get_raw_data(0)
    stamp(folder)
    after = sdata.ArrowDataset(max_len=4096, datapath=str(folder), on_missing="raise")._get_raw_data(0)
    assert isinstance(after, dict)
    for k in ("hidden_states", "verifier_last_hidden_states", "input_ids"):
        assert torch.equal(after[k], before[k])
    payload = load_file(str(path))
    check_hidden_states(payload, payload["token_ids"].tolist())


def test_hsf_stamp_and_verify_cli_exit_codes(copy, capsys, monkeypatch):
    from forensics.cli import main

    monkeypatch.setenv("COLUMNS", "400")  # the console folds to the terminal; keep each file on one line

    folder = copy("speculators_v1")
    assert main(["verify", str(folder)]) == 3
    assert main(["stamp", str(folder), "--model-name", "SmolLM2-135M-Instruct"]) == 0
    assert main(["verify", str(folder)]) == 0
    lines = [json.loads(x) for x in (folder / "stamps.jsonl").read_text().splitlines()]
    assert {x["path"] for x in lines} == {f"data_{i}.pt" for i in range(5)}
    assert "stamps" not in json.loads((folder / "capture.json").read_text())  # capture.json is never written
    torch.save({**torch.load(folder / "data_1.pt", weights_only=True),
                "hidden_states": list(reversed(torch.load(folder / "data_1.pt", weights_only=True)["hidden_states"]))},
               folder / "data_1.pt")
    capsys.readouterr()
    assert main(["verify", str(folder)]) == 1
    out = capsys.readouterr().out
    out = " ".join(out.split())  # the text is folded to the terminal's width
    assert "FAIL" in out and "data_1.pt" in out and "slot 0 (stamped embed) now holds what slot 3" in out
    assert main(["stamp", str(folder / "missing")]) == 2



@pytest.mark.model
@pytest.mark.parametrize("fmt", ["specforge", "speculators"])
def test_hsf_capture_stamps_what_it_writes(sample_data, tmp_path, fmt):
    """A torch format (stamp in stamps.jsonl) and a safetensors one (stamp in the header): verify passes at once,
    and the stamp carries the r, the model and L that capture.json declares."""
    from forensics.models.recorder import capture

    text = str(sample_data / "texts" / "english_rivers.txt")
    run = capture([text], layers="L3,L16,L28,final_post" if fmt == "specforge" else "embed,L3,L16,L30", fmt=fmt,
                  out=str(tmp_path / fmt), max_tokens=24, progress=False)
    out = verify(tmp_path / fmt)
    assert out.verdict == "pass", [f.message for f in out.files]
    rec = store.read_stamp(str(tmp_path / fmt / run.files[0]))
    assert [s["r"] for s in rec["slots"]] == run.r
    assert rec["target"] == {"model": run.meta["model"], "num_layers": run.meta["num_layers"]}
    assert rec["producer"].startswith("hsf capture") and rec["convention"] == run.meta["convention"]


def test_the_report_shows_each_files_stamp_status(copy):
    from forensics.views.report.core import report

    folder = copy("speculators")
    assert "not stamped" in report([str(folder)]).html
    stamp(folder, model="SmolLM2-135M-Instruct", num_layers=30)
    html = report([str(folder)]).html
    assert "stamped: [L2, L15, L27, L30] · SmolLM2-135M-Instruct L=30" in html
