"""A scan stopped by a signal says one line and nothing else: SIGTERM gave two "interrupted" lines (the scan's and
the command's), and after SIGKILL the surviving resource tracker printed a two-line "leaked semaphore objects"
UserWarning on the caller's stderr."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
import torch

import forensics

pytestmark = pytest.mark.timeout(120)
ROOT = pathlib.Path(forensics.__file__).parents[1]


def _run_and_kill(tmp_path, sig):
    import psutil

    ds = tmp_path / "ds"
    ds.mkdir()
    for i in range(6):
        torch.save({"hidden_states": [torch.randn(16, 32) for _ in range(3)], "input_ids": torch.arange(16)},
                   ds / f"data_{i}.pt")
    env = dict(os.environ, PYTHONPATH=str(ROOT), HSF_SCAN_TEST_SLEEP_ON="data_2.pt")
    proc = subprocess.Popen([sys.executable, "-m", "forensics.cli", "scan", str(ds), "-o", str(tmp_path / "s.jsonl"),
                             "--no-progress", "-j", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # a worker is running (the sleeping file holds it)
        kids = [c for c in psutil.Process(proc.pid).children(recursive=True) if "forkserver" in " ".join(c.cmdline())]
        if len(kids) >= 2 and (tmp_path / "s.jsonl").exists():
            break
        time.sleep(0.2)
    time.sleep(1.0)
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=30)
    return proc.returncode, err.decode()


def test_sigterm_is_one_line(tmp_path):
    code, err = _run_and_kill(tmp_path, signal.SIGTERM)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code != 0 and len(lines) == 1 and "interrupted" in lines[0] and "--resume" in lines[0], err


def test_sigkill_leaves_no_library_warning(tmp_path):
    code, err = _run_and_kill(tmp_path, signal.SIGKILL)
    assert code == -signal.SIGKILL and "Warning" not in err and "leaked" not in err, err
