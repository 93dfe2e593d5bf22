"""Token text from ``--model`` for captures saved without a tokenizer, and a capture of another model's size as one
line (exit 2, ``ModelMismatch``), in ``fingerprint``, ``report``, Python and the explorer.

The model is a tiny random 3-block Llama saved by transformers with the SmolLM2 tokenizer files of
``sample_data/tokenizer`` beside its weights (an HF folder as ``hsf export-model`` writes one); the captures are its
own ``output.hidden_states`` saved the plain-transformers way (ids + a stack, nothing else), in a folder with no
``tokenizer/`` anywhere above it. References: each id decoded by the ``tokenizers`` library on its own, the ground
truth r of each stacked slot, and the lens' top-1 recomputed in float64 from the model's own weights.
"""

from __future__ import annotations

import shutil

import pytest
import torch

import forensics
from forensics.analysis.explore import explore_state
from forensics.cli import main as hsf_main
from forensics.errors import ForensicsError, ModelMismatch

H, L, V = 64, 3, None  # V: the SmolLM2 tokenizer's size
TEXT = "The river carried the boats down to the sea, and the town grew rich on the trade."
RS = (0, 1, 2, 3)


@pytest.fixture(scope="module")
def world(tmp_path_factory, sample_data):
    return make_world(tmp_path_factory.mktemp("tokens"), sample_data)


def make_world(root, sample_data):
    """``(model folder, capture path, ids, wide capture path, tokenizer, model)``."""
    import tokenizers
    import transformers

    folder = root / "tiny-hf"
    tok = tokenizers.Tokenizer.from_file(str(sample_data / "tokenizer" / "tokenizer.json"))
    vocab = tok.get_vocab_size(with_added_tokens=True)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=H, intermediate_size=96, num_hidden_layers=L,
                                   num_attention_heads=4, num_key_value_heads=2)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(sample_data / "tokenizer" / name, folder / name)
    ids = torch.tensor(tok.encode(TEXT).ids, dtype=torch.int64)
    with torch.no_grad():
        hs = model(ids[None], output_hidden_states=True).hidden_states
    data = root / "data"
    data.mkdir()
    cap = data / "capture.pt"
    torch.save({"input_ids": ids, "hidden_states": torch.stack([hs[r][0] for r in RS])}, cap)
    wide = data / "wide.pt"  # another model's width: 48, not 64
    torch.save({"input_ids": ids, "hidden_states": torch.randn(4, len(ids), 48)}, wide)
    return folder, cap, ids, wide, tok, model


def test_tokenizer_folder_of_an_hf_model_loads_with_its_weights_above_the_cap(world, monkeypatch):
    """The size cap is for tokenizer files: a model folder whose weights exceed it still gives its tokenizer
    (before: refused because model.safetensors was measured), and a tokenizer file above it is still refused."""
    import forensics.io.tokenizer as tz

    folder, cap, ids, _, tok, _ = world
    weights = (folder / "model.safetensors").stat().st_size
    tok_json = (folder / "tokenizer.json").stat().st_size
    assert weights > 2 * tok_json
    monkeypatch.setattr(tz, "_CACHE", {})
    monkeypatch.setattr(tz, "MAX_TOKENIZER_FILE_BYTES", (weights + tok_json) // 2)
    st = explore_state(cap, tokenizer=str(folder))
    assert st.tokens == [tok.decode([int(i)]) for i in ids.tolist()]
    monkeypatch.setattr(tz, "_CACHE", {})
    monkeypatch.setattr(tz, "MAX_TOKENIZER_FILE_BYTES", tok_json - 1)
    st = explore_state(cap, tokenizer=str(folder))
    assert st.tokens is None and "tokenizer.json" in st.tokenizer_note and str(tok_json) in st.tokenizer_note


def test_model_tokenizer_of_a_folder_and_of_a_pair(world):
    from forensics.models.target import model_tokenizer

    folder, _, ids, _, tok, model = world
    t, why = model_tokenizer(str(folder))
    assert why is None and [t.decode([i]) for i in ids.tolist()] == [tok.decode([i]) for i in ids.tolist()]
    assert model_tokenizer((model, t)) == (t, None)
    assert model_tokenizer(model)[0] is None  # a bare model object carries no tokenizer: said, not guessed


def _lens_top1(model, h: torch.Tensor, post: bool = False) -> int:
    """lm_head(RMSNorm(h)) in float64 from the model's own weights (no norm for a state already past it)."""
    g = model.model.norm.weight.double()
    eps = model.config.rms_norm_eps
    x = h.double()
    if not post:
        x = g * x / torch.sqrt(x.pow(2).mean() + eps)
    return int(torch.argmax(model.lm_head.weight.double() @ x))


def test_explore_with_model_has_token_text_labels_of_the_exact_fingerprint_and_a_lens_in_words(world):
    folder, cap, ids, _, tok, model = world
    ex = forensics.explore(cap, model=str(folder), background=False)
    st = ex.state()
    assert st.tokens == [tok.decode([i]) for i in ids.tolist()]  # the model's tokenizer, id by id
    fp = ex.fingerprint()
    assert fp.exact is not None  # exact mode ran: the explorer's labels are that object's
    # the ground truth of the stack: HF's last hidden_states entry is after the final norm
    assert st.labels == fp.labels == ["embed", "L1", "L2", "final_post"]
    # nothing claimed and the reference forward named every slot: each slot reads "identified", as the fingerprint's
    # outcome does (a claim verdict otherwise)
    assert fp.outcome == "identified"
    assert ex.meta["labels"] == st.labels and ex.meta["verdicts"] == [
        s.verdict.value if s.verdict is not None else "identified" for s in fp.slots]
    again = forensics.fingerprint(cap, model=str(folder))
    assert again.labels == st.labels
    pos = 5
    lens = ex.logit_lens(pos)
    for r, row in zip(RS[1:], lens["rows"][1:], strict=True):
        want = _lens_top1(model, cap_tensor(cap, r)[pos], post=r == L)
        assert row["ids"][0] == want and row["texts"][0] == tok.decode([want]), r
    assert not any(t.startswith("<id") for row in lens["rows"] for t in row["texts"])


def cap_tensor(cap, r):
    return forensics.load(cap).slots[RS.index(r)].tensor()


def test_a_tokenizer_object_reaches_the_lens(world):
    folder, cap, _, _, tok, model = world

    class Upper:
        def __len__(self):
            return tok.get_vocab_size(with_added_tokens=True)

        def decode(self, ids, skip_special_tokens=False):
            return tok.decode(ids).upper() + "!"

    ex = forensics.explore(cap, model=str(folder), tokenizer=Upper(), background=False)
    assert ex.state().tokens[1] == tok.decode([int(forensics.load(cap).input_ids[1])]).upper() + "!"
    rows = ex.logit_lens(3)["rows"]
    assert all(t.endswith("!") for t in rows[1]["texts"])


def test_report_with_model_shows_the_token_text(world, tmp_path):
    from forensics.analysis.report import report

    folder, cap, ids, _, tok, _ = world
    res = report([str(cap)], model=str(folder))
    f = res.files[0]
    assert f.error is None and f.tokens == [tok.decode([i]) for i in ids.tolist()]
    out = tmp_path / "r.html"
    code = hsf_main(["report", str(cap), "--model", str(folder), "-o", str(out)])
    assert code in (0, 3)
    import html
    import json
    import re

    state = json.loads(html.unescape(re.search(r'data-state="([^"]*)"', out.read_text()).group(1)))
    assert state["states"][0]["tokens"] == [tok.decode([i]) for i in ids.tolist()]  # the static explorer too
    lm = state["states"][0]["lens_map"]  # --model: the report's explorer carries the logit-lens overview
    model = world[5]
    slots = forensics.load(cap).slots
    labels = state["states"][0]["meta"]["labels"]
    for s, c in ((1, 2), (2, 5), (3, 9)):
        assert lm["ids"][s][c] == _lens_top1(model, slots[s].tensor()[c], post=labels[s] == "final_post")


def _one_line(text: str, *needles: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    assert len(lines) == 1, text
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def test_a_capture_of_another_hidden_size_is_one_line_exit_2_everywhere(world, capsys, tmp_path):
    folder, _, _, wide, _, _ = world
    code = hsf_main(["fingerprint", str(wide), "--model", str(folder)])
    err = capsys.readouterr().err
    assert code == 2
    _one_line(err, "48", "64", "wide.pt", "hidden size")
    code = hsf_main(["report", str(wide), "--model", str(folder), "-o", str(tmp_path / "r.html")])
    out = capsys.readouterr()
    assert code == 2 and "Traceback" not in out.err
    _one_line(out.err, "48", "64", "wide.pt")
    from forensics.analysis.report import report

    with pytest.raises(ModelMismatch) as e:  # no input is the model's: one error, as fingerprint raises
        report([str(wide)], model=str(folder))
    assert "48" in str(e.value) and "64" in str(e.value)
    with pytest.raises(ModelMismatch) as e:
        forensics.fingerprint(wide, model=str(folder))
    assert isinstance(e.value, ForensicsError) and "48" in str(e.value) and "64" in str(e.value)
    ex = forensics.explore(wide, model=str(folder), background=False)
    _one_line(ex.status, "48", "64", "wide.pt")


def test_concatenated_aux_states_are_named_as_such_and_the_hint_reads_them(world, capsys, tmp_path):
    """EAGLE-3's aux states saved concatenated, [T, 3·H] of the model's own r = 0, 1, 2: before, "hidden size 192 ≠
    64 ... the capture comes from another model" (wrong: it is this model's). Now one line says 3 × 64 and how to
    re-save; the re-saved file passes its true claim against the model; data only, the count mismatch says it too."""
    folder, _, ids, _, _, model = world
    with torch.no_grad():
        hs = model(ids[None], output_hidden_states=True).hidden_states
    cat = tmp_path / "eagle.pt"
    torch.save({"input_ids": ids, "hidden_states": torch.cat([hs[r][0] for r in (0, 1, 2)], dim=-1)}, cat)
    assert hsf_main(["fingerprint", str(cat), "--model", str(folder)]) == 2
    line = _one_line(capsys.readouterr().err, "192", "3 × 64", "eagle.pt", f"hs.view(T, 3, {H})")
    assert "another model" not in line
    assert hsf_main(["fingerprint", str(cat), "--layers", "0,1,2"]) == 1  # data only: the count cannot match
    assert "3 × 64" in capsys.readouterr().out
    T = len(ids)
    fixed = tmp_path / "eagle_fixed.pt"  # the hint followed
    torch.save({"input_ids": ids, "hidden_states": torch.load(cat)["hidden_states"].view(T, 3, H)}, fixed)
    assert hsf_main(["fingerprint", str(fixed), "--model", str(folder), "--layers", "0,1,2"]) == 0
    fp = forensics.fingerprint(fixed, model=str(folder), layers=[0, 1, 2])
    assert [s.label for s in fp.slots] == ["embed", "L1", "L2"]


def test_a_wider_capture_of_another_model_is_not_called_concatenated(world, sample_data, capsys):
    """A real SmolLM2 capture (width 576) against a model of width 64 said "9 states concatenated on the last
    axis (EAGLE-3's [T, 9·H] aux states)? save them as [T, 9, H]": advice that turns a plain wrong --model into
    garbage. Past EAGLE-3's few states the width is another model's, as it says for any other width."""
    folder = world[0]
    assert hsf_main(["fingerprint", str(sample_data / "speculators_v1" / "data_0.pt"), "--model", str(folder)]) == 2
    line = _one_line(capsys.readouterr().err, "576", "≠ 64", "another model")
    assert "concatenated" not in line and "hs.view" not in line


def test_a_model_of_the_same_shape_that_matches_nothing_is_named_and_lends_no_layer_count(world, tmp_path):
    """--model a random model of the capture's width and vocabulary (5 blocks; the capture's has 3): no slot
    matched, yet r≈ was read against its 5 blocks (`L = 5`, r≈ L1, L2, L4: exact-looking labels of another model)
    and the warning did not say that even the embedding slot, a table lookup, is not this model's."""
    import transformers

    folder, cap, _, _, tok, _ = world
    other = tmp_path / "other"
    torch.manual_seed(1)
    cfg = transformers.LlamaConfig(vocab_size=tok.get_vocab_size(with_added_tokens=True), hidden_size=H,
                                   intermediate_size=96, num_hidden_layers=5, num_attention_heads=4,
                                   num_key_value_heads=2)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(other)
    d = torch.load(cap, weights_only=True)  # r = 0, 1, 2 (its post-norm last slot would pass both models' γ = 1)
    mine = tmp_path / "mine.pt"
    torch.save({"input_ids": d["input_ids"], "hidden_states": d["hidden_states"][:3]}, mine)
    fp = forensics.fingerprint(mine, model=str(other))
    f = next(f for f in fp.findings if f.kind == "no_reference_match")
    assert f.slots == [0, 1, 2] and "not even slot 0" in f.message and "not from this model" in f.message
    assert fp.num_layers is None and all(not str(sf.r_estimate).startswith("L") for sf in fp.slots[1:])
    assert forensics.fingerprint(mine, model=str(folder)).num_layers == L  # its own model: every slot matched


def test_an_encoder_as_the_model_is_one_line_exit_2_not_a_traceback(world, capsys, tmp_path):
    """A BERT folder passed as --model (no final norm: post-LN encoder): before, AttributeError 'BertLMHeadModel'
    object has no attribute 'norm' as a traceback from fingerprint; now one line naming it, exit 2, and report
    raises the same ModelMismatch instead of writing a report headed NO CLAIM."""
    import transformers

    _, cap, _, _, tok, _ = world
    bert = tmp_path / "bert"
    cfg = transformers.BertConfig(vocab_size=tok.get_vocab_size(with_added_tokens=True), hidden_size=H,
                                  num_hidden_layers=2, num_attention_heads=4, intermediate_size=96)
    transformers.BertModel(cfg).save_pretrained(bert)
    capsys.readouterr()  # transformers' save progress
    assert hsf_main(["fingerprint", str(cap), "--model", str(bert)]) == 2
    line = _one_line(capsys.readouterr().err, "bert", "no final norm")
    assert line.startswith(f"hsf fingerprint: error: {bert}: ")  # the line names the folder given as --model
    from forensics.analysis.report import report

    with pytest.raises(ModelMismatch, match="no final norm"):
        report([str(cap)], model=str(bert))
    ex = forensics.explore(cap, model=str(bert), background=False)
    assert "no final norm" in ex.status and "; no logit lens" in repr(ex)  # it said "; logit lens"


def test_ids_outside_the_vocabulary_and_another_layer_count_are_model_mismatches(world, tmp_path, capsys):
    import json

    folder, cap, ids, _, tok, _ = world
    big = tmp_path / "big.pt"
    bad = ids.clone()
    bad[2] = 10 ** 6
    torch.save({"input_ids": bad, "hidden_states": torch.load(cap)["hidden_states"]}, big)
    with pytest.raises(ModelMismatch, match="1000000"):
        forensics.fingerprint(big, model=str(folder))
    d = tmp_path / "declared"
    d.mkdir()
    shutil.copy(cap, d / "capture.pt")
    (d / "capture.json").write_text(json.dumps({"num_layers": 30}))
    assert forensics.load(d / "capture.pt").num_layers == 30  # the generic reader takes capture.json's facts
    code = hsf_main(["fingerprint", str(d / "capture.pt"), "--model", str(folder)])
    assert code == 2
    _one_line(capsys.readouterr().err, "30", str(L), "capture.pt", "layers")


# ----------------------------------------------------------------------------------- honest fixes (item 6)
def _finding(fp, kind):
    return next(f for f in fp.findings if str(f.kind) == kind)


def test_off_by_one_claim_data_only_shows_both_readings_never_one_wrong_list(sample_data):
    """``sample_data/speculators_v1`` is ``[embed, L3, L16, L28]`` (its capture.json). Claimed ids 1,4,17,29 read
    as slots shifted give ``[embed, L1, L4, L17]``, as ids off by one the truth: data alone shows both."""
    from forensics.analysis.fingerprint.core import fingerprint

    truth = [0, 3, 16, 28]
    fp = fingerprint(sample_data / "speculators_v1" / "data_0.pt", layers=[1, 4, 17, 29])
    s = _finding(fp, "shifted")
    assert s.severity.value == "fail" and s.evidence["corrected"] is None  # no single list is offered as the fix
    assert s.evidence["readings"] == {"slots shifted": [0, 1, 4, 17], "ids off by one": truth}
    assert "Corrected list" not in s.message and "--model decides" in s.message
    assert "[embed, L1, L4, L17]" in s.message and "[embed, L3, L16, L28]" in s.message
    assert fp.slots[0].label == "embed" and [sf.label for sf in fp.slots[1:]] == [None, None, None]
    assert "L3" in fp.slots[1].verdict_why and "L1" in fp.slots[1].verdict_why
    # the seed's claim [L3, L16, L28, L30]: only the shifted reading fits (ids - 1 would put L2 on the embedding)
    seed = _finding(fingerprint(sample_data / "speculators_v1" / "data_0.pt", layers=[3, 16, 28, 30]), "shifted")
    assert seed.evidence["corrected"] == truth and "readings" not in seed.evidence


def test_off_by_one_claim_with_the_model_is_the_one_right_list(world):
    from forensics.analysis.fingerprint.core import fingerprint

    folder, cap, *_ = world  # [embed, L1, L2, final_post] of the tiny model
    fp = fingerprint(cap, layers="L1,L2,L3,final_post", model=str(folder))
    s = _finding(fp, "ids_off_by_one")  # every slot one block from its claim the same way: ids, not slots
    assert s.evidence["corrected"] == [0, 1, 2, "final_post"] and "readings" not in s.evidence
    assert "Corrected list: [embed, L1, L2, final_post]" in s.message


def test_no_hint_asks_for_the_model_when_it_was_given(world, tmp_path, capsys):
    folder, cap, *_ = world
    noids = tmp_path / "noids.pt"
    torch.save({"hidden_states": list(torch.load(cap)["hidden_states"])}, noids)
    code = hsf_main(["fingerprint", str(noids), "--model", str(folder), "--expect", "embed,L1,L2,final_post"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 3 and "settle with --ids FILE" in out and "settle with --model" not in out
    code = hsf_main(["fingerprint", str(noids), "--expect", "embed,L1,L2,final_post"])  # without a model it is the hint
    assert code == 3 and "settle with --model" in " ".join(capsys.readouterr().out.split())


def test_exact_headline_states_its_tolerance(world, capsys):
    from forensics.analysis.fingerprint.ladder import LADDER_MATCH_COS, LADDER_MATCH_REL

    folder, cap, *_ = world
    assert hsf_main(["fingerprint", str(cap), "--model", str(folder)]) == 0
    head = " ".join(capsys.readouterr().out.split("\n")[:3])
    head = " ".join(head.split())
    assert head.startswith("IDENTIFIED [embed, L1, L2, final_post]")
    assert f"relative error ≤ {LADDER_MATCH_REL:g}" in head and f"cosine ≥ {LADDER_MATCH_COS:g}" in head


# ----------------------------------------------------------------------------------- to_dataframe (item 9)
def test_fingerprint_dataframe_has_a_row_per_slot_with_independent_values(sample_data):
    from forensics.analysis.fingerprint.core import fingerprint

    path = sample_data / "speculators_v1" / "data_0.pt"
    df = fingerprint(path).to_dataframe()
    cap = forensics.load(path)
    assert list(df["slot"]) == [0, 1, 2, 3] and list(df["label"].isna()) == [False, True, True, True]
    assert list(df["claimed"]) == ["embed", "L3", "L16", "L28"]  # capture.json r
    for i, s in enumerate(cap.slots):
        n = s.tensor().double().norm(dim=-1)
        assert df["tokens"][i] == n.numel() and df["hidden"][i] == s.hidden_size
        assert abs(df["norm_mean"][i] - float(n.mean())) <= 1e-4 * float(n.mean())
        assert abs(df["norm_median"][i] - float(n.median())) <= 1e-2 * float(n.median())
    assert list(df["verdict"]) == ["pass", "cannot tell", "cannot tell", "cannot tell"]


def test_scan_dataframe_has_a_row_per_file(sample_data):
    folder = sample_data / "speculators_v1"
    df = forensics.scan(str(folder), progress=False, workers=0).to_dataframe()
    files = sorted(folder.glob("data_*.pt"))
    assert len(df) == len(files)
    want = {str(f.resolve()): forensics.load(f).num_tokens for f in files}
    got = {str(__import__("pathlib").Path(p).resolve()): n for p, n in zip(df["path"], df["num_tokens"], strict=True)}
    assert got == want and set(df["hidden"]) == {576}
    assert all(list(x) == ["embed", None, None, None] for x in df["labels"])  # data only: L3/L16/L28 undecided


def test_audit_dataframe_has_a_row_per_fc_slice(sample_data):
    import json

    from forensics.analysis.audit.core import audit

    draft = sample_data / "draft_eagle3"
    ids = json.loads((draft / "config.json").read_text())
    res = audit(draft=str(draft), trainer="speculators-v1", engine="vllm", num_layers=30, hidden_size=576)
    df = res.to_dataframe()
    assert list(df["slice"]) == list(range(len(res.slices))) == [0, 1, 2]
    assert list(df["trained_r"]) == [0, 3, 16]  # speculators-v1 reads the draft's ids as r = id (speculators#379)
    assert list(df["trained"]) == ["embed", "L3", "L16"] and set(df["wiring"]) == {res.wiring}
    assert ids  # the config is read (its ids are what the trained column restates)


def test_probe_dataframe_has_a_row_per_wiring_in_rank_order():
    from forensics.analysis.probe import ProbeResult, ProbeRow
    from forensics.findings import Verdict

    def row(label, top1, control=None):
        return ProbeRow(wiring=[0, 3, 16], label=label, tags=["declared"] if label == "a" else [], top1=top1,
                        top1_ci=[top1 - 0.1, top1 + 0.1], topk=top1 + 0.2, n=100, correct=int(top1 * 100),
                        acceptance=[top1], acceptance_length=1 + top1, acceptance_length_ci=[1.0, 2.0],
                        control=control)

    res = ProbeResult(draft={}, rows=[row("a", 0.6), row("b", 0.3), row("c", 0.01, control="shuffled")],
                      target="verifier", target_source="x", embed_source="y", files=["f"], positions=100,
                      num_layers=30, verdict=Verdict.PASS)
    df = res.to_dataframe()
    assert list(df["wiring"]) == ["a", "b", "c"] and list(df["rank"][:2]) == [1, 2] and df["rank"].isna()[2]
    assert list(df["top1"]) == [0.6, 0.3, 0.01] and df["control"][:2].isna().all() and df["control"][2] == "shuffled"
    assert abs(df["top1_low"][0] - 0.5) < 1e-12 and df["tags"][0] == "declared"


def test_to_dataframe_without_pandas_is_one_line_naming_the_extra(sample_data, monkeypatch):
    import sys

    from forensics.analysis.fingerprint.core import fingerprint

    fp = fingerprint(sample_data / "speculators_v1" / "data_0.pt")
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError) as e:
        fp.to_dataframe()
    assert "[dataframe]" in str(e.value) and "\n" not in str(e.value)


def test_lens_overview_is_the_top1_of_every_slot_and_token_in_float64(world):
    folder, cap, ids, _, tok, model = world
    ex = forensics.explore(cap, model=str(folder), background=False)
    m = ex.lens_map
    capture = forensics.load(cap)
    labels = ex.state().labels
    assert m["file"] == 0 and m["positions"] == list(range(len(ids))) and m["num_tokens"] == len(ids)
    agree = total = 0
    for s, slot in enumerate(capture.slots):
        for c, pos in enumerate(m["positions"]):
            want = _lens_top1(model, slot.tensor()[pos], post=labels[s] == "final_post")
            total += 1
            agree += m["ids"][s][c] == want
            if m["ids"][s][c] == want:
                assert m["texts"][s][c] == tok.decode([want])
    assert agree == total  # float32 vs float64 top-1 on a random model: no near-ties at this size
    assert all(0 < p <= 1 for row in m["probs"] for p in row)


@pytest.mark.timeout(120)
def test_a_fifo_named_tokenizer_json_in_a_named_folder_is_refused_not_waited_on(world, tmp_path):
    import os

    from forensics.io.tokenizer import load_tokenizer

    folder, cap, *_ = world
    d = tmp_path / "fifo"
    d.mkdir()
    os.mkfifo(d / "tokenizer.json")
    tok, why = load_tokenizer(str(d), confined=False)
    assert tok is None and "FIFO" in why and "tokenizer.json" in why
    st = explore_state(cap, tokenizer=str(d))
    assert st.tokens is None and "FIFO" in st.tokenizer_note
