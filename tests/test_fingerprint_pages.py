"""The fingerprint gives its file's pages back as it goes (``forensics.io.pages``), and that changes nothing.

A fingerprint with the releases must equal the one without, bit for bit (its whole JSON, and the scan row built
from it), on a real SmolLM2 capture (sample_data, ``hsf capture``) and a Kimi-shaped file; and the releases must
really happen: after the fingerprint the slots hold few present pages of their file mapping, where without them
every page the stages read stays mapped.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from cli_tools import present_pages

from forensics.analysis.fingerprint.core import fingerprint
from forensics.analysis.scan.rows import file_row
from forensics.io import pages
from forensics.io.formats import load

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="page tables read from /proc (Linux)")

ROOT = Path(__file__).resolve().parents[1]
SMOL = ROOT / "sample_data" / "speculators_v1" / "data_3.pt"  # a real SmolLM2-135M capture (hsf capture)


def _present(t: torch.Tensor) -> int:
    return present_pages(t, pages.PAGE)


def _run(path: Path, monkeypatch, release: bool) -> tuple[str, dict, int, int, int]:
    """The fingerprint's JSON and the scan row of ``path``, the released runs counted, and the present and total
    pages of its slots after the fingerprint (the capture still open)."""
    with monkeypatch.context() as m:
        done = []
        real = pages.release

        def counted(start: int, end: int) -> bool:
            ok = real(start, end)
            done.append(ok)
            return ok

        m.setattr(pages, "release", counted)
        if not release:
            m.setattr(pages, "_libc", lambda: None)  # what a platform without madvise does: nothing released
        cap = load(path)
        fp = fingerprint(cap)
        ts = [s.tensor() for s in cap.slots]
        present = sum(_present(t) for t in ts)
        total = sum(-(-t.numel() * t.element_size() // pages.PAGE) for t in ts)
        doc = json.dumps(fp.to_dict(), sort_keys=True, default=str)
        st = path.stat()
        row = file_row(str(path), st.st_size, st.st_mtime_ns, use_fingerprint=True)
        row.pop("elapsed")
        return doc, row, sum(done), present, total


def _same_with_and_without(path: Path, monkeypatch) -> None:
    on_doc, on_row, released, on_present, total = _run(path, monkeypatch, True)
    off_doc, off_row, none, off_present, _ = _run(path, monkeypatch, False)
    assert none == 0
    assert released > 0  # the releases ran ...
    assert on_present <= total // 4 < off_present  # ... and left little of the file mapped; without, it stays
    assert on_doc == off_doc
    assert on_row == off_row


def test_fingerprint_with_releases_equals_without_on_a_real_smollm2_capture(monkeypatch):
    monkeypatch.setattr(pages, "RELEASE_BYTES", pages.PAGE)  # a 93-token SmolLM2 slot is 107 KB: release it too
    _same_with_and_without(SMOL, monkeypatch)


def test_fingerprint_with_releases_equals_without_on_a_kimi_shaped_file(tmp_path, monkeypatch):
    from forensics.io.synth import kimi_like, write_speculators_v1

    p = tmp_path / "data_0.pt"
    write_speculators_v1(kimi_like(seed=5, hidden=4096), str(p))  # 4 × 10.5 MB bf16 slots: releases at 4 MB runs
    _same_with_and_without(p, monkeypatch)
