"""The hsf dispatcher: instant help, and no traceback when the reader of a pipe leaves early."""

from __future__ import annotations

import subprocess
import sys
import time


def test_help_does_not_import_torch():
    code = "import sys; from forensics.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_help_lists_every_command():
    out = subprocess.run([sys.executable, "-m", "forensics.cli", "--help"], capture_output=True, text=True)
    for name in ("inspect", "fingerprint", "audit", "capture", "scan", "probe", "report"):
        assert name in out.stdout


def test_closed_pipe_is_not_a_traceback(sample_data):
    # `hsf inspect --json sample_data | head -1`: the reader closes the pipe after one line (the JSON
    # document is larger than a pipe buffer, so the writer meets the closed pipe)
    p = subprocess.Popen([sys.executable, "-m", "forensics.cli", "inspect", "--json", str(sample_data)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.readline()
    p.stdout.close()
    deadline = time.time() + 120
    while p.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    err = p.stderr.read().decode()
    assert p.returncode == 0, err
    assert "Traceback" not in err and "BrokenPipeError" not in err
