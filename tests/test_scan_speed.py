"""Issue 32's scan plumbing: Dask tasks of at least 8 files whatever their size, pool tasks as before."""

from __future__ import annotations

from forensics.analysis.scan.workers import BATCH_BYTES, BATCH_MAX_FILES, DASK_MIN_FILES, batches


def _items(sizes):
    return [(f"/d/f{i}.pt", s, 0, False) for i, s in enumerate(sizes)]


def test_dask_tasks_hold_at_least_eight_files_of_any_size():
    kimi = 73_480_789  # one Kimi-shaped file is more than a pool task's byte budget
    assert kimi > BATCH_BYTES
    items = _items([kimi] * 20)
    pool = batches(items)
    assert [len(b) for b in pool] == [1] * 20  # the pool: one big file per task (balance, quarantine)
    dask = batches(items, DASK_MIN_FILES)
    assert [len(b) for b in dask] == [8, 8, 4]
    assert [it for b in dask for it in b] == items  # every file once, in order


def test_small_files_still_fill_a_task_up_to_the_file_cap():
    items = _items([1000] * (BATCH_MAX_FILES * 2 + 3))
    for m in (1, DASK_MIN_FILES):
        assert [len(b) for b in batches(items, m)] == [BATCH_MAX_FILES, BATCH_MAX_FILES, 3]


def test_a_tap_sees_every_row_once_in_order_from_the_statistics_pass(sample_data):
    """The hook for a further consumer of the same bytes (a stamp checksum): called on every row block of the
    norm pass, in order, with the stored bytes; the statistics do not change."""
    import hashlib

    import torch

    import forensics
    from forensics.analysis.stats import summarize

    cap = forensics.load(sample_data / "speculators_v1" / "data_0.pt")
    seen: dict[int, list] = {}
    digests: dict[int, object] = {}

    def taps(i):
        h = digests.setdefault(i, hashlib.sha256())

        def tap(row0, block):
            seen.setdefault(i, []).append((row0, int(block.shape[0])))
            h.update(block.contiguous().view(torch.int16).numpy().tobytes())
        return [tap]

    with_taps = summarize(cap, taps=taps)
    plain = summarize(cap)
    for i, s in enumerate(cap.slots):
        t = s.tensor()
        rows = [r for r0, n in seen[i] for r in range(r0, r0 + n)]
        assert rows == list(range(int(t.shape[0])))  # every row once, in order
        assert digests[i].hexdigest() == hashlib.sha256(t.contiguous().view(torch.int16).numpy().tobytes()).hexdigest()
        assert (with_taps.slots[i].norms == plain.slots[i].norms).all()
        assert with_taps.slots[i].median_abs == plain.slots[i].median_abs
