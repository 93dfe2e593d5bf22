"""The cheap cross-slot test (issue 32): ``screen_sims`` computes the full test's centered cosines on its blocks
(checked against a float64 numpy reference written here), and the screen never hides a late slot the full
sample would find — on a long capture made of real SmolLM2 rows (the five speculators-v1 samples end to end,
518 rows: long enough for the screen to run) and on a Kimi-shaped synthetic capture (1281 rows, 7168 dims).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import forensics
from forensics.analysis import rows as R
from forensics.analysis.rows import check_rows


def _reference_sims(ts, rows, m):
    """Mean centered cosine of slot i's row t and slot j's row t + s over ``rows``, float64 numpy."""
    k = len(ts)
    out = np.zeros((k, k, 2 * m + 1))
    xs = []
    for h in ts:
        x = h.double().numpy()
        mu = x[rows].mean(0)
        x = x - mu
        xs.append(x / np.linalg.norm(x, axis=1, keepdims=True))
    for i in range(k):
        for j in range(k):
            if i != j:
                for s in range(-m, m + 1):
                    out[i, j, s + m] = float(np.mean(np.sum(xs[i][rows] * xs[j][rows + s], axis=1)))
    return out


@pytest.fixture(scope="module")
def long_real(sample_data):
    """The five speculators-v1 samples' rows end to end: a 518-row capture of real SmolLM2 states (embed, L3,
    L16, L28), with the ids end to end."""
    caps = [forensics.load(sample_data / "speculators_v1" / f"data_{i}.pt") for i in range(5)]
    states = [torch.cat([c.slots[j].tensor() for c in caps]) for j in range(4)]
    ids = torch.cat([c.input_ids.reshape(-1) for c in caps])
    return ids, states


def _capture(ids, states):
    from forensics.io.formats import as_capture

    return as_capture([s.contiguous() for s in states], input_ids=ids)


def _late(states, slot, o):
    """Slot ``slot`` o rows late (+1: its row t holds the others' row t + 1), every slot trimmed to one length."""
    n = int(states[0].shape[0]) - abs(o)
    out = []
    for i, s in enumerate(states):
        a = (o if o > 0 else 0) if i == slot else (0 if o > 0 else -o)
        out.append(s[a:a + n].clone())
    return out


def test_screen_sims_are_the_full_tests_cosines_on_the_block_rows(long_real):
    _, states = long_real
    layer = states[1:]  # the layer slots (the embedding slot is left out of the cross test)
    n = int(layer[0].shape[0])
    ok = np.ones(n, dtype=bool)
    ok[100:104] = False  # a broken run inside a block: those base rows do not count
    good = np.flatnonzero(ok[2:n - 2]) + 2
    starts, rows = R.screen_starts(good), R.screen_rows(good)
    assert starts is not None and rows is not None and 100 > int(starts[0])
    got = R.screen_sims(layer, starts, rows)
    ref = _reference_sims(layer, rows, R.CROSS_SHIFT)
    assert np.abs(got - ref).max() < 1e-5  # float32 cosines of unit rows
    assert np.abs(R._cross_sims(layer, rows, R.CROSS_SHIFT) - ref).max() < 1e-5


@pytest.mark.parametrize("slot,o", [(None, 0), (2, 1), (2, -1), (1, 1), (3, -1)])
def test_the_screen_finds_what_the_full_sample_finds_on_real_rows(long_real, slot, o):
    ids, states = long_real
    st = states if slot is None else _late(states, slot, o)
    ids2 = ids[:int(st[0].shape[0])]
    layer = st[1:]
    n = int(layer[0].shape[0])
    ok = np.ones(n, dtype=bool)
    full_rows = R._span(np.unique(np.flatnonzero(ok[2:n - 2])[np.linspace(0, n - 5, R.CROSS_ROWS).round()
                                                                  .astype(np.int64)] + 2), 2).size
    assert full_rows >= R.CROSS_SCREEN_SAVES * R.CROSS_SCREEN_BLOCKS * (R.CROSS_SCREEN_BLOCK_ROWS + 4)  # it runs
    screened = R._slot_offsets(*R.cross_offsets(layer, ok), [1, 2, 3])
    full = R._slot_offsets(*R.cross_offsets(layer, ok, screen=False), [1, 2, 3])
    assert screened == full
    rep = check_rows(_capture(ids2, st))
    kinds = [f.kind for f in rep.findings]
    if slot is None:
        assert R.screen_quiet(layer, np.arange(2, n - 2), full_rows=full_rows) and kinds == []
    else:
        assert not R.screen_quiet(layer, np.arange(2, n - 2))
        (f,) = [f for f in rep.findings if f.kind == "slot_misaligned"]
        assert f.slots == [slot] and f.evidence["offset"] == o


def test_a_kimi_shaped_clean_capture_is_settled_by_the_screen_and_a_late_slot_is_not():
    from forensics.io.synth import kimi_like

    cap = kimi_like(seed=3)
    ts = [s.tensor() for s in cap.slots][1:]
    n = int(ts[0].shape[0])
    good = np.arange(2, n - 2)
    assert R.screen_quiet(ts, good, full_rows=n)
    late = _late([s.tensor() for s in cap.slots], 2, 1)[1:]
    assert not R.screen_quiet(late, np.arange(2, n - 3))
    d, margin = R.cross_offsets(late, np.ones(n - 1, dtype=bool))
    assert R._slot_offsets(d, margin, [1, 2, 3])[0] == {2: 1}
