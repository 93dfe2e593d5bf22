"""The draft probe: candidate sets, statistics, pairing, and the proof on real SmolLM2 activations — the
committed draft (trained on ``[embed, L3, L16]``) must rank that wiring first, far above the shifted
``[L3, L16, L28]`` (the seed's 76.9 % vs 34.1 % effect)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

import forensics
from forensics.analysis.probe import MAX_CANDIDATES, TARGET_NEXT, TARGET_VERIFIER, auto_candidates, probe, wilson
from forensics.cli import main
from forensics.errors import ForensicsError
from forensics.layers import FINAL_POST

TRAINED = [0, 3, 16]
SHIFTED = [3, 16, 28]
MIN_MARGIN = 0.15  # the trained wiring must beat the shifted one by at least this much top-1 agreement


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="session")
def draft_dir(sample_data):
    d = sample_data / "draft_eagle3"
    if not (d / "model.safetensors").is_file():
        pytest.skip("sample_data/draft_eagle3 is not in this checkout")
    return d


@pytest.fixture(scope="session")
def proof(draft_dir, sample_data, smollm2):
    """The auto probe of the committed draft on sample_data/speculators_v1, scored against SmolLM2."""
    return probe(draft_dir, sample_data / "speculators_v1", model=smollm2[0])


def test_wilson_matches_known_intervals():
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = wilson(5, 10)
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))


def test_auto_candidates_four_slots_are_every_ordered_triple():
    c = auto_candidates([0, 3, 16, 28], 3, declared=[0, 3, 16], trainer_fc=[0, 3, 16])
    wirings = [w for w, _ in c]
    assert len(wirings) == len(set(wirings)) == 24  # 4·3·2 ordered triples, all of them
    assert wirings[0] == (0, 3, 16) and {"declared", "trainer view"} <= set(c[0][1])
    assert (3, 16, 28) in wirings


def test_auto_candidates_are_bounded_on_a_ladder():
    refs = list(range(31)) + [FINAL_POST]
    c = auto_candidates(refs, 3, declared=[0, 3, 16], trainer_fc=[0, 1, 2], L=30)
    wirings = [w for w, _ in c]
    assert len(wirings) <= MAX_CANDIDATES and wirings[0] == (0, 3, 16)
    assert (2, 15, 27) in wirings and (3, 16, 28) in wirings  # engine default and its SGLang +1 reading
    assert (1, 4, 17) in wirings and (28, 29, 30) in wirings  # declared shifted +1, the last slots
    assert all(FINAL_POST not in w for w in wirings)


def test_proof_trained_wiring_ranks_first(proof):
    best = proof.best
    shifted = next(r for r in proof.rows if r["wiring"] == SHIFTED)
    assert best["wiring"] == TRAINED and "declared" in best["tags"] and "trainer view" in best["tags"]
    assert proof.target == TARGET_VERIFIER and proof.embed_source == "model"
    assert best["n"] == shifted["n"] == sum(c - 1 for c in (93, 116, 108, 130, 71))  # T-1 pairs per sample
    assert best["top1"] - shifted["top1"] >= MIN_MARGIN, (best["top1"], shifted["top1"])
    assert best["top1_ci"][0] > shifted["top1_ci"][1]
    assert proof.clear_winner and not any("clearly best" in w for w in proof.warnings)
    assert len(proof.rows) == 24 and best["topk"] >= best["top1"]
    assert proof.ids_per_engine["vllm"]["ids"] == [0, 3, 16]
    assert proof.ids_per_engine["sglang pre-25454"]["ids"] == [-1, 2, 15]
    d = proof.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["best"]["label"] == "embed+L3+L16"
    assert "embed+L3+L16" in repr(proof) and "<table" in proof._repr_html_()


def test_next_token_mode_counts_match_an_independent_loop(draft_dir, sample_data):
    """Without a model: target = the actual next token, embedding = the capture's r=0 slot. Recount
    the shift_batch pairing by hand: fused[t] + embed(token t+1) → compare with token t+2."""
    path = sample_data / "speculators_v1" / "data_2.pt"
    res = probe(draft_dir, path, candidates=[TRAINED])
    assert res.target == TARGET_NEXT and res.embed_source == "the capture's r=0 slot"
    cap = forensics.load(path)
    d = forensics.models.draft.load_draft(draft_dir)
    ids = cap.input_ids.long()
    slots = [s.tensor().float() for s in cap.slots]
    fused = torch.cat([slots[0], slots[1], slots[2]], dim=-1)
    logits = d.forward(fused[:-1], slots[0][1:])  # row t: fused state t + embedding of token t+1
    tids = d.target_ids()
    correct = sum(int(tids[int(logits[t].argmax())]) == int(ids[t + 2]) for t in range(len(ids) - 2))
    row = res.rows[0]
    assert row["n"] == len(ids) - 2 and row["correct"] == correct


def _reference_counts(d, cap, wiring, target, valid, topk=5):
    """(top-1 hits, top-k hits, n) of one wiring, the draft run alone in float64 (no batching, no row blocks)."""
    slots = {r: s.tensor().double() for r, s in zip([0, 3, 16, 28], cap.slots, strict=True)}
    fused = torch.cat([slots[r][:-1] for r in wiring], dim=-1)
    logits = d.forward(fused, slots[0][1:], dtype=torch.float64)
    top = d.target_ids()[logits.topk(topk, dim=-1).indices]
    return (int(((top[:, 0] == target) & valid).sum()), int(((top == target[:, None]).any(-1) & valid).sum()),
            int(valid.sum()))


def test_batched_blocked_counts_match_one_float64_forward_per_wiring(draft_dir, sample_data, monkeypatch):
    """All 24 wirings in one batched forward (and, squeezed, in chunks of 5 with lm_head over 7-row blocks)
    score exactly what each wiring scores run alone in float64."""
    import forensics.analysis.probe as P

    path = sample_data / "speculators_v1" / "data_1.pt"
    cap = forensics.load(path)
    d = forensics.models.draft.load_draft(draft_dir)
    ids = cap.input_ids.reshape(-1).long()
    target = torch.cat([ids[2:], ids.new_zeros(1)])
    valid = torch.arange(len(ids) - 1) < len(ids) - 2
    whole = probe(d, path)
    per = P.BATCH_FLOATS // (len(ids) * (d.num_aux + 8) * d.hidden_size + d.num_heads * len(ids) ** 2) // 5
    monkeypatch.setattr(P, "BATCH_FLOATS", per * 5 + 1)
    monkeypatch.setattr(P, "HEAD_ROWS", 7)
    squeezed = probe(d, path)
    assert len(whole.rows) == 24 and P._batch_size(d, len(ids) - 1) < 24
    for a, b in zip(whole.rows, squeezed.rows, strict=True):
        ref = _reference_counts(d, cap, a["wiring"], target, valid)
        assert (a["correct"], round(a["topk"] * a["n"]), a["n"]) == ref, a["label"]
        assert (a["wiring"], a["correct"], a["topk"], a["n"]) == (b["wiring"], b["correct"], b["topk"], b["n"])


def test_plain_verifier_probe_equals_transformers_and_float64(proof, draft_dir, sample_data, smollm2):
    """``model="default"`` runs the plain-torch SmolLM2: the same ranking and counts as the transformers model
    (``proof``), and the trained wiring's count equals a float64 draft forward against transformers' argmax."""
    plain = probe(draft_dir, sample_data / "speculators_v1", model="default")
    assert [(r["wiring"], r["correct"], r["topk"], r["n"]) for r in plain.rows] == \
        [(r["wiring"], r["correct"], r["topk"], r["n"]) for r in proof.rows]
    d = forensics.models.draft.load_draft(draft_dir)
    E = smollm2[0].get_input_embeddings().weight.detach().double()
    hits = 0
    for p in sorted((sample_data / "speculators_v1").glob("data_*.pt")):
        cap = forensics.load(p)
        ids = cap.input_ids.reshape(-1).long()
        with torch.no_grad():
            target = smollm2[0](input_ids=ids[None]).logits[0].argmax(-1)[1:]
        slots = {r: s.tensor().double() for r, s in zip([0, 3, 16, 28], cap.slots, strict=True)}
        logits = d.forward(torch.cat([slots[r][:-1] for r in TRAINED], dim=-1), E[ids[1:]], dtype=torch.float64)
        hits += int((d.target_ids()[logits.argmax(-1)] == target).sum())
    assert plain.rows[0]["wiring"] == TRAINED and plain.rows[0]["correct"] == hits


def test_midlayer_copy_probes_identically(draft_dir, sample_data, tmp_path):
    from safetensors.torch import load_file, save_file

    w = load_file(str(draft_dir / "model.safetensors"))
    save_file({k.replace("layers.0.", "midlayer."): v for k, v in w.items()}, str(tmp_path / "model.safetensors"))
    shutil.copy(draft_dir / "config.json", tmp_path / "config.json")
    path = sample_data / "speculators_v1" / "data_4.pt"
    a = probe(draft_dir, path, candidates=[TRAINED, SHIFTED])
    b = probe(tmp_path, path, candidates=[TRAINED, SHIFTED])
    assert forensics.models.draft.load_draft(tmp_path).scheme == "midlayer"
    assert [(r["wiring"], r["correct"], r["n"]) for r in a.rows] == [(r["wiring"], r["correct"], r["n"])
                                                                    for r in b.rows]


def test_candidates_naming_missing_r_is_an_error(draft_dir, sample_data):
    with pytest.raises(ForensicsError, match="L5"):
        probe(draft_dir, sample_data / "speculators_v1" / "data_4.pt", candidates="0,5,16")


def test_cli_json_and_exit_codes(draft_dir, sample_data, tmp_path, capsys):
    data = str(sample_data / "speculators_v1" / "data_4.pt")
    rc = main(["probe", "--draft", str(draft_dir), "--data", data, "--candidates", "embed,L3,L16;L3,L16,L28",
               "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and [r["wiring"] for r in doc["rows"]][0] == TRAINED and doc["target"] == TARGET_NEXT
    # the same draft declaring the shifted wiring: the probe contradicts the config -> exit 1 + warning
    shutil.copy(draft_dir / "model.safetensors", tmp_path / "model.safetensors")
    cfg = json.loads((draft_dir / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = SHIFTED
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    rc = main(["probe", "--draft", str(tmp_path), "--data", str(sample_data / "speculators_v1"), "--candidates",
               "0,3,16;3,16,28"])
    out = capsys.readouterr().out
    assert rc == 0  # explicit candidates carry no "declared" tag
    rc = main(["probe", "--draft", str(tmp_path), "--data", str(sample_data / "speculators_v1")])
    out = capsys.readouterr().out
    assert rc == 1 and "likely trained on embed+L3+L16" in " ".join(out.split())  # folded to the width
    assert out.splitlines()[0].startswith("probe: MISMATCH — best wiring embed+L3+L16")  # the verdict first
    assert main(["probe", "--draft", str(tmp_path / "nope"), "--data", data]) == 2


def test_flat_verb_survives_submodule_import(draft_dir, sample_data):
    import forensics.analysis.probe  # noqa: F401 - rebinding forensics.analysis.probe to the module must keep it callable

    res = forensics.probe(draft_dir, sample_data / "speculators_v1" / "data_4.pt", candidates="0,3,16")
    assert res.best["wiring"] == TRAINED


@pytest.mark.parametrize("user", [None, "ACTIVE"])
def test_cli_waits_passively_unless_the_user_chose(draft_dir, sample_data, monkeypatch, user):
    """libgomp's wait policy is set for the process (before torch loads it in a fresh `hsf`); a user's value wins."""
    if user is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", user)
    data = str(sample_data / "speculators_v1" / "data_4.pt")
    assert main(["probe", "--draft", str(draft_dir), "--data", data, "--candidates", "0,3,16", "--json", "-q"]) == 0
    assert os.environ["OMP_WAIT_POLICY"] == (user or "PASSIVE")
