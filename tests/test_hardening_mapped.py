"""Hardening round 3, N9: a memory-mapped file truncated by another process while hsf reads it.

Every case truncates a real file while hsf holds a mapping of it (a hook that truncates right after the mapping
is made, or a second process that truncates as soon as the file shows in ``/proc/PID/maps``) and checks: exit 2
and one line "FILE: changed size while being read", never a signal death ("Bus error", exit 135 / -7), nothing
on stderr but that line; in the Python API a :class:`forensics.errors.ForensicsError`, also on a second read of
the same tensor (nothing computed from the zero pages that replaced the lost ones reaches a result).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import torch

import forensics
from forensics.errors import ForensicsError
from forensics.io import sigbus

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(not sigbus.supported(), reason="the SIGBUS guard handles 64-bit Linux only")]

CHANGED = "changed size while being read"
# a child process runs hsf with one reader wrapped so that the file is truncated right after it is mapped
HOOK = textwrap.dedent("""
    import os, sys
    what = sys.argv.pop(1)
    import numpy as np, torch
    if what == "torch":
        real = torch.load
        def load(f, *a, **k):
            out = real(f, *a, **k)
            if k.get("mmap") and isinstance(f, str):
                os.truncate(f, 4096)
            return out
        torch.load = load
    elif what == "npy":
        real = np.load
        def load(f, *a, **k):
            out = real(f, *a, **k)
            if k.get("mmap_mode"):
                os.truncate(f, 200)
            return out
        np.load = load
    elif what == "memmap":
        real = np.memmap
        class cut(real):
            def __new__(cls, f, *a, **k):
                out = real.__new__(real, f, *a, **k)
                os.truncate(f, 4096)
                return out
        np.memmap = cut
    from forensics.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def hsf(hook: str | None, *args, timeout: float = 240) -> subprocess.CompletedProcess:
    code = HOOK if hook else "import sys\nfrom forensics.cli import main\nsys.exit(main(sys.argv[1:]))"
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(forensics.__file__).parents[1]), COLUMNS="400")
    argv = [sys.executable, "-c", code, *([hook] if hook else []), *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)


def one_changed_line(proc: subprocess.CompletedProcess, path) -> str:
    assert proc.returncode not in (-signal.SIGBUS, 128 + signal.SIGBUS), proc
    assert "Bus error" not in proc.stderr and "Traceback" not in proc.stderr and "Fatal" not in proc.stderr, proc
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert CHANGED in lines[0] and os.path.basename(str(path)) in lines[0], lines[0]
    return lines[0]


def v1_file(path: pathlib.Path, t: int = 256, h: int = 512) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    torch.save({"hidden_states": [(torch.randn(t, h, generator=g) * (k + 1)).to(torch.bfloat16) for k in range(4)],
                "input_ids": torch.arange(t)}, path)
    return path


@pytest.mark.parametrize("command", ["inspect", "fingerprint"])
def test_pt_truncated_after_it_is_mapped_is_one_line(tmp_path, command):
    """The reference case (S17): ``hsf inspect``/``fingerprint`` of a ``.pt`` truncated while mapped."""
    p = v1_file(tmp_path / "data_0.pt")
    proc = hsf("torch", command, p)
    assert proc.returncode == 2
    one_changed_line(proc, p)


def test_scan_in_process_gives_an_error_row_and_keeps_the_other_files(tmp_path):
    ds = tmp_path / "ds"
    v1_file(ds / "data_0.pt")
    shutil.copy(v1_file(ds / "data_1.pt"), tmp_path / "intact.pt")
    proc = hsf("torch", "scan", ds, "-j", "0", "--no-progress", "-o", tmp_path / "rows.jsonl")
    assert proc.returncode == 2 and "Bus error" not in proc.stderr and "Traceback" not in proc.stderr, proc
    rows = [__import__("json").loads(ln) for ln in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(CHANGED in (r["error"] or "") for r in rows)  # the hook cuts every file


def test_stamp_of_a_pt_truncated_while_read_says_not_stamped(tmp_path):
    ds = tmp_path / "ds"
    v1_file(ds / "data_0.pt")
    proc = hsf("torch", "stamp", ds, "--layers", "embed,L2,L3,final_post")
    assert proc.returncode == 2 and "Bus error" not in proc.stderr and "Traceback" not in proc.stderr, proc
    assert CHANGED in proc.stdout + proc.stderr
    assert not (ds / "stamps.jsonl").exists() or "data_0.pt" not in (ds / "stamps.jsonl").read_text()


def test_verify_of_a_safetensors_stack_truncated_under_its_memory_map_is_a_fail_row(tmp_path):
    """``raw_slot_arrays`` maps the stack for the checksum: a FAIL row for that file, a verdict, exit 1."""
    from safetensors.torch import save_file

    from forensics.analysis.stamp import stamp

    ds = tmp_path / "ds" / "hidden_states"
    ds.mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    save_file({"hidden_states": torch.randn(256, 4, 512, generator=g).to(torch.bfloat16),
               "token_ids": torch.arange(256)}, str(ds / "hs_0.safetensors"))
    stamp(str(tmp_path / "ds"), layers="embed,L2,L3,final_post")
    proc = hsf("memmap", "verify", tmp_path / "ds")
    assert proc.returncode == 1, proc
    assert "FAIL" in proc.stdout and CHANGED in proc.stdout and "Bus error" not in proc.stderr, proc


def test_npy_truncated_after_it_is_mapped_is_one_line(tmp_path):
    p = tmp_path / "data_0.npy"
    np.save(p, np.random.default_rng(0).standard_normal((512, 256)).astype(np.float32))
    proc = hsf("npy", "inspect", p)
    assert proc.returncode == 2
    one_changed_line(proc, p)


def test_truncated_by_a_second_process_watching_the_maps(tmp_path):
    """As the reference ran it: another process truncates the file as soon as it shows in the reader's
    ``/proc/PID/maps``. The race is the file's: a run that finished reading first exits 0; none may die."""
    p = v1_file(tmp_path / "data_0.pt", t=2048, h=2048)  # 32 MB: far longer to read than to notice the mapping
    pristine = p.read_bytes()
    outcomes = []
    for _ in range(3):
        p.write_bytes(pristine)
        env = dict(os.environ, PYTHONPATH=str(pathlib.Path(forensics.__file__).parents[1]), COLUMNS="400")
        child = subprocess.Popen([sys.executable, "-c", "import sys\nfrom forensics.cli import main\n"
                                  "sys.exit(main(sys.argv[1:]))", "inspect", str(p)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        cut = threading.Event()

        def watch(pid=child.pid, done=cut) -> None:
            maps = f"/proc/{pid}/maps"
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    if str(p) in pathlib.Path(maps).read_text():
                        os.truncate(p, 4096)
                        done.set()
                        return
                except OSError:
                    return  # the child has exited
                time.sleep(0.0005)

        w = threading.Thread(target=watch)
        w.start()
        out, err = child.communicate(timeout=240)
        w.join()
        proc = subprocess.CompletedProcess(child.args, child.returncode, out, err)
        assert child.returncode in (0, 2), proc  # never a signal death
        if child.returncode == 2:
            one_changed_line(proc, p)
        outcomes.append((cut.is_set(), child.returncode))
        if child.returncode == 2:
            break
    assert any(rc == 2 for _, rc in outcomes), outcomes


def test_api_raises_and_a_second_read_raises_again(tmp_path):
    """In-process: the error is a ForensicsError naming the file; reading the same capture again (a caller that
    caught it) raises again instead of computing on the zero pages."""
    p = v1_file(tmp_path / "data_0.pt")
    cap = forensics.load(str(p))
    os.truncate(p, 4096)
    for _ in range(2):
        with pytest.raises(ForensicsError, match=CHANGED) as e:
            forensics.summarize(cap)
        assert e.value.path == str(p)


def test_api_numpy_map_on_a_thread_raises_in_that_thread(tmp_path):
    """A fault on a Python thread other than the main one raises there (the explorer computes on a thread)."""
    p = tmp_path / "x.npy"
    np.save(p, np.ones((2048, 1024), np.float32))
    cap = forensics.load(str(p))  # the guard handles the files hsf maps, not mappings of the caller's own
    arr = cap.slots[0].tensor().numpy()
    os.truncate(p, 4096)
    got: list = []

    def work() -> None:
        try:
            got.append(float(arr.sum()))
        except ForensicsError as e:
            got.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join(60)
    assert len(got) == 1 and isinstance(got[0], ForensicsError) and CHANGED in str(got[0]), got


def test_a_fault_that_is_not_a_truncated_file_still_kills_as_before(tmp_path):
    """The guard takes only what it can name: any other SIGBUS goes to the previous action (here the default)."""
    code = ("import os, signal\nfrom forensics.io import sigbus\nsigbus.install()\n"
            "os.kill(os.getpid(), signal.SIGBUS)\nprint('survived')")
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(forensics.__file__).parents[1]))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == -signal.SIGBUS and "survived" not in proc.stdout, proc


def test_reading_through_the_guard_is_unchanged(tmp_path):
    """Installed, a mapped read returns the same bytes (the guard costs nothing until a fault)."""
    p = v1_file(tmp_path / "data_0.pt")
    want = torch.load(p, weights_only=True)["hidden_states"]
    sigbus.install()
    got = forensics.load(str(p))
    assert all(torch.equal(s.tensor(), w) for s, w in zip(got.slots, want, strict=True))
