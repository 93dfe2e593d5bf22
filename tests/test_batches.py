"""Batches and many-sample files are B samples in every command (``FILE#i``), each file read once.

Batches are made with plain transformers on the real SmolLM2 (``tok(texts, padding=True)``, ``model(**enc,
output_hidden_states=True)``), left and right padded, saved as ``{"input_ids": [B, T], "attention_mask": [B, T],
"hidden_states": [k, B, T, H]}`` (and as safetensors/npz, and in memory). The ground truth is computed here,
independently of the readers: each sample's real length is its mask's sum, its real ids are ``ids[b][mask[b]]``,
its slots are the transformers indices the test picked (r = index; the last = the post-norm final).
TensorRT-LLM record lists get a broken record 2 (a zero block: no token's state) and must fail in every command.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import forensics
from forensics.cli import main
from forensics.layers import FINAL_POST

PICK = [0, 3, 16, 30]  # transformers' hidden_states indices saved: r = index; 30 = L, after the final norm
WANT_R = [0, 3, 16, FINAL_POST]
TEXTS = ["The quick brown fox jumps over the lazy dog while the farmer watches from the porch, sipping his tea.",
         "Hidden states are the activations",
         "In 1905 Einstein published four papers that changed physics: the photoelectric effect, Brownian motion, "
         "special relativity and the equivalence of mass and energy."]


@pytest.fixture(scope="module")
def batches(smollm2, tmp_path_factory):
    model, tok = smollm2
    d = tmp_path_factory.mktemp("batches")
    out = {}
    for side in ("right", "left"):
        tok.padding_side = side
        enc = tok(TEXTS, return_tensors="pt", padding=True)
        with torch.no_grad():
            o = model(**enc, output_hidden_states=True)
        hs = torch.stack([o.hidden_states[i] for i in PICK])  # [k, B, T, H]
        ids, mask = enc.input_ids, enc.attention_mask
        torch.save({"input_ids": ids, "attention_mask": mask, "hidden_states": hs}, d / f"{side}.pt")
        save_file({"input_ids": ids, "attention_mask": mask,
                   **{f"layer_{i}": o.hidden_states[i].contiguous() for i in PICK}}, d / f"{side}.safetensors")
        np.savez(d / f"{side}.npz", input_ids=ids.numpy(), attention_mask=mask.numpy(), hidden_states=hs.numpy())
        torch.save({"input_ids": ids, "hidden_states": hs}, d / f"{side}_nomask.pt")
        out[side] = (ids, mask, o.hidden_states)
    tok.padding_side = "right"
    return d, out, tok.pad_token_id


def _fingerprint(args, capsys):
    code = main(["fingerprint", *map(str, args), "--json", "-q"])
    return code, json.loads(capsys.readouterr().out)["files"]


@pytest.mark.parametrize("side", ["right", "left"])
def test_padded_batch_is_B_exact_samples(batches, side, capsys):
    d, out, _ = batches
    ids, mask, _ = out[side]
    assert int(mask.sum()) < mask.numel()  # the batch really is padded
    code, docs = _fingerprint([d / f"{side}.pt", "--model", "default", "--layers", "0,3,16,final_post"], capsys)
    assert code == 0
    assert [doc["path"].rsplit("#", 1)[1] for doc in docs] == ["0", "1", "2"]
    for b, doc in enumerate(docs):
        assert doc["num_tokens"] == int(mask[b].sum())  # the pad rows are gone
        assert doc["verdict"] == "pass"
        assert [s["r_exact"] for s in doc["slots"]] == WANT_R
        kinds = {f["kind"] for f in doc["findings"]}
        assert not kinds & {"foreign_rows", "zero_rows", "row_count", "token_shift", "padding"}


@pytest.mark.parametrize("ext", ["safetensors", "npz"])
def test_other_containers_split_the_same_way(batches, ext):
    d, out, _ = batches
    ids, mask, hs = out["right"]
    caps = forensics.load_all(d / f"right.{ext}")
    assert len(caps) == 3
    for b, cap in enumerate(caps):
        keep = mask[b].bool()
        assert cap.name.endswith(f"right.{ext}#{b}")
        assert torch.equal(cap.input_ids, ids[b][keep])
        for s, i in zip(cap.slots, PICK, strict=True):
            assert torch.equal(s.tensor(), hs[i][b][keep])


def test_left_padding_cuts_the_front(batches):
    from forensics.io.formats import load

    d, out, _ = batches
    ids, mask, hs = out["left"]
    short = int(mask.sum(1).argmin())
    cap = load(f"{d / 'left.pt'}#{short}")
    n = int(mask[short].sum())
    assert cap.num_tokens == n and torch.equal(cap.input_ids, ids[short, -n:])
    assert torch.equal(cap.slots[1].tensor(), hs[3][short, -n:])
    assert any("left padding" in x for x in cap.provenance.notes)


def test_in_memory_transformers_tuple(batches, smollm2):
    d, out, _ = batches
    ids, mask, hs = out["right"]
    fps = forensics.fingerprint(tuple(hs[i] for i in PICK), input_ids=ids, attention_mask=mask,
                                layers="0,3,16,final_post")
    assert isinstance(fps, list) and len(fps) == 3
    assert [fp.capture.num_tokens for fp in fps] == mask.sum(1).tolist()
    assert [fp.path for fp in fps] == ["<in memory>#0", "<in memory>#1", "<in memory>#2"]
    with pytest.raises(forensics.ForensicsError, match="batch of 3 samples"):
        forensics.as_capture(tuple(hs[i] for i in PICK), input_ids=ids, attention_mask=mask)


@pytest.mark.parametrize("side", ["right", "left"])
def test_without_a_mask_pad_rows_are_padding_not_foreign(batches, side, capsys):
    d, out, pad = batches
    ids, mask, _ = out[side]
    T = ids.shape[1]
    code, docs = _fingerprint([d / f"{side}_nomask.pt", "--model", "default", "--layers", "0,3,16,final_post"], capsys)
    assert code == 0
    for b, doc in enumerate(docs):
        n_pad = int((~mask[b].bool()).sum())
        kinds = [f["kind"] for f in doc["findings"]]
        assert "foreign_rows" not in kinds and doc["verdict"] == "pass"
        if n_pad >= 2:  # the run of the pad id at the padded end: removed and named
            pf = next(f for f in doc["findings"] if f["kind"] == "padding")
            want = [T - n_pad, T - 1] if side == "right" else [0, n_pad - 1]
            assert pf["evidence"]["rows"] == [want] and pf["evidence"]["pad_id"] == pad
            assert doc["num_tokens"] == T - n_pad
        else:
            assert "padding" not in kinds and doc["num_tokens"] == T


def test_every_command_sees_the_samples(batches, capsys, tmp_path):
    d, out, _ = batches
    ids, mask, _ = out["right"]
    assert main(["inspect", str(d / "right.pt"), "--json", "-q"]) == 0
    docs = json.loads(capsys.readouterr().out)["files"]
    assert [doc["num_tokens"] for doc in docs] == mask.sum(1).tolist()
    ex = forensics.explore(str(d / "right.pt"), background=False)
    assert [f["name"] for f in ex.files] == ["right.pt#0", "right.pt#1", "right.pt#2"]
    res = forensics.report([str(d / "right.pt")]).result
    assert [f.path.rsplit("#", 1)[1] for f in res.files] == ["0", "1", "2"]


# ------------------------------------------------------------------- many-sample files: every record judged
def _records(path, n=5, bad=2, T=40, H=16, k=3, seed=0):
    """A TensorRT-LLM SaveState record list; record ``bad`` has a zero block in every slot (rows 10-19)."""
    g = torch.Generator().manual_seed(seed)
    recs = []
    for i in range(n):
        aux = torch.randn(T, k * H, generator=g) * (1 + torch.arange(k).repeat_interleave(H))
        final = torch.randn(T, H, generator=g)
        if i == bad:
            aux[10:20] = 0
            final[10:20] = 0
        recs.append({"id": i, "input_ids": torch.randint(0, 100, (T,), generator=g), "hidden_state": final,
                     "aux_hidden_states": aux})
    torch.save(recs, path)
    return path


def test_a_bad_record_fails_in_scan_report_and_fingerprint(tmp_path, capsys):
    p = _records(tmp_path / "data_0.pt")
    code, docs = _fingerprint([p], capsys)
    assert code == 1 and len(docs) == 5
    zero = [any(f["kind"] == "zero_rows" for f in doc["findings"]) for doc in docs]
    assert zero == [False, False, True, False, False]
    res = forensics.scan(str(p), workers=0, progress=False)
    hit = [a for a in res.anomalies if a.kind == "zero_rows"]
    assert hit and "data_0.pt#2" in hit[0].message
    (row,) = res.rows
    assert [s["path"].rsplit("#", 1)[1] for s in row["samples"]] == ["0", "1", "2", "3", "4"]
    rep = forensics.report([str(p)]).result
    assert len(rep.files) == 5 and rep.verdict.value == "fail"


def test_each_file_is_read_once(tmp_path, monkeypatch, capsys):
    import forensics.io.formats as fm

    p = _records(tmp_path / "data_0.pt", n=12, bad=-1)
    calls = []
    real = fm.torch_load
    monkeypatch.setattr(fm, "torch_load", lambda *a, **k: calls.append(a) or real(*a, **k))
    code, docs = _fingerprint([p], capsys)
    assert len(docs) == 12 and len(calls) == 1


def test_stamp_verify_cover_every_record(tmp_path, capsys):
    p = _records(tmp_path / "data_0.pt", bad=-1)
    assert main(["stamp", str(tmp_path), "--layers", "3,16,28,final_post", "-q"]) == 0
    capsys.readouterr()
    assert main(["verify", str(tmp_path), "-q"]) == 0
    capsys.readouterr()
    recs = torch.load(p, weights_only=True)
    recs[2]["aux_hidden_states"][5, 3] += 1.0  # one value of record 2
    torch.save(recs, p)
    from forensics.analysis.stamp import verify

    res = verify(str(tmp_path))
    (fc,) = res.files
    assert fc.status == "drifted" and "data_0.pt#2" in fc.message and "1 of 5 samples" in fc.message
