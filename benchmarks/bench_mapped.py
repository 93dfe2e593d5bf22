"""Benchmark: reading a Kimi-shaped ``.pt`` through its memory map, with and without the SIGBUS guard, against
reading it into memory (what not mapping would cost).

Generates one speculators-v1 sample (``forensics.io.synth.kimi_like``: 4 × bf16 ``[1281, 7168]``, 73.5 MB) in a
temporary folder, warms the page cache, then times (best of ``--rounds`` processes × ``--reps``, one torch
thread each) ``torch.load`` and one pass over every slot (``amax``: every byte is touched, as the statistics
kernels touch them):

- ``mmap``: ``torch.load(mmap=True)``, as the readers do;
- ``mmap + guard``: the same after :func:`forensics.io.sigbus.install` (the guard runs only on a fault, so this
  must equal ``mmap``; goal: within 5 %);
- ``read``: ``torch.load(mmap=False)`` (the file copied into memory first: the option the guard avoids).

Usage::

    PYTHONPATH=. .venv/bin/python benchmarks/bench_mapped.py [--reps 9] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

GUARD_RATIO = 1.05


def best(fn, reps: int) -> float:
    fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)


def child(path: str, mode: str, reps: int) -> None:
    """One process, one way of reading; prints its best time (the guard is process-wide, so each way runs
    in its own process, alternating)."""
    import torch

    torch.set_num_threads(1)
    if mode == "guard":
        from forensics.io import sigbus

        assert sigbus.install()

    def read() -> None:
        doc = torch.load(path, map_location="cpu", weights_only=True, mmap=mode != "read")
        for h in doc["hidden_states"]:
            torch.amax(h)

    print(best(read, reps))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child[0], a.child[1], a.reps)
        return 0
    import subprocess

    from forensics.io.synth import kimi_like, write_speculators_v1

    times: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "data_0.pt")
        write_speculators_v1(kimi_like(), p)
        size = os.path.getsize(p)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(
            __file__))), os.environ.get("PYTHONPATH", "")]))
        for _ in range(a.rounds):
            for mode in ("mmap", "guard", "read"):
                out = subprocess.run([sys.executable, __file__, "--child", p, mode, "--reps", str(a.reps)],
                                     capture_output=True, text=True, check=True, env=env)
                times[mode] = min(times.get(mode, float("inf")), float(out.stdout.split()[-1]))
    names = {"mmap": "mmap", "guard": "mmap + guard", "read": "read"}
    for mode, t in times.items():
        print(f"{names[mode]:13s} {t * 1e3:7.1f} ms  {size / t / 1e9:5.2f} GB/s (best of {a.rounds} x {a.reps})")
    ratio = times["guard"] / times["mmap"]
    print(f"GOAL guard cost: mmap + guard takes {ratio:.2f}x mmap ({'meets' if ratio <= GUARD_RATIO else 'MISSES'} "
          f"<= {GUARD_RATIO}x); reading into memory instead takes {times['read'] / times['mmap']:.2f}x; "
          f"load (1 min) {os.getloadavg()[0]:.1f}")
    return 0 if ratio <= GUARD_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
