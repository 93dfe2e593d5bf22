"""Hardening round 5: the SIGBUS guard under threads, pools, other handlers and files changed in place.

Every case runs in a fresh child process (the guard is process-wide state) and truncates or rewrites a real file
while hsf holds a mapping of it. What each asserts: a thread that computes from the file gets
:class:`forensics.io.sigbus.FileChangedSize` or the exact statistics of the intact file (compared with float64
norms computed here from the pristine bytes), never a result with zero rows; the process never dies of the
signal (exit 135 / -7), never exits 2 from inside the handler, never spins, and prints no "Fatal Python error".
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

import forensics
from forensics.io import sigbus

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(not sigbus.supported(), reason="the SIGBUS guard handles 64-bit Linux only")]

ROOT = str(pathlib.Path(forensics.__file__).parents[1])

PRELUDE = textwrap.dedent("""
    import os, sys, threading, math
    import torch
    import forensics
    from forensics.io.sigbus import FileChangedSize
    P = sys.argv[1]
    WANT = [float(x) for x in sys.argv[2].split(",")]   # float64 mean row norm of each slot of the intact file

    def judge(tag, fn):
        # 'error' for the one error, 'ok' for the intact statistics; anything else is a wrong result
        try:
            st = fn()
        except FileChangedSize as e:
            assert P in str(e.path), e
            return "error"
        got = [float(s.norm.mean) for s in st.slots]
        zero_rows = sum(int((s.norms == 0).sum()) for s in st.slots)
        if zero_rows or any(abs(g - w) > 1e-3 * w for g, w in zip(got, WANT)):
            print(f"WRONG {tag}: {got} vs {WANT}, {zero_rows} zero rows", flush=True)
            return "wrong"
        return "ok"
""")


def v1_file(path: pathlib.Path, t: int = 2048, h: int = 1024) -> tuple[pathlib.Path, str]:
    """A speculators-v1 capture and the float64 mean row norm of each slot (computed here, not by hsf)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    slots = [(torch.randn(t, h, generator=g) * (k + 1)).to(torch.bfloat16) for k in range(3)]
    torch.save({"hidden_states": slots, "input_ids": torch.arange(t)}, path)
    want = ",".join(repr(float(s.double().norm(dim=-1).mean())) for s in slots)
    return path, want


def child(code: str, *args, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="2")
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode not in (-signal.SIGBUS, 128 + signal.SIGBUS, -signal.SIGSEGV, 139), proc
    assert "Fatal Python error" not in proc.stderr and "WRONG" not in proc.stdout, proc
    return proc


def test_two_threads_reading_one_truncated_capture_both_raise(tmp_path):
    """The issue's 7-of-12 case: one thread's fault zero-fills the pages, the other thread read them as zeros."""
    p, want = v1_file(tmp_path / "data_0.pt")
    proc = child("""
        cap = forensics.load(P)
        os.truncate(P, 4096)
        out = {}
        def work(i):
            out[i] = judge(i, lambda: forensics.summarize(cap))
        ts = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        [t.start() for t in ts]; [t.join() for t in ts]
        print("OUT", sorted(out.values()))
        assert sorted(out.values()) == ["error", "error"], out
    """, p, want)
    assert proc.returncode == 0, proc


def test_thread_pool_worker_gets_the_error_and_the_main_thread_does_not(tmp_path):
    """A ``ThreadPoolExecutor`` worker computing from a truncated file: the error in the worker (its future),
    none in the main thread, which goes on; the guard was first installed on a worker thread."""
    p, want = v1_file(tmp_path / "data_0.pt")
    proc = child("""
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(2) as pool:
            cap = pool.submit(forensics.load, P).result()     # first load (and install) on a worker thread
            os.truncate(P, 4096)
            res = [pool.submit(judge, i, lambda: forensics.fingerprint(cap).stats).result() for i in range(3)]
        print("OUT", res)
        assert res == ["error"] * 3, res
        print("main thread fine")
    """, p, want)
    assert proc.returncode == 0 and "main thread fine" in proc.stdout, proc


def test_fault_on_the_main_thread_after_a_worker_installed_the_guard(tmp_path):
    """Today's ``os._exit(2)``: the first read on a worker thread, a later fault on the main thread."""
    p, want = v1_file(tmp_path / "data_0.pt")
    q, _ = v1_file(tmp_path / "data_1.pt")
    proc = child("""
        t = threading.Thread(target=lambda: forensics.summarize(forensics.load(sys.argv[3])))
        t.start(); t.join()
        cap = forensics.load(P)
        os.truncate(P, 4096)
        print("OUT", judge("main", lambda: forensics.summarize(cap)))
    """, p, want, q)
    assert proc.returncode == 0 and "OUT error" in proc.stdout, proc


@pytest.mark.parametrize("order", ["handler-after-guard", "handler-before-guard"])
@pytest.mark.parametrize("other", ["faulthandler", "python-handler"])
def test_chained_with_faulthandler_and_user_handlers_in_both_orders(tmp_path, order, other):
    p, want = v1_file(tmp_path / "data_0.pt")
    setup = ("import faulthandler; faulthandler.enable()" if other == "faulthandler" else
             "import signal; signal.signal(signal.SIGBUS, lambda *a: print('user handler', flush=True))")
    first, second = ("forensics.io.sigbus.install()", setup) if order == "handler-after-guard" else \
        (setup, "forensics.io.sigbus.install()")
    proc = child(f"""
        import forensics.io.sigbus
        {first}
        cap = forensics.load(P)
        {second}
        os.truncate(P, 4096)
        print("OUT", judge("main", lambda: forensics.summarize(cap)))
    """, p, want, timeout=120)
    assert proc.returncode == 0 and "OUT error" in proc.stdout, proc


def test_a_fault_that_is_not_hsf_still_reaches_faulthandler_and_kills(tmp_path):
    """A mapping hsf did not make (the caller's own np.memmap) truncated under it: not the guard's; with
    faulthandler enabled after the guard, faulthandler's dump and the signal death, as without hsf."""
    p, want = v1_file(tmp_path / "data_0.pt")
    env = dict(os.environ, PYTHONPATH=ROOT)
    code = textwrap.dedent(f"""
        import os, faulthandler, numpy as np, forensics
        forensics.summarize(forensics.load({str(p)!r}))
        faulthandler.enable()
        a = np.memmap({str(p)!r}, dtype=np.uint8, mode="r")
        os.truncate({str(p)!r}, 4096)
        print(int(a.sum()))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == -signal.SIGBUS and "Bus error" in proc.stderr, proc


def test_write_fault_on_a_full_filesystem_is_not_turned_into_sigsegv(tmp_path):
    """A write through the caller's own shared mapping of a file on a full tmpfs faults (SIGBUS): never the
    guard's (it would make the page read-only and the write a SIGSEGV, exit 139); the default action, as without
    hsf."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        p, _ = v1_file(tmp_path / "data_0.pt", t=64, h=64)
        env = dict(os.environ, PYTHONPATH=ROOT)
        code = textwrap.dedent(f"""
            import mmap, os, forensics
            forensics.summarize(forensics.load({str(p)!r}))
            fd = os.open({str(mnt / 'big')!r}, os.O_RDWR | os.O_CREAT)
            os.ftruncate(fd, 1 << 20)           # sparse: 1 MiB on a 64 KiB filesystem
            m = mmap.mmap(fd, 1 << 20)
            for i in range(0, 1 << 20, 4096):
                m[i] = 1                        # the page past the filesystem's room faults
            print("wrote")
        """)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == -signal.SIGBUS, proc
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.parametrize("how", ["same-size", "grown", "shrunk-after-read"])
def test_a_file_changed_in_place_after_loading_is_detected_at_use(tmp_path, how):
    """The issue's 1,602-instead-of-16 case: the bytes under a loaded capture rewritten in place (same size,
    appended, or cut after the norms were read): the verbs raise instead of computing on the new bytes."""
    p, want = v1_file(tmp_path / "data_0.pt")
    proc = child(f"""
        how = {how!r}
        cap = forensics.load(P)
        if how == "shrunk-after-read":
            print("OUT0", judge("before", lambda: forensics.summarize(cap)))
            os.truncate(P, os.path.getsize(P) - 1)
        else:
            with open(P, "r+b") as f:
                if how == "same-size":
                    f.seek(os.path.getsize(P) // 2); f.write(os.urandom(1 << 20))
                else:
                    f.seek(0, 2); f.write(b"x")
        print("OUT", judge("after", lambda: forensics.summarize(cap)))
        print("OUT2", judge("again", lambda: forensics.fingerprint(cap).stats))
    """, p, want)
    assert "OUT error" in proc.stdout and "OUT2 error" in proc.stdout, proc
    if how == "shrunk-after-read":
        assert "OUT0 ok" in proc.stdout, proc


def test_truncation_by_another_process_while_threads_compute(tmp_path):
    """The race as the issue ran it: 4 threads computing from 4 mapped files, a second process truncating them
    at random moments. Every answer is the error or the intact statistics."""
    files = [v1_file(tmp_path / f"data_{i}.pt") for i in range(4)]
    want = files[0][1]
    pristine = [f.read_bytes() for f, _ in files]
    for _trial in range(3):
        for (f, _), b in zip(files, pristine, strict=True):
            f.write_bytes(b)
        # every file has the same seed, so the same statistics
        proc = child("""
            import subprocess, random
            paths = sys.argv[3:]
            caps = [forensics.load(x) for x in paths]
            cutter = subprocess.Popen([sys.executable, "-c",
                "import os, sys, time, random\\n"
                "for p in sys.argv[1:]:\\n"
                "    time.sleep(random.random() * 0.05)\\n"
                "    os.truncate(p, random.choice([4096, os.path.getsize(p) // 2]))\\n", *paths])
            out = {}
            def work(i):
                P_ = paths[i]
                for k in range(3):
                    try:
                        st = forensics.summarize(caps[i])
                    except FileChangedSize as e:
                        assert P_ in e.path, e
                        out.setdefault(i, []).append("error")
                        continue
                    got = [float(s.norm.mean) for s in st.slots]
                    bad = sum(int((s.norms == 0).sum()) for s in st.slots)
                    ok = not bad and all(abs(g - w) <= 1e-3 * w for g, w in zip(got, WANT))
                    out.setdefault(i, []).append("ok" if ok else "WRONG")
            ts = [threading.Thread(target=work, args=(i,)) for i in range(len(paths))]
            [t.start() for t in ts]; [t.join() for t in ts]
            cutter.wait()
            print("OUT", out)
            assert not any("WRONG" in v for v in out.values()), out
        """, files[0][0], want, *[f for f, _ in files])
        assert proc.returncode == 0, proc


def test_reading_a_file_replaced_by_rename_after_loading_is_not_an_error(tmp_path):
    """An atomic replacement (``hsf stamp`` does it) leaves the mapped old file intact: its statistics, exact."""
    p, want = v1_file(tmp_path / "data_0.pt")
    proc = child("""
        cap = forensics.load(P)
        os.replace(sys.argv[3], P)
        print("OUT", judge("after", lambda: forensics.summarize(cap)))
    """, p, want, v1_file(tmp_path / "other.pt", t=16, h=16)[0])
    assert proc.returncode == 0 and "OUT ok" in proc.stdout, proc
