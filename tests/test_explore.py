"""The explorer's state (forensics.analysis.explore), its wire form, the report embed and the kernel-side widget.

References are computed independently in float64 from the tensors (norms, cosines, the nearest other
occurrence of an id found by brute force); the logit lens is checked against the model's own next-token
logits on the real ladder capture, whose pre-norm last block and post-norm slots must decode to them.
"""

from __future__ import annotations

import base64
import html
import json
import re

import numpy as np
import pytest
import torch

from forensics.analysis.explore import (
    MAX_COLUMNS,
    as_capture,
    column_starts,
    explore_state,
    finding_bands,
    logit_lens,
    with_fingerprint,
)
from forensics.errors import ForensicsError
from forensics.findings import Finding, Severity
from forensics.views.explore import wire


def _f64(cap):
    return [s.tensor().to(torch.float64) for s in cap.slots]


def _cos(a, b):
    return (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1))


def test_norms_and_cosines_equal_float64_on_a_real_capture(sample_data):
    import forensics

    cap = forensics.load(sample_data / "speculators_v1" / "data_0.pt")
    st = explore_state(cap)
    hs = _f64(cap)
    ids = cap.input_ids.tolist()
    assert st.norms.shape == (4, cap.num_tokens) and not st.binned
    for i, h in enumerate(hs):
        np.testing.assert_allclose(st.norms[i], h.norm(dim=-1).numpy(), rtol=1e-5)
        if i:
            np.testing.assert_allclose(st.cos_prev[i], _cos(h, hs[i - 1]).numpy(), rtol=1e-4, atol=1e-5)
    assert np.isnan(st.cos_prev[0]).all()
    # the nearest other occurrence of the same id, by brute force: the previous one, else the next
    for p, t in enumerate(ids):
        before = [q for q in range(p) if ids[q] == t]
        after = [q for q in range(p + 1, len(ids)) if ids[q] == t]
        q = before[-1] if before else (after[0] if after else None)
        for i, h in enumerate(hs):
            if q is None:
                assert np.isnan(st.cos_same[i, p])
            else:
                assert st.cos_same[i, p] == pytest.approx(float(_cos(h[p], h[q])), rel=1e-4, abs=1e-5)
    repeated = [p for p, t in enumerate(ids) if ids.count(t) > 1]
    assert repeated and np.allclose(st.cos_same[0, repeated], 1.0, atol=1e-5)  # the embedding is a lookup
    assert st.tokens[:3] == ["<|im_start|>", "system", "\n"] and st.ids[:3] == ids[:3]
    assert st.labels == ["embed", "L3", "L16", "L28"]  # declared by capture.json


def test_downsampling_keeps_each_columns_maximum():
    T, H = 3 * MAX_COLUMNS + 17, 8
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(T, H, generator=gen)
    spikes = [5, 4099, 9000, T - 1]
    for k, p in enumerate(spikes):
        x[p] *= 100 + k
    x[777] = 0.0
    x[1234, 0] = float("nan")
    st = explore_state([x, 2 * x], tokenizer=None)
    assert st.binned and st.norms.shape == (2, MAX_COLUMNS)
    ref = x.to(torch.float64).norm(dim=-1).numpy()
    s = st.starts
    assert s[0] == 0 and s[-1] == T and (np.diff(s) >= 1).all()
    for c in range(MAX_COLUMNS):
        seg = ref[s[c]:s[c + 1]]
        if np.isnan(seg).any():
            assert np.isnan(st.norms[0, c])
        else:
            assert st.norms[0, c] == pytest.approx(seg.max(), rel=1e-5)
    for p in spikes:  # every spike is its column's value
        c = int(np.searchsorted(s, p, side="right") - 1)
        assert st.norms[0, c] == pytest.approx(ref[p], rel=1e-5)
        assert st.norms[1, c] == pytest.approx(2 * ref[p], rel=1e-5)
    assert np.nanmax(st.norms[0]) == pytest.approx(np.nanmax(ref), rel=1e-5)
    np.testing.assert_allclose(np.nan_to_num(st.cos_prev[1]), 1.0, atol=1e-5)  # 2x is x: cosine 1 (NaN row aside)


def test_column_starts_cover_every_token_once():
    for T in (1, 7, MAX_COLUMNS, MAX_COLUMNS + 1, 10_001):
        s = column_starts(T)
        assert s[0] == 0 and s[-1] == T and len(s) - 1 == min(T, MAX_COLUMNS) and (np.diff(s) >= 1).all()


def test_in_memory_tensors_with_ids_and_bad_input(sample_data):
    import forensics

    real = forensics.load(sample_data / "speculators_v1" / "data_0.pt")
    hs = [s.tensor() for s in real.slots]
    ids = real.input_ids.flatten()
    cap = as_capture(torch.stack(hs), input_ids=ids)  # [k, T, H]: the ids' length says which axis is T
    assert [s.shape for s in cap.slots] == [s.shape for s in real.slots]
    st = explore_state(hs, input_ids=ids, tokenizer=sample_data / "tokenizer")
    ref = explore_state(real)
    assert st.tokens == ref.tokens and st.ids == ref.ids
    np.testing.assert_array_equal(st.norms, ref.norms)
    np.testing.assert_array_equal(st.cos_same, ref.cos_same)
    plain = explore_state(np.ones((3, 4), np.float32), tokenizer=None)
    assert plain.norms.tolist() == [[2.0, 2.0, 2.0]] and plain.tokens is None and plain.tokenizer_note
    for bad in ([torch.ones(3, 4), torch.ones(2, 4)], [torch.ones(3)], "not a file.pt", 42, []):
        with pytest.raises(ForensicsError) as e:
            explore_state(bad)
        assert "\n" not in str(e.value).strip()


def test_row_findings_become_bands_on_the_slots_they_name(sample_data):
    import forensics

    cap = forensics.load(sample_data / "speculators_v1" / "data_0.pt")
    fp = forensics.fingerprint(cap)
    fp.findings.append(Finding("zero_rows", Severity.FAIL, [2], "tokens 10-19 are all zero",
                               {"rows": [[10, 19], [90, 500]], "slots": [2]}))
    fp.findings.append(Finding("foreign_rows", Severity.WARN, [], "rows from elsewhere", {"rows": [[3, 3]]}))
    st = with_fingerprint(explore_state(cap), fp)
    mine = [(b.slot, b.first, b.last, b.kind, b.severity) for b in st.bands if b.kind in ("zero_rows", "foreign_rows")]
    T = cap.num_tokens
    assert mine == [(2, 10, 19, "zero_rows", "fail"), (2, 90, T - 1, "zero_rows", "fail")] + \
        [(i, 3, 3, "foreign_rows", "warn") for i in range(4)]
    sinks = {(b.slot, b.first) for b in st.bands if b.kind == "sink"}
    assert sinks == {(s.index, p) for s in fp.stats.slots for p in s.sinks}
    assert st.verdicts == [None if s.verdict is None else s.verdict.value for s in fp.slots]
    assert finding_bands([Finding("shifted", Severity.INFO, [], "", {"rows": "not a list"})], 4, 10) == []


def test_zero_row_block_of_a_real_capture_is_drawn_where_the_finding_says(sample_data):
    import forensics

    cap = forensics.load(sample_data / "speculators_v1" / "data_1.pt")
    hs = [s.tensor().clone() for s in cap.slots]
    hs[1][20:30] = 0
    st = explore_state(hs, tokenizer=None)
    assert (st.norms[1, 20:30] == 0).all() and (st.norms[1, :20] > 0).all()
    zero = [(b.slot, b.first, b.last, b.severity) for b in st.bands if b.kind == "zero_rows"]
    assert zero == [(1, 20, 29, "fail")]  # forensics.analysis.rows found it; the band is on its rows only
    meta = wire.meta(st)
    assert {"slot": 1, "first": 20, "last": 29, "kind": "zero_rows"}.items() <= meta["bands"][0].items()


def test_wire_payload_round_trips_and_the_report_embed_is_inert(sample_data):
    import forensics

    cap = forensics.load(sample_data / "speculators_v1" / "data_0.pt")
    st = explore_state(cap)
    st.tokens[0] = "<script>alert(1)</script>"
    p = wire.payload(st, "a<b>.pt")
    np.testing.assert_array_equal(np.frombuffer(p["norms"], "<f4").reshape(st.norms.shape), st.norms)
    np.testing.assert_array_equal(np.frombuffer(p["starts"], "<i4"), st.starts)
    emb = wire.report_embed([("a<b>.pt", st, "fail")])
    assert "<script>" not in emb["html"] and "<b>" not in emb["html"]
    doc = json.loads(html.unescape(re.search(r'data-state="([^"]*)"', emb["html"]).group(1)))
    assert doc["files"] == [{"name": "a<b>.pt", "verdict": "fail"}]
    s0 = doc["states"][0]
    assert s0["tokens"][0] == "<script>alert(1)</script>"
    np.testing.assert_array_equal(np.frombuffer(base64.b64decode(s0["cos_same"]), "<f4").reshape(st.norms.shape),
                                  st.cos_same)
    assert "export default" not in emb["js"] and "bootStatic();" in emb["js"]


def test_explorer_widget_state_and_file_switch(sample_data):
    import forensics

    ex = forensics.explore(sample_data / "speculators_v1", background=False)
    assert [f["name"] for f in ex.files] == [f"data_{i}.pt" for i in range(5)]
    assert all(f["verdict"] for f in ex.files)
    # data only: the embedding is named; L3/L16/L28 stay claims (CANNOT TELL), marked as such
    assert ex.meta["labels"] == ["embed", "L3?", "L16?", "L28?"] and ex.meta["fingerprinted"]
    cap = forensics.load(sample_data / "speculators_v1" / "data_2.pt")
    ex.file = 2
    assert ex.meta["name"] == "data_2.pt" and ex.meta["num_tokens"] == cap.num_tokens
    norms = np.frombuffer(ex.norms, "<f4").reshape(4, -1)
    np.testing.assert_allclose(norms[3], cap.slots[3].tensor().double().norm(dim=-1).numpy(), rtol=1e-5)
    assert "data_2.pt" in repr(ex) and ex.lens == {}
    one = forensics.explore(sample_data / "speculators_v1" / "data_0.pt", background=False)
    cap0 = forensics.load(sample_data / "speculators_v1" / "data_0.pt")
    # one file is listed too, with the verdict its fingerprint gives (a batch and a folder list theirs)
    assert one.files == [{"name": "data_0.pt", "verdict": forensics.fingerprint(cap0).outcome}]
    assert one.meta["file_verdict"] == ex.files[0]["verdict"] == one.files[0]["verdict"]


@pytest.mark.model
def test_logit_lens_of_the_last_block_and_final_post_is_the_models_prediction(sample_data):
    """On the real ladder capture (r 0…30 and final_post of SmolLM2), lm_head(norm(h_30)) and lm_head(final_post)
    are the model's own next-token distribution: their top-5 equals the verifier's logits' top-5."""
    import forensics
    from forensics.models.verifier import open_verifier

    cap = forensics.load(sample_data / "ladder" / "capture_0.safetensors")
    v = open_verifier("default")
    st = explore_state(cap, fingerprint=forensics.fingerprint(cap))
    ids = cap.input_ids.flatten()
    ref = torch.softmax(v.logits(ids).double(), dim=-1)
    for pos in (1, cap.num_tokens // 2, cap.num_tokens - 1):
        rows = logit_lens(cap, pos, v, labels=st.labels)
        top = torch.topk(ref[pos], 5)
        for slot in (30, 31):
            assert rows[slot].ids == top.indices.tolist(), (pos, slot)
            # the capture stores bf16 (3 significant digits): probabilities agree to about 1 %
            np.testing.assert_allclose(rows[slot].probs, top.values.numpy(), rtol=0.03, atol=1e-3)
        assert rows[31].normed is False and rows[30].normed is True
        assert rows[0].ids != top.indices.tolist()  # the embedding does not predict the next token


def test_bad_input_is_one_line_naming_the_file(sample_data, tmp_path):
    import shutil

    import forensics

    bad = tmp_path / "data_9.pt"
    bad.write_bytes(b"not a torch file")
    with pytest.raises(ForensicsError) as e:
        forensics.explore(bad, background=False)
    assert "data_9.pt" in str(e.value) and "\n" not in str(e.value).strip()
    shutil.copy(sample_data / "speculators_v1" / "data_0.pt", tmp_path / "data_0.pt")
    before = bad.read_bytes()
    ex = forensics.explore(tmp_path, background=False)  # a folder: the bad file listed unreadable, its error shown
    assert [(f["name"], f["verdict"]) for f in ex.files][1] == ("data_9.pt", "unreadable")
    ex.file = 1
    assert "data_9.pt" in ex.status and ex.meta["error"] and ex.norms == b""
    ex.file = 0
    assert ex.meta["labels"] and not ex.status
    assert bad.read_bytes() == before
