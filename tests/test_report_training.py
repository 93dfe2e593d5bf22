"""The report audits and probes the draft on its training files, not on whatever file comes first."""

from __future__ import annotations

import pytest

import forensics


@pytest.fixture(scope="module")
def demo_report(sample_data):
    draft = sample_data / "draft_eagle3"
    if not (draft / "model.safetensors").is_file():
        pytest.skip("no committed draft in sample_data/")
    return forensics.report([str(sample_data)], draft=str(draft), engine="sglang", trainer="speculators-v1")


def test_audit_uses_the_trainers_format_not_the_first_file(demo_report):
    audit = demo_report.context["audit"]
    # sample_data/ lists the 32-slot ladder first; the draft was trained on speculators-v1 [embed, L3, L16]
    assert [s["trained_r"] for s in audit.to_dict()["slices"]] == [0, 3, 16]
    assert audit.wiring == "mismatch"  # SGLang ignores the top-level ids: default r = {2, 15, 27}
    assert [s["served_r"] for s in audit.to_dict()["slices"]] == [2, 15, 27]


def test_probe_uses_every_training_file(demo_report):
    probe = demo_report.context["probe"]
    best = probe.to_dict()["rows"][0]
    assert best["wiring"] == [0, 3, 16]
    # the five speculators-v1 samples give ~500 positions; the 119-token ladder alone gave 117
    assert best["n"] > 300


def test_training_files_follow_the_trainer_by_any_of_its_names():
    """``--trainer`` in any spelling picks that trainer's data format out of a mixed folder (the raw word
    ``speculators-legacy`` matched no format and fell back to the most common one)."""
    from types import SimpleNamespace

    from forensics.analysis.report import training_files
    from forensics.models import conventions as cv

    def f(fmt: str) -> SimpleNamespace:
        return SimpleNamespace(error=None, capture=SimpleNamespace(format=fmt))

    files = [f("speculators"), f("speculators"), f("speculators"), f("speculators-v1"), f("specforge")]
    for s in cv.ALL:
        for alias in s.aliases:
            got = {x.capture.format for x in training_files(files, cv.system(alias))}
            known = {"speculators-v1", "specforge", "speculators"}
            want = {s.data_format} if s.data_format in known else {"speculators"}  # else: the most common format
            assert got == want, alias
