"""Below the row (issue 33): a slot that is a block's attention/MLP output or the residual after attention
(``not_residual``), and rows computed without the earlier context (``context_lost``).

The captures are made here with forward hooks written independently of ``forensics.models.target`` (the ground
truth), from a tiny random-init Llama (exact mode) and from the real SmolLM2 (the data-only signs need its
token-0 sink)."""

from __future__ import annotations

import pytest
import torch

from forensics.analysis.context import check_context, sequence_starts
from forensics.analysis.fingerprint.core import fingerprint
from forensics.analysis.stats import summarize
from forensics.findings import FindingKind, Verdict

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM(cfg).eval()


def _states(model, ids: torch.Tensor) -> dict:
    """Every residual r and, per 1-based block b, its attention output, MLP output and residual after attention,
    captured with hooks on the modules themselves (not through forensics)."""
    got: dict = {}
    hooks = []
    for i, blk in enumerate(model.model.layers):
        b = i + 1
        hooks.append(blk.self_attn.register_forward_hook(
            lambda m, a, o, b=b: got.__setitem__(("attn", b), o[0][0].detach().clone())))
        hooks.append(blk.mlp.register_forward_hook(
            lambda m, a, o, b=b: got.__setitem__(("mlp", b), o[0].detach().clone())))
        hooks.append(blk.register_forward_hook(
            lambda m, a, o, b=b: got.__setitem__(("res", b), (o[0] if isinstance(o, tuple) else o)[0].detach())))
    try:
        with torch.no_grad():
            out = model(ids.reshape(1, -1), output_hidden_states=True, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    got[("res", 0)] = out.hidden_states[0][0]
    for b in range(1, len(model.model.layers) + 1):  # the residual after attention = block input + attention out
        got[("mid", b)] = got[("res", b - 1)] + got[("attn", b)]
        assert torch.allclose(got[("res", b)], got[("mid", b)] + got[("mlp", b)], atol=1e-4)
    return got


@pytest.fixture(scope="module")
def tiny():
    model = _tiny_llama()
    ids = torch.randint(0, 97, (80,), generator=torch.Generator().manual_seed(1))
    return model, ids, _states(model, ids)


def _kinds(fp, kind):
    return [f for f in fp.findings if f.kind == kind]


@pytest.mark.parametrize("what", ["mlp", "attn", "mid"])
def test_exact_mode_names_the_sub_layer_a_slot_holds(tiny, what):
    model, ids, S = tiny
    slots = [S[("res", 1)], S[(what, 2)], S[("res", 3)]]
    fp = fingerprint(slots, layers=[1, 2, 3], model=model, input_ids=ids)
    nr = _kinds(fp, FindingKind.NOT_RESIDUAL)
    assert len(nr) == 1 and nr[0].slots == [1] and nr[0].is_fail
    assert nr[0].evidence["what"] == [what] and nr[0].evidence["block"] == [2]
    hooked = {"mlp": "model.layers[1].mlp", "attn": "model.layers[1].self_attn", "mid": "inside model.layers[1]"}
    assert hooked[what] in nr[0].message  # the module _states hooked (layers[1] is block 2), by the user's own name
    assert fp.slots[1].verdict is Verdict.FAIL and fp.verdict is Verdict.FAIL
    assert [fp.slots[i].verdict for i in (0, 2)] == [Verdict.PASS, Verdict.PASS]
    assert not _kinds(fp, FindingKind.NO_REFERENCE_MATCH)


def test_exact_mode_every_slot_an_mlp_output(tiny):
    model, ids, S = tiny
    fp = fingerprint([S[("mlp", b)] for b in (1, 2, 4)], layers=[1, 2, 4], model=model, input_ids=ids)
    nr = _kinds(fp, FindingKind.NOT_RESIDUAL)
    assert nr and nr[0].slots == [0, 1, 2] and nr[0].evidence["block"] == [1, 2, 4]
    assert all(s.verdict is Verdict.FAIL for s in fp.slots)


def test_clean_residual_capture_is_not_flagged_with_the_model(tiny):
    model, ids, S = tiny
    fp = fingerprint([S[("res", r)] for r in (0, 1, 2, 3)], layers=[0, 1, 2, 3], model=model, input_ids=ids)
    assert not _kinds(fp, FindingKind.NOT_RESIDUAL) and not _kinds(fp, FindingKind.CONTEXT_LOST)
    assert fp.verdict is Verdict.PASS


def test_a_slot_matching_nothing_does_not_advise_the_model_it_was_given(tiny):
    model, ids, S = tiny
    noise = torch.randn(S[("res", 2)].shape, generator=torch.Generator().manual_seed(3)) * 5
    fp = fingerprint([S[("res", 1)], noise, S[("res", 3)]], layers=[1, 2, 3], model=model, input_ids=ids)
    assert fp.slots[1].verdict is Verdict.CANNOT_TELL
    assert "--model HF_FOLDER" not in (fp.slots[1].settle or "") and "ran" in fp.slots[1].settle


@pytest.mark.parametrize("p", [32, 50])
def test_context_lost_rows_named_with_the_model(tiny, p):
    model, ids, S = tiny
    alone = _states(model, ids[p:])
    rs = [0, 1, 2, 4]
    slots = [torch.cat([S[("res", r)][:p], alone[("res", r)]]) for r in rs]
    fp = fingerprint(slots, layers=rs, model=model, input_ids=ids)
    cl = _kinds(fp, FindingKind.CONTEXT_LOST)
    assert len(cl) == 1 and cl[0].is_fail
    assert cl[0].evidence["rows"] == [[p, int(ids.numel()) - 1]] and cl[0].evidence["by"] == "reference"
    assert 0 not in cl[0].slots  # the embedding output is context-free: it proves nothing
    assert not _kinds(fp, FindingKind.FOREIGN_ROWS)


def test_context_check_on_clean_rows_tries_chunk_boundaries_and_finds_nothing(tiny):
    model, ids, S = tiny
    from forensics.io.formats import as_capture

    cap = as_capture([S[("res", r)] for r in (1, 2)], input_ids=ids)
    ts = [s.tensor() for s in cap.slots]
    rep = check_context(cap, ts, summarize(cap).slots, None, net=model)
    assert rep.lost_from is None and not rep.findings


# ------------------------------------------------------------------------ data only, on real SmolLM2 rows
TEXT = ("The night train to the coast was late again, and the station master walked the platform with a lantern, "
        "counting the crates of oranges stacked by the fence. A boy with a violin case asked him the time twice. "
        "When the engine finally came round the bend, its whistle scattered the pigeons from the roof, and the "
        "passengers picked up their bags without a word. ") * 2


@pytest.fixture(scope="module")
def smol(smollm2):
    model, tok = smollm2
    ids = tok(TEXT, return_tensors="pt").input_ids[0][:160]
    return model, ids, _states(model, ids)


@pytest.mark.model
@pytest.mark.parametrize("what", ["mlp", "attn"])
def test_data_only_one_sub_layer_slot_between_residual_slots_fails(smol, what):
    model, ids, S = smol
    fp = fingerprint([S[("res", 3)], S[(what, 16)], S[("res", 28)]], layers=[3, 16, 28], input_ids=ids)
    nr = _kinds(fp, FindingKind.NOT_RESIDUAL)
    assert nr and nr[0].slots == [1] and fp.slots[1].verdict is Verdict.FAIL
    assert fp.slots[0].verdict is not Verdict.FAIL and fp.slots[2].verdict is not Verdict.FAIL


@pytest.mark.model
def test_data_only_mlp_outputs_fail_on_their_empty_token0(smol):
    model, ids, S = smol
    fp = fingerprint([S[("mlp", b)] for b in (3, 16, 28)], layers=[3, 16, 28], input_ids=ids)
    nr = _kinds(fp, FindingKind.NOT_RESIDUAL)
    assert nr and 1 in nr[0].slots and fp.verdict is Verdict.FAIL
    assert fp.stats.slots[1].first_ratio < 0.2  # the sign itself, on the real MLP output


@pytest.mark.model
def test_data_only_clean_residual_slots_never_fail(smol):
    model, ids, S = smol
    for rs in ([3, 16, 28], [8, 10, 12], [9, 11, 13], [0, 10, 11, 30], [2, 5, 29]):
        fp = fingerprint([S[("res", r)] for r in rs], layers=rs, input_ids=ids)
        assert not _kinds(fp, FindingKind.NOT_RESIDUAL), rs  # r = 10, 11 lose the sink: their norms still grow
        assert not _kinds(fp, FindingKind.CONTEXT_LOST), rs


@pytest.mark.model
def test_data_only_sequence_start_named(smol):
    model, ids, S = smol
    p = 100
    alone = _states(model, ids[p:])
    rs = [0, 3, 16, 28]
    slots = [torch.cat([S[("res", r)][:p], alone[("res", r)]]) for r in rs]
    fp = fingerprint(slots, layers=rs, input_ids=ids)
    cl = _kinds(fp, FindingKind.CONTEXT_LOST)
    assert len(cl) == 1 and cl[0].severity.value == "warn" and cl[0].evidence["start"] == p
    assert cl[0].evidence["rows"] == [[p, int(ids.numel()) - 1]]
    from forensics.io.formats import as_capture

    cap = as_capture([S[("res", r)] for r in rs], input_ids=ids)
    assert sequence_starts(summarize(cap).slots, [s.tensor() for s in cap.slots])[0] == []
    fp = fingerprint(slots, layers=rs, input_ids=ids, model=model)
    cl = _kinds(fp, FindingKind.CONTEXT_LOST)
    assert len(cl) == 1 and cl[0].is_fail and cl[0].evidence["rows"] == [[p, int(ids.numel()) - 1]]


# ------------------------------------------ one finding per cause; the scan's row findings are the fingerprint's
NEWLINE_TEXT = ("The committee met on Tuesday to review the budget.\nEveryone agreed that the library needed new "
                "shelves, and the park needed benches. Then they went home.")


@pytest.mark.model
def test_sub_layer_outputs_are_not_also_told_as_a_lost_context(smollm2):
    """MLP outputs of blocks 3, 16, 28: block 3's MLP writes token 0's massive activation on the row after the
    newline too, which the data-only sequence-start check reads as a second sequence. The file's not_residual FAIL
    says what the slots are; the context_lost WARN, whose premise (the residual stream carries the sink) that
    finding refutes, is not said beside it."""
    model, tok = smollm2
    ids = tok(NEWLINE_TEXT, return_tensors="pt").input_ids[0]
    S = _states(model, ids)
    mlp = [S[("mlp", b)] for b in (3, 16, 28)]
    from forensics.io.formats import as_capture

    cap = as_capture(mlp, input_ids=ids)
    alone = check_context(cap, [s.tensor() for s in cap.slots], summarize(cap).slots, None)
    assert [f.kind for f in alone.findings] == [FindingKind.CONTEXT_LOST]  # the data-only check alone fires
    fp = fingerprint(mlp, layers=[3, 16, 28], input_ids=ids)
    assert _kinds(fp, FindingKind.NOT_RESIDUAL) and fp.verdict is Verdict.FAIL
    assert not _kinds(fp, FindingKind.CONTEXT_LOST)
    # no slot is a residual state: none is labelled with its claimed layer, decided or not (walk: L3 / L28 were
    # shown as labels under CANNOT TELL), while the claims stay the claims
    assert fp.labels == [None, None, None] and [s.claim.label for s in fp.slots] == ["L3", "L16", "L28"]
    # no claim: block 16's MLP output has a nearly empty token-0 row (no residual state has one), so the premise
    # of the data-only sequence start is not established there either
    fp = fingerprint(mlp, input_ids=ids)
    assert fp.stats.slots[1].first_ratio < 0.2 and not _kinds(fp, FindingKind.CONTEXT_LOST)
    # residual slots of the same text: no sub-layer output, and no sequence start either
    fp = fingerprint([S[("res", r)] for r in (3, 16, 28)], layers=[3, 16, 28], input_ids=ids)
    assert not _kinds(fp, FindingKind.NOT_RESIDUAL) and not _kinds(fp, FindingKind.CONTEXT_LOST)



@pytest.mark.model
def test_scan_says_what_the_fingerprint_says_of_sub_layer_outputs(smollm2, tmp_path):
    """``hsf scan --fingerprint none`` reads the same premise as the fingerprint: the MLP outputs of blocks 3, 16,
    28 (token 0's row nearly empty in block 16's) carry no data-only context_lost in either (the scan said it)."""
    import forensics

    model, tok = smollm2
    ids = tok(NEWLINE_TEXT, return_tensors="pt").input_ids[0]
    S = _states(model, ids)
    torch.save({"input_ids": ids, "hidden_states": [S[("mlp", b)] for b in (3, 16, 28)]}, tmp_path / "mlp.pt")
    row = forensics.scan(tmp_path, workers=0, fingerprint="none", progress=False).rows[0]
    fp = fingerprint(str(tmp_path / "mlp.pt"))
    assert not _kinds(fp, FindingKind.CONTEXT_LOST)
    assert "context_lost" not in [f["kind"] for f in row["findings"]]


@pytest.mark.model
def test_scan_rows_carry_the_fingerprints_data_only_context_finding(smol, tmp_path):
    """Two sequences packed into one sample (rows 100.. computed alone) and a clean one: every file's findings in
    ``hsf scan`` without a fingerprint are the data-only fingerprint's (context_lost included), read in one pass."""
    import forensics

    model, ids, S = smol
    p, rs = 100, [0, 3, 16, 28]
    alone = _states(model, ids[p:])
    packed = torch.stack([torch.cat([S[("res", r)][:p], alone[("res", r)]]) for r in rs])
    torch.save({"input_ids": ids, "hidden_states": packed}, tmp_path / "packed.pt")
    torch.save({"input_ids": ids, "hidden_states": torch.stack([S[("res", r)] for r in rs])}, tmp_path / "clean.pt")
    res = forensics.scan(tmp_path, workers=0, fingerprint="none", progress=False)
    by = {r["path"].rsplit("/", 1)[-1]: r for r in res.rows}
    for name in ("packed.pt", "clean.pt"):
        fp = fingerprint(str(tmp_path / name))
        assert sorted(f["kind"] for f in by[name]["findings"]) == sorted(f.kind.value for f in fp.findings), name
    cl = [f for f in by["packed.pt"]["findings"] if f["kind"] == "context_lost"]
    assert len(cl) == 1 and cl[0]["severity"] == "warn" and cl[0]["evidence"]["start"] == p


@pytest.mark.model
def test_concatenated_aux_states_are_named_data_only(smol):
    """EAGLE-3's aux states saved side by side, [T, 3·H] of SmolLM2's own L3, L16, L28 (hooked, not through
    forensics): data only, the one slot is named as 3 states of width 576 (its massive dims repeat every 576) and
    the re-save it names reads as the 3 states; no residual slot, nor the three of them stacked, is so named."""
    _, ids, S = smol
    res = [S[("res", r)] for r in (3, 16, 28)]
    fp = fingerprint([torch.cat(res, dim=-1)], input_ids=ids)
    cc = _kinds(fp, FindingKind.CONCATENATED)
    assert len(cc) == 1 and cc[0].evidence["k"] == 3 and cc[0].evidence["hidden_size"] == 576
    assert "hs.view(T, 3, 576)" in cc[0].message
    T = len(ids)
    back = torch.cat(res, dim=-1).view(T, 3, 576)
    assert all(torch.equal(back[:, i], res[i]) for i in range(3))  # the hint's re-save is the three states
    # one layer claimed on it (walk: "claimed [L16] are consistent with the data" above the WARN): the slot is 3
    # states, so the verdict is not PASS, no label is given, and the headline does not call the claim consistent
    from forensics.views.fingerprint import headline

    fp = fingerprint([torch.cat(res, dim=-1)], layers=[16], input_ids=ids)
    assert fp.slots[0].verdict is Verdict.CANNOT_TELL and fp.labels == [None]
    assert "side by side" in fp.slots[0].verdict_why and "hs.view(T, 3, 576)" in fp.slots[0].settle
    assert "consistent" not in headline(fp) and "side by side" in headline(fp)
    fp = fingerprint([S[("res", r)] for r in (0, 3, 16, 28)], input_ids=ids)
    assert not _kinds(fp, FindingKind.CONCATENATED)
