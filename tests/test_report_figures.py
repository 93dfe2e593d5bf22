"""The report's figures: inline SVG written by forensics.views.report.svg, each (figure, result) drawn once.

The plotted values are read back from the SVG and compared with float64 references computed here; every
text is escaped (slot names, file names and titles come from the files under audit).
"""

from __future__ import annotations

import base64
import dataclasses
import math
import re
import subprocess
import sys
import types
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import forensics
from forensics.analysis.audit.parts import AuditSlice
from forensics.views.report import figures as F
from forensics.views.report import svg

NS = {"s": "http://www.w3.org/2000/svg"}
PIXEL = 0.005  # coordinates are written rounded to 0.01 px
EVIL = '<script>alert(1)</script>&"\'\x01\ufffe'


def _svg(src: str) -> ET.Element:
    assert src.startswith("data:image/svg+xml;base64,")
    return ET.fromstring(base64.b64decode(src.split(",", 1)[1]).decode("utf-8"))


@pytest.fixture(scope="module")
def fps(sample_data):
    return [forensics.fingerprint(sample_data / p) for p in
            ("speculators_v1/data_0.pt", "speculators/hidden_states/hs_0.safetensors")]


@pytest.fixture(scope="module")
def demo(sample_data):
    """The ``make demo`` report (sample_data/ with the committed draft, SGLang, speculators-v1 trainer)."""
    from forensics.views.report.core import report

    draft = sample_data / "draft_eagle3"
    if not (draft / "model.safetensors").is_file():
        pytest.skip("sample_data/draft_eagle3 is not in this checkout")
    return report([str(sample_data)], draft=str(draft), engine="sglang", trainer="speculators-v1")


def test_same_figure_of_same_result_is_drawn_once_and_fills_every_request(fps, monkeypatch):
    drawn = []
    real = F.draw
    monkeypatch.setattr(F, "draw", lambda name, *a: drawn.append(name) or real(name, *a))
    figs = F.Figures()
    a = figs.request("norm_distributions", fps[0], title="key numbers")
    b = figs.request("norm_distributions", fps[0], title="cross")
    c = figs.request("norm_distributions", fps[1], title="other file")
    assert len(figs) == 2
    ticks = []
    figs.draw(progress=lambda done, total: ticks.append((done, total)))
    assert drawn == ["norm_distributions"] * 2 and ticks[-1] == (2, 2)
    assert a["src"] == b["src"] != c["src"] and a["src"].startswith("data:image/svg+xml;base64,")
    assert (a["title"], b["title"], a["error"]) == ("key numbers", "cross", None)
    assert a["src"] == real("norm_distributions", fps[0])["src"]  # deterministic: the same bytes drawn again


def test_every_figure_of_the_demo_report_is_well_formed_svg(demo):
    html = demo.html
    srcs = re.findall(r'<img class="fig[^"]*"[^>]* src="([^"]+)"', html)
    assert len(srcs) >= 18 and "data:image/png" not in html
    kinds = set()
    for src in srcs:
        root = _svg(src)
        assert root.tag == "{http://www.w3.org/2000/svg}svg" and float(root.get("width")) > 100
        kinds |= {re.sub(r"-\d.*$", "", el.get("class")) for el in root.iter() if el.get("class")}
    # violins, token strips, heatmap cells, ladder dots, massive dims, audit slices and probe bars all drawn
    assert {"violin", "tokens", "cell", "ladder", "massive-dims", "slice", "probe-length"} <= kinds
    assert "figure unavailable" not in html


def test_the_report_path_does_not_import_matplotlib(sample_data, tmp_path):
    code = ("import sys, forensics.views.report.core as c; "
            f"c.report([{str(sample_data / 'speculators_v1')!r}]).save({str(tmp_path / 'r.html')!r}); "
            "assert 'matplotlib' not in sys.modules, 'matplotlib imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def _polygon(root: ET.Element, cls: str) -> np.ndarray:
    el = root.find(f".//s:polygon[@class='{cls}']", NS)
    return np.array([[float(v) for v in p.split(",")] for p in el.get("points").split()])


def test_violins_and_strips_are_the_kde_and_norms_of_each_slot(fps):
    """Read each violin back: its y coordinates are linear in log10(norm) between the slot's smallest and
    largest finite norm, its half-widths the Silverman KDE (float64, computed here) scaled to its peak."""
    fp = fps[0]
    root = ET.fromstring(svg.norm_distributions(fp))
    for s in fp.stats.slots:
        n = np.asarray(s.norms, dtype=np.float64)
        x = np.log10(n[np.isfinite(n) & (n > 0)])
        bw = max(1.06 * x.std() * x.size ** -0.2, 1e-3)
        grid = np.linspace(x.min(), x.max(), 128)
        dens = np.exp(-0.5 * ((grid[:, None] - x[None, :]) / bw) ** 2).sum(axis=1)
        dens /= dens.max()
        pts = _polygon(root, f"violin-{s.index}")
        right, left = pts[:128], pts[128:][::-1]
        np.testing.assert_allclose(right[:, 1], left[:, 1], atol=0)  # mirrored
        y = right[:, 1]  # pixel y = a + b * log10(norm): the first point is the smallest norm, the last the largest
        b = (y[-1] - y[0]) / (x.max() - x.min())
        assert b < 0  # larger norms higher up
        np.testing.assert_allclose(y[0] + b * (grid - x.min()), y, atol=2 * PIXEL)
        centre = (right[:, 0] + left[:, 0]) / 2
        half = (right[:, 0] - left[:, 0]) / 2
        np.testing.assert_allclose(centre, centre[0], atol=PIXEL)
        np.testing.assert_allclose(half / half.max(), dens, atol=2 * PIXEL / half.max())
        # the token strip: every finite positive norm (no striding at this length), at its own height
        d = root.find(f".//s:path[@class='tokens-{s.index}']", NS).get("d")
        ys = np.array([float(m) for m in re.findall(r"M[-\d.]+ ([-\d.]+)h0", d)])
        assert x.size <= 4000 and ys.size == x.size
        np.testing.assert_allclose(np.sort((ys - y[0]) / b + x.min()), np.sort(x), atol=2 * PIXEL / abs(b))


def test_heatmap_cells_are_matplotlibs_cividis_of_the_distances(fps):
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    fp = fps[1]
    sim = np.asarray(fp.similarity, dtype=np.float64)
    vmax = float(np.nanmax(sim))
    root = ET.fromstring(svg.similarity_heatmap(fp))
    for a in range(sim.shape[0]):
        for b in range(sim.shape[0]):
            cell = root.find(f".//s:rect[@class='cell-{a}-{b}']", NS)
            assert cell.get("fill") == to_hex(colormaps["cividis"](sim[a, b] / vmax))


def test_colours_match_the_matplotlib_figures():
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    from forensics.views import plots

    assert [svg.cividis(i / 256) for i in range(256)] == [to_hex(colormaps["cividis"](i)) for i in range(256)]
    for k in (3, 8, 9, 32):
        assert [c.lower() for c in svg.slot_colors(k)] == [to_hex(c) for c in plots.slot_colors(k)]


def _probe_row(label, length, ci, tags=(), control=None, n=508):
    from forensics.analysis.probe import ProbeRow

    return ProbeRow(wiring=[0], label=label, tags=list(tags), top1=0.2, top1_ci=[0.15, 0.25], topk=0.3, n=n,
                    correct=n // 5, acceptance=[0.2, 0.05, 0.01], acceptance_length=length, acceptance_length_ci=ci,
                    control=control)


def test_probe_bars_are_the_acceptance_lengths():
    rows = [_probe_row("embed+L3+L16", 1.30, (1.19, 1.40), ["declared"]), _probe_row("L3+embed+L16", 1.18, None),
            _probe_row("random control (embed+L3+L16)", 1.12, (1.08, 1.16), control="random")]
    root = ET.fromstring(svg.probe_wirings(types.SimpleNamespace(rows=rows, target=None, steps=3)))
    w = [float(root.find(f".//s:rect[@class='probe-length-{k}']", NS).get("width")) for k in range(3)]
    assert w[1] / w[0] == pytest.approx(0.18 / 0.30, abs=2 * PIXEL / w[0])  # lengths minus 1: bars start at 1
    assert root.find(".//s:rect[@class='probe-length-0']", NS).get("stroke") == "#000000"  # declared: outlined
    assert root.find(".//s:rect[@class='probe-length-1']", NS).get("stroke") is None
    assert root.find(".//s:rect[@class='probe-length-2']", NS).get("fill") == "#bbbbbb"  # the control greyed


def _texts(root: ET.Element) -> str:
    return " ".join("".join(t.itertext()) for t in root.iter() if t.tag.endswith(("text", "title")))


def test_untrusted_names_and_titles_are_escaped(fps):
    """Slot names, a verdict, slice names and wiring labels carrying markup and XML-invalid characters give
    well-formed SVG whose text shows them literally."""
    fp = fps[0]
    stats = dataclasses.replace(fp.stats, slots=[dataclasses.replace(s, name=EVIL + s.name, declared_r=None)
                                                 for s in fp.stats.slots])
    shown = EVIL.replace("\x01", "\\x01").replace("\ufffe", "\\xfffe")
    out = [svg.norm_distributions(stats, title=EVIL), svg.massive_dims(stats),
           svg.audit_slices(types.SimpleNamespace(wiring=EVIL, slices=[AuditSlice(EVIL, 0, 2, False, "exact")])),
           svg.probe_wirings(types.SimpleNamespace(rows=[_probe_row(EVIL, 1.5, None, n=3)], target=None, steps=3))]
    for text in out:
        assert "<script" not in text and "\x01" not in text
        root = ET.fromstring(text)
        assert shown in _texts(root) and not root.findall(".//s:script", NS)


def test_degenerate_inputs_still_draw(fps):
    fp = fps[0]
    assert "no slot selected" in svg.norm_distributions(fp, slots=[])
    assert "no wiring was scored" in svg.probe_wirings(types.SimpleNamespace(rows=[], target=None, steps=3))
    assert "no slice information" in svg.audit_slices(types.SimpleNamespace(wiring="?", slices=[]))
    one = dataclasses.replace(fp.stats, slots=[dataclasses.replace(fp.stats.slots[0],
                                                                   norms=np.full(4, math.nan, np.float32))])
    ET.fromstring(svg.norm_distributions(one))  # no finite norm: empty axes, still well formed


@pytest.mark.parametrize(("lo", "hi"), [(101.0, 103.0), (3.0, 40.0), (0.5, 2e4), (1e-3, 2e-3)])
def test_log_axis_ticks_lie_inside_the_span_and_every_span_gets_one(lo, hi):
    ticks, labels = svg.log_ticks(lo, hi)
    assert ticks and len(ticks) == len(labels) and all(lo <= t <= hi for t in ticks)
    assert ticks == sorted(ticks) and len(set(labels)) == len(labels)
