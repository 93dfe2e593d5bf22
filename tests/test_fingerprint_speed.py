"""The fingerprint's faster paths (issue 32) give the same answers as the plain ones they replace.

- :class:`~forensics.analysis.rows.RowHashTaps` (row hashes gathered on the statistics' pass) equal a strided read
  of every row, and the row checks report the same with them;
- foreign-row labels (vectorized) equal a per-row dictionary reference written here;
- the duplicate-row test screened by the row hashes, with padding told from the row norms and whole rows
  compared by their bytes, equals a bytewise reference;
- the distance sample without the NaN/Inf pass equals it with the pass on finite data (and, in the whole
  fingerprints below, its buffer centred and multiplied in chunks equals the one batched product:
  ``test_fingerprint_fuse.py``);
- a whole fingerprint (its ``to_dict``) is identical with every fast path and with the plain paths, on real SmolLM2
  captures (``sample_data`` and fresh ``hsf capture`` ones, clean and corrupted).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_fingerprint_fuse import _old_distances_in_buffer

import forensics
from forensics.analysis import rows as R
from forensics.analysis.fingerprint import core, depth, rules
from forensics.analysis.rows import RowHashTaps, check_rows


def _caps(sample_data):
    return [sample_data / "speculators_v1" / f"data_{i}.pt" for i in range(5)] + \
        sorted((sample_data / "speculators").rglob("*.safetensors"))[:2] + \
        sorted((sample_data / "specforge").rglob("*.pt"))[:2]


def test_row_hash_taps_equal_a_strided_read(sample_data):
    for p in _caps(sample_data):
        cap = forensics.load(p)
        ht = RowHashTaps(cap)
        forensics.summarize(cap, taps=ht.taps)
        got = ht.hashes()
        assert len(got) == len(cap.slots)
        for s, h in zip(cap.slots, got, strict=True):
            assert h is not None and np.array_equal(h, R._row_hashes(s.tensor())), p


def test_row_hash_taps_trust_only_every_row_once_in_order():
    x = torch.randn(10, 40).to(torch.bfloat16)
    from forensics.io.formats import as_capture

    cap = as_capture([x, x * 2])
    ht = RowHashTaps(cap)
    (tap,) = ht.taps(0)
    tap(0, x[:4])
    tap(6, x[6:])  # rows 4–5 never arrived
    (tap1,) = ht.taps(1)
    tap1(0, (x * 2)[:5])  # only half of the rows
    assert ht.hashes() == [None, None]
    ht = RowHashTaps(cap)
    for i, t in ((0, x), (1, x * 2)):
        (tap,) = ht.taps(i)
        for s in range(0, 10, 3):
            tap(s, t[s:s + 3])
    assert all(np.array_equal(h, R._row_hashes(t)) for h, t in zip(ht.hashes(), (x, x * 2), strict=True))


def _foreign_reference(hs, ok, ids, k):
    """The per-row labels by definition: +1 another row has the same (hash, id); −1 the id has such confirmed
    rows but none with this row's hash; 0 otherwise (dictionaries, one row at a time)."""
    n = hs.size
    label = np.zeros(n, dtype=np.int8)
    rows = [t for t in range(n) if ok[t] and 0 <= t + k < ids.size]
    if len(rows) < 2:
        return label
    count: dict = {}
    for t in rows:
        key = (int(hs[t]), int(ids[t + k]))
        count[key] = count.get(key, 0) + 1
    confirmed_hashes: dict = {}
    for t in rows:
        key = (int(hs[t]), int(ids[t + k]))
        if count[key] > 1:
            label[t] = 1
            confirmed_hashes.setdefault(key[1], set()).add(key[0])
    for t in rows:
        h, i = int(hs[t]), int(ids[t + k])
        if label[t] == 0 and i in confirmed_hashes and h not in confirmed_hashes[i]:
            label[t] = -1
    return label


def test_foreign_labels_equal_the_dictionary_reference():
    rng = np.random.default_rng(5)
    for trial in range(200):
        n = int(rng.integers(2, 80))
        vocab = int(rng.integers(1, 12))
        ids = rng.integers(0, vocab, size=n + int(rng.integers(0, 4)))
        k = int(rng.integers(-2, 3))
        table = rng.integers(0, 2 ** 63, size=vocab, dtype=np.uint64)
        t = np.clip(np.arange(n) + k, 0, ids.size - 1)
        hs = table[ids[t]].copy()
        bad = rng.random(n) < 0.2  # foreign rows: another token's row, or a row no token has
        hs[bad] = np.where(rng.random(int(bad.sum())) < 0.5, table[rng.integers(0, vocab, int(bad.sum()))],
                           rng.integers(0, 2 ** 63, int(bad.sum()), dtype=np.uint64))
        if trial % 3 == 0:
            hs[: n // 2] = hs[0]  # one row repeated over many ids
        ok = rng.random(n) > 0.1
        assert np.array_equal(R._foreign_from_embedding(hs, ok, ids, k), _foreign_reference(hs, ok, ids, k)), trial


def test_duplicate_rows_with_hashes_and_norms_equal_the_plain_test_and_the_bytes():
    """Adversarial rows (equal in the hashed columns but not elsewhere, ±0, NaN, all-zero padding, clashing ids):
    the counts are the same with the row checks' hashes and the row norms given as without them, and equal a
    bytewise reference."""
    g = torch.Generator().manual_seed(11)
    for trial in range(150):
        T, H = int(torch.randint(2, 60, (1,), generator=g)), int(torch.randint(1, 80, (1,), generator=g))
        h = torch.randint(-2, 3, (T, H), generator=g).to(torch.bfloat16)
        if T > 7:
            h[1] = h[0]
            h[2] = 0
            h[3] = -h[2]
            h[4, 0] = float("nan")
            h[5] = h[4]
            h[6] = h[0]
            h[6, -1] = h[0, -1] + 1  # differs in one value only (maybe outside every hashed column)
            h[7, 0] = float("inf")
        ids = torch.randint(0, 7, (T,), generator=g)
        hashes = R._row_hashes(h)
        norms = torch.linalg.vector_norm(h.float(), dim=-1).numpy()
        for i in (ids, None):
            plain = depth.duplicate_rows(h, i)
            assert depth.duplicate_rows(h, i, hashes, norms) == plain, (trial, T, H)
            assert depth.duplicate_rows(h, i, hashes) == plain and depth.duplicate_rows(h, i, None, norms) == plain
            keys = [h[t].view(torch.int16).numpy().tobytes() for t in range(T)]
            if i is not None:  # identical groups by bytes
                by_id: dict = {}
                for t, v in enumerate(i.tolist()):
                    by_id.setdefault(v, []).append(t)
                pad = ((h == 0).all(-1) | ~torch.isfinite(h).all(-1)).tolist()
                want = sum(1 for v in by_id.values() if len(v) > 1 and len({keys[t] for t in v}) == 1
                           and not pad[v[0]])
                assert plain["identical"] == want, trial


def test_rows_differ_is_the_byte_comparison():
    rng = np.random.default_rng(2)
    bits = rng.integers(-3, 3, size=(30, 17)).astype(np.int16)
    bits[5] = bits[1]
    bits[9] = bits[1]
    bits[9, 16] += 1
    rows, refs = np.arange(30), np.full(30, 1)
    want = np.array([bits[r].tobytes() != bits[f].tobytes() for r, f in zip(rows, refs, strict=True)])
    assert np.array_equal(depth._rows_differ(bits, rows, refs), want) and not want[5] and want[9]


def test_distance_sample_without_the_nan_pass_is_the_same_on_finite_data():
    g = torch.Generator().manual_seed(1)
    ts = [torch.randn(300, 96, generator=g).to(torch.bfloat16) for _ in range(4)]
    a = depth.angular_distance_sample(ts, [0, 7], [3])
    b = depth.angular_distance_sample(ts, [0, 7], [3], finite=True)
    assert np.array_equal(a.D, b.D) and np.array_equal(a.se, b.se)


# ------------------------------------------------------------------------ whole fingerprints, fast vs plain
def _old_screen_sims(ts, starts, rows, max_shift=R.CROSS_SHIFT):
    """The screen's cosines as computed before (normalized rows, one diagonal sum per shift)."""
    Rr, m = R.CROSS_SCREEN_BLOCK_ROWS, max_shift
    P = Rr + 2 * m
    base = np.zeros((len(starts), P), dtype=bool)
    base[:, m:m + Rr] = np.isin(starts[:, None] + np.arange(Rr)[None, :], rows)
    count = int(base.sum())
    w = torch.from_numpy(base.reshape(1, -1) / count).to(torch.float32)
    base_t = torch.from_numpy(base)
    xs = []
    for h in ts:
        x = torch.stack([h[a - m:a + Rr + m] for a in starts.tolist()]).to(torch.float32)
        x -= w @ x.reshape(-1, x.shape[-1])
        x /= torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(1e-30)
        xs.append(x)
    k = len(ts)
    sims = np.zeros((k, k, 2 * m + 1))
    for i in range(k):
        for j in range(i + 1, k):
            g = torch.bmm(xs[i], xs[j].transpose(1, 2))
            for a_, b_, gg in ((i, j, g), (j, i, g.transpose(1, 2))):
                sims[a_, b_] = [float(torch.diagonal(gg, offset=o - m, dim1=1, dim2=2)[
                    base_t[:, max(0, m - o):P - max(0, o - m)]].sum(dtype=torch.float64)) / count
                    for o in range(2 * m + 1)]
    return sims


class _NoTaps(RowHashTaps):
    def taps(self, slot):
        return []

    def hashes(self):
        return [None] * len(self._order)


@pytest.fixture
def plain_paths(monkeypatch):
    """Every fast path of this issue swapped for the plain computation it replaced."""
    def plain():
        real_dup, real_dist = depth.duplicate_rows, core.angular_distance_sample
        monkeypatch.setattr(core, "RowHashTaps", _NoTaps)
        monkeypatch.setattr(R, "screen_sims", _old_screen_sims)
        monkeypatch.setattr(R, "_foreign_from_embedding", _foreign_reference)
        monkeypatch.setattr(rules, "duplicate_rows", lambda h, ids, hashes=None, norms=None: real_dup(h, ids))
        monkeypatch.setattr(core, "angular_distance_sample",
                            lambda *a, finite=False, **k: real_dist(*a, **k))
        monkeypatch.setattr(depth, "_distances_in_buffer", _old_distances_in_buffer)  # one batched product
    return plain


def _same_fingerprint(paths, plain_paths):
    fast = [json.dumps(forensics.fingerprint(p).to_dict(), sort_keys=True, default=str) for p in paths]
    plain_paths()
    slow = [json.dumps(forensics.fingerprint(p).to_dict(), sort_keys=True, default=str) for p in paths]
    for p, a, b in zip(paths, fast, slow, strict=True):
        assert a == b, p


def test_fingerprints_are_identical_with_the_plain_paths_on_sample_captures(sample_data, plain_paths):
    _same_fingerprint([str(p) for p in _caps(sample_data)], plain_paths)


@pytest.fixture(scope="module")
def fresh_long(tmp_path_factory, smollm2, sample_data):
    """A fresh ``hsf capture`` of a ~500-token text (long enough for the cross-slot screen to run), real SmolLM2,
    and copies with one slot a row late and with a run of rows from another text's capture (same model, same
    layers: ``sample_data/speculators_v1``)."""
    from forensics.io.formats import as_capture
    from forensics.models.recorder import capture

    root = tmp_path_factory.mktemp("fresh_long")
    texts = sorted((sample_data / "texts").glob("*.txt"))
    (root / "long.txt").write_text("\n\n".join(t.read_text() for t in texts * 2))  # each text twice: ~600 tokens
    res = capture([str(root / "long.txt")], layers=[0, 3, 16, 28], fmt="speculators-v1", out=str(root / "cap"),
                  model=None, progress=False, max_tokens=600)
    path = str(root / "cap" / res.files[0])
    cap = forensics.load(path)
    ids = cap.input_ids.reshape(-1)
    states = [s.tensor().clone() for s in cap.slots]
    n = int(states[0].shape[0]) - 1
    late = [s[:n].clone() if i != 2 else s[1:n + 1].clone() for i, s in enumerate(states)]
    other = forensics.load(sample_data / "speculators_v1" / "data_1.pt")
    foreign = [s.clone() for s in states]
    for s, o in zip(foreign, other.slots, strict=True):
        s[200:230] = o.tensor()[10:40]  # another sequence's rows, written over a run
    out = [path]
    for name, (st, ii) in {"late.pt": (late, ids[:n]), "foreign.pt": (foreign, ids)}.items():
        c = as_capture([x.contiguous() for x in st], input_ids=ii)
        torch.save({"input_ids": c.input_ids.reshape(-1), "hidden_states": [s.tensor() for s in c.slots]},
                   str(root / name))
        out.append(str(root / name))
    return out


@pytest.mark.model
def test_fingerprints_are_identical_with_the_plain_paths_on_fresh_captures(fresh_long, plain_paths, monkeypatch):
    kinds = [sorted(f.kind for f in check_rows(forensics.load(p)).findings) for p in fresh_long]
    assert kinds[0] == [] and "slot_misaligned" in kinds[1] and "foreign_rows" in kinds[2], kinds
    real, quiet = R.screen_sims, []
    monkeypatch.setattr(R, "screen_sims", lambda *a, **k: quiet.append(1) or real(*a, **k))
    _same_fingerprint(fresh_long, plain_paths)
    assert len(quiet) == len(fresh_long)  # the cross-slot screen ran on every one of them


def _sign_agreement_float(pre, post, rows):
    """The float definition: per dim, sign(pre)·sign(post) never both positive and negative over the rows."""
    prod = torch.sign(pre[rows].to(torch.float32)) * torch.sign(post[rows].to(torch.float32))
    pos, neg = (prod > 0).sum(0), (prod < 0).sum(0)
    return float(((pos == 0) | (neg == 0)).to(torch.float32).mean())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_sign_agreement_on_bits_equals_the_float_definition(dtype):
    g = torch.Generator().manual_seed(7)
    for trial in range(60):
        T, H = int(torch.randint(2, 40, (1,), generator=g)), int(torch.randint(1, 300, (1,), generator=g))
        pre = torch.randn(T, H, generator=g)
        gamma = torch.randn(H, generator=g)
        post = pre * gamma if trial % 2 else torch.randn(T, H, generator=g)
        for x in (pre, post):  # zeros of both signs, NaN, ±Inf, subnormals
            x[torch.rand(T, H, generator=g) < 0.05] = 0.0
            x[torch.rand(T, H, generator=g) < 0.03] = -0.0
            x[torch.rand(T, H, generator=g) < 0.03] = float("nan")
            x[torch.rand(T, H, generator=g) < 0.02] = float("inf")
            x[torch.rand(T, H, generator=g) < 0.02] = -float("inf")
            x[torch.rand(T, H, generator=g) < 0.02] = 1e-40
        pre, post = pre.to(dtype), post.to(dtype)
        rows = torch.from_numpy(np.unique(torch.randint(0, T, (min(T, 16),), generator=g).numpy()))
        assert depth.sign_agreement(pre, post, rows) == _sign_agreement_float(pre, post, rows), (trial, dtype)
    stack = torch.randn(20, 3, 64).to(torch.bfloat16)  # strided slots of a [T, k, H] stack
    rows = torch.arange(0, 20, 3)
    assert depth.sign_agreement(stack[:, 0], stack[:, 2], rows) == _sign_agreement_float(stack[:, 0], stack[:, 2], rows)


def _fnv_reference(row_bytes: bytes) -> int:
    """The row hash by definition, one Python int at a time: the hashed bytes as little-endian 64-bit words, FNV-style
    (xor, then multiply modulo 2**64)."""
    acc = 0
    for j in range(0, len(row_bytes), 8):
        acc = ((acc ^ int.from_bytes(row_bytes[j:j + 8], "little")) * 0x100000001B3) % (1 << 64)
    return acc


@pytest.mark.parametrize("H", [8, 20, 32, 33, 40, 100, 576, 7168])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_row_hash_runs_are_whole_words_and_the_taps_equal_the_definition(H, dtype):
    """The hashed columns are ``HASH_RUNS`` runs of ``HASH_COLS / HASH_RUNS`` columns, each starting at a multiple of
    its length (so each run is whole 64-bit words); the tap (words read from the tensor's rows, or from a block of
    another tensor with the same bytes) and the strided read give the hash computed here from the bytes alone."""
    from forensics.io.formats import as_capture

    g = torch.Generator().manual_seed(H)
    x = torch.randn(70, H, generator=g).to(dtype)
    x[5] = x[3]
    cols = R._hash_cols(H)
    run = R.HASH_COLS // R.HASH_RUNS
    if H <= R.HASH_COLS:
        assert cols.tolist() == list(range(H))
    else:
        assert cols.size == R.HASH_COLS and (cols[::run] % run == 0).all()
        assert all((cols[i:i + run] == cols[i] + np.arange(run)).all() for i in range(0, cols.size, run))
    raw = x.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]).numpy()
    ref = np.array([_fnv_reference(raw[t, cols].tobytes()) if (cols.size * x.element_size()) % 8 == 0 else None
                    for t in range(70)], dtype=object)
    cap = as_capture([x, x.clone()])
    ht = RowHashTaps(cap)
    for i, t in ((0, cap.slots[0].tensor()), (1, x.clone())):  # slot 1: blocks of another tensor, same bytes
        (tap,) = ht.taps(i)
        for s in range(0, 70, 32):
            tap(s, t[s:s + 32])
    got = ht.hashes()
    for h in (got[0], got[1], R._row_hashes(x)):
        assert h is not None and h[5] == h[3] and np.unique(h).size == 69
        if ref[0] is not None:
            assert [int(v) for v in h] == list(ref)


def test_duplicate_rows_ids_grouped_once_and_an_in_place_change_seen():
    """The id grouping is shared by a capture's slots; an in-place change to the ids tensor (its version counter)
    is not answered from the shared one. Counts checked against a reference computed here."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 40, (300,), generator=g)
    table = torch.randn(40, 64, generator=g).to(torch.bfloat16)
    emb = table[ids]

    def reference(ids_np):
        groups = identical = 0
        for v in np.unique(ids_np):
            where = np.flatnonzero(ids_np == v)
            if where.size > 1:
                groups += 1
                identical += all(torch.equal(emb[where[0]], emb[w]) for w in where[1:])
        return groups, identical

    a = depth.duplicate_rows(emb, ids)
    assert (a["groups"], a["identical"]) == reference(ids.numpy())
    b = depth.duplicate_rows(emb, ids)  # the shared grouping: the same answer
    assert a == b
    ids[1::7] = 39 - ids[1::7]  # in place: the rows no longer follow the ids there
    c = depth.duplicate_rows(emb, ids)
    assert (c["groups"], c["identical"]) == reference(ids.numpy()) and c["identical"] < a["identical"]
