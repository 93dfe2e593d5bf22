"""The scan's fork server imports what the scanning process imports, never the current directory's files.

Python's fork server is started as ``python -c``, which puts the current directory first on its path: a scan run
from a folder holding a ``torch.py`` (a downloaded dataset's) executed that file in the fork server, and a scan run
from another checkout ran that checkout's ``forensics`` in its workers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data" / "speculators_v1"  # five captures, read by the worker pool


def test_a_torch_py_in_the_current_directory_is_never_imported(tmp_path):
    data, bin_ = tmp_path / "data", tmp_path / "bin"
    data.mkdir()
    bin_.mkdir()
    marker = tmp_path / "EXECUTED"
    (data / "torch.py").write_text(f"open({str(marker)!r}, 'w').write('x')\nraise ImportError('not torch')\n")
    out = tmp_path / "rows.jsonl"
    # a script, as the `hsf` command is: its own folder, not the current directory, leads the scanning process's path
    (bin_ / "run.py").write_text(f"from forensics import scan\nr = scan({str(SAMPLE)!r}, workers=2, out={str(out)!r}, "
                                 "progress=False)\nprint(r.summary['errors'])\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HSF_CACHE": str(tmp_path / "cache")}
    env.pop("PYTHONSAFEPATH", None)
    res = subprocess.run([sys.executable, str(bin_ / "run.py")], cwd=data, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert not marker.exists()  # the fork server's preload of torch found the real torch
    assert res.stdout.split()[-1] == "0"
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 5 and all(r["error"] is None and r["num_slots"] == 4 for r in rows)
