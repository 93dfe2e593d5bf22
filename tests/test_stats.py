"""``forensics.stats`` against float64 references computed here, independently of the module."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest
import torch

import forensics
from forensics.analysis import stats as S
from forensics.io.capture import Capture, Provenance, Slot


def make_capture(*tensors: torch.Tensor, names: list[str] | None = None) -> Capture:
    slots = [Slot(index=i, name=(names or [f"s{i}"] * len(tensors))[i], key="k", shape=tuple(t.shape), dtype=t.dtype,
                  getter=(lambda t=t: t)) for i, t in enumerate(tensors)]
    return Capture(slots=slots, input_ids=None, loss_mask=None,
                   provenance=Provenance(path="/virtual/x.pt", format="test", size_bytes=0))


def rows_with_norms(norms: list[float], h: int = 32, seed: int = 0) -> torch.Tensor:
    """float32 rows pointing in random directions with exactly chosen L2 norms."""
    g = torch.Generator().manual_seed(seed)
    d = torch.randn(len(norms), h, generator=g, dtype=torch.float64)
    d = d / d.norm(dim=-1, keepdim=True)
    return (d * torch.tensor(norms, dtype=torch.float64)[:, None]).float()


# --- per-token norms ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("block", [1, 7, 256])
def test_token_norms_match_float64_reference(dtype, block):
    g = torch.Generator().manual_seed(1)
    h = (torch.randn(601, 300, generator=g) * 3).to(dtype)
    h[0] *= 50  # a sink-like row
    ref = h.double().pow(2).sum(-1).sqrt()  # independent float64 reference
    got = S.token_norms(h, block=block)
    assert got.dtype == torch.float32 and got.shape == (601,)
    np.testing.assert_allclose(got.double().numpy(), ref.numpy(), rtol=1e-5)


def test_token_norms_bit_identical_to_naive_upcast():
    h = (torch.randn(1000, 512) * 2).to(torch.bfloat16)
    assert torch.equal(S.token_norms(h), h.float().norm(dim=-1))


def test_token_norms_on_strided_view_and_float8():
    stack = torch.randn(50, 3, 64)
    view = stack[:, 1]  # a non-contiguous slot as speculators-current produces
    np.testing.assert_allclose(S.token_norms(view).numpy(), view.double().norm(dim=-1).numpy(), rtol=1e-5)
    f8 = torch.randn(20, 64).to(torch.float8_e4m3fn)
    np.testing.assert_allclose(S.token_norms(f8).numpy(), f8.double().norm(dim=-1).numpy(), rtol=1e-5)


# --- robust summaries ------------------------------------------------------------------------------------

def ref_summary(x: list[float]) -> dict:
    q = statistics.quantiles(x, n=100, method="inclusive")  # linear interpolation, like numpy's default
    med = statistics.median(x)
    return {"n": len(x), "mean": statistics.fmean(x), "std": statistics.pstdev(x), "median": med,
            "p01": q[0], "p05": q[4], "p25": q[24], "p75": q[74], "p95": q[94], "p99": q[98],
            "mad": statistics.median([abs(v - med) for v in x]), "min": min(x), "max": max(x)}


def test_norm_summary_against_reference():
    rng = np.random.default_rng(3)
    norms = rng.lognormal(2.0, 0.5, size=257).astype(np.float32)
    got = S.NormSummary.of(norms)
    ref = ref_summary([float(v) for v in norms])
    for k, v in ref.items():
        assert getattr(got, k) == pytest.approx(v, rel=1e-9, abs=1e-12), k
    assert got.min_pos == int(np.argmin(norms)) and got.max_pos == int(np.argmax(norms))


def test_slot_summary_excl_first_and_sinks():
    norms = [400.0, 10.0, 11.0, 9.0, 12.0, 80.0, 10.5, 49.0, 9.5, 10.2, 11.1, 8.9]
    st = forensics.summarize(make_capture(rows_with_norms(norms))).slots[0]
    ref_all = ref_summary(norms)
    assert st.norm.mean == pytest.approx(ref_all["mean"], rel=1e-5)
    assert st.norm.median == pytest.approx(ref_all["median"], rel=1e-5)
    assert st.norm.p05 == pytest.approx(ref_all["p05"], rel=1e-5)
    assert st.norm.p95 == pytest.approx(ref_all["p95"], rel=1e-5)
    assert st.norm.mad == pytest.approx(ref_all["mad"], rel=1e-5)
    ref_x0 = ref_summary(norms[1:])
    for k in ("mean", "std", "median", "mad", "min", "max"):
        assert getattr(st.norm_excl_first, k) == pytest.approx(ref_x0[k], rel=1e-5), k
    assert st.norm_excl_first.max_pos == 5  # positions stay those of the full sequence
    # sinks: norm >= SINK_RATIO x median of all token norms (median 10.85: 400 and 80 qualify, 49 does not)
    med = statistics.median(norms)
    expected = [i for i, v in enumerate(norms) if v / med >= S.SINK_RATIO]
    assert expected == [0, 5] and st.sinks == expected and st.num_sinks == 2
    assert st.sink_ratios == pytest.approx([400 / med, 80 / med], rel=1e-5)
    ref_xs = ref_summary([v for i, v in enumerate(norms) if i not in expected])
    assert st.norm_excl_sinks.mean == pytest.approx(ref_xs["mean"], rel=1e-5)
    assert st.first == pytest.approx(400.0, rel=1e-5) and st.last == pytest.approx(8.9, rel=1e-5)
    assert st.first_ratio == pytest.approx(400.0 / statistics.median(norms[1:]), rel=1e-5)
    assert st.rms_mean == pytest.approx(statistics.fmean(norms) / math.sqrt(32), rel=1e-5)


# --- massive activations (Sun et al. 2024: |x| > 100 and >= 1000 x median |x|) ----------------------------

def ref_massive(h: torch.Tensor) -> tuple[float, dict[int, list[int]]]:
    a = h.double().abs()
    fin = a[torch.isfinite(a)]
    med = float(fin.median())  # lower-middle, like the module; H < 128 so every column is sampled
    thr = max(100.0, 1000.0 * med)
    hits = {}
    for p in range(h.shape[0]):
        row = torch.where(torch.isfinite(a[p]), a[p], torch.zeros_like(a[p]))
        dims = [int(d) for d in torch.nonzero(row > thr).flatten()]
        if dims:
            hits[p] = sorted(dims, key=lambda d: -float(row[d]))
    return thr, hits


def test_massive_activations_relative_threshold():
    g = torch.Generator().manual_seed(5)
    h = torch.randn(60, 64, generator=g) * 0.5  # median |x| ~ 0.34 -> threshold ~ 340 (relative rule binds)
    h[3, 7], h[3, 9], h[10, 7] = 2000.0, -1500.0, 900.0
    h[20, 1] = 300.0  # > 100 but < 1000 x median|x|: not massive
    h[41, 2], h[41, 3] = float("nan"), 5000.0  # a NaN in the same row must not hide the massive entry
    thr, hits = ref_massive(h)
    st = forensics.summarize(make_capture(h)).slots[0]
    assert 300 < thr < 900
    assert st.massive_threshold == pytest.approx(thr, rel=1e-6)
    assert {t["pos"]: t["dims"] for t in st.massive_tokens} == hits == {3: [7, 9], 10: [7], 41: [3]}
    t3 = next(t for t in st.massive_tokens if t["pos"] == 3)
    assert t3["max_abs"] == 2000.0 and t3["ratio_to_median_abs"] == pytest.approx(2000.0 / st.median_abs)
    assert st.massive_dims == [3, 7, 9] and st.num_massive_tokens == 3
    assert st.nan == 1 and st.nan_positions == [41]


def test_massive_activations_absolute_threshold_binds_for_small_states():
    h = torch.randn(40, 64) * 0.01  # 1000 x median|x| ~ 7: the absolute 100 binds
    h[0, 5], h[9, 1] = 150.0, 90.0
    thr, hits = ref_massive(h)
    st = forensics.summarize(make_capture(h.to(torch.bfloat16))).slots[0]
    assert thr == st.massive_threshold == S.MASSIVE_ABS_THRESHOLD
    assert [t["pos"] for t in st.massive_tokens] == [0] and st.massive_tokens[0]["dims"] == [5]


def test_massive_matches_brute_force_on_many_planted_values():
    g = torch.Generator().manual_seed(9)
    h = torch.randn(300, 96, generator=g)
    for p, d, v in [(1, 4, 1e4), (2, 4, 700.0), (5, 90, -3e3), (77, 0, 2e3), (77, 95, 1.5e3), (299, 50, 1e3)]:
        h[p, d] = v
    _, hits = ref_massive(h)
    st = forensics.summarize(make_capture(h)).slots[0]
    assert {t["pos"]: t["dims"] for t in st.massive_tokens} == hits
    assert st.num_massive_tokens == len(hits)


def test_median_abs_sample_is_close_for_wide_states():
    h = torch.randn(400, 4096, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    exact = float(h.double().abs().median())
    assert S.median_abs_sample(h) == pytest.approx(exact, rel=0.03)


# --- NaN / Inf -------------------------------------------------------------------------------------------

def test_nan_inf_counts_and_positions():
    h = torch.randn(12, 16)
    for p, d in [(2, 5), (2, 6), (7, 0)]:
        h[p, d] = float("nan")
    h[4, 1], h[9, 3] = float("inf"), float("-inf")
    st = forensics.summarize(make_capture(h.to(torch.bfloat16))).slots[0]
    assert (st.nan, st.inf) == (3, 2)
    assert st.nan_positions == [2, 7] and st.inf_positions == [4, 9]
    finite = [p for p in range(12) if p not in (2, 4, 7, 9)]
    ref = h.to(torch.bfloat16).double()[finite].norm(dim=-1)
    assert st.norm.n == 8 and st.norm.mean == pytest.approx(float(ref.mean()), rel=1e-5)
    d = st.to_dict()
    json.dumps(d, allow_nan=False)  # JSON-safe even with non-finite norms
    assert d["nonfinite"]["nan"] == 3 and "NaN×3!" in st.one_line() and "Inf×2!" in st.one_line()


def test_all_nan_slot_still_summarises():
    h = torch.full((5, 8), float("nan"))
    st = forensics.summarize(make_capture(h)).slots[0]
    assert st.nan == 40 and st.norm.n == 0 and st.first != st.first
    d = st.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["norm"]["mean"] is None and d["norm"]["first"] is None


# --- result objects ---------------------------------------------------------------------------------------

def test_block_size_does_not_change_results():
    h = (torch.randn(333, 40) * 2).to(torch.bfloat16)
    h[17, 3] = 900.0
    slot = make_capture(h).slots[0]
    a, b = S.slot_stats(slot, block=5), S.slot_stats(slot)
    assert np.array_equal(a.norms, b.norms) and a.massive_tokens == b.massive_tokens
    assert a.to_dict() == b.to_dict()


def test_to_dict_keys_repr_and_html():
    h = rows_with_norms([50.0] + [5.0] * 9)
    cs = forensics.summarize(make_capture(h, h * 2, names=["<b>evil</b>", "s1"]))
    d = cs.to_dict()
    assert set(d) >= {"path", "format", "num_tokens", "hidden_size", "error", "slots"} and d["error"] is None
    slot = d["slots"][0]
    assert set(slot) >= {"index", "name", "shape", "dtype", "norm", "nonfinite", "massive"}
    assert set(slot["norm"]) >= {"mean", "std", "median", "p05", "p95", "first", "last", "mean_excl_first"}
    assert slot["norm"]["mean_excl_first"] == pytest.approx(5.0, rel=1e-5)
    assert slot["sinks"]["positions"] == [0] and slot["sinks"]["ratio_threshold"] == S.SINK_RATIO
    assert slot["massive"]["abs_threshold"] == S.MASSIVE_ABS_THRESHOLD
    json.dumps(d, allow_nan=False)
    st = cs.slots[0]
    assert "\n" not in repr(st) and "sinks@[0]" in repr(st)
    html = cs._repr_html_() + st._repr_html_()
    assert "<b>evil</b>" not in html and "&lt;b&gt;evil&lt;/b&gt;" in html
    assert len(repr(cs).splitlines()) == 3
    assert "mean excl. tok0" in cs.table()


def test_single_token_slot_has_empty_excl_first_summary():
    st = forensics.summarize(make_capture(torch.tensor([[3.0, 4.0]]))).slots[0]
    assert st.norm.n == 1 and st.norm.mean == pytest.approx(5.0)
    assert st.first == st.last == pytest.approx(5.0)
    assert st.norm_excl_first.n == 0 and math.isnan(st.first_ratio)
    d = st.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["norm"]["mean_excl_first"] is None


def test_stats_restore_torch_thread_setting():
    before = torch.get_num_threads()
    forensics.summarize(make_capture(torch.randn(300, 64)))
    S.token_norms(torch.randn(10, 8))
    assert torch.get_num_threads() == before


def test_robust_summary_is_bit_identical_to_numpy():
    """One sort gives exactly numpy.percentile/median/mean/std/argmin/argmax (ties, duplicates, odd/even n)."""
    from forensics.analysis.kernels import robust_summary

    rng = np.random.default_rng(0)
    for t in range(400):
        n = int(rng.integers(1, 2000))
        x = rng.lognormal(3, 1, n).astype(np.float32).astype(np.float64)
        if t % 3 == 0:
            x = np.round(x)  # ties
        if t % 5 == 0 and n > 2:
            x[rng.integers(0, n)] = x.max()  # a repeated max: first occurrence wins
            x[rng.integers(0, n)] = x.min()
        pos = np.arange(n) + 7
        q = np.percentile(x, [1, 5, 25, 50, 75, 95, 99])
        med = float(q[3])
        want = {"n": n, "mean": float(x.mean()), "std": float(x.std()), "median": med, "p01": float(q[0]),
                "p05": float(q[1]), "p25": float(q[2]), "p75": float(q[4]), "p95": float(q[5]), "p99": float(q[6]),
                "mad": float(np.median(np.abs(x - med))), "min": float(x.min()), "min_pos": int(pos[x.argmin()]),
                "max": float(x.max()), "max_pos": int(pos[x.argmax()])}
        assert robust_summary(x, pos) == want, t
