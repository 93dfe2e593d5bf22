"""End-to-end QA regressions: each test failed before the fix it guards (see the commit that added it)."""

from __future__ import annotations

import numpy as np

import forensics
from forensics.fingerprint_rules import order_chain
from forensics.stats import summarize


def test_order_chain_without_direction_signal_keeps_norm_order(sample_data):
    """A near-tied chain with a zero direction vote fell back to the chain's arbitrary listing, not norm order.

    Real case: a ladder of a raw code snippet, slots [L2, L4, L5, L30] unshuffled; L30 is equally far
    (0.477) from all three, so the chain 2 → 1 → 0 → 3 (L5, L4, L2, L30) beat the true one by 0.2 %,
    its norm τ was 0, and the output read "no direction signal: norm order kept" while listing L5 first.
    Distances are those measured there; the slot statistics are the committed ladder's L2, L4, L5, L30.
    """
    cap = forensics.load(sample_data / "ladder" / "capture_0.safetensors")
    st = summarize(cap)
    slots = [st.slots[i] for i in (2, 4, 5, 30)]
    meds = [s.norm_excl_sinks.median for s in slots]
    assert meds == sorted(meds)  # norms rise with depth here, so norm order is the true order
    D = np.array([[0.000, 0.160, 0.193, 0.477],
                  [0.160, 0.000, 0.127, 0.477],
                  [0.193, 0.127, 0.000, 0.478],
                  [0.477, 0.477, 0.478, 0.000]])
    path, ev = order_chain(D, [0, 1, 2, 3], slots, meds)
    direction = next(e for e in ev if e.signal == "direction")
    if "norm order kept" in direction.verdict:
        assert path == [0, 1, 2, 3], f"says norm order kept but orders {path}"
    else:
        assert path == [0, 1, 2, 3]
