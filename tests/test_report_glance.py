"""The report read in three seconds: one verdict sentence in the header's colour (red whenever anything in the
report is FAIL), key numbers per format beside the audited file's norm distribution, the audited file's cards
open, provenance last, and the same number printed the same way in the report and on the command line."""

from __future__ import annotations

import re
import shutil

import pytest
import torch
from test_report import one_sample, swapped_sample

from forensics.cli import main
from forensics.layers import r_label
from forensics.views.format import num
from forensics.views.report.core import report

SENTENCE = re.compile(r'<p class="sentence s-([\w-]+)" id="verdict-sentence">(.*?)</p>', re.S)


def _header(html: str) -> tuple[str, str]:
    m = SENTENCE.search(html)
    assert m, "no verdict sentence in the header"
    return m.group(1), m.group(2)


def _has_fail(html: str) -> bool:
    """Any FAIL below the header: a slot row, card, check row or the audit box marked fail, or a failing audit
    finding (the legend's and the counts' sample badges do not count)."""
    body = html[html.index('<section id="verdicts">'):]
    return bool(re.search(r'class="(?:v-fail|card v-fail|o-fail|audit-box v-fail)"|<li><span class="badge b-fail">',
                          body))


@pytest.fixture(scope="module")
def reports(sample_data, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("glance")
    clean = report(str(one_sample(sample_data, tmp / "clean")))
    bad_slots = report(str(swapped_sample(sample_data, tmp / "shuffled")))  # L3 and L16 swapped
    # the seed's wiring bug, every slot passing: only the audit fails (config-only draft: audited, not probed)
    draft = tmp / "draft"
    draft.mkdir()
    shutil.copy(sample_data / "draft_eagle3" / "config.json", draft / "config.json")
    audit_only = report([str(one_sample(sample_data, tmp / "audited")), str(sample_data / "ladder")],
                        draft=str(draft), engine="sglang", trainer="speculators-v1")
    return {"clean": clean.html, "bad_slots": bad_slots.html, "audit_only": audit_only.html,
            "audit_ctx": audit_only.context}


def test_header_is_red_whenever_anything_fails(reports):
    for name in ("clean", "bad_slots", "audit_only"):
        html = reports[name]
        colour, sentence = _header(html)
        assert (colour == "fail") == _has_fail(html), name
        assert sentence.startswith(colour.replace("-", " ").upper() + ":"), (name, sentence)
    assert _header(reports["clean"])[0] in ("pass", "cannot-tell")  # sidecar claims: consistent, maybe unproven
    colour, sentence = _header(reports["bad_slots"])
    assert colour == "fail" and "1 file fails (2 slots: " in sentence
    colour, sentence = _header(reports["audit_only"])
    assert colour == "fail" and "not served the layers it was trained on" in sentence
    # what failed, named: trained → served for every fc slice the audit proves wrong (SGLang serves r = 2, 15, 27)
    wrong = [sl for sl in reports["audit_ctx"]["audit"].slices if sl.ok is False]
    assert wrong and wrong[0].trained_r == 0 and wrong[0].served_r == 2
    assert ", ".join(f"{r_label(sl.trained_r)}→{r_label(sl.served_r)}" for sl in wrong) in sentence


def test_key_numbers_and_audited_file_first(reports, sample_data):
    html, ctx = reports["audit_only"], reports["audit_ctx"]
    kn = ctx["key_numbers"]
    assert [k["format"] for k in kn] == ["speculators-v1", "generic"]  # the audited file's format first
    assert kn[0]["focus"] and kn[0]["fig"]["src"].startswith("data:image/svg+xml;base64,") and kn[1]["fig"] is None
    # token-0 norm and ‖x‖ of every slot against a float64 reference from the raw file
    hs = torch.load(sample_data / "speculators_v1" / "data_0.pt", weights_only=True)["hidden_states"]
    for row, h in zip(kn[0]["rows"], hs, strict=True):
        norms = h.double().norm(dim=-1)
        assert row["tok0"] == num(float(norms[0])) and row["median"] == num(float(norms.median()))
        assert row["mean_std"] == f"{num(float(norms.mean()))} ± {num(float(norms.std(correction=0)))}"
        assert (row["sink"] != "—") == bool(norms[0] >= 5 * norms[1:].median())
    assert [r["label"] for r in kn[0]["rows"]] == ["embed", "L3?", "L16?", "L28?"]  # data only: claims, marked
    # the audited file's cards are open, the unrelated ladder's are not
    opened = dict(re.findall(r'<details class="fgroup filecards" id="([^"]+)"( open)?>', html))
    assert opened[kn[0]["anchor"]] == " open" and opened[kn[1]["anchor"]] == ""


def test_provenance_last_and_sections_in_reading_order(reports):
    html = reports["audit_only"]
    order = [html.index(f'<section id="{s}">') for s in ("verdicts", "slots", "cross", "checks", "samples",
                                                         "provenance")]
    assert order == sorted(order) and html.index('id="verdict-sentence"') < order[0]


def test_one_number_style_in_the_report_and_the_cli(reports, sample_data, capsys, monkeypatch):
    """The L16 slot's token-0 norm (a sink, ~25,000) prints identically in `hsf inspect` and in the report."""
    monkeypatch.setenv("COLUMNS", "100")
    hs = torch.load(sample_data / "speculators_v1" / "data_0.pt", weights_only=True)["hidden_states"]
    tok0 = num(float(hs[2][0].double().norm()))
    assert re.fullmatch(r"\d{2},\d{3}", tok0)
    assert main(["inspect", str(sample_data / "speculators_v1" / "data_0.pt")]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "hidden_states[2]" in line)
    assert f" {tok0} " in row
    assert f">{tok0}</td>" in reports["audit_only"]
