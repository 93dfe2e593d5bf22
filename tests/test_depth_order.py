"""The data-only depth order's two tie rules (forensics.analysis.fingerprint.rules.chain_order), on hand-made
distances and norms shaped like the SmolLM2 cases that motivated them (real values from the tuning half)."""

from types import SimpleNamespace

import numpy as np

from forensics.analysis.fingerprint.rules import NEAR_TIE_PATH, chain_order


def _slot(median: float, spread: float = 0.12, sink: bool = True) -> SimpleNamespace:
    """What chain_order reads of a SlotStats: the token-norm summary (spread) and the sink signals."""
    norms = SimpleNamespace(median=median, mad=spread * median / 1.4826)
    return SimpleNamespace(norm_excl_first=norms, massive_tokens=[0] if sink else [], sinks=[0] if sink else [],
                           first_ratio=8.0 if sink else 1.0)


def _D(edges: dict, n: int) -> np.ndarray:
    D = np.zeros((n, n))
    for (a, b), d in edges.items():
        D[a, b] = D[b, a] = d
    return D


def test_a_near_tie_of_paths_is_broken_by_the_norms():
    # L2, L6, L21 (median norms 67, 96, 185): the path L6 → L2 → L21 is 0.18 % cheaper than the true one
    D = _D({(0, 1): 0.19, (1, 2): 0.30, (0, 2): 0.2991}, 3)
    best, true = 0.19 + 0.2991, 0.19 + 0.30
    assert (true - best) / best < NEAR_TIE_PATH  # the distances alone prefer the wrong path
    meds = [67.0, 96.0, 185.0]
    order = chain_order(D, [0, 1, 2], [_slot(m) for m in meds], meds)
    assert order.path == [0, 1, 2]
    assert order.confidence < 0.75  # a near-tie is never a decided order


def test_a_clear_path_is_kept_against_the_norms():
    # the distances decide by 20 %: the norms (which fall at the end, like a real last layer's) do not overrule
    D = _D({(0, 1): 0.1, (1, 2): 0.1, (0, 2): 0.3}, 3)
    meds = [50.0, 150.0, 120.0]
    assert chain_order(D, [0, 1, 2], [_slot(m) for m in meds], meds).path == [0, 1, 2]


def test_a_maybe_post_norm_end_beside_the_deepest_slot_casts_no_norm_vote():
    # L4, L8, L12 and a post-norm final (norm 48, sinkless) that the chain puts beside L12 (norm 147): counting
    # its collapsed norm, the votes cancel and the norm order would rank it shallowest
    D = _D({(0, 1): 0.21, (1, 2): 0.20, (0, 2): 0.26, (2, 3): 0.46, (0, 3): 0.47, (1, 3): 0.46}, 4)
    meds = [92.0, 121.0, 147.0, 48.0]
    slots = [_slot(92.0), _slot(121.0), _slot(147.0), _slot(48.0, spread=0.109, sink=False)]
    assert chain_order(D, [0, 1, 2, 3], slots, meds).path[0] == 3  # without the rule: shallowest
    assert chain_order(D, [0, 1, 2, 3], slots, meds, quiet=[3]).path == [0, 1, 2, 3]


def test_a_maybe_post_norm_slot_inside_the_chain_still_votes():
    # the same slot at the shallow end beside a small-norm layer is a layer (SmolLM2 L1/L2 look like this)
    D = _D({(0, 1): 0.13, (1, 2): 0.2, (0, 2): 0.3}, 3)
    meds = [44.0, 77.0, 185.0]
    slots = [_slot(44.0, sink=False), _slot(77.0), _slot(185.0)]
    assert chain_order(D, [0, 1, 2], slots, meds, quiet=[0]).path == [0, 1, 2]


def test_betweenness_tells_a_post_norm_final_from_a_shallow_layer():
    from forensics.analysis.fingerprint.rules import OFF_LINE_BETWEENNESS, off_line

    # layers L13, L14, L17 (slots 0-2) and a sinkless low-norm slot 3; distances like the tuning ladders' means
    layers = {(0, 1): 0.086, (1, 2): 0.134, (0, 2): 0.152}
    meds = [159.0, 167.0, 193.0, 45.0]
    slots = [_slot(m) for m in meds[:3]] + [_slot(45.0, sink=False)]
    post = _D({**layers, (0, 3): 0.446, (1, 3): 0.445, (2, 3): 0.447}, 4)  # γ: equally far from every layer
    shallow = _D({**layers, (0, 3): 0.29, (1, 3): 0.30, (2, 3): 0.33}, 4)  # L1: farther from the deeper layers
    beta_post = (0.447 - 0.446) / 0.152
    beta_shallow = (0.33 - 0.29) / 0.152
    assert beta_post < OFF_LINE_BETWEENNESS <= beta_shallow
    ev = [[] for _ in range(4)]
    assert off_line(post, [0, 1, 2, 3], [3], slots, meds, ev) == {3: True}
    assert off_line(shallow, [0, 1, 2, 3], [3], slots, meds, ev) == {3: False}
    assert [e.value for e in ev[3]] == [beta_post, beta_shallow]
