"""Structural tests of the HTML report: sections, offline-only references, size budget, inert injection,
raw check values against independent float64 references, and the ``hsf report`` command."""

from __future__ import annotations

import functools
import html as htmllib
import json
import math
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser

import pytest
import torch

from forensics.views.report.core import SIZE_BUDGET_BYTES, report

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data"
SECTIONS = ["verdicts", "provenance", "slots", "cross", "checks", "samples"]
XSS = "<script>alert(1)</script>"


def make_synthetic(folder: pathlib.Path, n: int = 2, T: int = 48, H: int = 32) -> pathlib.Path:
    """A tiny speculators-v1 capture [embed, L3, L16, L28]-shaped: a token-0 sink from the second slot on."""
    folder.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    for i in range(n):
        ids = torch.randint(0, 100, (T,), generator=g)
        hs, h = [], torch.randn(T, H, generator=g) * 0.05
        hs.append(h.clone())
        for scale in (1.0, 4.0, 8.0):
            h = h + torch.randn(T, H, generator=g) * scale
            h[0, 3] = 400.0 * scale
            hs.append(h.clone())
        torch.save({"input_ids": ids, "loss_mask": torch.ones(T, dtype=torch.long),
                    "hidden_states": [t.to(torch.bfloat16) for t in hs]}, folder / f"data_{i}.pt")
    (folder / "data_config.json").write_text(json.dumps({"hidden_states": {"layer_ids": [-1, 2, 15, 27]}}))
    return folder


@functools.cache
def synthetic_report(tmp: str) -> tuple[str, str]:
    """(path of the saved report, its html) for the synthetic capture under ``tmp`` (built once)."""
    data = make_synthetic(pathlib.Path(tmp) / "syn")
    out = pathlib.Path(tmp) / "syn_report.html"
    report([str(data)]).save(out)
    return str(out), out.read_text(encoding="utf-8")


@functools.cache
def sample_report() -> tuple[str, str]:
    """(path, html) of the report on the whole real ``sample_data/``, built once per session and shared with
    the browser tests (the demo's report; ~30 s on a busy 2-core machine, most of it figures)."""
    out = pathlib.Path(tempfile.mkdtemp(prefix="hsf-report-")) / "sample_report.html"
    report([str(SAMPLE)]).save(out)
    return str(out), out.read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def syn(tmp_path_factory):
    return synthetic_report(str(tmp_path_factory.mktemp("report_syn")))


@pytest.fixture(scope="session")
def real(sample_data):
    return sample_report()


class _Collect(HTMLParser):
    """Ids, resource references, and the cells of every table row (text only)."""

    def __init__(self):
        super().__init__()
        self.ids, self.refs, self.rows, self._row, self._cell = set(), [], [], None, None
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        for k in ("src", "href", "action", "srcset", "poster", "data"):
            if k in a:
                self.refs.append((tag, k, a[k] or ""))
        if tag == "script":
            self.scripts += 1
        if tag == "tr":
            self._row = []
        if tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        if tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def parse(html: str) -> _Collect:
    c = _Collect()
    c.feed(html)
    return c


def check_rows(html: str, group: str) -> list[list[str]]:
    """The 5-cell rows of one group (a file's relative path) of the checks section."""
    m = re.search(r'<details class="cgroup"[^>]*data-group="' + re.escape(group) + r'".*?</details>', html, re.S)
    assert m, group
    return [r for r in parse(m.group(0)).rows if len(r) == 5 and r[0] != "where"]


def assert_offline(html: str) -> None:
    """No network reference: every src is a data: URI, every href an in-page anchor, no url(http…)/@import."""
    doc = parse(html)
    for tag, attr, value in doc.refs:
        v = value.strip().lower()
        if attr == "href":
            assert v.startswith("#"), (tag, attr, value)
        else:
            assert v.startswith("data:"), (tag, attr, value)
    assert not re.search(r"url\(\s*['\"]?\s*(https?:)?//", html, re.I)
    assert not re.search(r"@import", html, re.I)
    assert not re.search(r"(src|href)\s*=\s*['\"]?\s*(https?:)?//", html, re.I)
    assert doc.scripts == 1  # ours, inline
    assert "<script src" not in html.lower()


def test_sections_and_verdict_rows(syn):
    _, html = syn
    doc = parse(html)
    for s in SECTIONS:
        assert s in doc.ids, s
    # verdicts come first: the verdict section precedes every other section in the document
    assert html.index('id="verdicts"') < min(html.index(f'id="{s}"') for s in SECTIONS[1:])
    slot_rows = [r for r in doc.rows if len(r) == 9 and r[1].startswith("hidden_states[")]
    assert len(slot_rows) >= 8  # 2 files × 4 slots in the verdict block
    assert {r[2] for r in slot_rows} >= {"embed", "L3", "L16", "L28"}  # claimed identities from data_config
    assert "hsf report " in html and "Regenerate this report" in html
    # one sample browser: the explorer (every readable file in its state), not the superseded sparkline panels
    assert "sample-select" not in doc.ids and "sample-0" not in doc.ids
    state = re.search(r'<div class="hsf-explore-static" data-state="([^"]*)"', html)
    assert state and len(json.loads(htmllib.unescape(state.group(1)))["files"]) == 2


def test_offline_only(syn):
    assert_offline(syn[1])
    assert "Content-Security-Policy" in syn[1] and "default-src 'none'" in syn[1]


def test_checks_show_raw_values_against_float64_reference(syn, tmp_path_factory):
    """The token-0 ratio and NaN count rows carry the raw value even when passing; values match float64."""
    path, html = syn
    data = pathlib.Path(path).parent / "syn" / "data_0.pt"
    hs = torch.load(data, weights_only=True)["hidden_states"]
    checks = check_rows(html, "syn/data_0.pt")
    for k, h in enumerate(hs):
        n = torch.linalg.vector_norm(h.double(), dim=-1)
        ratio = float(n[0] / n[1:].median())
        lo = [r for r in checks if r[0].startswith(f"[{k}]")]
        nonfinite = next(r for r in lo if r[1].startswith("non-finite"))
        assert nonfinite[2] == "0" and nonfinite[4].lower().startswith("pass")
        row = next(r for r in lo if r[1] in ("token-0 norm / median of the rest", "token0_ratio"))
        shown = float(row[2].replace(",", ""))
        assert math.isclose(shown, ratio, rel_tol=0.01), (k, shown, ratio)


def test_report_object_and_cli_json(tmp_path, syn):
    data = pathlib.Path(syn[0]).parent / "syn"
    out = tmp_path / "deep" / "r.html"
    cmd = [sys.executable, "-m", "forensics.cli", "report", str(data), "--layers", "0,3,16,28", "-o", str(out),
           "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT)
    # slot 0 of the synthetic capture is noise, not a table lookup (repeated ids, different rows), so the claimed
    # embed is excluded: the report's verdict is FAIL and its exit code 1
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    assert doc["output"] == str(out.resolve()) and doc["bytes"] == out.stat().st_size
    assert doc["files"] == 2 and sum(doc["verdicts"].values()) == 8
    assert "--layers 0,3,16,28" in doc["command"] and doc["command"].startswith("hsf report ")
    assert doc["command"] in out.read_text(encoding="utf-8")


def test_cli_exit_code_2_when_an_input_is_unreadable(tmp_path, capsys):
    from forensics.cli import main

    (tmp_path / "empty").mkdir()
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "empty"), str(tmp_path / "missing"), "-o", str(out)]) == 2
    text = capsys.readouterr().out
    assert "2 unreadable" in text and str(out) in text
    html = out.read_text(encoding="utf-8")
    assert "no capture files found" in html and "no such file or directory" in html


def test_an_unreadable_input_is_one_stderr_line_naming_its_path_once(tmp_path, capsys):
    from forensics.cli import main

    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"garbage")
    assert main(["report", str(bad), "-o", str(tmp_path / "r.html")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if str(bad) in line]
    assert len(err) == 1 and err[0].count(str(bad)) == 1, err


def test_unreadable_file_is_listed_not_fatal(tmp_path, syn):
    data = pathlib.Path(syn[0]).parent / "syn"
    d = tmp_path / "mixed"
    shutil.copytree(data, d)
    (d / "data_9.pt").write_text("not a checkpoint")
    rep = report(str(d))
    html = rep.html
    assert 'id="errors"' in html and "data_9.pt" in html
    assert rep.counts["fail"] >= 1
    assert_offline(html)


def test_injected_script_in_names_and_metadata_is_inert(tmp_path, syn):
    """A <script> in a file name, a folder name, capture.json metadata and the title renders as text."""
    data = pathlib.Path(syn[0]).parent / "syn"
    evil_dir = tmp_path / "<script>alert(1)<"  # with the file below, the relative path reads <script>alert(1)</script>…
    evil_dir.mkdir()
    shutil.copy(data / "data_0.pt", evil_dir / "script>data_0.pt")
    shutil.copy(data / "data_1.pt", tmp_path / "<img src=x onerror=alert(2)>data_1.pt")
    (tmp_path / "capture.json").write_text(json.dumps({"model": XSS, "r": [0, 3, 16, "<b>x</b>"]}))
    rep = report([str(tmp_path)], title=XSS)
    html = rep.html
    assert "<script>alert" not in html and "<img src=x" not in html and "<b>x</b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;data_0.pt" in html
    assert "&lt;img src=x onerror=alert(2)&gt;data_1.pt" in html
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 3  # title, file name, model metadata
    assert_offline(html)
    layered = report([str(evil_dir)], layers=XSS).html  # a config value: in the command and any error message
    assert "<script>alert" not in layered and "--layers &#39;&lt;script&gt;alert(1)&lt;/script&gt;&#39;" in layered
    saved = pathlib.Path(rep.save(tmp_path / "xss.html")).read_text(encoding="utf-8")
    assert "<script>alert" not in saved and "&lt;script&gt;alert(1)&lt;/script&gt;" in saved


def test_real_sample_data_report(real):
    """The demo's report on the real sample_data/: all sections, offline, within the 5 MB budget."""
    path, html = real
    size = os.path.getsize(path)
    assert size <= SIZE_BUDGET_BYTES, size
    doc = parse(html)
    for s in SECTIONS:
        assert s in doc.ids
    assert_offline(html)
    assert "speculators_v1/data_0.pt" in html
    # the chat template's first token is SmolLM2's <|im_start|>: token text is known and rendered escaped
    assert "&lt;|im_start|&gt;" in html and "<|im_start|>" not in html
    assert 'class="fig"' in html or "figure unavailable" in html
    # sample_data is ground truth (sample_data/README.md): every declared identity is confirmed, nothing fails
    headline = re.search(r'<div class="headline[^"]*">(.*?)</div>', html, re.S).group(1)
    # data alone confirms the embeddings and post-norm states; the layer slots' exact r needs --model: the
    # headline says CANNOT TELL first (it used to say every slot "is what its file declares")
    assert headline.startswith("<p>CANNOT TELL") and "--model" in headline and "fail" not in headline


def one_sample(sample_data: pathlib.Path, folder: pathlib.Path) -> pathlib.Path:
    """A copy of the real speculators_v1 data_0.pt with its sidecars (one file keeps model/draft runs short)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("data_config.json", "capture.json", "data_0.pt"):
        shutil.copy(sample_data / "speculators_v1" / name, folder / name)
    return folder


def swapped_sample(sample_data: pathlib.Path, folder: pathlib.Path) -> pathlib.Path:
    """The real speculators_v1 data_0.pt with slots 1 and 2 (L3 and L16) swapped, and its sidecars."""
    folder.mkdir(parents=True, exist_ok=True)
    for side in ("data_config.json", "capture.json"):
        shutil.copy(sample_data / "speculators_v1" / side, folder / side)
    doc = torch.load(sample_data / "speculators_v1" / "data_0.pt", weights_only=True)
    hs = doc["hidden_states"]
    doc["hidden_states"] = [hs[0], hs[2], hs[1], hs[3]]
    torch.save(doc, folder / "data_0.pt")
    return folder


def _verdict_rows(html: str) -> list[list[str]]:
    m = re.search(r'<section id="verdicts">.*?</section>', html, re.S)
    return [r for r in parse(m.group(0)).rows if len(r) == 9 and r[0].isdigit()]


def test_shuffled_real_capture_fails_with_the_right_labels(sample_data, tmp_path):
    """The seed's check on real data: slots L3 and L16 swapped in the file ⇒ both fail, labelled by depth."""
    rep = report(str(swapped_sample(sample_data, tmp_path / "shuffled")))
    rows = _verdict_rows(rep.html)
    got = {int(r[0]): (r[2], r[3], r[7].lower()) for r in rows}
    assert got[0] == ("embed", "embed", "pass") and got[3] == ("L28", "L28", "cannot tell")  # data-only L28
    assert got[1] == ("L3", "L16", "fail") and got[2] == ("L16", "L3", "fail")
    assert rep.counts["fail"] == 2 and rep.context["overall"] == "fail"
    assert "reordered" in rep.html
    assert rep.context["verdicts"]["headline"][0].startswith("FAIL: 1 file fails (2 slots): the claimed layers are "
                                                             "all there but stored in another order than claimed")


def test_audit_verdict_and_fix_in_the_verdict_block(sample_data, tmp_path):
    """The Kimi case at SmolLM2 scale: SGLang (pre-#25454) ids [2, 15, 27] serve L3, L16, L28 to a draft trained
    on embed, L3, L16 ⇒ mismatch, fix [-1, 2, 15] nested (values worked out by hand from the SGLang rule)."""
    from test_draft_config import make_draft, sglang_config

    draft = make_draft(tmp_path / "draft", sglang_config([2, 15, 27], 576, V=49152, Vd=8192), H=576, weights=False)
    target = tmp_path / "target.json"
    target.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                  "num_hidden_layers": 30, "hidden_size": 576, "vocab_size": 49152}))
    out = tmp_path / "audit.html"
    data = one_sample(sample_data, tmp_path / "data")
    cmd = [sys.executable, "-m", "forensics.cli", "report", str(data), "--draft", draft,
           "--engine", "sglang", "--engine-version", "pre-25454", "--target-config", str(target), "-o", str(out),
           "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 1, p.stderr  # the report's own verdict is FAIL: exit 1 (it used to exit 0)
    doc = json.loads(p.stdout)
    assert doc["audit"] == "mismatch" and doc["overall"] == "fail"
    html = out.read_text(encoding="utf-8")
    block = re.search(r'<section id="verdicts">.*?</section>', html, re.S).group(0)
    # data-only, L3 and L16 are declared, not proven: no fix id list (it would rest on them), the command that
    # settles it instead; slice 0 (embed, measured) served L3 is the certain mismatch, and the list is shifted
    assert "Wiring audit: mismatch" in block and "--model" in block and "shifted" in block
    slices = [r for r in check_rows(html, "wiring audit") if r[1] == "trained r vs served r"]
    assert [r[2] for r in slices] == ["0 vs 3", "3 vs 16", "16 vs 28"]
    assert [r[4].lower() for r in slices] == ["fail", "cannot tell", "cannot tell"]
    assert 'id="errors"' not in html  # a config-only draft is audited, not probed
    assert_offline(html)


def test_many_files_are_summarised_by_the_scan(tmp_path, monkeypatch):
    """Beyond MAX_ANALYSED_FILES, files are not analysed one by one: the dataset scan summarises them all."""
    import forensics.analysis.report as analysis_report
    import forensics.views.report.core as rp

    data = make_synthetic(tmp_path / "many", n=3)
    monkeypatch.setattr(analysis_report, "MAX_ANALYSED_FILES", 2)
    rep = rp.report(str(data))
    assert len(rep.context["files"]) == 2 and rep.context["skipped"] == 1
    html = rep.html
    assert "3 capture files found: the first 2" in html
    assert rep.context["scan_html"] and "Dataset scan" in html
    assert_offline(html)


def test_trained_draft_is_probed_and_summarised_in_the_verdicts(sample_data, tmp_path):
    """The committed tiny draft was trained on r = [0, 3, 16] (sample_data/draft_eagle3/training.json): the
    probe's best wiring is shown next to the verdicts as the bar chart with confidence whiskers, its ranking
    table folded under it."""
    draft = sample_data / "draft_eagle3"
    if not (draft / "model.safetensors").is_file():
        pytest.skip("sample_data/draft_eagle3 is not in this checkout")
    rep = report(str(one_sample(sample_data, tmp_path / "data")), draft=str(draft), engine="vllm")
    html = rep.html
    block = re.search(r'<section id="verdicts">.*?</section>', html, re.S).group(0)
    assert "Draft probe:" in block and "best wiring <b>embed+L3+L16</b>" in block
    probed = rep.context["probe"]  # the panel reads the result's verdict and its served-vs-best line (--engine)
    assert f"<b>Draft probe:</b> {probed.verdict.value} — " in block and "served by vllm: embed+L3+L16" in block
    assert {"pass": 0, "cannot tell": 1, "fail": 2}[rep.verdict()] >= probed.verdict.rank  # the probe decides too
    assert rep.context["probe_fig"]["src"].startswith("data:image/svg+xml;base64,")
    assert rep.context["probe_fig"]["src"] in block and rep.context["probe_html"] in block
    assert "--draft " in rep.command() and "--engine vllm" in rep.command()
    assert_offline(html)


@pytest.mark.model
def test_exact_mode_with_the_real_model(sample_data, tmp_path):
    """--model: model facts in the provenance and every slot's exact r (the capture's recorded r = 0, 3, 16, 28)."""
    from forensics.models.target import default_model_path

    rep = report(str(one_sample(sample_data, tmp_path) / "data_0.pt"), model=default_model_path())
    facts = rep.context["provenance"]["model_facts"]
    assert facts["num_layers"] == 30 and facts["hidden_size"] == 576
    rows = _verdict_rows(rep.html)
    assert [r[5] for r in rows] == ["0 (exact)", "3 (exact)", "16 (exact)", "28 (exact)"]
    assert all(r[7].lower() == "pass" for r in rows)
    assert "ladder_match" in rows[1][8]


def test_report_result_is_typed_and_decides_each_slot(sample_data, tmp_path, capsys):
    """``forensics.analysis.report.report`` returns the decision as data: per slot its outcome and the evidence
    that decided it (numbers as numbers), the verdict, counts and exit code; ``hsf report --json`` keeps its keys.
    Truth: data_0.pt holds r = [0, 3, 16, 28] (sample_data/README.md), so the list 3,16,28,final_post is wrong
    on every slot; data_1.pt's declared truth is proven for the embedding only from data alone."""
    from forensics.analysis.report import ReportResult, SlotOutcome
    from forensics.analysis.report import report as analyse
    from forensics.cli import main

    shifted = analyse([str(sample_data / "speculators_v1" / "data_0.pt")], layers="3,16,28,final_post")
    assert isinstance(shifted, ReportResult) and all(isinstance(s, SlotOutcome) for s in shifted.slots)
    assert [s.outcome for s in shifted.slots] == ["fail"] * 4 and [s.label for s in shifted.slots] == \
        ["embed", "L3", "L16", "L28"]
    assert {s.deciding.kind for s in shifted.slots} <= {"claim", "finding"}
    assert "shifted" in {s.deciding.signal for s in shifted.slots}
    assert (shifted.verdict.value, shifted.exit_code(), shifted.counts["fail"], shifted.overall) == \
        ("fail", 1, 4, "fail")
    assert repr(shifted) == "ReportResult(FAIL: 1 files, 4 fail)" and "<iframe" in shifted._repr_html_()

    truth = analyse([str(sample_data / "speculators_v1" / "data_1.pt")])
    assert [s.outcome for s in truth.slots] == ["pass", "cannot tell", "cannot tell", "cannot tell"]
    embed = truth.slots[0].deciding
    assert (embed.kind, embed.signal) == ("evidence", "dup_rows") and isinstance(embed.value, float)
    assert (truth.verdict.value, truth.exit_code(), truth.exit_code(decided_only=True)) == ("cannot tell", 3, 3)

    main(["report", str(sample_data / "speculators_v1" / "data_1.pt"), "-o", str(tmp_path / "r.html"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert list(doc) == ["verdict", "output", "bytes", "files", "unreadable", "verdicts", "overall", "sentence",
                         "audit", "command"]
    assert {k: doc[k] for k in ("verdict", "files", "unreadable", "verdicts", "overall", "audit")} == truth.to_dict()
    assert doc["verdicts"] == {"fail": 0, "unreadable": 0, "cannot tell": 3, "warn": 0, "pass": 1, "identified": 0,
                               "info": 0}


def test_a_folder_report_without_scan_says_the_checks_across_files_were_not_run(tmp_path, capsys):
    """A folder where one capture is 768 wide among 576-wide ones: each file alone has nothing wrong (no claims),
    so the report says 'no failure', exit 0, while `hsf scan` fails the folder on the hidden size. The report now
    says the checks across files were not run and names --scan, which fails it (exit 1, as hsf scan)."""
    from forensics.cli import main

    g = torch.Generator().manual_seed(0)
    d = tmp_path / "caps"
    d.mkdir()
    for i, h in enumerate((576, 576, 576, 768)):
        torch.save({"input_ids": torch.arange(20), "hidden_states": torch.randn(3, 20, h, generator=g)},
                   d / f"c{i}.pt")
    assert main(["scan", str(d)]) == 1
    assert "hidden_size" in capsys.readouterr().out
    out = tmp_path / "r.html"
    code = main(["report", str(d), "-o", str(out)])
    text = capsys.readouterr().out
    assert "--scan" in text and "were not run" in text
    assert main(["report", str(d), "--scan", "-o", str(out)]) == 1 and code != 1
    assert "were not run" not in capsys.readouterr().out
