"""forensics.views.report.figures: each (figure, result) drawn once; forked workers give the same PNGs."""

from __future__ import annotations

import os

import pytest

import forensics
from forensics.views.report import figures as F

NAMES = ("norm_distributions", "similarity_heatmap", "depth_ladder", "massive_dims")


@pytest.fixture(scope="module")
def fps(sample_data):
    return [forensics.fingerprint(sample_data / p) for p in
            ("speculators_v1/data_0.pt", "speculators/hidden_states/hs_0.safetensors")]


def _batch(fps, workers):
    figs = F.Figures(workers)
    asked = [figs.request(n, fp, title=f"{n} {k}") for k, fp in enumerate(fps) for n in NAMES]
    return figs, asked


def test_same_figure_of_same_result_is_drawn_once_and_fills_every_request(fps, monkeypatch):
    drawn = []
    real = F.draw
    monkeypatch.setattr(F, "draw", lambda name, *a: drawn.append(name) or real(name, *a))
    figs = F.Figures(1)
    a = figs.request("norm_distributions", fps[0], title="key numbers")
    b = figs.request("norm_distributions", fps[0], title="cross")
    c = figs.request("norm_distributions", fps[1], title="other file")
    assert len(figs) == 2
    figs.draw()
    assert drawn == ["norm_distributions"] * 2
    assert a["src"] == b["src"] != c["src"] and a["src"].startswith("data:image/png;base64,")
    assert (a["title"], b["title"], a["error"]) == ("key numbers", "cross", None)
    assert a["src"] == real("norm_distributions", fps[0])["src"]  # the same PNG as drawing it alone


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_forked_workers_draw_the_same_pngs(fps, monkeypatch):
    monkeypatch.setattr(F, "_spare_cpus", lambda: 2)
    monkeypatch.setattr(F.sys, "platform", "linux")
    serial, want = _batch(fps, 1)
    serial.draw()
    forked, got = _batch(fps, 2)
    ticks = []
    forked.draw(progress=lambda done, total: ticks.append((done, total)))
    assert [g["src"] for g in got] == [w["src"] for w in want] and all(g["src"] for g in got)
    assert [g["title"] for g in got] == [w["title"] for w in want]
    assert ticks[-1] == (len(got), len(got))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_dead_worker_leaves_its_figures_to_this_process(fps, monkeypatch):
    monkeypatch.setattr(F, "_spare_cpus", lambda: 2)
    serial, want = _batch(fps, 1)
    serial.draw()
    real, parent = F.draw, os.getpid()

    def dies_in_a_worker(name, *args):
        if name == "similarity_heatmap" and os.getpid() != parent:
            os._exit(3)
        return real(name, *args)

    monkeypatch.setattr(F, "draw", dies_in_a_worker)
    forked, got = _batch(fps, 2)
    forked.draw()
    assert [g["src"] for g in got] == [w["src"] for w in want]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_hung_worker_is_killed_and_its_figures_drawn_here(fps, monkeypatch):
    import time

    monkeypatch.setattr(F, "_spare_cpus", lambda: 2)
    monkeypatch.setattr(F, "FORKED_BATCH_SECONDS", 3.0)
    monkeypatch.setattr(F, "FORKED_FIGURE_SECONDS", 0.0)
    serial, want = _batch(fps, 1)
    serial.draw()
    real, parent = F.draw, os.getpid()

    def hangs_in_a_worker(name, *args):
        if name == "depth_ladder" and os.getpid() != parent:
            time.sleep(600)
        return real(name, *args)

    monkeypatch.setattr(F, "draw", hangs_in_a_worker)
    forked, got = _batch(fps, 2)
    t0 = time.monotonic()
    forked.draw()
    assert time.monotonic() - t0 < 60
    assert [g["src"] for g in got] == [w["src"] for w in want]


@pytest.mark.parametrize(("load", "spare"), [(0.3, 2), (1.2, 1), (6.0, 1)])
def test_workers_only_on_cores_the_machine_leaves_idle(monkeypatch, load, spare):
    monkeypatch.setattr(F.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(F.os, "getloadavg", lambda: (load, load, load))
    assert F._spare_cpus() == spare
