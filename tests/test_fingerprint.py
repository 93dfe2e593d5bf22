"""Fingerprint from the data alone: proofs on the real SmolLM2 captures, plus unit checks of each signal.

Ground truth comes from ``sample_data/*/capture.json`` (the r every slot was captured at), never from a
previous run of the fingerprint. Accuracy floors are set from measurement (see benchmarks/README.md).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random

import numpy as np
import pytest
import torch

import forensics
from forensics.analysis.fingerprint.core import DUP_GROUP_FRACTION, fingerprint
from forensics.io.capture import Capture, Provenance, Slot
from forensics.layers import FINAL_POST, r_label
from forensics.layers import parse_layer_list as parse_expected

SUBSETS = 200  # random 4-slot subsets of the ladder (half with the embedding)
# measured on sample_data/ladder (see test output): 100 % embedding found, ≥ 99 % depth order; floors
# leave one or two misses of slack for other torch builds / CPUs
EMBED_FLOOR = 0.99
ORDER_FLOOR = 0.97


def _key(r):
    return math.inf if r == FINAL_POST else r


def _sub(cap: Capture, idx: list[int], keep_declared: bool = False) -> Capture:
    """A capture made of some of ``cap``'s slots, in the given order (tensors shared, not copied)."""
    slots = [dataclasses.replace(cap.slots[i], index=j, declared_r=cap.slots[i].declared_r if keep_declared else None)
             for j, i in enumerate(idx)]
    return Capture(slots=slots, input_ids=cap.input_ids, loss_mask=cap.loss_mask, provenance=cap.provenance, meta={})


def _mem_capture(tensors: list, ids=None, names=None) -> Capture:
    slots = [Slot(index=i, name=(names[i] if names else f"s{i}"), key="x", shape=tuple(t.shape), dtype=t.dtype,
                  getter=(lambda t=t: t)) for i, t in enumerate(tensors)]
    return Capture(slots=slots, input_ids=ids, loss_mask=None,
                   provenance=Provenance(path="<memory>", format="generic", size_bytes=0))


@pytest.fixture(scope="session")
def ladder(sample_data):
    cap = forensics.load(sample_data / "ladder" / "capture_0.safetensors")
    assert [s.declared_r for s in cap.slots] == list(range(31)) + [FINAL_POST]
    return cap


# ------------------------------------------------------------------------------------ real captures
def test_ladder_subsets_embedding_and_depth_order(ladder):
    """Many shuffled 4-slot subsets of the real ladder: embedding found and depth order recovered."""
    rng = random.Random(1234)
    rs = [s.declared_r for s in ladder.slots]
    embed_ok = order_ok = 0
    misses = []
    for n in range(SUBSETS):
        with_embed = n % 2 == 0
        pick = rng.sample(range(1, len(rs)), 3 if with_embed else 4) + ([0] if with_embed else [])
        rng.shuffle(pick)
        fp = fingerprint(_sub(ladder, pick))
        truth = sorted(range(4), key=lambda j: _key(rs[pick[j]]))
        e = [s.role == "embedding" for s in fp.slots] == [rs[p] == 0 for p in pick]
        o = fp.depth_order == truth
        embed_ok += e
        order_ok += o
        if not (e and o):
            misses.append(([r_label(rs[p]) for p in pick], [r_label(rs[pick[j]]) for j in fp.depth_order]))
    print(f"\nladder subsets: embedding {embed_ok}/{SUBSETS}, depth order {order_ok}/{SUBSETS}; misses {misses}")
    assert embed_ok / SUBSETS >= EMBED_FLOOR
    assert order_ok / SUBSETS >= ORDER_FLOOR


def test_full_ladder_order_and_final_norm_pair(ladder):
    """All 32 real states: the order is recovered exactly; r=L and final_post found by B = RMSNorm(A)."""
    fp = fingerprint(_sub(ladder, list(range(32))))
    assert fp.depth_order == list(range(32))
    assert fp.slots[0].role == "embedding"
    assert fp.slots[30].role == "final_prenorm"
    assert fp.slots[31].role == "final_postnorm"
    assert [s.depth_rank for s in fp.slots] == list(range(32))
    assert fp.similarity.shape == (32, 32) and np.allclose(fp.similarity, fp.similarity.T)


@pytest.mark.parametrize("i", range(5))
def test_speculators_v1_seed_case_labelled(sample_data, i):
    """The seed's case scaled to L=30: [embed, L3, L16, L28], roles embedding/early/middle/late."""
    path = sample_data / "speculators_v1" / f"data_{i}.pt"
    fp = fingerprint(path)  # expected list = the r the capture declares (capture.json)
    assert fp.expected == [0, 3, 16, 28] and fp.num_layers == 30
    assert [s.role for s in fp.slots] == ["embedding", "early", "middle", "late"]
    assert fp.labels == ["embed", "L3", "L16", "L28"]
    assert fp.depth_order == [0, 1, 2, 3]
    assert fp.findings == []
    assert fingerprint(path, layers="embed,L3,L16,L28").labels == ["embed", "L3", "L16", "L28"]


def test_speculators_v1_shuffled_copy_flagged_reordered(sample_data, tmp_path):
    src = torch.load(sample_data / "speculators_v1" / "data_2.pt", weights_only=True)
    perm = [2, 0, 3, 1]  # stored slot j holds true slot perm[j]
    truth = [[0, 3, 16, 28][p] for p in perm]
    shuffled = dict(src, hidden_states=[src["hidden_states"][p].clone() for p in perm])
    path = tmp_path / "data_0.pt"
    torch.save(shuffled, path)
    fp = fingerprint(path, layers=[0, 3, 16, 28])
    assert fp.labels == [r_label(r) for r in truth]  # ['L16', 'embed', 'L28', 'L3']
    assert [s.role for s in fp.slots] == ["middle", "embedding", "late", "early"]
    kinds = [f.kind for f in fp.findings]
    assert kinds == ["reordered"]
    assert "L16, embed, L28, L3" in fp.findings[0].message

    from forensics.cli import main

    assert main(["fingerprint", str(path), "--layers", "0,3,16,28"]) == 1


def test_specforge_final_post_and_speculators_current(sample_data):
    sf = fingerprint(sample_data / "specforge" / "rows_0-2000" / "data_0.ckpt")
    assert sf.expected == [2, 15, 27, FINAL_POST]
    assert sf.slots[3].role == "final_postnorm"
    assert sf.labels == ["L2", "L15", "L27", "final_post"] and sf.findings == []
    sp = fingerprint(sample_data / "speculators" / "hidden_states" / "hs_0.safetensors")
    assert sp.labels == ["L2", "L15", "L27", "L30"] and sp.findings == []
    assert sp.depth_order == [0, 1, 2, 3]


def test_postnorm_where_prenorm_expected(sample_data):
    """The HF-vs-vLLM last-layer confusion: a post-norm tensor where r = L (pre-norm) is expected."""
    fp = fingerprint(sample_data / "specforge" / "rows_0-2000" / "data_0.ckpt", layers=[2, 15, 27, 30])
    post = [f for f in fp.findings if f.kind == "postnorm"]
    assert post and post[0].slots == [3]


def test_missing_embedding_sglang_case(sample_data):
    """Trained on [embed, L3, L16] but served [L3, L16, L28]: the embedding is missing."""
    cap = forensics.load(sample_data / "speculators_v1" / "data_0.pt")
    fp = fingerprint(_sub(cap, [1, 2, 3]), layers="embed,L3,L16")
    kinds = {f.kind for f in fp.findings}
    assert "missing_embedding" in kinds
    assert "embedding" not in [s.role for s in fp.slots]
    # data only, two readings fit (slots shifted: [L3, L16, ?]; ids off by one: [L1, L4, L17]): no slot is named
    # by one of them alone, least of all slot 2 (truly L28), which only the ids reading names
    shifted = next(f for f in fp.findings if f.kind == "shifted")
    assert shifted.evidence["readings"] == {"slots shifted": [3, 16, None], "ids off by one": [1, 4, 17]}
    assert fp.labels == [None, None, None]


def test_duplicate_capture(sample_data):
    cap = forensics.load(sample_data / "speculators_v1" / "data_1.pt")
    fp = fingerprint(_sub(cap, [0, 1, 2, 2]))
    dup = [f for f in fp.findings if f.kind == "duplicate"]
    assert dup and dup[0].slots == [2, 3]


def test_kimi_shaped_synthetic_roles():
    """SYNTHETIC Kimi-shaped sample (seed norms; not real data): embedding / early / middle / late."""
    from forensics.io.synth import kimi_like

    cap = kimi_like(seed=3, tokens=1281, hidden=512)
    fp = fingerprint(cap, layers="embed,L3,L31,L59", num_layers=61)
    assert [s.role for s in fp.slots] == ["embedding", "early", "middle", "late"]
    assert fp.depth_order == [0, 1, 2, 3]
    assert fp.labels == ["embed", "L3", "L31", "L59"] and fp.findings == []
    # depth is not norm order: L59's median norm is below L31's, yet it is deepest
    med = [s.norm_excl_sinks.median for s in fp.stats.slots]
    assert med[3] < med[2]


# ------------------------------------------------------------------------------ signals, unit level
def test_duplicate_rows_match_bruteforce(sample_data):
    from forensics.analysis.fingerprint.depth import duplicate_rows

    cap = forensics.load(sample_data / "speculators_v1" / "data_3.pt")
    ids = cap.input_ids
    for slot in cap.slots:
        h = slot.tensor()
        groups = {}
        for i, t in enumerate(ids.tolist()):
            groups.setdefault(t, []).append(i)
        rep = [g for g in groups.values() if len(g) > 1]
        same = sum(all(torch.equal(h[g[0]], h[j]) for j in g[1:]) for g in rep)
        d = duplicate_rows(h, ids)
        assert (d["groups"], d["identical"]) == (len(rep), same)
    assert duplicate_rows(cap.slots[0].tensor(), ids)["fraction"] >= DUP_GROUP_FRACTION


def test_angular_distances_float64_reference():
    from forensics.analysis.fingerprint.depth import angular_distances

    g = torch.Generator().manual_seed(0)
    a = torch.randn(40, 16, generator=g)
    b = a + 0.5 * torch.randn(40, 16, generator=g)
    c = torch.randn(40, 16, generator=g)
    a[0, 3] = 1e4  # a sink token with a massive dim: dropped / masked
    D, used = angular_distances([a, b, c], drop_tokens=[0], mask_dims=[3])
    assert used == 39

    def ref(x, y):
        x = x[1:].double().numpy().copy()
        y = y[1:].double().numpy().copy()
        x[:, 3] = 0
        y[:, 3] = 0
        x -= x.mean(0)
        y -= y.mean(0)
        cos = (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)
        return float(np.mean(np.arccos(np.clip(cos, -1, 1))) / np.pi)

    assert D[0, 1] == pytest.approx(ref(a, b), abs=1e-5)
    assert D[1, 2] == pytest.approx(ref(b, c), abs=1e-5)
    assert D[0, 1] < D[0, 2]


def test_seriate_exact_and_heuristic_agree_on_a_line():
    from forensics.analysis.fingerprint.depth import seriate

    pos = np.array([0.0, 3.0, 1.0, 7.0, 4.5, 2.0, 9.0, 5.0, 8.0, 6.0, 10.0, 11.5])
    D = np.abs(pos[:, None] - pos[None, :])
    truth = list(np.argsort(pos))
    for nodes in ([1, 3, 5, 7], list(range(12))):  # exact search, then NN + 2-opt
        path, cost, runner = seriate(D, nodes)
        want = [n for n in truth if n in nodes]
        assert path in (want, want[::-1])
        assert runner >= cost


def test_normalizes_recovers_rmsnorm_with_unknown_gamma():
    from forensics.analysis.fingerprint.depth import normalizes

    g = torch.Generator().manual_seed(1)
    h = torch.randn(64, 32, generator=g) * 30
    gamma = torch.rand(32, generator=g) + 0.2
    post = (gamma * h / h.pow(2).mean(-1, keepdim=True).sqrt()).to(torch.bfloat16)
    assert normalizes(h, post)["residual"] < 0.01
    assert normalizes(h, torch.randn(64, 32, generator=g))["residual"] > 0.5


def test_absolute_position_embedding_still_found():
    """GPT-2-style wte + wpe: no duplicate rows, but tiny context-free norms and no sink."""
    g = torch.Generator().manual_seed(2)
    T, H = 96, 64
    ids = torch.randint(0, 20, (T,), generator=g)
    wte, wpe = torch.randn(20, H, generator=g) * 0.1, torch.randn(T, H, generator=g) * 0.05
    emb = wte[ids] + wpe
    base = torch.randn(T, H, generator=g)
    l1 = base * 10 + emb
    l1[0] *= 30  # a sink
    l2 = base * 12 + torch.randn(T, H, generator=g) * 6
    l2[0] *= 25
    fp = fingerprint(_mem_capture([l2, emb, l1], ids))
    assert fp.slots[1].role == "embedding" and fp.slots[1].confidence < 0.9
    dup = next(e for e in fp.slots[1].evidence if e.signal == "norm_level")
    assert "absolute position" in dup.verdict
    assert fp.depth_order[0] == 1


def test_nonfinite_reported_and_rest_still_ordered(sample_data):
    cap = forensics.load(sample_data / "speculators_v1" / "data_0.pt")
    ts = [s.tensor().clone() for s in cap.slots]
    ts[2][5, 7] = float("nan")
    fp = fingerprint(_mem_capture(ts, cap.input_ids))
    assert [f.kind for f in fp.findings] == ["nonfinite"] and fp.findings[0].slots == [2]
    assert fp.depth_order == [0, 1, 2, 3]
    json.dumps(fp.to_dict(), allow_nan=False)


def test_parse_expected_forms():
    assert parse_expected("embed,L3,L16,L28") == [0, 3, 16, 28]
    assert parse_expected([0, "3", "final_post"]) == [0, 3, FINAL_POST]
    assert parse_expected(None) is None
    with pytest.raises(forensics.ForensicsError):
        parse_expected("embed,Lx")


# -------------------------------------------------------------------------------------- rendering
def test_to_dict_extends_inspect_entry_and_html_is_escaped(sample_data):
    from forensics.analysis.stats import summarize

    path = sample_data / "speculators_v1" / "data_4.pt"
    fp = fingerprint(path)
    d = json.loads(json.dumps(fp.to_dict(), allow_nan=False))
    base = summarize(path).to_dict()
    assert set(base) <= set(d) and d["findings"] == []
    for s, b in zip(d["slots"], base["slots"], strict=True):
        assert {k: s[k] for k in b} == json.loads(json.dumps(b))
        assert {"role", "confidence", "depth_rank", "r_estimate", "label", "evidence", "r_exact"} <= set(s)
        assert all({"signal", "value", "threshold", "verdict"} == set(e) for e in s["evidence"])
    assert [s["r_estimate"] for s in d["slots"]][0] == 0
    cap = forensics.load(path)
    cap.slots[1].name = "<script>alert(1)</script>"
    html = fingerprint(cap)._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert html.index("hsf-fingerprint") < html.index("hsf-evidence")  # verdict table before evidence
    assert "embedding" in repr(fp) and "evidence" in fp.explain()
    assert len(repr(fp).splitlines()) == 2 + 1 + len(fp.slots)  # verdict, file, header, one line per slot


def test_cli_json_and_unreadable(sample_data, tmp_path, capsys):
    from forensics.cli import main

    # data-only, L3/L16/L28 are consistent with the data but not proven: exit 3 (cannot tell), not 0
    assert main(["fingerprint", str(sample_data / "speculators_v1"), "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["files"]) == 5
    for f in doc["files"]:
        assert [s["label"] for s in f["slots"]] == ["embed", "L3", "L16", "L28"]
        assert [s["role"] for s in f["slots"]] == ["embedding", "early", "middle", "late"]
    bad = tmp_path / "bad.pt"
    bad.write_text("not a tensor")
    assert main(["fingerprint", str(bad)]) == 2


@pytest.mark.parametrize("pick, ids, roles", [
    ([31], True, ["final_postnorm"]),  # alone: the sink's one-dim direction at an ordinary norm
    ([0, 3, 31], True, ["embedding", "middle", "final_postnorm"]),  # no norm collapse vs L3, direction decides
    ([28, 31], False, ["middle", "final_postnorm"]),  # tiny norm, no ids: not mistaken for the embedding
    ([29, 30, 31], False, ["middle", "final_prenorm", "final_postnorm"]),  # B = RMSNorm(A), γ fitted
])
def test_post_norm_without_gamma(ladder, pick, ids, roles):
    cap = _mem_capture([ladder.slots[i].tensor() for i in pick], ladder.input_ids if ids else None)
    fp = fingerprint(cap)
    assert [s.role for s in fp.slots] == roles
    assert fp.depth_order == list(range(len(pick)))


def test_cli_expected_from_draft_config(sample_data, tmp_path, capsys):
    """--draft/--trainer: SpecForge ids [1, 14, 26] → r [2, 15, 27] (SGLang +1), labels the SpecForge aux slots."""
    from forensics.cli import main

    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 576,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 14, 26]}}))
    path = sample_data / "specforge" / "rows_0-2000" / "data_0.ckpt"
    code = main(["fingerprint", str(path), "--draft", str(tmp_path), "--trainer", "specforge", "--json"])
    f = json.loads(capsys.readouterr().out)["files"][0]
    assert [s["label"] for s in f["slots"]] == ["L2", "L15", "L27", "final_post"]  # + the file's own target
    assert "draft config ids [1, 14, 26]" in f["expected_source"]
    assert f["findings"] == [] and code == 3  # final_post PASS; L2/L15/L27 need --model: cannot tell
    assert [s["verdict"] for s in f["slots"]] == ["cannot tell"] * 3 + ["pass"]
    assert main(["fingerprint", str(path), "--draft", str(tmp_path)]) == 2  # no --trainer: a clear error


def test_package_verb_survives_submodule_import(sample_data):
    """Importing the compute subpackage never shadows the flat verb ``forensics.fingerprint``."""
    import forensics.analysis.fingerprint.core  # noqa: F401

    assert callable(forensics.fingerprint) and not isinstance(forensics.fingerprint, type(forensics))
    fp = forensics.fingerprint(sample_data / "speculators_v1" / "data_4.pt")
    assert fp.labels == ["embed", "L3", "L16", "L28"]


def test_every_format_speculators_v0_and_eagle(ladder, tmp_path):
    """Files written in the remaining formats from real ladder states: v0 [L3, L16, L28 | target L30] and
    EAGLE-1/2 (one post-norm hidden_state)."""
    T = {r: ladder.slots[r].tensor() for r in (3, 16, 28, 30)}
    post = ladder.slots[31].tensor()
    ids = ladder.input_ids
    v0 = tmp_path / "v0" / "data_0.pt"
    v0.parent.mkdir()
    torch.save({"input_ids": ids, "loss_mask": torch.ones_like(ids), "target": T[30].clone(),
                "hidden_state": torch.cat([T[3], T[16], T[28]], dim=-1)}, v0)
    fp = fingerprint(v0, layers=[3, 16, 28, 30])
    assert fp.capture.format == "speculators-v0"
    assert fp.labels == ["L3", "L16", "L28", "L30"] and fp.findings == []
    eg = tmp_path / "eagle" / "data_0.ckpt"
    eg.parent.mkdir()
    torch.save({"input_ids": ids, "loss_mask": torch.ones_like(ids), "hidden_state": post.clone()}, eg)
    fp = fingerprint(eg)
    assert fp.capture.format == "eagle" and fp.slots[0].role == "final_postnorm"
    json.dumps(fp.to_dict(), allow_nan=False)


def test_degenerate_slots_are_findings_not_crashes(sample_data):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(50, 64, generator=g)
    zero = fingerprint(_mem_capture([torch.zeros(50, 64), x]))
    assert [f.kind for f in zero.findings] == ["all_zero"] and zero.slots[0].role != "embedding"
    nan = fingerprint(_mem_capture([torch.full((50, 64), float("nan")), x]))
    assert [f.kind for f in nan.findings] == ["nonfinite"] and nan.slots[0].role != "embedding"  # NaN rows: no twins
    cap = forensics.load(sample_data / "speculators_v1" / "data_0.pt")
    short = fingerprint(_mem_capture([s.tensor()[:3] for s in cap.slots], cap.input_ids[:3]))
    assert [f.kind for f in short.findings] == ["few_tokens"]
    for fp in (zero, nan, short):
        json.dumps(fp.to_dict(), allow_nan=False)
        assert repr(fp) and fp._repr_html_()


def _f64_distances(slots, rows, mask):
    """Masked, mean-centred per-token angular distances on ``rows`` in float64 (the definition, directly)."""
    import math

    ref = []
    for t in slots:
        x = t[rows].to(torch.float64)
        x[:, mask] = 0.0
        x = x - x.mean(0, keepdim=True)
        ref.append(x / x.norm(dim=-1, keepdim=True))
    k = len(slots)
    return np.array([[0.0 if i == j else float(torch.arccos((ref[i] * ref[j]).sum(-1).clamp(-1, 1)).mean())
                      / math.pi for j in range(k)] for i in range(k)])


@pytest.mark.parametrize("buffered", [True, False])
def test_distances_and_rmsnorm_fit_match_a_float64_reference_on_the_row_sample(buffered, monkeypatch):
    """The sampled float32 distances (one gathered buffer, or two passes over row blocks) equal a direct
    float64 computation on the same rows (1e-5), and on all rows when the sample covers them; the RMSNorm
    fit likewise (1e-9)."""
    from forensics.analysis.fingerprint import depth

    if not buffered:
        monkeypatch.setattr(depth, "DISTANCE_BUFFER_ELEMENTS", 0)
    from forensics.analysis.fingerprint.depth import (
        DISTANCE_BLOCK_ELEMENTS,
        DISTANCE_SAMPLE_ROWS,
        angular_distance_sample,
        normalizes,
        sample_rows,
    )

    g = torch.Generator().manual_seed(0)
    H = 96
    T = 3 * (DISTANCE_BLOCK_ELEMENTS // (3 * H)) + 17  # several row blocks and a ragged last one
    base = torch.randn(T, H, generator=g, dtype=torch.float64)
    slots = [(base + s * torch.randn(T, H, generator=g, dtype=torch.float64)).to(torch.bfloat16)
             for s in (0.0, 0.5, 2.0)]
    drop, mask = [0, 5], [3, 40]
    keep = [i for i in range(T) if i not in drop]
    full = angular_distance_sample(slots, drop, mask, max_rows=T)
    assert (full.rows, full.population) == (len(keep), len(keep)) and not full.se.any()
    assert np.abs(full.D - _f64_distances(slots, keep, mask)).max() < 1e-5
    res = angular_distance_sample(slots, drop, mask)
    rows = sample_rows(T, drop, DISTANCE_SAMPLE_ROWS)
    assert res.rows == len(rows) == DISTANCE_SAMPLE_ROWS and rows[0] == keep[0] and rows[-1] == keep[-1]
    assert not set(rows.tolist()) & set(drop)
    assert np.abs(res.D - _f64_distances(slots, rows, mask)).max() < 1e-5
    # the sample estimates the all-rows distance within its standard error (5 σ: a bound, not a 1-in-20 event)
    off = ~np.eye(3, dtype=bool)
    assert (res.se[off] > 0).all() and (np.abs(res.D - full.D)[off] <= 5 * res.se[off]).all()
    gamma = torch.rand(H, generator=g, dtype=torch.float64) + 0.5
    pre = slots[2].to(torch.float64)
    post = (gamma * pre / pre.pow(2).mean(-1, keepdim=True).sqrt()).to(torch.bfloat16)
    res = normalizes(slots[2], post, drop_tokens=[], max_rows=T)
    u = pre / pre.pow(2).mean(-1, keepdim=True).sqrt()
    b = post.to(torch.float64)
    g_hat = (b * u).sum(0) / u.pow(2).sum(0)
    want = float((b - g_hat * u).norm() / b.norm())
    assert abs(res["residual"] - want) < 1e-9 and res["residual"] < 0.01


def test_near_duplicate_slots_keep_float64_precision():
    """Two slots 1e-6 apart (relative): float32 cosines would put their distance anywhere in [0, ~1e-4] (the
    duplicate threshold); the float64 recomputation keeps it within 1e-8 of the float64 definition."""
    from forensics.analysis.fingerprint.depth import angular_distance_sample

    g = torch.Generator().manual_seed(3)
    a = torch.randn(200, 512, generator=g)
    b = a + 1e-6 * torch.randn(200, 512, generator=g)
    res = angular_distance_sample([a, b, a.clone()], [0], [], max_rows=200)
    want = _f64_distances([a, b, a], list(range(1, 200)), [])
    assert np.abs(res.D - want).max() < 1e-8 and res.D[0, 2] < 1e-8 and 1e-7 < res.D[0, 1] < 1e-6


def test_duplicate_rows_match_bytewise_reference_on_adversarial_rows():
    """Hash-screened duplicate rows equal the bytewise definition: rows equal in the hashed columns but not
    elsewhere, ±0, NaN rows, all-zero padding, clashing ids, with and without ids."""
    from forensics.analysis.fingerprint.depth import DUP_KEY_COLS, duplicate_rows

    def reference(h, ids):
        keys = [bytes(h[i].contiguous().view(torch.int16).numpy().tobytes()) for i in range(h.shape[0])]
        zero = ((h == 0).all(-1) | ~torch.isfinite(h).all(-1)).tolist()
        if ids is not None:
            by_id = {}
            for i, t in enumerate(ids.tolist()):
                by_id.setdefault(t, []).append(i)
            groups = [v for v in by_id.values() if len(v) > 1]
            identical = sum(1 for v in groups if len({keys[i] for i in v}) == 1 and not zero[v[0]])
            seen, clashes = {}, 0
            for t, v in by_id.items():
                if keys[v[0]] in seen and seen[keys[v[0]]] != t and not zero[v[0]]:
                    clashes += 1
                seen[keys[v[0]]] = t
            return {"tokens": len(keys), "groups": len(groups), "identical": identical, "clashes": clashes,
                    "fraction": identical / len(groups) if groups else None}
        counts = {}
        for k, z in zip(keys, zero, strict=True):
            if not z:
                counts[k] = counts.get(k, 0) + 1
        twins = sum(c for c in counts.values() if c > 1)
        return {"tokens": len(keys), "rows_with_twin": twins, "fraction": twins / len(keys)}

    g = torch.Generator().manual_seed(4)
    for trial in range(120):
        T, H = int(torch.randint(2, 50, (1,), generator=g)), int(torch.randint(1, 3 * DUP_KEY_COLS, (1,), generator=g))
        h = torch.randint(-2, 3, (T, H), generator=g).to(torch.bfloat16)
        if T > 6:
            h[1] = h[0]
            h[2] = 0
            h[3] = -h[2]  # -0.0 rows: differ from +0.0 by bits, still padding
            h[4, 0] = float("nan")
            h[5] = h[4]
            h[6] = h[0]
            h[6, 0] = h[0, 0] + 1  # same hashed (middle) columns, different elsewhere
        ids = torch.randint(0, 6, (T,), generator=g)
        for i in (ids, None):
            assert duplicate_rows(h, i) == reference(h, i), (trial, T, H)


def test_normalizes_screen_agrees_with_the_float64_fit():
    """The one-pass float32 screen gives the float64 residual to ~1e-3 on an exact pair and on an unrelated one,
    and its sign test lets the exact pair through and stops the unrelated one."""
    from forensics.analysis.fingerprint.depth import (
        NORMALIZES_SCREEN_ROWS,
        _normalizes_screen,
        normalizes,
        sample_rows,
        sign_agreement,
    )

    g = torch.Generator().manual_seed(5)
    pre = (torch.randn(300, 256, generator=g) * 20).to(torch.bfloat16)
    gamma = torch.rand(256, generator=g) + 0.3
    p32 = pre.float()
    post = (gamma * p32 * torch.rsqrt(p32.pow(2).mean(-1, keepdim=True))).to(torch.bfloat16)
    other = torch.randn(300, 256, generator=g).to(torch.bfloat16)
    rows = torch.from_numpy(sample_rows(300, [0], NORMALIZES_SCREEN_ROWS))
    for b in (post, other):
        fit = _normalizes_screen(pre, b, rows, 1 << 10)["residual"]  # the float32 one-pass fit itself
        screen = normalizes(pre, b, [0], NORMALIZES_SCREEN_ROWS)["residual"]  # sign test, then that fit
        full = normalizes(pre, b, [0], 10_000)["residual"]
        exact64 = normalizes(pre, b, [0], NORMALIZES_SCREEN_ROWS + 1)["residual"]  # same kind of fit, f64
        assert abs(fit - exact64) < 2e-3 and (full < 0.01) == (b is post) == (screen < 0.01)
        assert screen == (fit if b is post else float("inf"))  # the unrelated pair stops at the sign test
    assert sign_agreement(pre, post, rows[:16]) == 1.0 and sign_agreement(pre, other, rows[:16]) < 0.01


@pytest.mark.model
def test_sampled_fingerprint_equals_full_rows_on_a_long_real_capture(sample_data, tmp_path, monkeypatch):
    """A real SmolLM2 capture longer than both row samples (embed, L3, L16, L28, L30, final_post): the sampled
    fingerprint's roles, labels, depth order and findings equal the all-rows fit; its distances equal a
    float64 reference on the sampled rows (1e-5) and the all-rows distances within 5 standard errors."""
    from forensics.analysis.fingerprint import depth
    from forensics.models.recorder import capture

    texts = sorted((sample_data / "texts").glob("*.txt"))
    long_text = tmp_path / "long.txt"
    long_text.write_text("\n\n".join(p.read_text() for p in texts * 3))
    capture([str(long_text)], layers="embed,3,16,28,30,final_post", fmt="safetensors", out=str(tmp_path / "cap"),
            max_tokens=1024, progress=False)
    path = next((tmp_path / "cap").glob("*.safetensors"))
    cap = forensics.load(path)
    assert cap.num_tokens > depth.NORMALIZES_SAMPLE_ROWS + 1 > depth.DISTANCE_SAMPLE_ROWS
    fp = fingerprint(cap)
    with monkeypatch.context() as m:
        m.setattr(depth, "DISTANCE_SAMPLE_ROWS", 10**9)
        m.setattr(depth, "NORMALIZES_SAMPLE_ROWS", 10**9)
        full = fingerprint(forensics.load(path))

    def verdicts(f):
        return ([s.role for s in f.slots], f.labels, list(f.depth_order), sorted(x.kind for x in f.findings))

    assert verdicts(fp) == verdicts(full)
    assert [s.role for s in fp.slots][0] == "embedding" and fp.slots[-1].role == "final_postnorm"
    st = fp.stats
    drop = sorted({0} | {p for s in st.slots for p in s.sinks})
    mask = sorted({d for s in st.slots for d in s.massive_dims})
    tensors = [s.tensor() for s in cap.slots]
    res = depth.angular_distance_sample(tensors, drop, mask)
    rows = depth.sample_rows(cap.num_tokens, drop, depth.DISTANCE_SAMPLE_ROWS).tolist()
    assert np.abs(res.D - _f64_distances(tensors, rows, mask)).max() < 1e-5
    assert np.allclose(fp.similarity, res.D)
    off = ~np.eye(len(tensors), dtype=bool)
    assert (np.abs(res.D - full.similarity)[off] <= 5 * res.se[off] + 1e-9).all()


def test_near_tie_chain_is_settled_on_all_rows():
    """A duplicated layer slot makes two depth paths cost the same: the sample cannot decide, so the chain
    is seriated on all kept rows; a clearly ordered chain keeps the sample."""
    from forensics.analysis.fingerprint.depth import DISTANCE_SAMPLE_ROWS, angular_distance_sample, settle_chain

    g = torch.Generator().manual_seed(6)
    T, H = 4 * DISTANCE_SAMPLE_ROWS, 64
    x = torch.randn(T, H, generator=g)
    layers = [x]
    for _ in range(3):
        layers.append(layers[-1] + 0.6 * torch.randn(T, H, generator=g))
    clear = [t.to(torch.bfloat16) for t in layers]
    tie = clear[:2] + [clear[1].clone()] + clear[2:]
    for slots, settled in ((clear, False), (tie, True)):
        sample = angular_distance_sample(slots, [0], [])
        out = settle_chain(sample, slots, [0], [], list(range(len(slots))))
        assert sample.rows == DISTANCE_SAMPLE_ROWS and out.rows == (T - 1 if settled else DISTANCE_SAMPLE_ROWS)


def test_speculators_v0_target_is_not_claimed_pre_norm(ladder, tmp_path):
    """v0 ({hidden_state [T, 3H], target}) was read only by trainers that put lm_head on the target as stored
    (speculators#313 removed v0 and added the verifier norm together): a post-norm target is no failure, and the
    target slot is named by the evidence, whichever state it holds."""
    T = {r: ladder.slots[r].tensor() for r in (3, 16, 28, 30)}
    post = ladder.slots[31].tensor()
    ids = ladder.input_ids
    for name, target, want in (("post", post, "final_post"), ("pre", T[30], None)):
        v0 = tmp_path / name / "data_0.pt"
        v0.parent.mkdir()
        torch.save({"input_ids": ids, "loss_mask": torch.ones_like(ids), "target": target.clone(),
                    "hidden_state": torch.cat([T[3], T[16], T[28]], dim=-1)}, v0)
        fp = fingerprint(v0, num_layers=30)  # L known (as with --model): the v0 target's claim would be r = 30
        assert fp.capture.format == "speculators-v0"
        assert fp.slots[3].claim is None, name  # no convention claimed for the v0 target
        assert not [f for f in fp.findings if str(f.severity) == "fail"], (name, [f.message for f in fp.findings])
        if want is not None:
            assert fp.labels[3] == want
