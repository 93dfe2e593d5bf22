"""One verdict per result (issue 24): for each input, every command and view states the same decision.

Every command's JSON has a top-level ``verdict`` in one vocabulary (pass / fail / cannot tell), the result's
``.verdict``. For the wiring audit: the CLI exit code, the JSON's ``verdict`` (``wiring`` keeps the audit's own
words match / mismatch / cannot-tell), the CLI headline, ``_repr_html_``'s badge, and the report built on the
same inputs. For the fingerprint (a clean capture with the model, a shifted layer list, a zero block of rows, an
undecided claim) the same, plus ``hsf inspect`` / ``hsf scan`` on the row-corrupted file. For the draft probe (one
file: too few positions to rank the wirings) ``hsf probe`` and the report. Real SmolLM2 states, r known from how
they were captured (``sample_data/README.md``): the training data is ``[0, 3, 16, 30]`` of the ladder text without
a sidecar (with one declaring those r for the probe, which needs the embedding slot named).

The report states its verdict five ways, each checked against the single command's: ``ReportResult.verdict`` and
``.exit_code()``, the HTML header (the sentence's first word and colour), ``hsf report --json``'s ``verdict`` and
exit code, and the explorer's per-file badge (each file's one outcome, as its verdict row shows it).
"""

from __future__ import annotations

import html as html_lib
import json
import re

import pytest
import torch
from safetensors.torch import save_file
from test_draft_config import make_draft, speculators_config

from forensics import fingerprint, load
from forensics.analysis.audit.core import audit
from forensics.analysis.report import report as analyse
from forensics.cli import main
from forensics.findings import EXIT_CANNOT_TELL, EXIT_FAIL, EXIT_OK
from forensics.views.audit import HEAD
from forensics.views.report.core import Report

SHARED = 24  # tokens the two chat samples share (the system prompt): "other text" starts after them
EXIT = {"pass": EXIT_OK, "fail": EXIT_FAIL, "cannot tell": EXIT_CANNOT_TELL}
# the report header's first word → the verdict it states (warn contradicts no claim: it is a pass for the exit code)
HEADER = {"FAIL": "fail", "CANNOT TELL": "cannot tell", "WARN": "pass", "PASS": "pass", "NO CLAIM": "pass"}


def _report_everywhere(paths: list[str], kw: dict, flags: list[str], tmp, capsys,
                       browser: list | None = None) -> tuple[str, int]:
    """The report's verdict as ``ReportResult``, its exit code, the HTML header, ``hsf report --json`` and the static
    sample browser state it; asserts they agree and returns (verdict, exit code)."""
    res = analyse(paths, **kw)
    v, code = res.verdict.value, res.exit_code()
    assert code == EXIT[v] and res.decide().value == v
    page = Report.of(res).html
    m = re.search(r'<p class="sentence s-([a-z-]+)" id="verdict-sentence">([A-Z ]+):', page)
    assert m and HEADER[m.group(2)] == v, (m and m.groups(), v)
    assert m.group(1) == res.overall.replace(" ", "-") and HEADER.get(res.overall.upper(), "pass") == v
    assert re.search(rf'<div class="headline v-{m.group(1)}"><p>{m.group(2)}:', page)
    rc = main(["report", *paths, *flags, "-o", str(tmp / "report.html"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert (rc, doc["verdict"], doc["overall"]) == (code, v, res.overall)
    state = re.search(r'<div class="hsf-explore-static" data-state="([^"]*)"', page)
    files = json.loads(html_lib.unescape(state.group(1)))["files"]
    assert [f["verdict"] for f in files] == (browser if browser is not None else [v] * len(files))
    assert [f["verdict"] for f in files] == [f.outcome for f in res.readable]  # the verdict rows' badges
    return v, code


@pytest.fixture(scope="module")
def inputs(sample_data, tmp_path_factory):
    t = tmp_path_factory.mktemp("consistency")
    lad = load(sample_data / "ladder" / "capture_0.safetensors")
    by_r = dict(zip(lad.declared_r, lad.slots, strict=True))
    (t / "train").mkdir()
    torch.save({"input_ids": lad.input_ids, "hidden_states": [by_r[r].tensor().clone() for r in (0, 3, 16, 30)],
                "loss_mask": torch.ones_like(lad.input_ids)}, t / "train" / "data_0.pt")
    other = load(sample_data / "speculators_v1" / "data_0.pt")

    def served(name, tensors, ids):
        save_file({"hidden_states": torch.stack(tensors).contiguous(), "token_ids": ids.to(torch.int64).contiguous()},
                  str(t / name))
        return str(t / name)

    target = t / "target.json"
    target.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                  "num_hidden_layers": 30, "hidden_size": 576, "vocab_size": 49152}))
    return {"train": str(t / "train" / "data_0.pt"), "target": str(target),
            "draft": make_draft(t / "draft", speculators_config([0, 3, 16], 576, V=49152, Vd=8192), H=576,
                                V=49152, Vd=8192, weights=False),  # config only: nothing to probe
            "clean": served("clean.safetensors", [by_r[r].tensor() for r in (0, 3, 16)], lad.input_ids),
            "shifted": served("shifted.safetensors", [by_r[r].tensor() for r in (3, 16, 28)], lad.input_ids),
            "cannot_tell": served("other.safetensors", [s.tensor()[SHARED:] for s in other.slots[:3]],
                                  other.input_ids[SHARED:])}


@pytest.mark.parametrize(("case", "decision", "words"), [
    ("clean", "pass", "match"), ("shifted", "fail", "mismatch"), ("cannot_tell", "cannot tell", "cannot-tell")])
def test_audit_says_one_verdict_everywhere(inputs, case, decision, words, tmp_path, capsys):
    args = ["--data", inputs["train"], "--draft", inputs["draft"], "--engine", "vllm", "--target-config",
            inputs["target"], "--served", inputs[case]]
    res = audit(data=inputs["train"], draft=inputs["draft"], engine="vllm", target_config=inputs["target"],
                served=inputs[case])
    assert (res.wiring, res.verdict.value, res.decision, res.exit_code()) == (words, decision, decision, EXIT[decision])
    assert f"hsf-{decision.replace(' ', '-')}" in res._repr_html_() and repr(res).startswith(f"AuditResult({decision}")
    code = main(["audit", *args, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert (code, doc["verdict"], doc["wiring"]) == (EXIT[decision], decision, words)
    assert main(["audit", *args]) == code
    assert capsys.readouterr().out.startswith(f"hsf audit: {decision.upper()} (wiring {HEAD[words]}):")
    kw = {"draft": inputs["draft"], "engine": "vllm", "target_config": inputs["target"], "served": inputs[case]}
    # the training file declares no slot: its badge is info (no claim); the report's verdict is the audit's
    assert _report_everywhere([inputs["train"]], kw, args[2:], tmp_path, capsys, browser=["info"]) == \
        (decision, EXIT[decision])
    rep = Report.of(analyse([inputs["train"]], **kw))
    assert rep.context["audit_verdict"] == words and rep.context["verdicts"]["audit"]["wiring"] == words


def _zero_block(src: str, dst, slot: int, rows: slice) -> str:
    """A copy of the torch.save capture ``src`` with ``rows`` of ``slot`` set to zero (a lost write)."""
    d = torch.load(src, weights_only=True)
    d["hidden_states"][slot][rows] = 0
    torch.save(d, dst)
    return str(dst)


def _fingerprint_everywhere(path: str, layers: str | None, model: str | None, tmp, capsys) -> tuple[str, int]:
    """The verdict and exit code of one capture as the library, ``_repr_html_``, the CLI (JSON and text) and the
    report state them; asserts they agree and returns them."""
    flags = (["--layers", layers] if layers else []) + (["--model", model] if model else [])
    fp = fingerprint(path, layers=[int(x) for x in layers.split(",")] if layers else None, model=model)
    v = fp.verdict.value
    assert f"hsf-{v.replace(' ', '-')}" in fp._repr_html_()
    code = main(["fingerprint", path, *flags, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert (doc["verdict"], doc["files"][0]["verdict"], code) == (v, v, EXIT[v])
    assert main(["fingerprint", path, *flags]) == code
    assert capsys.readouterr().out.startswith(v.upper())
    kw = {"layers": [int(x) for x in layers.split(",")] if layers else None, "model": model}
    assert _report_everywhere([path], kw, flags, tmp, capsys, browser=[v]) == (v, code)
    return v, code


@pytest.mark.parametrize(("case", "layers", "want"), [
    ("shifted", "3,16,28,30", "fail"),  # slot 0 is the embedding (measured): a list shifted by one slot
    ("zero_rows", "0,3,16,30", "fail"),  # the true list, but 8 rows of slot 2 never written
    ("cannot_tell", "0,3,16,30", "cannot tell")])  # the true list: from data alone L3..L30 are not decided
def test_fingerprint_says_one_verdict_everywhere(inputs, tmp_path, case, layers, want, capsys):
    path = inputs["train"] if case != "zero_rows" else _zero_block(inputs["train"], tmp_path / "z.pt", 2,
                                                                    slice(40, 48))
    assert _fingerprint_everywhere(path, layers, None, tmp_path, capsys) == (want, EXIT[want])
    if case == "zero_rows":
        fp = fingerprint(path, layers=[0, 3, 16, 30])
        assert [(f.kind, f.slots) for f in fp.findings if f.kind == "zero_rows"] == [("zero_rows", [2])]
        code = main(["inspect", path, "--json"])
        doc = json.loads(capsys.readouterr().out)
        assert (code, doc["verdict"], doc["files"][0]["verdict"]) == (EXIT_FAIL, "fail", "fail")
        code = main(["scan", str(tmp_path), "--json", "-o", str(tmp_path / "scan.jsonl")])
        doc = json.loads(capsys.readouterr().out)
        assert (code, doc["verdict"]) == (EXIT_FAIL, "fail")
        from forensics.analysis.scan.core import scan

        res = scan(str(tmp_path))
        assert (res.verdict.value, res.exit_code()) == ("fail", EXIT_FAIL) and "hsf-fail" in res._repr_html_()
        assert repr(res).startswith("FAIL: scan of")


@pytest.mark.model
def test_fingerprint_clean_with_the_model_passes_everywhere(sample_data, tmp_path, capsys):
    # sample_data/speculators_v1 declares r = [0, 3, 16, 28] in its sidecar, as captured: exact mode proves it
    path = str(sample_data / "speculators_v1" / "data_0.pt")
    assert _fingerprint_everywhere(path, None, "default", tmp_path, capsys) == ("pass", EXIT_OK)


def test_a_cannot_tell_probe_says_one_verdict_everywhere(inputs, sample_data, tmp_path, capsys):
    """One training file is too few positions to rank the committed draft's wirings: ``hsf probe`` says CANNOT
    TELL (exit 3, headline, JSON); the report built with the same draft (its audit matched by the served capture)
    says CANNOT TELL in every form, its probe panel too."""
    draft = sample_data / "draft_eagle3"
    if not (draft / "model.safetensors").is_file():
        pytest.skip("sample_data/draft_eagle3 is not in this checkout")
    folder = tmp_path / "declared"
    folder.mkdir()
    (folder / "data_0.pt").write_bytes(open(inputs["train"], "rb").read())
    (folder / "capture.json").write_text(json.dumps({  # the r it was captured at: the probe needs the embedding named
        "tool": "hsf capture", "num_layers": 30, "hidden_size": 576, "r": [0, 3, 16, 30], "format": "speculators-v1",
        "tokenizer": str(sample_data / "tokenizer"), "samples": [{"file": "data_0.pt"}]}))
    data = str(folder / "data_0.pt")
    from forensics.analysis.probe import probe

    res = probe(str(draft), data)
    assert res.verdict.value == "cannot tell"
    code = main(["probe", "--draft", str(draft), "--data", data, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert (code, doc["verdict"]) == (EXIT_CANNOT_TELL, "cannot tell")
    assert main(["probe", "--draft", str(draft), "--data", data]) == code
    assert capsys.readouterr().out.startswith("probe: CANNOT TELL")
    kw = {"draft": str(draft), "engine": "vllm", "target_config": inputs["target"], "served": inputs["clean"]}
    flags = ["--draft", str(draft), "--engine", "vllm", "--target-config", inputs["target"],
             "--served", inputs["clean"]]
    assert _report_everywhere([data], kw, flags, tmp_path, capsys, browser=["cannot tell"]) == \
        ("cannot tell", EXIT_CANNOT_TELL)
    rep = Report.of(analyse([data], **kw))
    assert rep.result.probe.verdict.value == rep.context["verdicts"]["probe"]["verdict"] == "cannot tell"
    assert rep.result.audit.wiring != "mismatch" and not any(f.is_fail for f in rep.result.findings)


def test_an_unreadable_input_is_unreadable_everywhere_and_exit_2(inputs, tmp_path, capsys):
    """A report over a good and a corrupt file: the corrupt file is ``unreadable`` (its own word: nothing about it was
    decided, so it is no FAIL), the verdict is CANNOT TELL (never a PASS beside a file not read), in the result, the
    header and the JSON; the exit code is 2 (an input was not read)."""
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a torch file")
    alone = analyse([inputs["train"]])
    res = analyse([inputs["train"], str(bad)])
    assert alone.verdict.value == "pass" and alone.exit_code() == 0  # what was read passes by itself
    assert (res.verdict.value, res.exit_code(), res.counts["fail"], res.counts["unreadable"], res.overall) == \
        ("cannot tell", 2, 0, 1, "unreadable")
    page = Report.of(res).html
    assert re.search(r'id="verdict-sentence">UNREADABLE: 1 input could not be read \([^)]*bad\.pt\)', page)
    code = main(["report", inputs["train"], str(bad), "-o", str(tmp_path / "r.html"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert (code, doc["verdict"], doc["unreadable"]) == (2, "cannot tell", 1)


def test_a_file_only_the_scan_reads_decides_the_report(inputs, tmp_path, monkeypatch, capsys):
    """Beyond the report's per-file cap the dataset scan is the only reader of a file: its zero block of rows
    (a lost write) makes the report FAIL in every form, as ``hsf scan`` of the folder does."""
    import forensics.analysis.report as analysis_report

    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "a.pt").write_bytes(open(inputs["train"], "rb").read())
    _zero_block(inputs["train"], folder / "b.pt", 2, slice(40, 48))
    code = main(["scan", str(folder), "--json", "-o", str(tmp_path / "scan.jsonl")])
    assert (code, json.loads(capsys.readouterr().out)["verdict"]) == (EXIT_FAIL, "fail")
    monkeypatch.setattr(analysis_report, "MAX_ANALYSED_FILES", 1)
    res = analyse([str(folder)])
    assert res.skipped == 1 and [f.rel for f in res.files] == ["ds/a.pt"] and res.files[0].outcome != "fail"
    assert (res.scan.verdict.value, res.verdict.value, res.exit_code(), res.overall) == ("fail", "fail", 1, "fail")
    assert _report_everywhere([str(folder)], {}, [], tmp_path, capsys, browser=["info"]) == ("fail", EXIT_FAIL)
    assert "dataset scan of 2 files: fail" in Report.of(res).context["verdicts"]["sentence"]
