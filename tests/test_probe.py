"""The draft probe: candidate sets, statistics, pairing, chain acceptance, controls, the verdict, and the proof on
real SmolLM2 activations — the committed draft (trained on ``[embed, L3, L16]``) must rank that wiring first, far
above the shifted ``[L3, L16, L28]`` (the seed's 76.9 % vs 34.1 % effect). The chain is checked against
speculators' own Eagle-3 layers run in float64 on the extended sequence a serving engine would hold."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

import forensics
from forensics.analysis.acceptance import (
    BLOCK_ROWS,
    accepted_counts,
    length_interval,
    ratio_interval,
    speedup,
    t975,
    units,
)
from forensics.analysis.probe import (
    MAX_CANDIDATES,
    TARGET_NEXT,
    TARGET_VERIFIER,
    auto_candidates,
    probe,
    wilson,
)
from forensics.analysis.probe_wirings import Wiring, variants
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
    shifted = next(r for r in proof.rows if r.wiring == SHIFTED and r.control is None)
    assert best.wiring == TRAINED and "declared" in best.tags and "trainer view" in best.tags
    assert proof.target == TARGET_VERIFIER and proof.embed_source == "model"
    assert best.n == shifted.n == sum(c - 1 for c in (93, 116, 108, 130, 71))  # T-1 pairs per sample
    assert best.top1 - shifted.top1 >= MIN_MARGIN, (best.top1, shifted.top1)
    assert best.top1_ci[0] > shifted.top1_ci[1]
    assert best.acceptance_length > max(r.acceptance_length for r in proof.rows if r is not best)
    assert len(proof.candidates) == 24 + 2 and best.topk >= best.top1  # + the [h, emb] and same-token twins
    assert proof.ids_per_engine["vllm"]["ids"] == [0, 3, 16]
    assert proof.ids_per_engine["sglang pre-25454"]["ids"] == [-1, 2, 15]
    d = proof.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["best"]["label"] == "embed+L3+L16" and d["verdict"] == proof.verdict.value
    assert {"acceptance", "acceptance_length", "acceptance_length_ci", "top1", "control"} <= set(d["rows"][0])
    assert [r["control"] for r in d["rows"][-2:]] == ["shift", "random"]
    assert "embed+L3+L16" in repr(proof) and "<table" in proof._repr_html_()
    assert repr(proof).startswith(f"probe: {proof.verdict.value.upper()} — ") and "note: declared wiring" in \
        proof.explain()


def test_chain_invariants_and_controls(proof):
    """Every row: acceptance non-increasing with the position (by construction), position 0 = top-1 exactly,
    acceptance length 1 + Σ acceptance in [1, k + 1] (its interval too); the shift control at most a quarter of
    the true wiring's position-0 acceptance; the random control below the true wiring."""
    k = proof.steps
    assert k == 3 and proof.ci_unit.startswith("block") and proof.units >= 8
    for r in proof.rows:
        assert len(r.acceptance) == k and r.acceptance[0] == r.top1 == r.correct / r.n
        assert all(a >= b for a, b in zip(r.acceptance, r.acceptance[1:], strict=False)), r.label
        assert r.acceptance_length == pytest.approx(1 + sum(r.acceptance), abs=1e-12)
        assert 1 <= r.acceptance_length <= k + 1
        lo, hi = r.acceptance_length_ci
        assert 1 <= lo <= r.acceptance_length <= hi <= k + 1
    shift, rand = proof.controls
    assert (shift.control, rand.control) == ("shift", "random") and shift.wiring == rand.wiring == TRAINED
    assert shift.acceptance[0] <= proof.best.acceptance[0] / 4
    assert rand.acceptance_length < proof.best.acceptance_length


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
    assert row.n == len(ids) - 2 and row.correct == correct


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
    import forensics.analysis.probe_chain as P

    path = sample_data / "speculators_v1" / "data_1.pt"
    cap = forensics.load(path)
    d = forensics.models.draft.load_draft(draft_dir)
    ids = cap.input_ids.reshape(-1).long()
    target = torch.cat([ids[2:], ids.new_zeros(1)])
    valid = torch.arange(len(ids) - 1) < len(ids) - 2
    whole = probe(d, path)
    T = len(ids) - 1
    per = P.BATCH_FLOATS // (3 * (T * (d.num_aux + 8) * d.hidden_size + d.num_heads * T ** 2)) // 5
    monkeypatch.setattr(P, "BATCH_FLOATS", per * 5 + 1)
    monkeypatch.setattr(P, "HEAD_ROWS", 7)
    squeezed = probe(d, path)
    assert len(whole.candidates) == 24 + 2 and P._batch_size(d, T, 3) < 24
    for a, b in zip(whole.rows, squeezed.rows, strict=True):
        if a.control is None and a.order == "[emb, h]" and a.pairing == "previous-token":
            ref = _reference_counts(d, cap, a.wiring, target, valid)
            assert (a.correct, round(a.topk * a.n), a.n) == ref, a.label
        assert (a.wiring, a.correct, a.topk, a.n, a.acceptance) == (b.wiring, b.correct, b.topk, b.n, b.acceptance)


def test_plain_verifier_probe_equals_transformers_and_float64(proof, draft_dir, sample_data, smollm2):
    """The plain-torch SmolLM2 (what ``model="default"`` runs in a fresh process) gives the same ranking and
    counts as the transformers model (``proof``), and the trained wiring's count equals a float64 draft forward
    against transformers' argmax."""
    from forensics.models.target import default_model_path
    from forensics.models.verifier import load_plain, plain_folder

    verifier = load_plain(plain_folder(default_model_path()))  # "default" would reuse the fixture's loaded model
    plain = probe(draft_dir, sample_data / "speculators_v1", model=verifier)
    assert verifier.plain and plain.target_source == "model run on the capture's input_ids"
    assert [(r.label, r.correct, r.topk, r.n, r.acceptance) for r in plain.rows] == \
        [(r.label, r.correct, r.topk, r.n, r.acceptance) for r in proof.rows]
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
    assert plain.rows[0].wiring == TRAINED and plain.rows[0].correct == hits


def test_midlayer_copy_probes_identically(draft_dir, sample_data, tmp_path):
    from safetensors.torch import load_file, save_file

    w = load_file(str(draft_dir / "model.safetensors"))
    save_file({k.replace("layers.0.", "midlayer."): v for k, v in w.items()}, str(tmp_path / "model.safetensors"))
    shutil.copy(draft_dir / "config.json", tmp_path / "config.json")
    path = sample_data / "speculators_v1" / "data_4.pt"
    a = probe(draft_dir, path, candidates=[TRAINED, SHIFTED])
    b = probe(tmp_path, path, candidates=[TRAINED, SHIFTED])
    assert forensics.models.draft.load_draft(tmp_path).scheme == "midlayer"
    assert [(r.label, r.correct, r.n, r.acceptance) for r in a.rows] == [(r.label, r.correct, r.n, r.acceptance)
                                                                         for r in b.rows]


def test_candidates_naming_missing_r_is_an_error(draft_dir, sample_data):
    with pytest.raises(ForensicsError, match="L5"):
        probe(draft_dir, sample_data / "speculators_v1" / "data_4.pt", candidates="0,5,16")


def test_cli_json_and_exit_codes(draft_dir, sample_data, tmp_path, capsys):
    data = str(sample_data / "speculators_v1" / "data_4.pt")
    rc = main(["probe", "--draft", str(draft_dir), "--data", data, "--candidates", "embed,L3,L16;L3,L16,L28",
               "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert [r["wiring"] for r in doc["rows"]][0] == TRAINED and doc["target"] == TARGET_NEXT
    assert rc == {"pass": 0, "fail": 1, "cannot tell": 3}[doc["verdict"]]
    # the same draft declaring the shifted wiring: the probe contradicts the config -> exit 1 + warning
    shutil.copy(draft_dir / "model.safetensors", tmp_path / "model.safetensors")
    cfg = json.loads((draft_dir / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = SHIFTED
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    rc = main(["probe", "--draft", str(tmp_path), "--data", str(sample_data / "speculators_v1"), "--candidates",
               "0,3,16;3,16,28"])
    out = capsys.readouterr().out
    assert rc != 1  # explicit candidates carry no "declared" tag: nothing claimed, nothing failed
    rc = main(["probe", "--draft", str(tmp_path), "--data", str(sample_data / "speculators_v1")])
    out = capsys.readouterr().out
    assert rc == 1 and "likely trained on embed+L3+L16" in " ".join(out.split())  # folded to the width
    assert out.splitlines()[0].startswith("probe: FAIL — best wiring embed+L3+L16")  # the verdict first
    assert main(["probe", "--draft", str(tmp_path / "nope"), "--data", data]) == 2


def test_flat_verb_survives_submodule_import(draft_dir, sample_data):
    import forensics.analysis.probe  # noqa: F401 - rebinding forensics.analysis.probe to the module must keep it callable

    res = forensics.probe(draft_dir, sample_data / "speculators_v1" / "data_4.pt", candidates="0,3,16")
    assert res.best.wiring == TRAINED


@pytest.mark.parametrize("user", [None, "ACTIVE"])
def test_cli_waits_passively_unless_the_user_chose(draft_dir, sample_data, monkeypatch, user):
    """libgomp's wait policy is set for the process (before torch loads it in a fresh `hsf`); a user's value wins."""
    if user is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", user)
    data = str(sample_data / "speculators_v1" / "data_4.pt")
    # one file, one candidate: no runner-up, a few blocks — pass or cannot tell, never a failure
    rc = main(["probe", "--draft", str(draft_dir), "--data", data, "--candidates", "0,3,16", "--json", "-q"])
    assert rc in (0, 3)
    assert os.environ["OMP_WAIT_POLICY"] == (user or "PASSIVE")


# ------------------------------------------------------------------------------ chain acceptance --

def test_acceptance_statistics_match_hand_computations():
    assert accepted_counts([[1, 1, 0], [0, 1, 1], [1, 1, 1], [True, False, True]]) == [2, 0, 3, 1]
    assert (t975(1), t975(4), t975(30)) == (12.706, 2.776, 2.042) and 1.959 < t975(10**6) < 1.961
    s, n = [3.0, 1.0, 2.0, 6.0], [4.0, 2.0, 4.0, 6.0]  # R = 12 / 16
    R = 12 / 16
    se = (sum((a - R * b) ** 2 for a, b in zip(s, n, strict=True)) / (4 * 3)) ** 0.5 / 4
    got, ci = ratio_interval(s, n)
    assert got == R and ci == (pytest.approx(R - 3.182 * se, abs=1e-12), pytest.approx(R + 3.182 * se, abs=1e-12))
    assert ratio_interval([1.0], [2.0]) == (0.5, None)
    tau, ci = length_interval([0.0, 0.0], [5.0, 5.0], 3)
    assert tau == 1.0 and ci == (1.0, 1.0)
    blocks, kind = units([list(range(70)), list(range(70, 75))])
    assert kind == f"block of {BLOCK_ROWS} positions" and [len(b) for b in blocks] == [32, 38, 5]
    assert sorted(i for b in units([list(range(107))])[0] for i in b) == list(range(107))  # each row once
    seqs, kind = units([[i] for i in range(8)])
    assert kind == "sequence" and len(seqs) == 8
    assert speedup(2.6, 3, 0.05) == pytest.approx(2.6 / 1.15)  # Leviathan et al. 2023 with τ for E[tokens]


def test_variants_name_norm_stage_order_and_pairing():
    from forensics.layers import FINAL_POST

    got = {w.label: tags for w, tags in variants((0, 16, 30), 30, True, [0, 16, 30])}
    assert got == {"embed+L16+L30 [h, emb]": ["concat order"], "embed+L16+L30 same-token": ["row pairing"],
                   "embed+L16+final_post": ["norm stage"]}
    assert Wiring((0, 16, FINAL_POST)).norm == "post-norm" and Wiring((0, 16, 30)).norm == "pre-norm"
    back = variants((0, 16, FINAL_POST), 30, False, [0, 16, 30, FINAL_POST])
    assert Wiring((0, 16, 30)) in dict(back)


@pytest.fixture(scope="module")
def speculators_layers(draft_dir, smollm2):
    """speculators 0.9.0's own Eagle3DraftModel on the committed draft, float64, eager attention."""
    pytest.importorskip("speculators")
    from safetensors.torch import load_file
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig

    cfg = Eagle3SpeculatorConfig.from_pretrained(str(draft_dir))
    cfg.transformer_layer_config._attn_implementation = "eager"
    model = Eagle3DraftModel(cfg).eval()
    sd = load_file(str(draft_dir / "model.safetensors"))
    sd["embed_tokens.weight"] = smollm2[0].get_input_embeddings().weight.detach().float()
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in sd.items()}, strict=False)
    return model.double()


def _served_chain(model, fused, emb_rows, E, t, k, tids):
    """Row t's chain as a serving engine runs it, with speculators' layers: the context rows 0..t (fc on the
    target's states, positions 1..t+1), then each drafted token appended as one more row of the same causal
    sequence — its hidden input the previous row's pre-norm output, its embedding the drafted token's, its
    position one further. Returns the draft-vocab logits of every step."""
    hid, em, out = model.fc(fused[:t + 1]), emb_rows[:t + 1], []
    with torch.no_grad():
        for _ in range(k):
            S = hid.shape[0]
            pos = torch.arange(1, S + 1)[None]
            x = torch.cat([em, hid], -1)[None]
            mask = torch.full((S, S), float("-inf"), dtype=torch.float64).triu(1)[None, None]
            h = model.layers[0](x, attention_mask=mask, position_ids=pos,
                                position_embeddings=model.rotary_emb(x, pos))[0][-1]
            logits = model.lm_head(model.norm(h))
            out.append(logits)
            hid, em = torch.cat([hid, h[None]]), torch.cat([em, E[tids[logits.argmax()]][None]])
    return out


def test_chain_equals_speculators_layers_on_the_served_sequence(draft_dir, sample_data, smollm2, speculators_layers):
    """draft_chain (batched rows, step-0 KV + per-row chain keys, positions + j, pre-norm feedback) gives the
    logits of speculators' layers run on the extended causal sequence an engine holds, in float64 (RoPE angles
    in float32 there)."""
    from forensics.models.draft import draft_chain, load_draft

    d = load_draft(draft_dir)
    cap = forensics.load(sample_data / "speculators_v1" / "data_2.pt")
    ids = cap.input_ids.reshape(-1).long()
    E = smollm2[0].get_input_embeddings().weight.detach().double()
    s = [x.tensor().double() for x in cap.slots]
    fused, emb = torch.cat(s[:3], -1)[:-1], E[ids[1:]]
    tids, head = d.target_ids(), d.weights["lm_head.weight"].double()
    feed = []
    for j in range(3):  # our chain, fed its own drafted tokens
        hid = draft_chain(d, fused, emb, feed, dtype=torch.float64)
        if j < 2:
            feed.append(E[tids[(hid[j] @ head.T).argmax(-1)]])
    for t in (0, 1, 9, 33, 64, len(ids) - 2):
        ref = _served_chain(speculators_layers, fused, emb, E, t, 3, tids)
        for j in range(3):
            # transformers computes the RoPE angles in float32 whatever the dtype: ~6e-7 apart, not 1e-12; a wrong
            # key set, position or fed-back state moves logits by > 1e-2
            torch.testing.assert_close(hid[j, t] @ head.T, ref[j], rtol=1e-4, atol=1e-5)


def test_acceptance_counts_equal_an_independent_float64_chain(draft_dir, sample_data, smollm2, speculators_layers):
    """The probe's per-position acceptance on one file (float32, batched, rows dropped once rejected, fed the
    verifier's token) equals chains run row by row with speculators' layers in float64, fed the draft's own
    tokens, accepted while each equals transformers' argmax at its position."""
    from forensics.models.draft import load_draft

    path = sample_data / "speculators_v1" / "data_2.pt"
    res = probe(draft_dir, path, candidates=[TRAINED], model=smollm2[0], steps=3)
    d = load_draft(draft_dir)
    cap = forensics.load(path)
    ids = cap.input_ids.reshape(-1).long()
    with torch.no_grad():
        pred = smollm2[0](input_ids=ids[None]).logits[0].argmax(-1)
    E = smollm2[0].get_input_embeddings().weight.detach().double()
    s = [x.tensor().double() for x in cap.slots]
    fused, emb, tids = torch.cat(s[:3], -1)[:-1], E[ids[1:]], d.target_ids()
    T = len(ids)
    accepted, shifted = [], []
    for t in range(T - 1):
        logits = _served_chain(speculators_layers, fused, emb, E, t, 3, tids)
        drafted = [int(tids[lg.argmax()]) for lg in logits]
        hits = [t + 1 + j <= T - 1 and x == int(pred[t + 1 + j]) for j, x in enumerate(drafted)]
        accepted.append(accepted_counts([hits])[0])
        # tenstorrent/vllm#442's shifted target: the same inputs and chain, each drafted token compared with the
        # verifier's argmax one position later (t + 2 + j); fed its own tokens, which equal the labels it matched
        hits = [t + 2 + j <= T - 1 and x == int(pred[t + 2 + j]) for j, x in enumerate(drafted)]
        shifted.append(accepted_counts([hits])[0])
    row = res.rows[0]
    assert row.n == T - 1
    assert [round(a * row.n) for a in row.acceptance] == [sum(a > j for a in accepted) for j in range(3)]
    assert row.acceptance_length == pytest.approx(1 + sum(accepted) / (T - 1), abs=1e-12)
    shift = next(r for r in res.rows if r.control == "shift")
    assert shift.wiring == TRAINED and shift.n == T - 1
    assert [round(a * shift.n) for a in shift.acceptance] == [sum(a > j for a in shifted) for j in range(3)]
    assert shift.acceptance_length == pytest.approx(1 + sum(shifted) / (T - 1), abs=1e-12)


# ------------------------------------------------------------------------------ one verdict --

def _cli(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr().out
    rcj = main([*argv, "--json"])
    doc = json.loads(capsys.readouterr().out)
    return rc, out, rcj, doc


@pytest.mark.parametrize("case", ["fail", "one_file", "given"])
def test_exit_code_headline_json_and_report_state_one_verdict(case, draft_dir, sample_data, tmp_path, capsys):
    """For every probe result the exit code, the headline's first word, the JSON's top-level verdict and the
    report's probe panel agree (issue 24: one result exited 3 while its headline printed PASS)."""
    from forensics.views.report.verdicts import _probe_summary

    data = str(sample_data / "speculators_v1" / ("data_4.pt" if case == "one_file" else ""))
    draft = draft_dir
    if case == "fail":
        shutil.copy(draft_dir / "model.safetensors", tmp_path / "model.safetensors")
        cfg = json.loads((draft_dir / "config.json").read_text())
        cfg["eagle_aux_hidden_state_layer_ids"] = SHIFTED
        (tmp_path / "config.json").write_text(json.dumps(cfg))
        draft = tmp_path
    argv = ["probe", "--draft", str(draft), "--data", data]
    if case == "given":
        argv += ["--candidates", "3,16,28;0,3,16"]
    rc, out, rcj, doc = _cli(argv, capsys)
    word = out.splitlines()[0].split(" — ")[0].removeprefix("probe: ").lower()
    assert rc == rcj == {"pass": 0, "fail": 1, "cannot tell": 3}[doc["verdict"]]
    assert word == doc["verdict"]
    res = probe(draft, data, candidates="3,16,28;0,3,16" if case == "given" else "auto")
    assert res.verdict.value == doc["verdict"] == _probe_summary(res)["verdict"]
    if case == "fail":
        assert doc["verdict"] == "fail" and any(f["kind"] == "probe_declared_beaten" for f in doc["findings"])


def test_served_vs_best_line(draft_dir, sample_data, tmp_path, capsys):
    """--engine: the wiring vLLM would feed (config ids [3, 16, 28] → r = [3, 16, 28]) against the best, in
    acceptance length and speed-up τ / (1 + k·c), in the CLI, the JSON and the report panel."""
    from forensics.views.report.verdicts import _probe_summary

    shutil.copy(draft_dir / "model.safetensors", tmp_path / "model.safetensors")
    cfg = json.loads((draft_dir / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = SHIFTED
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    argv = ["probe", "--draft", str(tmp_path), "--data", str(sample_data / "speculators_v1"), "--candidates",
            "0,3,16", "--engine", "vllm", "--draft-cost", "0.1"]
    rc, out, rcj, doc = _cli(argv, capsys)
    s = doc["served"]
    served = next(r for r in doc["rows"] if r["wiring"] == SHIFTED and r["control"] is None)
    best = doc["best"]
    assert "served by vllm" in next(r for r in doc["rows"] if r["wiring"] == SHIFTED)["tags"]
    assert s["wiring"] == SHIFTED and s["acceptance_length"] == served["acceptance_length"]
    assert s["best_acceptance_length"] == best["acceptance_length"] and best["wiring"] == TRAINED
    assert s["speedup_served"] == pytest.approx(served["acceptance_length"] / 1.3)
    assert s["ratio"] == pytest.approx(served["acceptance_length"] / best["acceptance_length"]) and s["ratio"] < 1
    assert "served by vllm: L3+L16+L28 acceptance length" in " ".join(out.split())
    assert rc == rcj == 1 and any(f["kind"] == "probe_served_beaten" for f in doc["findings"])
    res = probe(tmp_path, sample_data / "speculators_v1", candidates="0,3,16", engine="vllm", draft_cost=0.1)
    assert "served by vllm" in _probe_summary(res)["served"]
    # an engine whose wiring the data cannot feed: the line says why, nothing is invented
    res = probe(draft_dir, sample_data / "speculators_v1" / "data_4.pt", candidates="0,3,16", engine="sglang")
    assert res.served.acceptance_length is None and "not in the data" in " ".join(res.notes)


@pytest.mark.parametrize("bad", [["--steps", "0"], ["--draft-cost", "-1"], ["--draft-cost", "nan"]])
def test_bad_steps_and_cost_are_one_line(bad, draft_dir, sample_data, capsys):
    try:
        rc = main(["probe", "--draft", str(draft_dir), "--data", str(sample_data / "speculators_v1" / "data_4.pt"),
                   *bad])
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err


def test_a_served_wiring_outside_the_capture_says_which_layers_are_missing_and_how_to_capture_them():
    """SGLang ignores a top-level id key and serves its default [L2, L15, L27]; a capture of [embed, L3, L16, L28]
    cannot score that: the cost line names the missing layers and the capture command, never 'not scored' alone."""
    from forensics.analysis.probe import ProbeRow, _served_cost
    from forensics.analysis.probe_wirings import Wiring

    def row(wiring, length, control=None):
        return ProbeRow(wiring, Wiring(tuple(wiring)).label, [], 0.2, [0.1, 0.3], 0.3, 100, 20, [0.2, 0.05, 0.0],
                        length, [length - 0.1, length + 0.1], control)

    rows = [row([0, 3, 16], 1.29), row([3, 16, 28], 1.07), row([0, 3, 16], 1.02, control="shift")]
    cost = _served_cost(rows, [2, 15, 27], "", "sglang", None, 3, 0.05)
    assert cost.acceptance_length is None and cost.best_acceptance_length == 1.29
    assert "no state at L2, L15, L27" in cost.why and "hsf capture --layers 2,15,27" in cost.why
    held = _served_cost(rows, [3, 16, 28], "", "sglang", None, 3, 0.05)  # scored: acceptance both ways, no why
    assert held.acceptance_length == 1.07 and held.why == "" and held.ratio < 1


def test_train_script_holds_out_whole_modules(tmp_path, monkeypatch):
    """The unseen-draft benchmark's split (scripts/train_tiny_draft.py --corpus source --holdout-every 10): a
    module is held out whole (no piece of it in the training documents), the split is a fixed function of the
    name, and the written texts take one piece per module before a second one."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "train_tiny_draft.py"
    spec = importlib.util.spec_from_file_location("train_tiny_draft", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "train_tiny_draft", mod)
    spec.loader.exec_module(mod)
    named = mod.stdlib_sources()
    held, train_docs = mod.split_holdout(named, 10)
    train = [(n, d) for n, d in named if not mod.held_out(n, 10)]
    assert train_docs == [d for _, d in train]
    held_names = {n for n, _ in held}
    assert held and train and not held_names & {n for n, _ in train}
    assert not {d for _, d in held} & set(train_docs)  # no held-out text verbatim in training
    assert 0.03 < len(held_names) / len({n for n, _ in named}) < 0.3  # about one module in ten
    assert [mod.held_out(n, 10) for n in ("ast", "json", "os")] == [mod.held_out(n, 10) for n in ("ast", "json", "os")]
    paths = mod.write_holdout(held, str(tmp_path), len(held_names) + 2)
    texts = [Path(p).read_text() for p in paths]
    firsts = {n: next(d for m, d in held if m == n) for n in held_names}
    assert sorted(texts[:len(held_names)]) == sorted(firsts.values())  # one piece per module first
    assert len(texts) == len(held_names) + 2 and all(t in {d for _, d in held} for t in texts)


# ------------------------------------------------------------------------- a collapsed draft --

@pytest.fixture(scope="module")
def random_draft(draft_dir, tmp_path_factory):
    """A randomly initialised draft of the sample draft's config (linears N(0, 0.02), norms 1, its vocabulary
    maps kept): what a checkpoint whose weights never trained, or never loaded, drafts."""
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("random_draft")
    shutil.copy(draft_dir / "config.json", out / "config.json")
    g = torch.Generator().manual_seed(0)
    sd = {}
    for k, t in load_file(str(draft_dir / "model.safetensors")).items():
        if not t.is_floating_point():
            sd[k] = t
        elif t.ndim == 1:
            sd[k] = torch.ones_like(t)
        else:
            sd[k] = (torch.randn(t.shape, generator=g) * 0.02).to(t.dtype)
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


@pytest.mark.parametrize("data", ["", "data_0.pt", "data_4.pt"])
def test_a_random_draft_is_a_collapse_fail_whatever_its_wiring(random_draft, sample_data, data, capsys):
    """Issue 33: a randomly initialised draft scored CANNOT TELL (exit 3), acceptance 1.00 for every wiring. It is
    a FAIL naming the collapse (exit 1): every candidate's interval and both controls at or below 1.1."""
    from forensics.analysis.probe import COLLAPSED_LENGTH

    res = probe(random_draft, sample_data / "speculators_v1" / data)
    assert res.verdict.value == "fail"
    hit = [f for f in res.findings if f.kind == "draft_collapsed"]
    assert len(hit) == 1 and hit[0].severity.value == "fail" and "collapsed" in hit[0].message
    assert all(r.acceptance_length <= COLLAPSED_LENGTH for r in res.rows)  # the ground truth the rule claims
    assert res.best.acceptance_length_ci[1] <= COLLAPSED_LENGTH
    assert main(["probe", "--draft", str(random_draft), "--data", str(sample_data / "speculators_v1" / data)]) == 1
    assert "collapsed" in capsys.readouterr().out


@pytest.mark.parametrize("data", ["", "data_0.pt", "data_1.pt", "data_2.pt", "data_3.pt", "data_4.pt"])
def test_the_sample_draft_never_collapses(draft_dir, sample_data, data):
    """The working sample draft scores 1.09-1.32 on single ~100-token files against the next token (points near
    the threshold, intervals well above it): never ``draft_collapsed``, whichever file."""
    res = probe(draft_dir, sample_data / "speculators_v1" / data)
    assert not any(f.kind == "draft_collapsed" for f in res.findings)
    assert res.best.acceptance_length_ci[1] > 1.1


def test_the_sample_draft_with_the_verifier_is_not_collapsed(proof):
    assert not any(f.kind == "draft_collapsed" for f in proof.findings) and proof.verdict.value == "pass"
