"""The layout resolver (``forensics.io.layout``): every way people save hidden states with plain torch, safetensors
and numpy is read slot for slot; ambiguous axes are decided by the token ids or refused with a re-save recipe; key
names are shown, never trusted; a plain dict is not speculators-v1.

The model section saves real SmolLM2 states produced with plain transformers (``model(ids,
output_hidden_states=True)``) in each layout and checks ``hsf fingerprint`` on the files: exact r per slot against
the indices the test itself took from the tuple, the embedding found from the data alone, a shifted claim FAILs.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import forensics
from forensics.analysis.claims import capture_claims
from forensics.cli import main
from forensics.errors import ForensicsError
from forensics.io.formats import read_ids
from forensics.io.layout import resolve

T, H = 12, 16
SEL = [0, 3, 16, 28]  # HF hidden_states indices = r (transformers: hidden_states[k] is block k's output)


def states(k: int, t: int = T, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(t, H, generator=g) * (i + 1) for i in range(k)]


def same(cap, hs) -> None:
    assert len(cap.slots) == len(hs)
    for s, h in zip(cap.slots, hs, strict=True):
        assert torch.equal(s.tensor(), h), s.name


# ---------------------------------------------------------------------------------------- synthetic layouts
@pytest.mark.parametrize("layout,make", [
    ("[k, T, H]", lambda hs: torch.stack(hs)),
    ("[k, 1, T, H]", lambda hs: torch.stack([h[None] for h in hs])),
    ("[T, k, H]", lambda hs: torch.stack(hs, dim=1)),
    ("[1, T, k, H]", lambda hs: torch.stack(hs, dim=1)[None]),
])
def test_stacks_resolve_slot_for_slot(tmp_path, layout, make):
    hs = states(4)
    torch.save({"input_ids": torch.arange(T), "hidden_states": make(hs)}, tmp_path / "c.pt")
    cap = forensics.load(tmp_path / "c.pt")
    assert cap.format == "generic" and cap.provenance.layout == layout
    same(cap, hs)


def test_list_tuple_and_hf_batch_dim(tmp_path):
    hs = states(3)
    torch.save([h[None] for h in hs], tmp_path / "l.pt")
    same(forensics.load(tmp_path / "l.pt"), hs)
    torch.save(tuple(hs), tmp_path / "t.pt")
    same(forensics.load(tmp_path / "t.pt"), hs)


def test_ids_decide_the_axes_and_nothing_else_does(tmp_path):
    hs = states(4)
    stack = torch.stack(hs)  # [k, T, H] without ids: k and T could be either way round
    torch.save(stack, tmp_path / "s.pt")
    with pytest.raises(ForensicsError) as e:
        forensics.load(tmp_path / "s.pt")
    msg = str(e.value)
    assert "s.pt" in msg and "[4, 12, 16]" in msg and "[T, k, H]" in msg and "torch.save" in msg and "--ids" in msg
    same(forensics.load(tmp_path / "s.pt", input_ids=torch.arange(T)), hs)
    # the same numbers read the other way round when the ids say T = 4
    other = forensics.load(tmp_path / "s.pt", input_ids=torch.arange(4))
    assert other.provenance.layout == "[T, k, H]" and len(other.slots) == T
    assert torch.equal(other.slots[5].tensor(), stack[:, 5])


def test_k_equal_to_t_is_refused_with_the_shapes(tmp_path):
    sq = torch.randn(6, 6, H)
    with pytest.raises(ForensicsError, match=r"k equals T.*\[6, 6, 16\].*accepted layouts"):
        resolve({"input_ids": torch.arange(6), "hidden_states": sq}, "x.pt")


def test_a_batch_is_refused_with_the_recipe():
    with pytest.raises(ForensicsError, match=r"\[3, 2, 12, 16\] holds more than one sequence.*torch.save"):
        resolve(torch.randn(3, 2, T, H), "x.pt")


def test_named_keys_are_shown_never_claimed(tmp_path):
    hs = states(3)
    torch.save({"input_ids": torch.arange(T), "layer_3": hs[0], "hidden_states.16": hs[1], "h28": hs[2]},
               tmp_path / "n.pt")
    cap = forensics.load(tmp_path / "n.pt")
    assert [s.name for s in cap.slots] == ["layer_3", "hidden_states.16", "h28"]
    assert cap.meta["key_layers"] == {0: 3, 1: 16, 2: 28}
    assert any("own numbering" in n and "not used as evidence" in n for n in cap.provenance.notes)
    assert all(s.claimed is None and s.declared_r is None for s in cap.slots)
    assert capture_claims(cap, 30) is None  # nothing claimed: the names are not evidence


def test_a_list_of_layer_ids_beside_the_states_is_a_note_not_an_unreadable_file(tmp_path):
    """An EAGLE-3 style dict saves its aux layer ids beside the states as a plain list; before, the reader took the
    list for a list of states and refused the file ("aux_hidden_state_layer_ids[0] is int, not a tensor"). Now the
    states read as saved (a batch too) and the ids are named in a note, never used as a claim."""
    hs = states(3)
    torch.save({"input_ids": torch.arange(T), "hidden_states": torch.stack(hs),
                "aux_hidden_state_layer_ids": [3, 16, 28], "names": ("a", "b")}, tmp_path / "e.pt")
    cap = forensics.load(tmp_path / "e.pt")
    same(cap, hs)
    assert all(s.claimed is None and s.declared_r is None for s in cap.slots)
    assert any("aux_hidden_state_layer_ids = [3, 16, 28]" in n for n in cap.provenance.notes)
    assert capture_claims(cap, 30) is None
    b = torch.stack([torch.stack(states(3, seed=s)) for s in (1, 2)], dim=1)  # [k, B, T, H]
    torch.save({"input_ids": torch.arange(2 * T).reshape(2, T), "hidden_states": b, "layer_ids": [3, 16, 28]},
               tmp_path / "b.pt")
    caps = forensics.load_all(tmp_path / "b.pt")
    assert len(caps) == 2
    for i, c in enumerate(caps):
        same(c, list(b[:, i]))
    with pytest.raises(ForensicsError, match="not a tensor"):  # a list mixing states and numbers stays refused
        forensics.load(_saved(tmp_path / "m.pt", {"input_ids": torch.arange(T), "hidden_states": [hs[0], 3]}))


def _saved(path, obj):
    torch.save(obj, path)
    return path


def test_plain_dict_is_not_speculators_v1(tmp_path):
    hs = states(4)
    torch.save({"input_ids": torch.arange(T), "hidden_states": hs}, tmp_path / "d.pt")
    cap = forensics.load(tmp_path / "d.pt")
    assert cap.format == "generic"
    assert capture_claims(cap, 30) is None  # no "last slot is the target at r = L" on a user's own file


def test_safetensors_stack_with_input_ids(tmp_path):
    hs = states(4)
    save_file({"input_ids": torch.arange(T), "hidden_states": torch.stack(hs)}, tmp_path / "s.safetensors")
    cap = forensics.load(tmp_path / "s.safetensors")
    assert cap.format == "generic" and cap.provenance.layout == "[k, T, H]"
    same(cap, hs)


def test_numpy_npy_and_npz(tmp_path):
    hs = states(3)
    np.save(tmp_path / "s.npy", torch.stack(hs).numpy())
    same(forensics.load(tmp_path / "s.npy", input_ids=np.arange(T)), hs)
    np.savez(tmp_path / "n.npz", input_ids=np.arange(T), **{f"layers.{i}": h.numpy() for i, h in enumerate(hs)})
    cap = forensics.load(tmp_path / "n.npz")
    same(cap, hs)
    assert [s.name for s in cap.slots] == ["layers.0", "layers.1", "layers.2"]


def test_npz_with_pickled_objects_is_refused_not_run(tmp_path):
    np.savez(tmp_path / "p.npz", x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ForensicsError, match="p.npz.*allow_pickle=False"):
        forensics.load(tmp_path / "p.npz")


def test_read_ids_text_pt_npy(tmp_path):
    (tmp_path / "a.txt").write_text("1 2\n3,4")
    (tmp_path / "b.json").write_text(json.dumps([5, 6]))
    torch.save(torch.tensor([[7, 8]]), tmp_path / "c.pt")
    np.save(tmp_path / "d.npy", np.array([9, 10], dtype=np.int32))
    assert [read_ids(tmp_path / n).tolist() for n in ("a.txt", "b.json", "c.pt", "d.npy")] == \
        [[1, 2, 3, 4], [5, 6], [7, 8], [9, 10]]
    (tmp_path / "bad.txt").write_text("hello world")
    with pytest.raises(ForensicsError, match="bad.txt.*not an ids file"):
        read_ids(tmp_path / "bad.txt")
    torch.save(torch.randn(4), tmp_path / "f.pt")
    with pytest.raises(ForensicsError, match="f.pt.*integers"):
        read_ids(tmp_path / "f.pt")


def test_outside_ids_must_agree_with_the_file(tmp_path):
    hs = states(2)
    torch.save({"input_ids": torch.arange(T), "hidden_states": torch.stack(hs)}, tmp_path / "c.pt")
    with pytest.raises(ForensicsError, match="differ from the input_ids stored"):
        forensics.load(tmp_path / "c.pt", input_ids=torch.arange(T) + 1)
    torch.save(hs, tmp_path / "l.pt")
    # fewer ids than rows is readable (rows != ids is the row checks' row_count finding, not an error)
    cap = forensics.load(tmp_path / "l.pt", input_ids=torch.arange(5))
    assert (cap.num_tokens, int(cap.input_ids.numel())) == (T, 5)
    from forensics.analysis.rows import check_rows

    assert "row_count" in check_rows(cap).kinds()


# ------------------------------------------------------------------------- real states, plain transformers
@pytest.fixture(scope="module")
def real(smollm2, tmp_path_factory, sample_data):
    """Real SmolLM2 states, every layout saved by plain torch / safetensors / numpy code (not this project's)."""
    model, tok = smollm2
    text = (sample_data / "texts" / "english_rivers.txt").read_text()
    ids = tok(text, return_tensors="pt").input_ids[:, :64]
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
    hs = out.hidden_states
    d = tmp_path_factory.mktemp("byo")
    pick = [hs[i][0] for i in SEL]
    torch.save({"input_ids": ids[0], "hidden_states": torch.stack(pick)}, d / "stack_kTH.pt")
    torch.save({"input_ids": ids[0], "hidden_states": torch.stack([hs[i] for i in SEL])}, d / "stack_k1TH.pt")
    torch.save({"input_ids": ids[0], "hidden_states": torch.stack(pick, dim=1)}, d / "stack_TkH.pt")
    torch.save({"input_ids": ids, "hidden_states": [hs[i] for i in SEL]}, d / "dict_list.pt")
    torch.save({"input_ids": ids[0], **{f"layer_{i}": hs[i][0] for i in SEL}}, d / "named.pt")
    save_file({"input_ids": ids[0].contiguous(), "hidden_states": torch.stack(pick).contiguous()},
              d / "stack.safetensors")
    np.savez(d / "named.npz", input_ids=ids[0].numpy(), **{f"hidden_states.{i}": hs[i][0].numpy() for i in SEL})
    torch.save(pick, d / "list.pt")  # a bare list: no ids
    np.save(d / "stack.npy", torch.stack(pick).numpy())  # no ids
    (d / "ids.txt").write_text(" ".join(map(str, ids[0].tolist())))
    (d / "text.txt").write_text(tok.decode(ids[0]))
    return {"dir": d, "ids": ids[0], "hs": hs, "model": smollm2}


WITH_IDS = ["stack_kTH.pt", "stack_k1TH.pt", "stack_TkH.pt", "dict_list.pt", "named.pt", "stack.safetensors",
            "named.npz"]


def _fingerprint_json(args, capsys):
    code = main(["fingerprint", *args, "--json", "-q"])
    return code, json.loads(capsys.readouterr().out)["files"][0]


@pytest.mark.parametrize("name", WITH_IDS)
def test_exact_r_of_every_layout(real, name, capsys):
    code, doc = _fingerprint_json([str(real["dir"] / name), "--model", "default"], capsys)
    assert code == 0, doc.get("error")
    assert [s["r_exact"] for s in doc["slots"]] == SEL


@pytest.mark.parametrize("name", ["stack_kTH.pt", "named.npz", "stack.safetensors"])
def test_data_only_finds_the_embedding(real, name, capsys):
    code, doc = _fingerprint_json([str(real["dir"] / name)], capsys)
    assert code == 0
    assert [s["role"] for s in doc["slots"]][0] == "embedding"
    assert all(s["role"] != "embedding" for s in doc["slots"][1:])


@pytest.mark.parametrize("name", ["stack_TkH.pt", "named.pt"])
def test_shifted_claim_fails(real, name, capsys):
    code, doc = _fingerprint_json([str(real["dir"] / name), "--model", "default", "--layers", "0,4,17,29"], capsys)
    assert code == 1 and doc["verdict"] == "fail"


def test_bare_list_without_ids_says_so_and_labels_nothing(real, capsys):
    code = main(["fingerprint", str(real["dir"] / "list.pt"), "--model", "default"])
    out = capsys.readouterr().out
    assert code == 0
    assert "no token ids" in out and "--ids" in out and "exact mode vs" not in out
    assert "IDENTIFIED" not in out
    code, doc = _fingerprint_json([str(real["dir"] / "list.pt"), "--model", "default"], capsys)
    assert [f["kind"] for f in doc["findings"]].count("no_token_ids") == 1
    assert all(s["r_exact"] is None and s["label"] in (None, "embed") for s in doc["slots"])


@pytest.mark.parametrize("how", ["--ids", "--text"])
def test_ids_from_outside_the_file(real, how, capsys):
    src = real["dir"] / ("ids.txt" if how == "--ids" else "text.txt")
    for name in ("list.pt", "stack.npy"):
        code = main(["fingerprint", str(real["dir"] / name), "--model", "default", how, str(src)])
        out = capsys.readouterr().out
        assert code == 0
        assert out.startswith("IDENTIFIED [embed, L3, L16, L28] (exact")


def test_a_python_claim_reads_as_written(tmp_path):
    """``layers=[0, 1, 2]`` from Python is told "layers=0,1,2" (it read "layers= 0,1,2", a flag's spacing)."""
    from forensics.analysis.claims import user_claims

    assert user_claims([0, 1, 2], "layers=").detail == "layers=0,1,2"
    assert user_claims("0,1,2").detail == "--layers 0,1,2"
    torch.save({"input_ids": torch.arange(T), "hidden_states": torch.stack(states(3))}, tmp_path / "c.pt")
    fp = forensics.fingerprint(tmp_path / "c.pt", layers=[0, 1, 2])
    assert fp.claims.detail == "layers=0,1,2" and "layers= " not in str(fp)
