"""forensics.views.plots: figures build, carry titles/labels, and draw exactly the result's values (no recompute)."""

from __future__ import annotations

import importlib.util
import json
import os
from types import SimpleNamespace as NS

import numpy as np
import pytest

pytest.importorskip("matplotlib")
import torch  # noqa: E402

import forensics  # noqa: E402
from forensics.analysis.fingerprint.core import Fingerprint, SlotFingerprint  # noqa: E402
from forensics.views import plots as hp  # noqa: E402

SAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample_data")
V1 = os.path.join(SAMPLE, "speculators_v1", "data_0.pt")


def write_capture(folder: str, T: int = 48, H: int = 64, massive: float = 5000.0) -> str:
    """A tiny speculators-v1 capture declared as [embed, L3, L16, L28] with a sink and a massive activation."""
    os.makedirs(folder, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 40, (T,), generator=g)
    hs = [(torch.randn(40, H, generator=g) * 0.02)[ids]]
    for scale, sink in ((1.0, massive), (3.0, 300.0), (2.0, 0.0)):
        h = torch.randn(T, H, generator=g) * scale
        if sink:
            h[0, 7] = sink
        hs.append(h)
    path = os.path.join(folder, "data_0.pt")
    torch.save({"input_ids": ids, "hidden_states": [h.bfloat16() for h in hs], "loss_mask": torch.ones(T)}, path)
    with open(os.path.join(folder, "capture.json"), "w") as f:
        json.dump({"r": [0, 3, 16, 28], "num_layers": 30, "hidden_size": H}, f)
    return path


@pytest.fixture(scope="module")
def stats(tmp_path_factory):
    return forensics.summarize(write_capture(str(tmp_path_factory.mktemp("plots"))))


@pytest.fixture(scope="module")
def fake_fp(stats):
    """A Fingerprint-shaped object with known values (independent of the fingerprint engine)."""
    rows = [("L16", "middle", 0.6, 15), ("L3", "early", 0.8, 4), ("embed", "embedding", 0.99, 0),
            ("L28", "late", 0.7, 27)]  # deliberately disagrees with the declared order for slots 0–2
    sim = np.array([[0, .3, .4, .5], [.3, 0, .2, .3], [.4, .2, 0, .1], [.5, .3, .1, 0]])
    return Fingerprint(stats=stats, capture=stats.capture, similarity=sim, depth_order=[2, 1, 0, 3], findings=[],
                       slots=[SlotFingerprint(index=i, name=f"s{i}", label=lab, role=role, confidence=c, r_estimate=r,
                                              depth_rank=i) for i, (lab, role, c, r) in enumerate(rows)])


def _coll(fig, gid):
    found = [c for ax in fig.axes for c in list(ax.collections) + list(ax.lines) + list(ax.images)
             if c.get_gid() == gid]
    assert found, f"no artist with gid {gid!r}"
    return found[0]


def _texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_labels_from_declared_then_fingerprint(stats, fake_fp):
    assert hp.slot_labels(stats) == ["0: embed", "1: L3", "2: L16", "3: L28"]
    assert hp.slot_labels(fake_fp) == ["0: L16 (decl. embed)", "1: L3", "2: embed (decl. L16)", "3: L28"]


def test_norm_distributions_draws_the_norms(stats):
    fig = hp.norm_distributions(stats)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and "‖x‖" in ax.get_ylabel() and "data_0.pt" in ax.get_title()
    assert [t.get_text() for t in ax.get_xticklabels()] == hp.slot_labels(stats)
    for s in stats.slots:
        ys = _coll(fig, f"tokens-{s.index}").get_offsets()[:, 1]
        np.testing.assert_array_equal(np.sort(ys), np.sort(s.norms.astype(np.float64)))
        seg = _coll(fig, f"median-{s.index}").get_segments()[0]
        assert seg[0][1] == pytest.approx(s.norm.median)
    sink = _coll(fig, "sinks-1").get_offsets()
    assert sink[:, 1].tolist() == pytest.approx([float(stats.slots[1].norms[0])])
    assert stats.slots[1].sinks == [0]


def test_norm_by_position_line_is_slot_norms(stats):
    fig = hp.norm_by_position(stats, slots=[1, 3], token_range=(0, 20))
    ax = fig.axes[0]
    assert ax.get_xlabel() == "token position" and "0–20" in ax.get_title()
    for i in (1, 3):
        line = _coll(fig, f"norms-{i}")
        np.testing.assert_array_equal(line.get_xdata(), np.arange(21))
        np.testing.assert_array_equal(line.get_ydata(), stats.slots[i].norms[:21].astype(np.float64))
        assert line.get_label() == hp.slot_labels(stats)[i]
    assert [t["pos"] for t in stats.slots[1].massive_tokens] == [0]
    assert _coll(fig, "massive-1").get_offsets()[:, 0].tolist() == [0]
    assert not [ln for ln in ax.lines if ln.get_gid() == "norms-0"]  # unselected slot not drawn


def test_massive_dims(stats):
    assert stats.slots[1].massive_dims == [7]
    fig = hp.massive_dims(stats)
    assert _coll(fig, "massive-dims-1").get_offsets()[:, 0].tolist() == [7]
    assert "1000" in fig.axes[0].get_title() and "hidden dimension" in fig.axes[0].get_xlabel()


def test_similarity_heatmap_is_the_matrix(fake_fp):
    fig = hp.similarity_heatmap(fake_fp)
    np.testing.assert_array_equal(np.asarray(_coll(fig, "similarity").get_array()), fake_fp.similarity)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == hp.slot_labels(fake_fp)
    assert "0.3" in _texts(fig)


def test_depth_ladder_places_slots_on_r(fake_fp):
    fig = hp.depth_ladder(fake_fp)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [hp.slot_labels(fake_fp)[i] for i in (2, 1, 0, 3)]
    for row, i in enumerate(fake_fp.depth_order):
        off = _coll(fig, f"ladder-{i}").get_offsets()[0]
        assert off.tolist() == [fake_fp.slots[i].r_estimate, row]
        assert _coll(fig, f"declared-{i}").get_offsets()[0][0] == fake_fp.stats.slots[i].declared_r
    assert "L = 30" in ax.get_xlabel()
    assert any("early · conf 0.80" == t for t in _texts(fig))


def test_depth_ladder_final_post_sits_past_L(stats):
    fp = Fingerprint(stats=stats, capture=stats.capture, similarity=np.zeros((4, 4)), depth_order=[0, 1, 2, 3],
                     findings=[], slots=[SlotFingerprint(index=i, name=f"s{i}", role="x", confidence=1.0, r_estimate=r,
                                                         r_exact=r) for i, r in enumerate((0, 3, 16, "final_post"))])
    fig = hp.depth_ladder(fp)
    assert _coll(fig, "ladder-3").get_offsets()[0][0] > 30
    assert "post" in [t.get_text() for t in fig.axes[0].get_xticklabels()]


def test_audit_slices():
    from forensics.analysis.audit.parts import AuditSlice

    au = NS(wiring="mismatch", slices=[AuditSlice(k, t, s, False, "exact")
                                        for k, (t, s) in enumerate(((0, 3), (3, 31), (31, 59)))])
    fig = hp.audit_slices(au)
    texts = _texts(fig)
    assert "mismatch" in fig.axes[0].get_title()
    for lab in ("embed", "L3", "L31", "L59", "trained", "served"):
        assert lab in texts
    assert "no slice" in " ".join(_texts(hp.audit_slices(NS(wiring="cannot-tell", slices=[]))))


def test_png_and_html_export_and_no_pyplot_leak(stats, fake_fp):
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    figs = [hp.norm_distributions(stats), hp.norm_by_position(stats), hp.similarity_heatmap(fake_fp),
            hp.depth_ladder(fake_fp)]
    png = hp.figure_to_png_bytes(figs[0], dpi=100)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (w, h) == (700, 300)  # 7×3 in at 100 dpi
    html = hp.figure_to_html(figs[0])
    assert html.startswith("<img") and "data:image/png;base64," in html and "http" not in html
    assert plt.get_fignums() == before


def test_empty_selection_does_not_crash(stats):
    assert "no slot selected" in _texts(hp.norm_distributions(stats, slots=[]))


@pytest.mark.skipif(not os.path.exists(V1), reason="sample_data not present")
def test_real_capture_plots():
    st = forensics.summarize(V1)
    fig = hp.norm_distributions(st)
    for s in st.slots:
        ys = _coll(fig, f"tokens-{s.index}").get_offsets()[:, 1]
        assert ys.size == np.count_nonzero(np.isfinite(s.norms) & (s.norms > 0))
    if importlib.util.find_spec("forensics.analysis.fingerprint.core") is not None:
        fp = forensics.fingerprint(V1)
        for f in (hp.depth_ladder(fp), hp.similarity_heatmap(fp), hp.norm_by_position(fp)):
            assert len(hp.figure_to_png_bytes(f)) > 1000


def test_depth_ladder_relative_when_L_unknown(stats):
    import copy
    import dataclasses

    for s in stats.slots:
        assert s.declared_r is not None  # declared r exists but cannot be placed on a 0–1 axis
    cap = copy.copy(stats.capture)
    cap.meta = {k: v for k, v in cap.meta.items() if k != "num_layers"}
    assert cap.num_layers is None
    st = dataclasses.replace(stats, capture=cap, slots=[dataclasses.replace(s, declared_r=None) for s in stats.slots])
    fp = Fingerprint(stats=st, capture=cap, num_layers=None, similarity=np.zeros((4, 4)), depth_order=[0, 1, 2, 3],
                     findings=[], slots=[SlotFingerprint(index=i, name=f"s{i}", role=r, confidence=0.7, r_estimate=f,
                                                         depth_fraction=f)
                                         for i, (r, f) in enumerate((("embedding", 0), ("early", 0.125),
                                                                     ("middle", 0.375), ("late", 0.875)))])
    fig = hp.depth_ladder(fp)
    assert [_coll(fig, f"ladder-{i}").get_offsets()[0][0] for i in range(4)] == [0, 0.125, 0.375, 0.875]
    assert "relative depth" in fig.axes[0].get_xlabel()


def _scan_result():
    from forensics.analysis.scan.result import Anomaly

    slots = [{"index": i, "name": f"hidden_states[{i}]", "label": lab, "files": 3, "tokens": 30, "p05": m * 0.8,
              "p25": m * 0.9, "median": m, "p75": m * 1.1, "p95": m * 1.3, "max": m * 10}
             for i, (lab, m) in enumerate((("embed", 1.0), ("L3", 40.0), ("L16", 150.0)))]
    rows = [{"path": f"/d/data_{j}.pt", "format": "speculators-v1", "error": None,
             "slots": [{"norm": {"median": m * (1 + j / 10)}} for m in (1.0, 40.0, 150.0)]} for j in range(3)]
    return NS(summary={"groups": {"speculators-v1": {"files": 3, "slots": slots}}}, rows=rows,
              anomalies=[Anomaly("/d/data_2.pt", "reordered", None, "x")])


def test_scan_norms_draws_the_summary_quantiles():
    res = _scan_result()
    fig = hp.scan_norms(res)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and [t.get_text() for t in ax.get_xticklabels()] == ["0: embed", "1: L3", "2: L16"]
    assert _coll(fig, "scan-max").get_offsets()[:, 1].tolist() == [10.0, 400.0, 1500.0]
    assert [_coll(fig, f"scan-median-{i}").get_ydata()[0] for i in range(3)] == [1.0, 40.0, 150.0]
    assert "3 files" in ax.get_title()


def test_scan_file_medians_marks_anomalous_files():
    res = _scan_result()
    fig = hp.scan_file_medians(res)
    np.testing.assert_allclose(_coll(fig, "scan-medians-1").get_ydata(), [40.0, 44.0, 48.0])
    assert _coll(fig, "scan-anomalies").get_offsets()[:, 0].tolist() == [2]


def _probe_row(label, length, ci, tags=(), control=None, n=500):
    from forensics.analysis.probe import ProbeRow

    return ProbeRow(wiring=[0], label=label, tags=list(tags), top1=0.5, top1_ci=[0.4, 0.6], topk=0.6, n=n,
                    correct=n // 2, acceptance=[0.5, 0.3, 0.1], acceptance_length=length, acceptance_length_ci=ci,
                    control=control)


def test_probe_wirings_bars_are_acceptance_lengths():
    rows = [_probe_row("embed+L3+L16", 2.6, [2.5, 2.7], ["declared"]), _probe_row("L3+L16+L28", 1.4, [1.3, 1.5]),
            _probe_row("shift control (embed+L3+L16)", 1.05, [1.0, 1.1], control="shift")]
    fig = hp.probe_wirings(NS(rows=rows, target="verifier", steps=3))
    bars = [p for p in fig.axes[0].patches]
    assert [round(b.get_width(), 6) for b in bars] == [1.6, 0.4, 0.05]  # bars start at 1 (nothing accepted)
    assert [round(b.get_x(), 6) for b in bars] == [1.0, 1.0, 1.0]
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["embed+L3+L16  (declared)", "L3+L16+L28",
                                                                     "shift control (embed+L3+L16)"]
    assert bars[2].get_facecolor() != bars[1].get_facecolor()  # the control greyed
    assert "verifier" in fig.axes[0].get_xlabel() and "k = 3" in fig.axes[0].get_xlabel()


LADDER = os.path.join(SAMPLE, "ladder", "capture_0.safetensors")


@pytest.mark.skipif(not os.path.exists(LADDER), reason="sample_data not present")
def test_32_slot_ladder_figures_fit(recwarn):
    """A 32-slot capture: every figure lays out (no collapsed-axes warning) within the size budget."""
    fp = forensics.fingerprint(LADDER)
    for name in ("norm_distributions", "norm_by_position", "massive_dims", "similarity_heatmap", "depth_ladder"):
        fig = getattr(hp, name)(fp)
        hp.figure_to_png_bytes(fig)
        w, h = fig.get_size_inches()
        assert w <= hp.FIG_WIDTH and h <= hp.MAX_HEIGHT, name
    assert not [w for w in recwarn if "constrained_layout" in str(w.message)]
