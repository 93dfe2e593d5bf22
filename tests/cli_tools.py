"""Helpers shared by the tests that run the CLI in-process and by those that read this process's page table."""

from __future__ import annotations

import os

import numpy as np

from forensics.cli import main as hsf_main


def run_cli(args, capsys) -> tuple[int, str, str]:
    """``hsf ARGS`` in this process: (exit code, stdout, stderr)."""
    code = hsf_main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(code: int, err: str, name: str) -> str:
    """Assert exit 2 with exactly one stderr line, no traceback, naming ``name``; return that line."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err)
    assert name in lines[0], lines[0]
    return lines[0]


def present_pages(t, page: int) -> int:
    """Pages of ``t``'s byte range present in this process's page table (``/proc/self/pagemap`` bit 63), read
    independently of ``forensics.io.pages``."""
    a = t.data_ptr() // page * page
    b = -(-(t.data_ptr() + t.numel() * t.element_size()) // page) * page
    fd = os.open("/proc/self/pagemap", os.O_RDONLY)
    try:
        raw = os.pread(fd, 8 * ((b - a) // page), 8 * (a // page))
    finally:
        os.close(fd)
    return int(((np.frombuffer(raw, dtype=np.uint64) >> np.uint64(63)) & np.uint64(1)).sum())
