"""Issue 32's faster statistics pass against independent references: the reused float32 block buffer, the flat
median-|x| gather, the partition median of bit patterns, the one-sort subset summaries and the row hashes mixed
for several slots at once.

Each fast path is checked against a reference computed here another way: float64 norms and the plain per-block
``vector_norm(..., dtype=float32)`` (bit for bit: the buffer only moves where the same float32 values are
reduced), the staggered sample built from its definition and sorted in float64, ``NormSummary.of`` on each subset
and ``statistics`` on plain floats, and ``_row_hashes`` per slot.
"""

from __future__ import annotations

import statistics
import threading

import numpy as np
import pytest
import torch

from forensics.analysis import kernels as K
from forensics.analysis import stats as S
from forensics.analysis.rows import RowHashTaps, _row_hashes
from forensics.io.capture import Capture, Provenance, Slot


def _plain_norms(h: torch.Tensor, block: int) -> torch.Tensor:
    """What the pass computed before the buffer: one ``vector_norm(dtype=float32)`` per row block."""
    return torch.cat([torch.linalg.vector_norm(h[s:s + block], dim=-1, dtype=torch.float32)
                      for s in range(0, h.shape[0], block)])


def _states(T: int, H: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(T, H, generator=g) * torch.logspace(-2, 1, H)  # per-dim scales, as hidden states have
    h[0] *= 40  # a sink row
    return h.to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize(("T", "H", "block"), [(1281, 7168, 32), (301, 999, 64), (7, 33, 5), (1, 8, 32)])
def test_buffered_norms_bit_identical_to_plain_blocks_and_close_to_float64(dtype, T, H, block):
    h = _states(T, H, dtype)
    got, _ = K.norms_and_median_abs(h, block)
    assert torch.equal(got, _plain_norms(h, block))  # bit for bit
    assert torch.equal(K._token_norms(h, block), got)
    ref = h.double().pow(2).sum(-1).sqrt()
    # float32 accumulation of H squares: relative error ≲ H·2⁻²⁴ in the worst case, ~√H·2⁻²⁴ in practice
    assert float(((got.double() - ref).abs() / ref).max()) < 4 * np.sqrt(H) * 2.0 ** -24


def test_buffered_norms_of_a_strided_view_and_with_nonfinite_rows():
    stack = _states(200, 3 * 96, torch.bfloat16).view(200, 3, 96)
    view = stack[:, 1]  # a non-contiguous slot
    view[5, 3], view[9, 0] = float("nan"), float("inf")
    got, med = K.norms_and_median_abs(view, 16)
    assert np.array_equal(got.numpy(), _plain_norms(view, 16).numpy(), equal_nan=True)  # NaN ≠ NaN in equal
    assert bool(torch.isnan(got[5])) and bool(torch.isinf(got[9]))
    assert med == K.median_abs_sample(view)


def test_buffer_is_reused_across_widths_and_threads():
    """The thread's buffer grows for a wider slot and is sliced for a narrower one; each thread has its own."""
    out: dict[str, bool] = {}

    def run(name: str, widths: list[int]) -> None:
        ok = True
        for i, w in enumerate(widths):
            h = _states(97, w, torch.bfloat16, seed=i)
            ok &= torch.equal(K.norms_and_median_abs(h, 32)[0], _plain_norms(h, 32))
        out[name] = ok

    ts = [threading.Thread(target=run, args=(f"t{k}", [64, 4096, 16, 2048][k:] + [64, 4096, 16, 2048][:k]))
          for k in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert out == {"t0": True, "t1": True, "t2": True}


def _reference_median_abs(h: torch.Tensor) -> float:
    """The staggered sample from its definition (``median_abs_sample``'s docstring), lower middle of the finite
    ``|x|`` in float64."""
    T, H = h.shape
    stride = max(1, H // K.MEDIAN_ABS_SAMPLE_COLS)
    cols = H // stride
    rows = list(range(0, T, max(1, (T * cols) // K.MEDIAN_ABS_SAMPLE_SIZE)))
    vals = [abs(float(h[r, j % stride + k * stride])) for j, r in enumerate(rows) for k in range(cols)]
    vals = sorted(v for v in vals if np.isfinite(v))
    return vals[(len(vals) - 1) // 2] if vals else float("nan")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize(("T", "H", "block"), [(1281, 7168, 32), (333, 300, 7), (50, 2, 64), (4, 5, 1)])
def test_flat_median_gather_equals_the_sample_by_definition(dtype, T, H, block):
    h = _states(T, H, dtype, seed=3)
    h[T // 2, :] = float("nan")
    _, med = K.norms_and_median_abs(h, block)
    assert med == _reference_median_abs(h) == K.median_abs_sample(h)


def test_median_of_bits_is_the_lower_middle_finite_magnitude():
    g = torch.Generator().manual_seed(4)
    for dt in (torch.bfloat16, torch.float16):
        for n in (1, 2, 3, 10, 4097):
            x = (torch.randn(n, generator=g) * 30).to(dt)
            x[::5] = float("nan")
            x[1::7] = float("-inf")
            x[2::9] = -0.0
            fin = sorted(abs(float(v)) for v in x if np.isfinite(float(v)))
            ref = fin[(len(fin) - 1) // 2] if fin else float("nan")
            got = K._median_abs_of_bits(K._bits_view(x), dt)
            assert got == ref or (np.isnan(got) and np.isnan(ref))
    assert np.isnan(K._median_abs_of_bits(K._bits_view(torch.full((4,), float("nan")).bfloat16()), torch.bfloat16))


def test_subset_summaries_from_one_sort_equal_separate_summaries():
    rng = np.random.default_rng(7)
    for n in (1, 2, 5, 400, 1281):
        x = rng.lognormal(3, 0.5, n).astype(np.float32)
        x[rng.integers(0, n, n // 7)] = x[0]  # ties
        x[rng.integers(0, n, n // 5)] = x.min()  # ties at the minimum: min_pos is the first of them
        if n > 4:
            x[1], x[3] = np.nan, np.inf
        keeps = [None, np.arange(n) != 0, rng.random(n) > 0.3, np.zeros(n, dtype=bool)]
        got = S.norm_summaries(x, keeps)
        pos = np.arange(n)
        for k, g in zip(keeps, got, strict=True):
            want = S.NormSummary.of(x) if k is None else S.NormSummary.of(x[k], pos[k])
            assert g.to_dict() == want.to_dict()
            vals = [float(v) for v, m in zip(x, np.ones(n, bool) if k is None else k, strict=True)
                    if m and np.isfinite(v)]
            if len(vals) > 1:  # and against plain-float statistics
                assert g.median == pytest.approx(statistics.median(vals), rel=1e-12)
                assert g.mean == pytest.approx(statistics.fmean(vals), rel=1e-9)


def _capture(*tensors: torch.Tensor) -> Capture:
    slots = [Slot(index=i, name=f"s{i}", key="k", shape=tuple(t.shape), dtype=t.dtype, getter=(lambda t=t: t))
             for i, t in enumerate(tensors)]
    return Capture(slots=slots, input_ids=None, loss_mask=None,
                   provenance=Provenance(path="/virtual/x.pt", format="test", size_bytes=0))


def test_row_hashes_mixed_together_equal_each_slot_s_own():
    a = _states(300, 512, torch.bfloat16, seed=1)
    a[100:140] = a[10:50]  # twin rows
    b = _states(300, 512, torch.bfloat16, seed=2)
    c = _states(300, 40, torch.float16, seed=3)  # another dtype and width: mixed apart
    d = _states(300, 512, torch.float32, seed=4)
    cap = _capture(a, b, c, d)
    ht = RowHashTaps(cap)
    S.summarize(cap, taps=ht.taps)
    got = ht.hashes()
    for t, hs in zip((a, b, c, d), got, strict=True):
        assert hs is not None and np.array_equal(hs, _row_hashes(t))
    assert np.array_equal(got[0][100:140], got[0][10:50])


def test_row_hashes_of_a_slot_with_missing_rows_are_none_and_others_still_mixed():
    a, b = _states(64, 128, torch.bfloat16, seed=5), _states(64, 128, torch.bfloat16, seed=6)
    cap = _capture(a, b)
    ht = RowHashTaps(cap)
    (ta,), (tb,) = ht.taps(0), ht.taps(1)
    for s in range(0, 64, 16):
        ta(s, a[s:s + 16])
    tb(0, b[:16])  # the rest of slot 1 never arrives
    got = ht.hashes()
    assert got[1] is None and np.array_equal(got[0], _row_hashes(a))


def test_sink_at_token_0_alone_shares_the_excl_first_summary():
    """The usual case (token 0 the only sink): ``norm_excl_sinks`` is taken from ``norm_excl_first``; both must be
    the summary of tokens 1.. computed independently."""
    g = torch.Generator().manual_seed(8)
    d = torch.randn(50, 64, generator=g, dtype=torch.float64)
    norms = [900.0] + [float(v) for v in 10 + torch.rand(49, generator=g)]
    h = (d / d.norm(dim=-1, keepdim=True) * torch.tensor(norms, dtype=torch.float64)[:, None]).float()
    st = S.summarize(_capture(h)).slots[0]
    assert st.sinks == [0]
    rest = [float(v) for v in st.norms[1:]]
    for s in (st.norm_excl_first, st.norm_excl_sinks):
        assert s.n == 49 and s.median == pytest.approx(statistics.median(rest), rel=1e-12)
        assert s.mean == pytest.approx(statistics.fmean(rest), rel=1e-12) and s.max == max(rest)
        assert s.max_pos == 1 + rest.index(max(rest))
    assert st.norm_excl_sinks is not st.norm_excl_first  # a copy: one may be changed without the other


def test_a_huge_block_buffer_is_not_kept_and_empty_or_zero_width_slots_work():
    h = _states(300, 2048, torch.bfloat16)
    K._buffers.__dict__.pop("f32", None)
    assert torch.equal(K._token_norms(h, 4096), _plain_norms(h, 4096))  # 300 × 2048 × 4 B = 2.4 MB: kept
    assert K._buffers.f32.numel() == 300 * 2048
    big = _states(1100, 2048, torch.bfloat16)  # 1100 × 2048 × 4 B = 9 MB > KEEP_BUFFER_BYTES: not kept
    assert torch.equal(K._token_norms(big, 4096), _plain_norms(big, 4096))
    assert K._buffers.f32.numel() == 300 * 2048
    for shape in ((0, 16), (5, 0), (0, 0)):
        e = torch.zeros(shape, dtype=torch.bfloat16)
        n, _ = K.norms_and_median_abs(e)
        assert n.shape == (shape[0],) and torch.equal(n, torch.zeros(shape[0]))
