"""What a speculative-decoding engineer met in a first hour with `hsf` on captures saved with plain transformers
(each test failed before the fix it guards; the commit that added it says what the user saw)."""

from __future__ import annotations

import pytest
import torch

import forensics
from forensics.cli import main


def _generic_copy(src, dst) -> None:
    """A speculators-v1 sample re-saved the way users save their own capture: ``{input_ids, hidden_states}``
    (no loss_mask, so no format claims anything; the slots declare no r)."""
    d = torch.load(src, weights_only=True)
    torch.save({"input_ids": d["input_ids"], "hidden_states": torch.stack(list(d["hidden_states"]))}, dst)


def test_report_with_a_draft_on_a_capture_without_declared_layers(smollm2, sample_data, tmp_path):
    """``hsf report my_capture.pt --draft D --engine vllm --trainer speculators --model default`` ended in a
    traceback: the probe names a slot without a declared r ``slot0``, which the report's probe panel parsed as an
    r. Then the probe ranked ``slot0+slot1+slot2`` and said the capture "holds no state at embed, L3, L16" (re-capture
    with hsf capture --layers 0,3,16) of a file whose fingerprint, in the same report, named exactly those. The
    headline also said "the wiring audit also finds" with nothing before it."""
    from forensics.views.report.verdicts import _probe_summary

    cap = tmp_path / "capture.pt"
    _generic_copy(sample_data / "speculators_v1" / "data_4.pt", cap)  # [embed, L3, L16, L28]
    draft = sample_data / "draft_eagle3"
    # a slot nobody names stays slot{i}: the panel shows it (a loaded model: the probe runs no fingerprint itself)
    res = forensics.probe(draft, cap, model=smollm2[0], candidates="slot0,slot1,slot2")
    assert _probe_summary(res)["r"] == "[slot0, slot1, slot2]"
    rep = forensics.report([str(cap)], model="default", draft=str(draft), engine="vllm", trainer="speculators")
    ctx = rep.context
    assert ctx["verdicts"]["probe"]["r"] == "[embed, L3, L16]"  # the report's exact fingerprint names the slots
    assert ctx["verdicts"]["probe"]["served"].startswith("served by vllm: embed+L3+L16 acceptance length")
    assert rep.result.audit.wiring == "match"
    assert forensics.probe(draft, cap, model="default").best.label == "embed+L3+L16"  # hsf probe --model default
    head = ctx["verdicts"]["sentence"]
    assert "also finds" not in head
    assert head.startswith("FAIL: the draft is served the layers it was trained on, but the wiring audit finds")
    # the Verdicts block's first line: it read "FAIL: The draft is served the layers it was trained on." alone
    first = ctx["verdicts"]["headline"][0]
    assert first.startswith("FAIL: The draft is served the layers it was trained on, but the wiring audit finds")
    assert "the training target is not the last block" in first


def test_key_numbers_say_audited_only_when_an_audit_ran(sample_data):
    """A report without --draft called its first failing file "(audited)" in the Key numbers panel."""
    data = str(sample_data / "speculators_v1" / "data_0.pt")
    rep = forensics.report([data], layers="3,16,28,30")  # the shifted list: FAIL, and no audit ran
    assert rep.result.audit is None and rep.verdict() == "fail"
    assert "(audited)" not in rep.html and "data_0.pt (fails)" in rep.html


def test_fingerprint_says_saved_layer_ids_are_no_claim(sample_data, tmp_path, capsys):
    """``torch.save({"input_ids", "hidden_states": [...], "layer_ids": [0, 4, 17, 29]})``: `hsf inspect` said the ids
    are not read as a claim, but `hsf fingerprint` printed only "NO CLAIM: nothing is claimed", as if the file said
    nothing; the engineer who saved the ids could not tell they were ignored, nor how to check them."""
    d = torch.load(sample_data / "speculators_v1" / "data_0.pt", weights_only=True)
    cap = tmp_path / "mine.pt"
    torch.save({"input_ids": d["input_ids"], "hidden_states": list(d["hidden_states"]), "layer_ids": [0, 4, 17, 29]},
               cap)
    assert main(["fingerprint", str(cap)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("NO CLAIM") and "note: layer_ids = [0, 4, 17, 29] is shown, not used" in out
    assert main(["fingerprint", str(cap), "--layers", "0,4,17,29"]) == 3  # the hint followed: the claim is checked
    out = capsys.readouterr().out
    assert "claims from user: --layers 0,4,17,29" in " ".join(out.split()) and "layer_ids =" not in out


def test_a_short_capture_does_not_blame_a_working_draft(sample_data):
    """The sample draft, which wins clearly on all of sample_data/speculators_v1 (README: PASS), probed on one
    short file (≈ 90 positions) was told "the draft, not the wiring, is the problem": an engineer would throw away
    a good draft. On < MIN_POSITIONS positions the finding says that too few samples do the same."""
    from forensics.analysis.probe import MIN_POSITIONS

    res = forensics.probe(sample_data / "draft_eagle3", sample_data / "speculators_v1" / "data_3.pt")
    near = [f for f in res.findings if f.kind == "probe_near_controls"]
    assert res.best.n < MIN_POSITIONS and near and res.verdict.value == "cannot tell"
    assert "too few samples" in near[0].message and "add samples" in near[0].message


def test_probe_without_an_embedding_source_does_not_deny_the_embedding_slot(sample_data, tmp_path):
    """`hsf report mine.pt --draft D` on a capture whose slot 0 the fingerprint names `embed` (duplicate rows) said
    "the data has no r=0 slot": false on its face. The probe reads declared layers only, and now says so."""
    cap = tmp_path / "capture.pt"
    _generic_copy(sample_data / "speculators_v1" / "data_4.pt", cap)
    assert forensics.fingerprint(cap).slots[0].label == "embed"
    with pytest.raises(forensics.ForensicsError) as e:
        forensics.probe(sample_data / "draft_eagle3", cap)
    assert "has no r=0 slot" not in str(e.value) and "declared r = 0" in str(e.value) and "--model" in str(e.value)


def test_audit_note_agrees_in_number(sample_data, capsys):
    """"1 other problem above still need fixing": one problem needs fixing."""
    argv = ["audit", "--trained-layout", "embed,L3,L16,L28", "--draft", str(sample_data / "draft_eagle3"), "--engine",
            "vllm", "--num-layers", "30", "--hidden-size", "576", "--trainer", "speculators"]
    assert main(argv) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "the wiring matches, but 1 other problem above still needs fixing" in out


def test_a_speculators_file_without_its_layer_count_says_its_format_claim_is_unchecked(sample_data, tmp_path,
                                                                                        capsys):
    """My own speculators-style file ``{input_ids, hidden_states: [L2, L15, L27], loss_mask}`` read "NO CLAIM:
    nothing is claimed", and the same file with --model failed on a claim (the format's: the last slot is the
    target, r = L). The data-only headline now names that claim and what checks it; the hint followed checks it."""
    import shutil

    shutil.copy(sample_data / "speculators_v1" / "data_0.pt", tmp_path / "data_0.pt")  # no sidecar beside it
    assert main(["fingerprint", str(tmp_path / "data_0.pt")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "nothing is claimed" not in out
    assert "claims its last slot is the training target" in out and "pass --model or --num-layers" in out
    assert main(["fingerprint", str(tmp_path / "data_0.pt"), "--num-layers", "30"]) == 3  # the claim, now checked
    assert "claimed [L30]" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("saved", ["bare", "dict"])
def test_a_token_id_file_in_the_capture_folder_says_what_it_is(saved, tmp_path, capsys):
    """The README's `--ids ids.pt` file, kept beside the captures, made `hsf report folder/` FAIL with "1 input
    could not be read: no floating-point hidden-state tensors found": the one line now says it is a file of token
    ids and where it goes."""
    ids = torch.arange(40)
    torch.save(ids if saved == "bare" else {"input_ids": ids}, tmp_path / "ids.pt")
    assert main(["inspect", str(tmp_path / "ids.pt")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "a file of token ids?" in err and "--ids FILE" in err


def test_a_report_whose_audit_could_not_run_says_so_on_its_first_screen(sample_data, tmp_path):
    """The README's `hsf report data/ --draft D --engine sglang --engine-version pre-25454 --target-config C` on my
    own captures: the audit (no --trainer) and the probe (no embedding) failed, and the header read "NO CLAIM: 2
    files declare no slot identity" — the errors sat under a nav link at the bottom (exit 2 only)."""
    cap = tmp_path / "capture.pt"
    _generic_copy(sample_data / "speculators_v1" / "data_4.pt", cap)
    rep = forensics.report([str(cap)], draft=str(sample_data / "draft_eagle3"), engine="sglang")
    assert {e.where for e in rep.result.errors} == {"audit", "draft probe"}
    v = rep.context["verdicts"]
    assert v["sentence"].endswith("the wiring audit and the draft probe could not run (errors below).")
    assert v["headline"][1].startswith("The wiring audit could not run: the trainer is needed")
    assert v["headline"][2].startswith("The draft probe could not run: ")
    assert rep.exit_code() == 2


def test_a_one_slot_capture_is_one_slot(sample_data, tmp_path, capsys):
    """My EAGLE-3 `cat([L2, L15, L27])` file: "hidden 1728, 1 slots" in fingerprint and inspect."""
    d = torch.load(sample_data / "speculators_v1" / "data_0.pt", weights_only=True)
    torch.save({"input_ids": d["input_ids"], "hidden_states": d["hidden_states"][1]}, tmp_path / "one.pt")
    for cmd in ("fingerprint", "inspect"):
        main([cmd, str(tmp_path / "one.pt")])
        out = capsys.readouterr().out
        assert "1 slot," in out and "1 slots" not in out, out


def test_the_reports_no_token_ids_line_keeps_its_hint():
    """`hsf report caps/ --model default` over my `torch.save(out.hidden_states)` file said "with --model, exact mode
    cannot run: the capture has no token ids." — the hint "(--ids, --text)" was cut as an aside by the report's
    plain words, and --ids takes one capture file only (a folder with --ids is refused)."""
    from forensics.findings import FindingKind
    from forensics.views.report.verdicts import plain

    said = plain(FindingKind.NO_TOKEN_IDS)
    assert "--ids FILE" in said and "one capture file" in said and "save input_ids" in said
