"""Verdicts you can trust: the seed's shifted list is FAIL in every command, and one severity per finding everywhere.

Real SmolLM2 data: ``sample_data/speculators_v1`` holds ``[embed, L3, L16, L28]`` (ground truth in its
``capture.json``). The seed's claim is the served ``[L3, L16, L28, L30]``, or SGLang reading ids
``[2, 15, 27]`` (+1: ``[L3, L16, L28]``) for a draft trained on ``[embed, L3, L16]``. The Kimi-shaped synthetic
sample (``forensics.io.synth.kimi_like``) is ``[embed, L3, L31, L59]`` against ``[L3, L31, L59, L61]``.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

from forensics.analysis.fingerprint.core import fingerprint
from forensics.cli import main
from forensics.findings import EXIT_BAD_INPUT, EXIT_CANNOT_TELL, EXIT_FAIL, EXIT_OK, Finding, Severity, exit_code

SEED_CLAIM = "3,16,28,30"
TRUTH = [0, 3, 16, 28]  # sample_data/speculators_v1/capture.json "r"


def test_exit_code_table():
    fail, warn = Finding("shifted", Severity.FAIL), Finding("few_tokens", Severity.WARN)
    assert exit_code([]) == EXIT_OK == 0
    assert exit_code([warn]) == 0 and exit_code([warn], fail_on="warn") == EXIT_FAIL == 1
    assert exit_code([fail, warn], verdicts=["cannot tell"]) == 1
    assert exit_code([warn], verdicts=["pass", "cannot tell"]) == EXIT_CANNOT_TELL == 3
    assert exit_code([fail], unreadable=True) == EXIT_BAD_INPUT == 2
    assert exit_code([{"severity": "fail"}]) == 1  # dicts (JSON rows) read the same way
    with pytest.raises(ValueError):
        Finding("shifted", "error")  # the old audit word is not a severity


def _shifted(findings: list[dict]) -> dict:
    return next(f for f in findings if f["kind"] == "shifted")


@pytest.mark.parametrize("i", [0, 4])
def test_seed_claim_is_fail_in_fingerprint(sample_data, capsys, i):
    path = str(sample_data / "speculators_v1" / f"data_{i}.pt")
    assert main(["fingerprint", path, "--layers", SEED_CLAIM, "--json"]) == 1
    f = json.loads(capsys.readouterr().out)["files"][0]
    s = _shifted(f["findings"])
    assert s["severity"] == "fail" and s["evidence"]["corrected"] == TRUTH
    assert "Kimi-K2.5 EAGLE-3 incident" in s["message"]
    assert f["verdict"] == "fail" and f["slots"][0]["verdict"] == "fail"
    # never the claimed label where the evidence contradicts it: slot 0 is the embedding, not L3
    assert f["slots"][0]["label"] == "embed"
    assert main(["fingerprint", path, "--layers", SEED_CLAIM]) == 1
    assert capsys.readouterr().out.startswith("FAIL: shifted")


def test_kimi_like_claim_is_fail(tmp_path, capsys):
    from forensics.io.synth import kimi_like, write_speculators_v1

    path = write_speculators_v1(kimi_like(tokens=1281, hidden=512), tmp_path / "data_0.pt")
    assert main(["fingerprint", path, "--layers", "3,31,59,61", "--json"]) == 1
    s = _shifted(json.loads(capsys.readouterr().out)["files"][0]["findings"])
    assert s["evidence"]["corrected"] == [0, 3, 31, 59] and s["severity"] == "fail"


def _sglang_draft(folder, ids=(2, 15, 27)):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 576,
        "num_hidden_layers": 1, "vocab_size": 49152, "draft_vocab_size": 2048, "target_hidden_size": 576,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(ids), "use_aux_hidden_state": True}}))
    return str(folder)


def test_one_reading_of_a_speculators_draft(sample_data, capsys):
    """``--trainer speculators-v1`` reads the draft's ids [0, 3, 16] as r = id (speculators#379) in fingerprint,
    audit and probe alike (fingerprint used to read them as id + 1: [L1, L4, L17])."""
    from forensics.analysis.audit.core import audit

    draft = str(sample_data / "draft_eagle3")
    data = str(sample_data / "speculators_v1" / "data_0.pt")
    main(["fingerprint", data, "--draft", draft, "--trainer", "speculators-v1", "--json"])
    f = json.loads(capsys.readouterr().out)["files"][0]
    assert f["expected"] == [0, 3, 16, 30] and f["claims"]["source"] == "draft config"
    res = audit(draft=draft, trainer="speculators-v1", engine="vllm", num_layers=30, hidden_size=576)
    assert res.trained.fc_r == [0, 3, 16]
    assert main(["fingerprint", data, "--draft", draft, "--trainer", "sglang"]) == 2  # an engine, not a trainer
    assert "invalid choice" in capsys.readouterr().err


def test_seed_wiring_is_fail_in_audit(sample_data, tmp_path, capsys):
    """SGLang +1 on ids [2, 15, 27] serves [L3, L16, L28] to a draft trained on [embed, L3, L16]."""
    draft = _sglang_draft(tmp_path / "d")
    code = main(["audit", "--data", str(sample_data / "speculators_v1"), "--draft", draft, "--engine", "sglang",
                 "--num-layers", "30", "--hidden-size", "576", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["wiring"] == "mismatch"
    s = _shifted(doc["findings"])
    assert s["severity"] == "fail" and s["evidence"]["served"] == [3, 16, 28]
    assert "Kimi-K2.5 EAGLE-3 incident" in s["message"]
    # data-only: slice 0 (embed) is measured, slices 1–2 are only declared: no fix list rests on them
    assert [sl["ok"] for sl in doc["slices"]] == [False, None, None]
    assert doc["fix"] is None and "--model" in doc["settle"]


def test_seed_claim_is_fail_in_report_headline(sample_data, tmp_path):
    from forensics.views.report.core import report

    rep = report(str(sample_data / "speculators_v1" / "data_0.pt"), layers=SEED_CLAIM)
    head = rep.context["verdicts"]["headline"]
    assert head[0].startswith("FAIL:") and "shifted" in head[0]
    assert rep.exit_code() == 1
    assert re.search(r'class="badge b-fail">fail</span> <b>shifted</b>', rep.html)


def test_seed_claim_is_a_dataset_wide_fail_in_scan(sample_data, capsys):
    code = main(["scan", str(sample_data / "speculators_v1"), "--layers", SEED_CLAIM, "--workers", "0",
                 "--fingerprint", "all", "--no-progress", "--json"])
    doc = json.loads(capsys.readouterr().out)
    wide = {d["kind"]: d for d in doc["summary"]["dataset_findings"]}
    assert code == 1 and wide["shifted"]["severity"] == "fail" and wide["shifted"]["files"] == 5


def test_declared_truth_data_only_is_cannot_tell_not_pass(sample_data):
    """Data alone confirms the embedding; L3/L16/L28 are consistent but not proven: CANNOT TELL, never a PASS."""
    fp = fingerprint(sample_data / "speculators_v1" / "data_1.pt")
    assert [s.verdict.value for s in fp.slots] == ["pass", "cannot tell", "cannot tell", "cannot tell"]
    assert fp.labels == ["embed", None, None, None] and fp.findings == []  # undecided claims are no labels


@pytest.mark.model
def test_seed_with_model_default(sample_data, tmp_path, capsys):
    path = str(sample_data / "speculators_v1" / "data_0.pt")
    assert main(["fingerprint", path, "--layers", SEED_CLAIM, "--model", "default", "--json"]) == 1
    f = json.loads(capsys.readouterr().out)["files"][0]
    s = _shifted(f["findings"])
    assert s["evidence"]["exact"] and s["evidence"]["corrected"] == TRUTH
    assert [sl["r_exact"] for sl in f["slots"]] == TRUTH
    assert [sl["label"] for sl in f["slots"]] == ["embed", "L3", "L16", "L28"]
    draft = _sglang_draft(tmp_path / "d")
    code = main(["audit", "--data", path, "--draft", draft, "--engine", "sglang", "--num-layers", "30",
                 "--hidden-size", "576", "--model", "default", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["wiring"] == "mismatch" and _shifted(doc["findings"])["severity"] == "fail"
    assert all(sl["ok"] is False for sl in doc["slices"]) and doc["fix"]["ids"] is not None
    from forensics.views.report.core import report

    rep = report(path, layers=SEED_CLAIM, model="default")
    assert rep.context["verdicts"]["headline"][0].startswith("FAIL:") and rep.exit_code() == 1


# ------------------------------------------------------------------------- one severity in every view
def _v1(path, hs, ids):
    torch.save({"input_ids": ids, "hidden_states": [h.contiguous() for h in hs],
                "loss_mask": torch.ones(len(ids), dtype=torch.long)}, path)
    return str(path)


def _cases(sample_data, tmp):
    """(name, path, --layers or None) for every fingerprint finding kind this data can make."""
    src = torch.load(sample_data / "speculators_v1" / "data_2.pt", weights_only=True)
    hs, ids = src["hidden_states"], src["input_ids"]
    nan = hs[2].clone()
    nan[5, 7] = float("nan")
    sf = str(sample_data / "specforge" / "rows_0-2000" / "data_0.ckpt")
    return [
        ("shifted", _v1(tmp / "a.pt", hs, ids), SEED_CLAIM),
        ("missing", _v1(tmp / "b.pt", hs[1:], ids), "embed,L3,L16"),
        ("reordered", _v1(tmp / "c.pt", [hs[2], hs[0], hs[3], hs[1]], ids), "0,3,16,28"),
        ("duplicate", _v1(tmp / "d.pt", [hs[0], hs[1], hs[1], hs[3]], ids), "0,3,3,28"),
        ("nonfinite", _v1(tmp / "e.pt", [hs[0], hs[1], nan, hs[3]], ids), "0,3,16,28"),
        ("all_zero", _v1(tmp / "f.pt", [hs[0], hs[1], torch.zeros_like(hs[2]), hs[3]], ids), "0,3,16,28"),
        ("few_tokens", _v1(tmp / "g.pt", [h[:10] for h in hs], ids[:10]), "0,3,16,28"),
        ("count", _v1(tmp / "h.pt", hs, ids), "0,3,16"),
        ("postnorm", sf, "2,15,27,30"),
        ("prenorm", _v1(tmp / "i.pt", hs, ids), "0,3,16,final_post"),
    ]


def test_every_view_shows_the_same_severity(sample_data, tmp_path, capsys):
    from forensics.analysis.report import FileReport, ReportResult
    from forensics.analysis.scan.rows import file_row
    from forensics.views.report.verdicts import build_verdicts
    from forensics.views.widgets import verdict_html

    seen: set[str] = set()
    for name, path, layers in _cases(sample_data, tmp_path):
        fp = fingerprint(path, layers=layers)
        want = {(f.kind, f.severity.value) for f in fp.findings}
        assert want, name
        seen |= {k for k, _ in want}
        # CLI JSON and exit code
        code = main(["fingerprint", path, "--layers", layers, "--json"])
        doc = json.loads(capsys.readouterr().out)["files"][0]
        assert {(f["kind"], f["severity"]) for f in doc["findings"]} == want, name
        assert code == exit_code(fp.findings, [s.verdict for s in fp.slots])
        # CLI text
        main(["fingerprint", path, "--layers", layers])
        out = capsys.readouterr().out
        for kind, sev in want:
            assert f"{sev.upper()} {kind}:" in out, (name, kind)
        # notebook HTML and the sample browser
        html, browser = fp._repr_html_(), verdict_html(fp)
        for kind, sev in want:
            assert re.search(rf">{sev}</span></td><td[^>]*>{kind}</td>", html), (name, kind)
            assert re.search(rf">{sev}</span> <b>{kind}</b>", browser), (name, kind)
        # the report's verdict block (what its template renders) and a dataset scan row
        row = build_verdicts(ReportResult(inputs=[path], files=[FileReport(path=path, rel=name, capture=fp.capture,
                                                                       stats=fp.stats, fingerprint=fp)]))
        assert {(x["kind"], x["severity"]) for x in row["rows"][0]["findings"]} == want, name
        scan_row = file_row(path, 0, 0, use_fingerprint=True, budget=None, layers=layers)
        assert {(x["kind"], x["severity"]) for x in scan_row["findings"]} >= want, name
    assert {"shifted", "missing_embedding", "unexpected_embedding", "reordered", "duplicate", "nonfinite",
            "all_zero", "few_tokens", "count_mismatch", "postnorm", "prenorm"} <= seen


# ------------------------------------------------------------------ audit: only what the data knows
def _specforge(folder, aux, final, ids):
    """A SpecForge ``rows_0/data_0.ckpt`` with no sidecar (what SpecForge writes): aux slots + post-norm final."""
    d = folder / "rows_0"
    d.mkdir(parents=True)
    torch.save({"input_ids": ids, "loss_mask": torch.ones(len(ids), dtype=torch.long),
                "hidden_state": final.unsqueeze(0), "aux_hidden_state": torch.cat(aux, -1).unsqueeze(0)},
               d / "data_0.ckpt")
    return str(folder)


def test_specforge_one_layer_off_is_cannot_tell_data_only_and_fail_with_a_reference(sample_data, tmp_path):
    """SpecForge data captured one layer off ([L3, L16, L28] where its config ids [1, 14, 26] say [L2, L15, L27]):
    the config and SGLang agree with each other, so only the tensors can tell — data alone cannot (no MATCH),
    a reference with the same token ids can (MISMATCH)."""
    from forensics.analysis.audit.core import audit
    from forensics.io.formats import load

    lad = load(sample_data / "ladder" / "capture_0.safetensors")
    by_r = {r: s.tensor() for r, s in zip(lad.declared_r, lad.slots, strict=True)}
    data = _specforge(tmp_path / "sf", [by_r[3], by_r[16], by_r[28]], by_r["final_post"], lad.input_ids)
    draft = _sglang_draft(tmp_path / "d", ids=(1, 14, 26))
    only = audit(data=data, draft=draft, engine="sglang", num_layers=30, hidden_size=576)
    assert only.wiring == "cannot-tell" and only.exit_code() == 3 and only.fix is None
    assert [sl.ok for sl in only.slices] == [None, None, None] and "--model" in only.settle
    exact = audit(data=data, draft=draft, engine="sglang", num_layers=30, hidden_size=576, model=lad)
    assert exact.wiring == "mismatch" and exact.trained.fc_r == [3, 16, 28]
    assert exact.fix.ids == [2, 15, 27] and exact.exit_code() == 1


def test_served_capture_joined_on_tokens_names_the_offset(sample_data, tmp_path):
    """Served [L3, L16, L28] on the training prompts: rows joined on token_ids, each served slot equals the next
    training slot (offset +1 slot), a MISMATCH from the tensors alone."""
    from safetensors.torch import save_file

    from forensics.analysis.audit.core import audit
    from forensics.io.formats import load

    train = load(sample_data / "speculators_v1" / "data_0.pt")
    served = tmp_path / "req_0.safetensors"
    save_file({"hidden_states": torch.stack([s.tensor() for s in train.slots[1:4]], 1).contiguous(),
               "token_ids": train.input_ids.contiguous()}, str(served))
    res = audit(data=train, served=str(served), use_fingerprint=False)
    rows = res.served.distances
    assert res.wiring == "mismatch" and res.served.joined_tokens == train.num_tokens
    assert [r["best_offset_slots"] for r in rows] == [1, 1, 1] and [r["best_offset_r"] for r in rows] == [3, 13, 12]
    assert all(r["median_rel"] > 0.05 for r in rows)  # not the trained slot; the next one matches exactly


def test_finding_kinds_are_one_enum():
    """A finding's kind is a FindingKind; an unknown name is an error naming the known kinds; JSON round-trips."""
    from forensics.findings import FindingKind

    f = Finding("shifted", Severity.FAIL, [0, 1], "m", {"corrected": [0, 3]})
    assert f.kind is FindingKind.SHIFTED and f.kind.meaning
    with pytest.raises(ValueError, match="known kinds: .*shifted"):
        Finding("shifted_list", Severity.FAIL)
    d = json.loads(json.dumps(f.to_dict()))
    assert d["kind"] == "shifted" and Finding.from_dict(d) == f
    assert FindingKind.SHIFTED.on_training_data() is FindingKind.DATA_SHIFTED
    assert FindingKind.DATA_SHIFTED.meaning.endswith(FindingKind.SHIFTED.meaning)
    for k in ("zero_rows", "row_count", "token_shift", "slot_misaligned", "foreign_rows"):  # row forensics
        assert FindingKind(k).on_training_data().meaning
