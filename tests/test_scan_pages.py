"""The scan's one pass for statistics-only rows: file pages released behind it, row hashes gathered on it.

The release is checked on the process's own page table (``/proc/self/pagemap``: present pages of the mapping),
the data read again after it against an independent copy, and a page written since mapping (a private copy)
must survive; the gathered hashes must equal the row checks' own pass, and the scan row must not change.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch
from cli_tools import present_pages

from forensics.analysis.rows import RowHashTaps, _row_hashes, check_rows
from forensics.analysis.scan.rows import _taps, file_row
from forensics.analysis.stats import summarize
from forensics.io import pages
from forensics.io.formats import load

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="page tables read from /proc (Linux)")

T, H = 700, 1536  # 2.1 MB per bf16 slot


def _capture(tmp_path, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 500, (T,), generator=g)
    ids[100:140] = ids[10:50]  # repeated ids: the embedding slot has bit-identical twin rows
    emb_table = torch.randn(500, H, generator=g)
    hs = [emb_table[ids].to(torch.bfloat16)] + [(torch.randn(T, H, generator=g) * (2 + j)).to(torch.bfloat16)
                                                for j in range(3)]
    p = tmp_path / f"data_{seed}.pt"
    torch.save({"input_ids": ids, "loss_mask": torch.ones(T, dtype=torch.bool), "hidden_states": hs}, p)
    return p, [h.clone() for h in hs]


def _present(t: torch.Tensor) -> int:
    return present_pages(t, pages.PAGE)


def test_release_drops_read_pages_and_data_reads_back(tmp_path, monkeypatch):
    monkeypatch.setattr(pages, "RELEASE_BYTES", 64 << 10)
    p, copies = _capture(tmp_path)
    cap = load(p)
    h = cap.slots[1].tensor()
    rel = pages.TrailingRelease(h)
    assert rel.on  # a contiguous view of torch.load's file mapping
    total = 0.0
    for s in range(0, T, 64):  # a one-way pass, as the norm pass reads it
        total += float(h[s:s + 64].float().sum())
        rel(s, h[s:s + 64])
    before_finish = _present(h)
    rel.finish()
    assert _present(h) <= 2  # at most the pages shared with the neighbouring tensors' first/last bytes
    assert before_finish < (h.numel() * 2) // pages.PAGE  # released behind the pass, not only at the end
    assert torch.equal(h, copies[1])  # read again: the file's bytes, faulted back in
    assert total == pytest.approx(float(copies[1].float().sum()), rel=1e-6)


def test_written_page_is_never_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(pages, "RELEASE_BYTES", 64 << 10)
    p, copies = _capture(tmp_path, seed=1)
    cap = load(p)
    h = cap.slots[2].tensor()
    rel = pages.TrailingRelease(h)
    assert rel.on
    h[300, 5] = 4096.0  # a private copy-on-write page of the mapping: not the file's any more
    for s in range(0, T, 64):
        rel(s, h[s:s + 64])
    rel.finish()
    assert float(h[300, 5]) == 4096.0  # the run holding the written page was left mapped
    expect = copies[2].clone()
    expect[300, 5] = 4096.0
    assert torch.equal(h, expect)


def test_in_memory_tensor_is_left_alone(monkeypatch):
    monkeypatch.setattr(pages, "RELEASE_BYTES", 64 << 10)
    h = torch.randn(T, H).to(torch.bfloat16)
    copy = h.clone()
    assert not pages.TrailingRelease(h[:, ::2]).on  # not contiguous
    rel = pages.TrailingRelease(h)
    for s in range(0, T, 64):
        rel(s, h[s:s + 64])
    rel.finish()
    assert torch.equal(h, copy)  # anonymous pages: never dropped (they would read back as zeros)


def test_hashes_gathered_beside_the_release_equal_the_row_checks_own(tmp_path, monkeypatch):
    monkeypatch.setattr(pages, "RELEASE_BYTES", 64 << 10)
    p, _ = _capture(tmp_path, seed=2)
    cap = load(p)
    ht = RowHashTaps(cap)
    release = {s.index: pages.TrailingRelease(s.tensor()) for s in cap.slots}
    st = summarize(cap, taps=_taps(None, ht, release))
    for r in release.values():
        r.finish()
    assert all(_present(s.tensor()) <= 2 for s in cap.slots)  # released behind the pass
    got = ht.hashes()
    for s, hs in zip(cap.slots, got, strict=True):
        assert hs is not None and np.array_equal(hs, _row_hashes(s.tensor()))
    norms = [s.norms for s in st.slots]
    with_h = check_rows(cap, cross_slots=False, norms=norms, hashes=got)
    without = check_rows(cap, cross_slots=False, norms=norms)
    assert with_h.to_dict() == without.to_dict()
    assert with_h.num_rows == T


def test_scan_row_unchanged_by_the_release(tmp_path, monkeypatch):
    p, _ = _capture(tmp_path, seed=3)
    st = os.stat(p)
    plain = file_row(str(p), st.st_size, st.st_mtime_ns, use_fingerprint=False)
    monkeypatch.setattr(pages, "RELEASE_BYTES", 64 << 10)  # releases on for this small file
    monkeypatch.setattr(RowHashTaps, "hashes", lambda self: None)  # check_rows reads the released rows again
    reread = file_row(str(p), st.st_size, st.st_mtime_ns, use_fingerprint=False)
    for r in (plain, reread):
        r.pop("elapsed")
    assert plain == reread and plain["error"] is None


def test_released_rows_of_a_truncated_file_are_an_error_not_a_crash(tmp_path, monkeypatch):
    from forensics.io.sigbus import FileChangedSize, supported

    if not supported():
        pytest.skip("the SIGBUS guard handles 64-bit Linux only")
    monkeypatch.setattr(pages, "RELEASE_BYTES", 64 << 10)
    p, copies = _capture(tmp_path, seed=4)
    cap = load(p)
    release = {s.index: pages.TrailingRelease(s.tensor()) for s in cap.slots}
    summarize(cap, taps=_taps(None, None, release))
    for r in release.values():
        r.finish()
    h = cap.slots[3].tensor()
    assert _present(h) <= 2
    os.truncate(p, os.path.getsize(p) // 2)  # another process cuts the file: the released rows are gone from it
    with pytest.raises(FileChangedSize):
        float(h[T - 1].float().sum())  # faults a page past the new end: SIGBUS, turned into the file's error
        cap.check_unchanged()


def test_page_table_read_is_this_process_s_after_a_fork():
    fd = pages._pagemap()
    assert fd is not None
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child must not read its parent's page table through the inherited descriptor
        try:
            own = pages._pagemap()
            os.write(w, b"1" if own is not None and own != fd and pages._state["pagemap_pid"] == os.getpid() else b"0")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 1) == b"1"
    assert pages._pagemap() == fd  # the parent's own, opened once


def test_release_in_longer_runs_holds_at_most_a_run_behind_the_pass(tmp_path, monkeypatch):
    """The scan's statistics-only rows release in ``RELEASE_RUN_BYTES`` runs (fewer page-table reads and madvise
    calls): every release but the last spans at least a run, and no more than a run behind the block being read
    stays unreleased."""
    monkeypatch.setattr(pages, "RELEASE_BYTES", 64 << 10)
    p, copies = _capture(tmp_path, seed=5)
    h = load(p).slots[2].tensor()
    run = 512 << 10
    calls: list[tuple[int, int]] = []
    real = pages.release
    monkeypatch.setattr(pages, "release", lambda a, b: calls.append((a, b)) or real(a, b))
    rel = pages.TrailingRelease(h, run)
    assert rel.on and rel.run == run
    assert pages.TrailingRelease(h, 1).run == 64 << 10  # never below RELEASE_BYTES
    block = 32
    for s in range(0, T, block):
        float(h[s:s + block].float().sum())
        rel(s, h[s:s + block])
        assert int(h[s:s + block].data_ptr()) - rel.done < run + pages.PAGE  # at most a run behind the pass
    mid = len(calls)
    rel.finish()
    assert 2 <= mid <= (T * H * 2) // run and all(b - a >= run for a, b in calls[:mid])
    assert all(calls[i][1] == calls[i + 1][0] for i in range(len(calls) - 1))  # contiguous, nothing skipped
    assert _present(h) <= 2 and torch.equal(h, copies[2])


def test_duplicate_rows_gives_back_the_pages_its_whole_row_compares_mapped(tmp_path, monkeypatch):
    """An embedding slot's repeated rows are compared whole (their pages mapped): the slot's file pages are given
    back right after, and the counts equal a bytewise reference."""
    from forensics.analysis.fingerprint import depth

    monkeypatch.setattr(pages, "RELEASE_BYTES", 64 << 10)
    p, copies = _capture(tmp_path, seed=7)
    cap = load(p)
    h = cap.slots[0].tensor()
    pages.release_tensors([h])
    got = depth.duplicate_rows(h, cap.input_ids)
    assert _present(h) <= 2  # given back (a partial page at either end may stay)
    ids = cap.input_ids.numpy()
    rep = [v for v in np.unique(ids) if (ids == v).sum() > 1]
    same = sum(all(copies[0][np.flatnonzero(ids == v)[0]].view(torch.int16).equal(copies[0][w].view(torch.int16))
                   for w in np.flatnonzero(ids == v)[1:]) for v in rep)
    assert got["groups"] == len(rep) and got["identical"] == same > 0


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc/self/maps")
def test_nothing_keeps_a_fingerprinted_file_mapped(tmp_path):
    """Once its fingerprint and capture are dropped, no cache of the fingerprint (the duplicate-row test's id
    grouping, a buffer) holds a tensor of the file: the file is no longer mapped (a mapped file keeps its whole
    size reserved, and a deleted one its disk space)."""
    import forensics

    p, _ = _capture(tmp_path, seed=9)

    def mapped() -> int:
        with open("/proc/self/maps") as f:
            return sum(1 for line in f if str(p) in line)

    fp = forensics.fingerprint(load(p))
    assert fp.slots
    del fp
    assert mapped() == 0


def test_rmsnorm_identity_test_gives_back_the_pages_its_rows_mapped(tmp_path, monkeypatch):
    """The RMSNorm identity test (sign screen, screening fit, full fit) leaves neither slot's file pages mapped,
    with the same residual as on in-memory copies of the slots, on a pair that is RMSNorm and on one that is not."""
    from forensics.analysis.fingerprint import depth

    monkeypatch.setattr(pages, "RELEASE_BYTES", 64 << 10)
    g = torch.Generator().manual_seed(11)
    pre = torch.randn(T, H, generator=g) * 3
    gamma = torch.rand(H, generator=g) + 0.5
    post = pre / pre.pow(2).mean(-1, keepdim=True).sqrt() * gamma
    other = torch.randn(T, H, generator=g)
    hs = [t.to(torch.bfloat16) for t in (pre, post, other)]
    f = tmp_path / "norm.pt"
    torch.save({"input_ids": torch.arange(T), "hidden_states": hs}, f)
    cap = load(f)
    a, b, c = (s.tensor() for s in cap.slots)
    for x, y, xc, yc in ((a, b, hs[0], hs[1]), (a, c, hs[0], hs[2])):
        for max_rows in (depth.NORMALIZES_SCREEN_ROWS, None):
            got = depth.normalizes(x, y, [0], max_rows)
            assert _present(x) <= 2 and _present(y) <= 2
            want = depth.normalizes(xc, yc, [0], max_rows)
            assert got["residual"] == want["residual"]
    assert depth.normalizes(a, b, [0])["residual"] <= depth.NORMALIZES_MAX_RESIDUAL  # the full fit ran on a pair


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_library_pages_given_back_and_faulted_back_on_use():
    """What the scan's fork server does after its warm-up (scan/warmup.py): every shared library's read-only pages are
    given back (the process's file-backed resident memory, read from /proc/self/status, drops), and code in them
    still runs, with the same results, after."""
    import subprocess

    code = """
import torch
from forensics.io.pages import LIBRARY_PAGES, release_libraries
def rss_file():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("RssFile:"))
x = torch.arange(4096, dtype=torch.float32).reshape(64, 64)
before_val = float((x @ x).sum())
before = rss_file()
freed = release_libraries(LIBRARY_PAGES)
after = rss_file()
print(before, after, freed, before_val == float((x @ x).sum()))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    before, after, freed, same = out.stdout.split()
    assert same == "True"
    assert int(freed) > 20 << 20  # torch's libraries alone: tens of MB given back
    assert int(before) - int(after) > 20 << 10  # kB: the process's own count agrees
