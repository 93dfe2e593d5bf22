"""``hsf`` reads the install's bytecode cache from a plain shell (``forensics.cli._venv_bytecode``).

Measured (README "Two commands"; 5 interleaved runs, load 15-21 on 2 cores): with ``PYTHONDONTWRITEBYTECODE=1``
``hsf fingerprint sample_data/speculators_v1/data_0.pt --model default`` from a plain shell took 55.9 s (median)
against 24.1 s with a warm cache before, 24.8 s against 25.3 s after.
"""

from __future__ import annotations

import os
import subprocess
import sys

import forensics.cli as cli


def test_reads_the_venv_cache_when_no_prefix_is_set(tmp_path, monkeypatch):
    (tmp_path / "pycache").mkdir()
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    monkeypatch.setattr(sys, "pycache_prefix", None)
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    cli._venv_bytecode()
    assert sys.pycache_prefix == str(tmp_path / "pycache")
    assert os.environ["PYTHONPYCACHEPREFIX"] == str(tmp_path / "pycache")  # worker processes read it too


def test_a_prefix_the_user_set_wins_and_no_folder_no_change(tmp_path, monkeypatch):
    (tmp_path / "pycache").mkdir()
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    monkeypatch.setattr(sys, "pycache_prefix", "/elsewhere")
    cli._venv_bytecode()
    assert sys.pycache_prefix == "/elsewhere"
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "no-venv"))
    monkeypatch.setattr(sys, "pycache_prefix", None)
    cli._venv_bytecode()
    assert sys.pycache_prefix is None


def test_writing_stays_the_users_choice(tmp_path):
    """With PYTHONDONTWRITEBYTECODE=1 nothing is written, the cache is only read."""
    code = ("import sys, forensics.cli as c; sys.prefix = sys.argv[1]; c._venv_bytecode(); "
            "import json; print(sys.dont_write_bytecode, sys.pycache_prefix)")
    (tmp_path / "pycache").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["True", str(tmp_path / "pycache")]
