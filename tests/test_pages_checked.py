"""``io.pages.checked_once``: a fingerprint or scan row reads each slot's page table once, and what must not be
dropped still is not.

A release drops a range only when none of its pages is an anonymous copy (a page written since it was mapped,
under ``MAP_PRIVATE``). Inside ``checked_once`` that is read once per tensor, on entry: these tests count the
page-table reads and check that a written page survives releases inside the block (it would read back as the
file's byte if the entry check were skipped).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from forensics.analysis.fingerprint.depth import _rows_differ
from forensics.io import pages

linux = pytest.mark.skipif(not sys.platform.startswith("linux") or pages._libc() is None,
                           reason="page tables read from /proc (64-bit Linux)")


def _mapped(tmp_path, rows: int = 8192, cols: int = 1024) -> torch.Tensor:
    """A bf16 [rows, cols] tensor mapped from its file (16 MB: large enough to be released), values 1, 2, 3, …"""
    t = (torch.arange(rows * cols, dtype=torch.float32) % 251 + 1).reshape(rows, cols).to(torch.bfloat16)
    torch.save({"h": t}, tmp_path / "t.pt")
    return torch.load(tmp_path / "t.pt", mmap=True, weights_only=True)["h"]


def _count_pagemap_reads(monkeypatch) -> list[int]:
    reads = []
    real = pages.os.pread

    def counting(fd, n, offset):
        if fd == pages._pagemap():
            reads.append(n)
        return real(fd, n, offset)

    monkeypatch.setattr(pages.os, "pread", counting)
    return reads


@linux
def test_inside_the_block_each_tensor_is_read_once(tmp_path, monkeypatch):
    h = _mapped(tmp_path)
    float(h.float().sum())  # every page present
    reads = _count_pagemap_reads(monkeypatch)
    with pages.checked_once([h]):
        assert len(reads) == 1  # the entry check
        for _ in range(5):
            pages.release_tensors([h])
            float(h[::7].float().sum())  # pages back in
        with pages.checked_once([h]):  # nested (a fingerprint inside a scan row): nothing read again
            pages.release_tensors([h])
        assert len(reads) == 1
    pages.release_tensors([h])  # outside: every release reads its range again
    pages.release_tensors([h])
    assert len(reads) == 3
    assert pages._clean == []


@linux
def test_a_written_page_is_never_dropped(tmp_path):
    h = _mapped(tmp_path)
    file_value = float(h[5, 3])
    h[5, 3] = -7.0  # a private copy of that page: the file still holds the old byte
    with pages.checked_once([h]):
        pages.release_tensors([h])
        tr = pages.TrailingRelease(h)
        for s in range(0, int(h.shape[0]), 256):
            tr(s, h[s:s + 256])
        tr.finish()
        assert float(h[5, 3]) == -7.0
    assert file_value != -7.0
    assert float(h[5, 3]) == -7.0


@linux
def test_clean_tensors_are_still_released(tmp_path):
    h = _mapped(tmp_path)
    float(h.float().sum())
    with pages.checked_once([h]):
        lo, hi = pages._page_range(h)
        pages.release_tensors([h])
        raw = np.frombuffer(pages.os.pread(pages._pagemap(), 8 * ((hi - lo) // pages.PAGE), 8 * (lo // pages.PAGE)),
                            dtype=np.uint64)
        assert int(((raw >> np.uint64(63)) & np.uint64(1)).sum()) == 0  # nothing of it mapped any more


def test_rows_differ_equals_a_bytewise_reference():
    rng = np.random.default_rng(3)
    bits = rng.integers(-2**15, 2**15, size=(40, 96), dtype=np.int16)
    bits[10] = bits[2]
    bits[11] = bits[2]
    bits[11, -1] ^= 1  # differs in its last byte only
    bits[12] = bits[3]
    bits[12, 0] = np.int16(-2**15) if bits[3, 0] == 0 else 0  # +0 against -0 (bf16 bits 0x0000 / 0x8000)
    bits[13] = bits[4]
    rows = np.array([10, 11, 12, 13, 2, 20, 21], dtype=np.int64)
    refs = np.array([2, 2, 3, 4, 2, 20, 22], dtype=np.int64)
    want = np.array([not np.array_equal(bits[r], bits[f]) for r, f in zip(rows, refs, strict=True)])
    assert want.tolist() == [False, True, True, False, False, False, True]
    assert _rows_differ(bits, rows, refs).tolist() == want.tolist()  # memcmp in place
    strided = bits[:, ::2]  # columns not contiguous: the bytes path
    want2 = np.array([not np.array_equal(strided[r], strided[f]) for r, f in zip(rows, refs, strict=True)])
    assert _rows_differ(strided, rows, refs).tolist() == want2.tolist()
