"""``forensics.io.synth.kimi_like``: the seed's Kimi-K2.5 norm statistics, embedding lookups, massive dims."""

from __future__ import annotations

import pytest
import torch

import forensics
from forensics.errors import ForensicsError
from forensics.io.synth import KIMI_NORMS, MASSIVE_DIMS, kimi_like, rest_moments, write_speculators_v1

REL = 0.02  # "within a few %": bf16 rounding moves norms by ~0.1-0.3 %


@pytest.fixture(scope="module")
def kimi():
    return kimi_like(seed=0)


@pytest.fixture(scope="module")
def kimi_stats(kimi):
    return forensics.summarize(kimi)


def test_shape_dtype_and_synthetic_label(kimi):
    assert [s.shape for s in kimi.slots] == [(1281, 7168)] * 4
    assert all(s.dtype == torch.bfloat16 for s in kimi.slots)
    assert kimi.format == "synthetic" and kimi.meta["synthetic"] is True
    assert "SYNTHETIC" in kimi.provenance.notes[0]


@pytest.mark.parametrize("k", range(4))
def test_norm_statistics_match_the_seed(kimi, kimi_stats, k):
    mean, std, first = KIMI_NORMS[k]
    norms = torch.linalg.vector_norm(kimi.slots[k].tensor().double(), dim=-1)  # float64 reference
    st = kimi_stats.slots[k]
    for value in (float(norms.mean()), st.norm.mean):
        assert value == pytest.approx(mean, rel=REL)
    for value in (float(norms.std(unbiased=False)), st.norm.std):
        assert value == pytest.approx(std, rel=REL)
    if first is not None:
        assert float(norms[0]) == pytest.approx(first, rel=REL) and st.first == pytest.approx(first, rel=REL)


def test_embedding_rows_repeat_with_ids(kimi):
    ids, emb = kimi.input_ids, kimi.slots[0].tensor()
    vals, counts = ids.unique(return_counts=True)
    assert int((counts > 1).sum()) > 50  # plenty of repeated ids
    for v in vals[counts > 1][:20]:
        rows = emb[ids == v]
        assert torch.equal(rows, rows[:1].expand_as(rows))
    distinct = vals[:2]
    assert not torch.equal(emb[ids == distinct[0]][0], emb[ids == distinct[1]][0])


def test_massive_activations_of_the_sink(kimi, kimi_stats):
    for k in (1, 2):
        st = kimi_stats.slots[k]
        assert [t["pos"] for t in st.massive_tokens] == [0]
        assert set(MASSIVE_DIMS) <= set(st.massive_tokens[0]["dims"])
    assert not kimi_stats.slots[3].massive_tokens and not kimi_stats.slots[0].massive_tokens


def test_deterministic_by_seed_and_small_sizes():
    a, b, c = (kimi_like(seed=s, tokens=1281, hidden=512) for s in (3, 3, 4))
    assert torch.equal(a.slots[2].tensor(), b.slots[2].tensor())
    assert not torch.equal(a.slots[2].tensor(), c.slots[2].tensor())
    n = torch.linalg.vector_norm(a.slots[1].tensor().double(), dim=-1)
    assert float(n.mean()) == pytest.approx(37.2, rel=REL) and float(n[0]) == pytest.approx(3321, rel=REL)


def test_rest_moments_reproduce_the_totals():
    n, mean, std, first = 1281, 174.4, 99.4, 2599.0
    m, s = rest_moments(n, mean, std, first)
    total_mean = (first + (n - 1) * m) / n
    total_var = ((first - mean) ** 2 + (n - 1) * (s * s + (m - mean) ** 2)) / n
    assert total_mean == pytest.approx(mean) and total_var ** 0.5 == pytest.approx(std)
    with pytest.raises(ForensicsError, match="tokens"):
        rest_moments(10, 1.0, 0.1, 100.0)
    with pytest.raises(ForensicsError, match=">= 1276 tokens"):  # the seed's L3 figures need 1276+ tokens
        kimi_like(tokens=200, hidden=64)


def test_write_speculators_v1_round_trip(tmp_path):
    cap = kimi_like(seed=1, tokens=100, hidden=256, norms=((1.0, 0.2, None), (40.0, 30.0, 300.0),
                                                            (170.0, 90.0, 900.0), (110.0, 8.0, 60.0)))
    path = write_speculators_v1(cap, tmp_path / "data_0.pt")
    back = forensics.load(path)
    assert back.format == "speculators-v1" and len(back.slots) == 4
    for s, t in zip(cap.slots, back.slots, strict=True):
        assert torch.equal(s.tensor(), t.tensor())
    assert torch.equal(back.input_ids, cap.input_ids)


def test_provenance_hash_without_a_file():
    a, b = kimi_like(seed=2, tokens=1281, hidden=64), kimi_like(seed=2, tokens=1281, hidden=64)
    assert a.provenance.sha256() == b.provenance.sha256() and len(a.provenance.sha256()) == 64
