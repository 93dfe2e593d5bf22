"""End-to-end regressions: each test failed before the fix it guards (see the commit that added it)."""

from __future__ import annotations

import numpy as np
import pytest

import forensics
from forensics.analysis.fingerprint.rules import order_chain
from forensics.analysis.stats import summarize


def test_order_chain_without_direction_signal_keeps_norm_order(sample_data):
    """A near-tied chain with a zero direction vote fell back to the chain's arbitrary listing, not norm order.

    Real case: a ladder of a raw code snippet, slots [L2, L4, L5, L30] unshuffled; L30 is equally far
    (0.477) from all three, so the chain 2 → 1 → 0 → 3 (L5, L4, L2, L30) beat the true one by 0.2 %,
    its norm τ was 0, and the output read "no direction signal: norm order kept" while listing L5 first.
    Distances are those measured there; the slot statistics are the committed ladder's L2, L4, L5, L30.
    """
    cap = forensics.load(sample_data / "ladder" / "capture_0.safetensors")
    st = summarize(cap)
    slots = [st.slots[i] for i in (2, 4, 5, 30)]
    meds = [s.norm_excl_sinks.median for s in slots]
    assert meds == sorted(meds)  # norms rise with depth here, so norm order is the true order
    D = np.array([[0.000, 0.160, 0.193, 0.477],
                  [0.160, 0.000, 0.127, 0.477],
                  [0.193, 0.127, 0.000, 0.478],
                  [0.477, 0.477, 0.478, 0.000]])
    path, ev = order_chain(D, [0, 1, 2, 3], slots, meds)
    direction = next(e for e in ev if e.signal == "direction")
    if "norm order kept" in direction.verdict:
        assert path == [0, 1, 2, 3], f"says norm order kept but orders {path}"
    else:
        assert path == [0, 1, 2, 3]


def test_audit_fix_does_not_tell_to_write_ids_already_there(tmp_path, capsys):
    """SGLang config with the right ids [-1, 2, 15] for data [embed, L3, L16, L28]: the only problem is the
    embedding-capture patch. The fix printed 'set ... = [-1, 2, 15]', the value already in the file."""
    import json

    from forensics.cli import main

    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 576,
        "num_hidden_layers": 1, "vocab_size": 49152, "draft_vocab_size": 8192, "target_hidden_size": 576,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 2, 15]}}))
    args = ["audit", "--trained-layout", "embed,L3,L16,L28", "--trainer", "speculators-v1", "--draft", str(draft),
            "--engine", "sglang", "--num-layers", "30", "--hidden-size", "576"]
    code = main(args)
    text = capsys.readouterr().out
    assert code == 1 and all(f"{t}" in text for t in ("embed", "L3", "L16"))
    assert "set nested `eagle_config.eagle_aux_hidden_state_layer_ids` = [-1, 2, 15]" not in text
    assert "already sets" in text and "caveat" in text
    main(args + ["--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["fix"]["ids"] == [-1, 2, 15] and doc["fix"]["already_set"] is True
    assert all(s["ok"] for s in doc["slices"])


def test_audit_trained_layout_typo_is_one_line_error(capsys):
    """`hsf audit --trained-layout embed,foo` raised a ValueError traceback instead of exit 2 with one line."""
    from forensics.cli import main

    code = main(["audit", "--trained-layout", "embed,foo", "--trainer", "speculators-v1", "--num-layers", "30"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "'foo'" in err and "--trained-layout" in err


def test_report_rejects_wrong_options_before_writing(sample_data, tmp_path, capsys):
    """`hsf report FILE --draft /nonexistent` (or a bad engine/trainer/version/--layers) printed "4 pass",
    exit 0, and buried the failure in the HTML's Errors section. Now: one line, exit 2, nothing written."""
    from forensics.cli import main

    f = str(sample_data / "speculators_v1" / "data_0.pt")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    out = tmp_path / "r.html"
    for opts, words in [(["--draft", str(tmp_path / "nope")], "--draft"), (["--draft", str(bad)], "not valid JSON"),
                        (["--engine", "tgi"], "tgi"), (["--trainer", "foo"], "foo"),
                        (["--engine", "vllm", "--engine-version", "9.9"], "9.9"), (["--layers", "foo"], "foo"),
                        (["--served", str(tmp_path / "nope")], "--served"),
                        (["--model", str(tmp_path / "nope")], "--model")]:
        code = main(["report", f, "-o", str(out), *opts])
        err = capsys.readouterr().err
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1, (opts, err)
        assert not out.exists(), opts


def test_report_errors_reach_the_terminal_and_exit_code(sample_data, tmp_path, capsys, monkeypatch):
    """An analysis that fails inside the report (here: the audit) is said on stderr and exits 2; 'default'
    as --model means the packaged model, as in `hsf fingerprint --model default`."""
    import forensics.analysis.report as report_mod
    from forensics.cli import main
    from forensics.models.target import default_model_path

    seen = {}
    real = report_mod.report

    def spy(paths, **kw):
        seen.update(kw)
        res = real(paths, **{**kw, "model": None})
        res.errors.append(report_mod.ReportError("audit", "boom"))
        return res

    monkeypatch.setattr(report_mod, "report", spy)
    code = main(["report", str(sample_data / "speculators_v1" / "data_0.pt"), "-o", str(tmp_path / "r.html"),
                 "--model", "default"])
    err = capsys.readouterr().err
    assert str(getattr(seen["model"], "path", seen["model"])) == default_model_path()  # a Target or a path
    assert code == 2 and "hsf report: error: audit: boom" in err


def test_norm_order_fallback_keeps_the_chain_in_its_evidence(sample_data):
    """The fallback to norm order must not rewrite the 'chain' evidence: it shows the seriation path found."""
    cap = forensics.load(sample_data / "ladder" / "capture_0.safetensors")
    st = summarize(cap)
    slots = [st.slots[i] for i in (2, 4, 5, 30)]
    meds = [s.norm_excl_sinks.median for s in slots]
    D = np.array([[0.000, 0.160, 0.193, 0.477],  # cheapest chain: 2 → 1 → 0 → 3 (0.764 vs 0.765)
                  [0.160, 0.000, 0.127, 0.477],
                  [0.193, 0.127, 0.000, 0.478],
                  [0.477, 0.477, 0.478, 0.000]])
    path, ev = order_chain(D, [0, 1, 2, 3], slots, meds)
    chain = next(e for e in ev if e.signal == "chain")
    assert path == [0, 1, 2, 3]  # norm order = true depth order
    assert "chain 2 → 1 → 0 → 3" in chain.verdict or "chain 3 → 0 → 1 → 2" in chain.verdict, chain.verdict
    assert "near-tie" in chain.verdict and chain.verdict.endswith("0 → 1 → 2 → 3")  # and what the norms made of it


def _config_only_draft(folder, **ids):
    import json

    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 576,
        "num_hidden_layers": 1, "vocab_size": 49152, "draft_vocab_size": 8192, "target_hidden_size": 576, **ids}))
    return str(folder)


def test_fingerprint_draft_final_post_binds_to_the_post_norm_slot(sample_data, tmp_path, capsys):
    """SpecForge file [L2, L15, L27, final_post] vs a draft wired for [embed, L3, L16]: the missing embedding
    shifted the labels so the L27 slot was labelled final_post and the real post-norm slot got none."""
    import json

    from forensics.cli import main

    draft = _config_only_draft(tmp_path / "d", eagle_config={"eagle_aux_hidden_state_layer_ids": [-1, 2, 15]})
    # SGLang is an engine, not a trainer: the one --trainer/--engine vocabulary reads these ids with --engine
    main(["fingerprint", str(sample_data / "specforge"), "--draft", draft, "--engine", "sglang", "--json"])
    f = json.loads(capsys.readouterr().out)["files"][0]
    labels = [s["label"] for s in f["slots"]]
    assert f["slots"][3]["role"] == "final_postnorm" and labels[3] == "final_post"
    # data only, the off-by-one list has two readings (slots shifted: L3, L16; ids off by one: L1, L4): neither
    # is named as the fix, so slots 0-1 carry no label (the file is truly [L2, L15, L27, final_post])
    assert labels[2] != "final_post" and labels[:2] == [None, None]
    assert "missing_embedding" in {x["kind"] for x in f["findings"]}


def test_fingerprint_draft_ids_plus_speculators_target_is_no_count_mismatch(sample_data, tmp_path, capsys):
    """A speculators draft's 3 ids vs a speculators-v1 file of 3 fc slots + its target gave COUNT_MISMATCH
    (exit 1) on correctly wired data; the last slot is the trainer's target, expected at r = L."""
    import json

    from forensics.cli import main

    draft = _config_only_draft(tmp_path / "d", eagle_aux_hidden_state_layer_ids=[0, 3, 16])
    code = main(["fingerprint", str(sample_data / "speculators_v1" / "data_0.pt"), "--draft", draft,
                 "--trainer", "speculators", "--json"])
    f = json.loads(capsys.readouterr().out)["files"][0]
    assert "count_mismatch" not in {x["kind"] for x in f["findings"]}
    assert f["expected"] == [0, 3, 16, 30] and code == 3  # L30 vs the data's L28 needs --model: cannot tell


def test_capture_no_progress_silences_the_model_loading_bar(tmp_path, monkeypatch):
    """`hsf capture --no-progress` still printed transformers' "Loading weights" bar on stderr."""
    from transformers.utils import logging as hf_logging

    import forensics.models.target
    from forensics.models.recorder import capture

    seen = []

    def fake_load(model=None):
        seen.append(hf_logging.is_progress_bar_enabled())
        raise RuntimeError("stop after the model load")

    monkeypatch.setattr(forensics.models.target, "load_model", fake_load)  # capture() calls it through the module
    text = tmp_path / "t.txt"
    text.write_text("hello world")
    hf_logging.enable_progress_bar()
    for progress in (False, True):
        try:
            capture(texts=[str(text)], out=str(tmp_path / f"o{progress}"), progress=progress)
        except RuntimeError:
            pass
    assert seen == [False, True] and hf_logging.is_progress_bar_enabled()


@pytest.mark.parametrize("argv", [["fingerprint", "X", "--num-layers", "-5"], ["fingerprint", "X", "--num-layers", "0"],
                                  ["audit", "--trained-layout", "embed,L3", "--num-layers", "0"],
                                  ["audit", "--trained-layout", "embed,L3", "--hidden-size", "-1"]])
def test_num_layers_must_be_positive(argv, sample_data, capsys):
    """--num-layers -5 printed 'L = -5' and r≈ 'L-4'; 0 was silently read as 'unknown'."""
    from forensics.cli import main

    argv = [str(sample_data / "speculators_v1" / "data_0.pt") if a == "X" else a for a in argv]
    code, err = main(argv), capsys.readouterr().err
    assert code == 2 and ("must be >= 1" in err or "expected 1 to" in err) and len(err.strip().splitlines()) == 1


def test_audit_data_deeper_than_target_is_named_not_a_negative_logit_lens():
    """Data [embed, L3, L16, L28] against a target with L = 12 read 'a logit lens -16 block(s) early'."""
    from forensics.analysis.audit.core import audit

    res = audit(data=["embed", "L3", "L16", "L28"], trainer="speculators-v1", num_layers=12)
    kinds = {f.kind: f for f in res.findings}
    assert "layers_beyond_L" in kinds and kinds["layers_beyond_L"].evidence["r"] == [16, 28]
    assert "target_not_final" not in kinds
    assert not any("-16 block" in f.message for f in res.findings)
    ok = audit(data=["embed", "L3", "L16", "L28"], trainer="speculators-v1", num_layers=30)
    ok_kinds = {f.kind for f in ok.findings}
    assert "layers_beyond_L" not in ok_kinds and "target_not_final" in ok_kinds


def test_served_extract_hidden_states_capture_last_slot_is_the_target(sample_data):
    """A served vLLM extract_hidden_states file [L2, L15, L27, L30] holds the aux states plus the appended last
    layer (the target). It was compared as 4 fc inputs: 'slice 3 trained ? served L30', '4 states, fc 3'."""
    from forensics.analysis.audit.core import audit

    res = audit(data=str(sample_data / "speculators_v1" / "data_4.pt"),
                served=str(sample_data / "speculators" / "hidden_states" / "hs_0.safetensors"), num_layers=30)
    assert res.wiring == "mismatch"
    assert [s.served_r for s in res.slices] == [2, 15, 27] and len(res.slices) == 3
    assert not any("states, training fed" in f.message for f in res.findings)
    assert any("appends" in n for n in res.served.notes)


def test_capture_notes_a_layer_listed_twice():
    """`hsf capture --layers 3,3` wrote two identical slots without a word."""
    from forensics.models.recorder import check_layers

    assert any("more than once" in n and "L3" in n for n in check_layers([3, 3, 16], "speculators-v1", 30))
    assert not any("more than once" in n for n in check_layers([0, 3, 16, 28], "speculators-v1", 30))


def _short_chat_specforge(smollm2, tmp_path, question: str, rs: list):
    """A SpecForge file of one short chat captured from the real SmolLM2 (as ``hsf capture`` writes it)."""
    import json

    from forensics.models.recorder import slot_states, tokenize, write_sample

    model, tok = smollm2
    text = tmp_path / "chat.json"
    text.write_text(json.dumps([{"role": "user", "content": question}]))
    sample = tokenize(tok, str(text), chat=True, max_tokens=48)
    assert len(sample.input_ids) <= 48
    path = tmp_path / "data_0.ckpt"
    write_sample("specforge", str(path), sample, slot_states(model, sample.input_ids, rs, "bf16"), rs)
    return forensics.fingerprint(path, layers=rs)


@pytest.mark.parametrize("question", ["Where is Rome?", "Why is the sky blue?"])
def test_short_chat_specforge_final_post_found_without_reordered(question, smollm2, tmp_path):
    """A short chat (≈ 35 tokens with SmolLM2's default system prompt) in the SpecForge layout [L2, L15, L27 |
    final_post]: the system-prompt tokens widened std/mean of the post-norm slot's token norms past 0.10, so
    it was called "early" and a false `reordered` finding came out (exit 1). The robust spread
    (1.4826·MAD/median) gates the tight signature now; this checks the old gate would indeed have failed.
    """
    from forensics.analysis.fingerprint.rules import TIGHT_SPREAD, robust_spread, spread_cv
    from forensics.layers import FINAL_POST

    fp = _short_chat_specforge(smollm2, tmp_path, question, [2, 15, 27, FINAL_POST])
    post = fp.stats.slots[3]
    assert spread_cv(post) > TIGHT_SPREAD >= robust_spread(post)  # the case the std/mean gate missed
    assert fp.slots[3].role == "final_postnorm"
    assert fp.depth_order == [0, 1, 2, 3]
    assert [s.label for s in fp.slots] == [None, None, None, "final_post"]  # L2/L15/L27 undecided: no labels
    assert not [f for f in fp.findings if f.kind in ("reordered", "prenorm", "postnorm")], fp.findings


def test_short_chat_post_norm_identity_needs_no_tight_spread(smollm2, tmp_path):
    """Even the robust spread of this short chat's post-norm slot is wide (0.111 > 0.10); with r = L in the
    file, B = RMSNorm(A) for a fitted γ is exact and decides it (the identity test was gated on the spread)."""
    from forensics.analysis.fingerprint.rules import TIGHT_SPREAD, robust_spread
    from forensics.layers import FINAL_POST

    fp = _short_chat_specforge(smollm2, tmp_path, "What is 2+2?", [2, 15, 30, FINAL_POST])
    assert robust_spread(fp.stats.slots[3]) > TIGHT_SPREAD
    assert (fp.slots[3].role, fp.slots[3].decided_by) == ("final_postnorm", "normalizes")
    assert fp.slots[2].role == "final_prenorm"
    assert [s.label for s in fp.slots] == [None, None, None, "final_post"]  # L unknown: r = L is not confirmed
    assert not [f for f in fp.findings if f.kind in ("reordered", "prenorm", "postnorm")], fp.findings
