"""Bad row ranges drawn as shaded bands on the per-token norm plot: matplotlib (notebook, sample browser) and the
report's SVG twin from the same data (``position_lines``), on a real SmolLM2 capture with a zero block."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import forensics.views.plots as hp
from forensics.analysis.rows import check_rows
from forensics.analysis.stats import summarize
from forensics.io.formats import load
from forensics.views.plots.slots import bad_rows_of, position_lines
from forensics.views.report import svg

ZERO = (40, 59)


@pytest.fixture(scope="module")
def corrupted(sample_data, tmp_path_factory):
    """sample_data's speculators v1 data_0 (93 tokens) with rows 40–59 zero in every slot."""
    x = torch.load(sample_data / "speculators_v1" / "data_0.pt", weights_only=True)
    for h in x["hidden_states"]:
        h[ZERO[0]:ZERO[1] + 1] = 0
    p = tmp_path_factory.mktemp("bands") / "data_0.pt"
    torch.save(x, p)
    cap = load(p)
    return summarize(cap), check_rows(cap)


def test_bands_are_the_row_reports_bad_rows(corrupted):
    st, rep = corrupted
    assert rep.bad_rows == {i: [ZERO] for i in range(4)}  # the row check itself (independent of the plot)
    pl = position_lines(st, [0, 1, 2, 3], bad_rows=rep.bad_rows)
    assert pl.bands == [(ZERO[0], ZERO[1], [0, 1, 2, 3])]
    for i, pos, n in pl.lines:
        np.testing.assert_array_equal(pos, np.arange(93))
        np.testing.assert_array_equal(n, st.slots[i].norms.astype(np.float64))
        assert (n[ZERO[0]:ZERO[1] + 1] == 0).all()
    # clipped to the token range; a range that misses the band has none
    assert position_lines(st, [1], (50, 70), rep.bad_rows).bands == [(50, ZERO[1], [1])]
    assert position_lines(st, [1], (0, 30), rep.bad_rows).bands == []
    # one slot's own band names that slot
    one = position_lines(st, [0, 1], bad_rows={1: [(3, 4)]})
    assert one.bands == [(3, 4, [1])] and hp.slots.band_label(one.bands, 2) == "bad rows (slot 1)"


def test_bands_default_to_the_results_row_report(corrupted):
    st, rep = corrupted
    res = SimpleNamespace(stats=st, rows=rep, slots=[])
    assert bad_rows_of(res) == rep.bad_rows and bad_rows_of(st) == {}
    assert position_lines(res, [2]).bands == [(ZERO[0], ZERO[1], [2])]


def test_matplotlib_band_spans_the_bad_rows(corrupted):
    st, rep = corrupted
    fig = hp.norm_by_position(st, bad_rows=rep.bad_rows)
    ax = fig.axes[0]
    band = [p for p in ax.patches if p.get_gid() == f"bad-rows-{ZERO[0]}-{ZERO[1]}"]
    assert len(band) == 1
    assert band[0].get_x() == ZERO[0] - 0.5 and band[0].get_x() + band[0].get_width() == ZERO[1] + 0.5  # data x
    assert any(t.get_text() == "bad rows (every slot)" for t in ax.get_legend().get_texts())
    assert not [p for p in hp.norm_by_position(st).axes[0].patches if (p.get_gid() or "").startswith("bad-rows")]


def test_svg_band_and_broken_lines(corrupted):
    st, rep = corrupted
    text = svg.norm_by_position(st, bad_rows=rep.bad_rows, title="rows <shaded>")
    assert "<title>rows &lt;shaded&gt;</title>" in text
    rect = re.search(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"[^>]*class="bad-rows-40-59"', text)
    frame = re.search(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)" height="[\d.]+" fill="none" '
                      r'stroke="#333333"', text)
    assert rect and frame
    left, w = float(frame[1]), float(frame[2])
    x0, x1 = -0.5, 92.5  # the axis spans the token range ± half a row
    assert float(rect[1]) == pytest.approx(left + (ZERO[0] - 0.5 - x0) / (x1 - x0) * w, abs=0.02)
    assert float(rect[2]) == pytest.approx((ZERO[1] - ZERO[0] + 1) / (x1 - x0) * w, abs=0.03)
    for i in range(4):  # the zero rows cannot sit on a log axis: each line is broken there, in two pieces
        d = re.search(rf'<path d="([^"]+)" fill="none" stroke="[^"]+" stroke-width="[\d.]+" class="norms-{i}"', text)
        assert d and d[1].count("M") == 2 and d[1].count("L") == 93 - 20 - 2
    assert "bad rows (every slot)" in text
    assert "bad-rows" not in svg.norm_by_position(st)
    assert svg.FIGURES["norm_by_position"] is svg.norm_by_position


def test_a_fingerprint_gives_its_row_findings_bad_rows(corrupted, sample_data, tmp_path):
    """A fingerprint carries the row findings: the report's norm-by-position figure shades their rows."""
    from forensics.analysis.fingerprint.core import fingerprint

    st, rep = corrupted
    fp = fingerprint(st.capture)
    assert bad_rows_of(fp) == {i: [ZERO] for i in range(4)} == rep.bad_rows
    assert "bad-rows-40-59" in svg.norm_by_position(fp)
    clean = fingerprint(load(sample_data / "speculators_v1" / "data_1.pt"))
    assert bad_rows_of(clean) == {} and "bad-rows" not in svg.norm_by_position(clean)
