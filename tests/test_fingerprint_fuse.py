"""The fingerprint's samples computed in cache-sized pieces (issue 32) give the values of the one-batch code.

- the distance sample centres and multiplies its float32 buffer a few rows at a time
  (``depth.DISTANCE_CHUNK_ELEMENTS``): its distances and standard errors equal, bit for bit, those of the former
  one mean-subtraction and one batched matmul over all rows (kept here), with chunks that do and do not divide the
  rows, with a near-parallel pair (the float64 redo) and with masked dims, and lie within float32 rounding of a
  float64 numpy reference on the same rows;
- the cross-slot screen multiplies every pair block by block: its cosines equal the former batched products';
- a whole fingerprint (``to_dict``) of a Kimi-shaped file is identical with the former code.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import forensics
from forensics.analysis import rows as R
from forensics.analysis.fingerprint import depth


def _old_distances_in_buffer(tensors, rows, masks, population, finite=False, *extra):
    """The distance sample as computed before: the whole buffer centred at once, one batched matmul."""
    n, k, H = int(rows.numel()), len(tensors), int(tensors[0].shape[1])
    X = torch.empty(n, k, H, dtype=torch.float32)
    for i, (t, m) in enumerate(zip(tensors, masks, strict=True)):
        X[:, i].copy_(t.index_select(0, rows))
        if m:
            X[:, i, m] = 0.0
    if not finite:
        torch.nan_to_num_(X, nan=0.0, posinf=0.0, neginf=0.0)
    X.sub_(X.mean(0))
    G = torch.bmm(X, X.transpose(1, 2)).to(torch.float64).numpy()
    d = np.sqrt(np.maximum(np.einsum("bii->bi", G), 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        c = G / (d[:, :, None] * d[:, None, :])
    np.einsum("bii->bi", c)[:] = 0.0
    near = np.flatnonzero((np.nan_to_num(c, nan=0.0) > depth.NEAR_PARALLEL_COS).any((1, 2)))
    if near.size:
        X64 = X[torch.from_numpy(near)].to(torch.float64)
        G[near] = torch.bmm(X64, X64.transpose(1, 2)).numpy()
    a = depth._angles(G)
    return depth._sample_result(a.sum(0), (a * a).sum(0), n, population)


def _float64_distances(tensors, rows, mask):
    """Masked, mean-centred mean angular distance in float64 numpy (independent of the library)."""
    xs = []
    for t in tensors:
        x = t[torch.from_numpy(rows)].double().numpy().copy()
        x[:, mask] = 0.0
        x -= x.mean(0)
        xs.append(x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-300))
    k = len(xs)
    D = np.zeros((k, k))
    for i in range(k):
        for j in range(i + 1, k):
            D[i, j] = D[j, i] = float(np.mean(np.arccos(np.clip((xs[i] * xs[j]).sum(1), -1, 1))) / math.pi)
    return D


def _slots(seed: int, near: bool = False) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(301, 96, generator=g)
    ts = [base + 0.6 * i * torch.randn(301, 96, generator=g) + 2.0 for i in range(4)]
    if near:  # slot 3 a near copy of slot 2: cosines above NEAR_PARALLEL_COS on every row (the float64 redo)
        ts[3] = ts[2] + 1e-4 * torch.randn(301, 96, generator=g)
    return [t.to(torch.bfloat16) for t in ts]


@pytest.mark.parametrize("chunk_rows", [1, 7, 16, 1000])
@pytest.mark.parametrize("near", [False, True])
def test_distance_sample_in_chunks_equals_the_one_batch_computation(monkeypatch, chunk_rows, near):
    ts = _slots(3, near)
    drop, mask = [0, 5], [3, 40]
    monkeypatch.setattr(depth, "DISTANCE_CHUNK_ELEMENTS", chunk_rows * 4 * 96)
    got = depth.angular_distance_sample(ts, drop, mask, finite=True)
    monkeypatch.setattr(depth, "_distances_in_buffer", _old_distances_in_buffer)
    want = depth.angular_distance_sample(ts, drop, mask, finite=True)
    assert np.array_equal(got.D, want.D) and np.array_equal(got.se, want.se)
    assert got.rows == want.rows == depth.DISTANCE_SAMPLE_ROWS
    ref = _float64_distances(ts, depth.sample_rows(301, drop, depth.DISTANCE_SAMPLE_ROWS), mask)
    assert np.abs(got.D - ref).max() < 1e-5
    if near:
        assert got.D[2, 3] < 1e-3  # the near pair took the float64 path and stays near 0


def test_screen_block_products_equal_the_batched_products():
    g = torch.Generator().manual_seed(11)
    n = 600
    base = torch.randn(n, 256, generator=g)
    ts = [(base + 0.5 * torch.randn(n, 256, generator=g)).to(torch.bfloat16) for _ in range(4)]
    ts[2] = torch.cat([ts[2][1:], ts[2][-1:]])  # one slot a row early: the screen is not quiet
    good = np.arange(2, n - 2)
    starts, rows = R.screen_starts(good), R.screen_rows(good)
    got = R.screen_sims(ts, starts, rows)
    # the former computation: one batched matmul per pair over all blocks
    Rr, m = R.CROSS_SCREEN_BLOCK_ROWS, R.CROSS_SHIFT
    P, B = Rr + 2 * m, len(starts)
    base_m = np.zeros((B, P), dtype=bool)
    base_m[:, m:m + Rr] = np.isin(starts[:, None] + np.arange(Rr)[None, :], rows)
    count = int(base_m.sum())
    w = torch.from_numpy(base_m.reshape(1, -1) / count).to(torch.float32)
    diag = np.zeros((2 * m + 1, B, P, P))
    r = np.arange(m, m + Rr)
    for o in range(2 * m + 1):
        diag[o][:, r, r + o - m] = base_m[:, r]
    sel = diag.reshape(2 * m + 1, -1)
    idx = torch.from_numpy((starts[:, None] + np.arange(-m, Rr + m)[None, :]).ravel())
    xs, ns = [], []
    for h in ts:
        x = h.index_select(0, idx).to(torch.float32).reshape(B, P, -1)
        x -= w @ x.reshape(-1, x.shape[-1])
        xs.append(x)
        ns.append(torch.linalg.vector_norm(x, dim=-1).clamp_min(1e-30).to(torch.float64).numpy())
    want = np.zeros((4, 4, 2 * m + 1))
    for i in range(4):
        for j in range(i + 1, 4):
            gg = torch.bmm(xs[i], xs[j].transpose(1, 2)).to(torch.float64).numpy()
            gg /= ns[i][:, :, None] * ns[j][:, None, :]
            want[i, j] = sel @ gg.reshape(-1) / count
            want[j, i] = sel @ gg.transpose(0, 2, 1).reshape(-1) / count
    assert np.array_equal(got, want)
    assert not R.screen_quiet(ts, good)  # and the early slot is seen


def test_kimi_shaped_fingerprint_is_identical_with_the_former_code(tmp_path, monkeypatch):
    from forensics.analysis.fingerprint import core, rules
    from forensics.io.synth import kimi_like, write_speculators_v1

    p = tmp_path / "data_0.pt"
    write_speculators_v1(kimi_like(seed=4, hidden=1024), str(p))
    fast = json.dumps(forensics.fingerprint(str(p)).to_dict(), sort_keys=True, default=str)
    monkeypatch.setattr(depth, "_distances_in_buffer", _old_distances_in_buffer)
    real_t0 = rules.token0_concentration
    monkeypatch.setattr(core, "token0_concentration", lambda h: float("nan"))  # the rules must read it themselves
    monkeypatch.setattr(core, "massive_sink", lambda s, h, c=None: rules.massive_sink(s, h))
    monkeypatch.setattr(core, "embedding_signals", lambda *a, **k: rules.embedding_signals(*a[:6]))
    monkeypatch.setattr(core, "postnorm_signals", lambda *a, **k: rules.postnorm_signals(*a[:7]))
    monkeypatch.setattr(core, "maybe_normalised", lambda *a, **k: rules.maybe_normalised(*a[:4]))
    plain = json.dumps(forensics.fingerprint(str(p)).to_dict(), sort_keys=True, default=str)
    assert real_t0 is rules.token0_concentration
    assert fast == plain
