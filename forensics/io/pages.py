"""Give back the mapped file pages a one-way pass over a tensor has finished with, as the pass goes.

A capture read through a file mapping (``torch.load(mmap=True)``) keeps every page it touched mapped into the
process until the tensors are freed: a scan worker holds its whole file (~70 MB for a Kimi-sized capture)
resident at once, though its statistics read each row block once, in order. :class:`TrailingRelease` is a
row-block tap (``summarize(taps=...)``) that ``madvise(MADV_DONTNEED)``-s the blocks behind the pass, a few
megabytes at a time: the kernel drops those page-table entries; the page cache keeps the pages, so a later
read of a released row faults it back in from memory, with the same bytes.

Only what is safe to drop is dropped, read from this process's own page table (``/proc/self/pagemap``,
one 8-byte entry a page): a range is released only when every page of it that is present is a file page (or
shared memory: bit 61) and none is swapped out (bit 62). A page written since it was mapped (a private
copy-on-write copy under ``MAP_PRIVATE``) or any page of an in-memory tensor is anonymous and would be lost:
a range holding one is left alone (a never-touched anonymous page is not present, and dropping it changes
nothing). Non-contiguous views and every platform but 64-bit Linux are left alone too.

That check reads 8 bytes a page of the range (~70 µs for an 18 MB Kimi-sized slot): a fingerprint releasing
each slot after each of its stages made ~45 of them, 3 ms of its CPU (measured 2026-12-06). Inside
:func:`checked_once` each tensor is checked once, on entry, and ranges inside a tensor found clean are released
without reading the page table again: the code inside (hsf's own, reading only) writes nothing into a mapping.
"""

from __future__ import annotations

import mmap
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

PAGE = mmap.PAGESIZE
RELEASE_BYTES = 4 << 20  # blocks behind the pass are released in runs of at least this many bytes (fewer calls)
_MADV_DONTNEED = 4
# pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst): present; swapped; file page or shared anon
_PM_PRESENT, _PM_SWAPPED, _PM_FILE = np.uint64(1 << 63), np.uint64(1 << 62), np.uint64(1 << 61)
_state: dict[str, Any] = {}
_clean: list[tuple[int, int]] = []  # page ranges checked free of anonymous pages by an open checked_once


def _libc() -> Any:
    if "libc" not in _state:
        lib = None
        if sys.platform.startswith("linux"):
            import ctypes

            if ctypes.sizeof(ctypes.c_void_p) == 8:
                try:
                    lib = ctypes.CDLL(None, use_errno=True)
                    lib.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                    lib.madvise.restype = ctypes.c_int
                except (OSError, AttributeError):
                    lib = None
        _state["libc"] = lib
    return _state["libc"]


def _pagemap() -> int | None:
    """This process's ``/proc/self/pagemap``, opened once per process: a descriptor inherited through ``fork``
    (a scan's fork server and its workers) would read the parent's page table, so it is opened again in a new
    process. None where it cannot be read (then nothing is released)."""
    pid = os.getpid()
    if _state.get("pagemap_pid") != pid:
        try:
            fd: int | None = os.open("/proc/self/pagemap", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            fd = None
        _state["pagemap"], _state["pagemap_pid"] = fd, pid
    return _state["pagemap"]


def _only_file_pages(start: int, end: int) -> bool:
    """No page of ``[start, end)`` (page aligned) is a present anonymous page (a copy-on-write copy, an
    in-memory tensor's) or swapped out."""
    if any(a <= start and end <= b for a, b in _clean):
        return True
    n = (end - start) // PAGE
    fd = _pagemap()
    if fd is None:
        return False
    try:
        raw = os.pread(fd, 8 * n, 8 * (start // PAGE))
    except OSError:
        return False
    if len(raw) != 8 * n:
        return False
    e = np.frombuffer(raw, dtype=np.uint64)
    return not bool(np.any((((e & _PM_PRESENT) != 0) & ((e & _PM_FILE) == 0)) | ((e & _PM_SWAPPED) != 0)))


def _page_range(h: Any, min_bytes: int = 1) -> tuple[int, int] | None:
    """The whole pages around a contiguous CPU tensor's bytes (None: not one, or fewer than ``min_bytes`` bytes).
    A mapping starts and ends on page boundaries, so the pages around the tensor's first and last byte are the
    same mapping's (bytes of a neighbouring tensor there are checked like the tensor's own)."""
    try:
        if h.device.type != "cpu" or not h.is_contiguous():
            return None
        base, nbytes = int(h.data_ptr()), int(h.numel()) * int(h.element_size())
    except (AttributeError, RuntimeError, TypeError):
        return None
    if nbytes < min_bytes:
        return None
    return base // PAGE * PAGE, -(-(base + nbytes) // PAGE) * PAGE


@contextmanager
def checked_once(tensors: Sequence[Any]) -> Iterator[None]:
    """Check each tensor's pages once, here, for pages that must not be dropped (see the module's docstring);
    until the block ends, a release inside a tensor found clean reads no page table. For code that only reads
    the tensors (a fingerprint, a scan row): nothing inside may write into them."""
    # a tensor already inside an open block's range is answered from it, without a read (a fingerprint in a scan row)
    added = [rng for h in tensors if (rng := _page_range(h)) is not None and _only_file_pages(*rng)]
    _clean.extend(added)
    try:
        yield
    finally:
        for rng in added:
            _clean.remove(rng)


def release(start: int, end: int) -> bool:
    """Drop this process's mapping of the pages around ``[start, end)`` when none of them would be lost (see
    the module's docstring); True when released."""
    lib = _libc()
    a, b = start // PAGE * PAGE, -(-end // PAGE) * PAGE
    if lib is None or b <= a or not _only_file_pages(a, b):
        return False
    return lib.madvise(a, b - a, _MADV_DONTNEED) == 0


LIBRARY_PAGES = (".so",)  # release_libraries names: every shared library (Python's extension modules among them)


def release_libraries(names: tuple[str, ...]) -> int:
    """Drop this process's mapping of the read-only pages of the shared libraries whose path holds one of ``names``
    (their code and constants, clean copies of the file: faulted back from the page cache if ever run again), e.g.
    LLVM's after the one kernel it compiled is loaded. Writable segments are left alone. Returns bytes released."""
    freed = 0
    try:
        with open("/proc/self/maps") as f:
            maps = f.read().splitlines()
    except OSError:
        return 0
    for line in maps:
        parts = line.split(None, 5)
        if len(parts) < 6 or "w" in parts[1] or not any(n in parts[5] for n in names):
            continue
        a, b = (int(x, 16) for x in parts[0].split("-"))
        if release(a, b):
            freed += b - a
    return freed


class TrailingRelease:
    """Row-block tap releasing ``h``'s file pages behind a one-way pass (``tap(first_row, block)`` on each block
    in order; :meth:`finish` after the pass releases the rest), in runs of ``run`` bytes (at least
    ``RELEASE_BYTES``). Off for a non-contiguous or small tensor; an in-memory tensor's runs are checked and left
    alone."""

    def __init__(self, h: Any, run: int = 0):
        self.on = False
        self.run = max(RELEASE_BYTES, run)  # bytes behind the pass released at once (each call costs ~50 µs)
        rng = _page_range(h, 2 * RELEASE_BYTES) if _libc() is not None else None
        if rng is not None:
            self.done, self.end = rng
            self.on = True

    def __call__(self, first_row: int, block: Any) -> None:
        if not self.on:
            return
        start = int(block.data_ptr()) // PAGE * PAGE  # the blocks before this one are read: released in runs
        if start - self.done >= self.run:
            release(self.done, start)
            self.done = start

    def finish(self) -> None:
        """Release the rest (after the pass)."""
        if self.on and self.end > self.done:
            release(self.done, self.end)
            self.done = self.end


def release_tensors(tensors: Any) -> None:
    """Release every file page of each tensor that is safe to drop (see the module's docstring): after a stage
    that read rows scattered over a file (a row sample: each fault maps the pages around it too), so they do
    not stay mapped while the next stage reads others."""
    for t in tensors:
        TrailingRelease(t).finish()


__all__ = ["TrailingRelease", "checked_once", "release", "release_libraries", "release_tensors", "LIBRARY_PAGES",
           "RELEASE_BYTES"]
