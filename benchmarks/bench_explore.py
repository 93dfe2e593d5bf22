"""Benchmark: opening the explorer on a 4 × 2048 × 7168 bf16 capture, after the file is read (issue 27: < 1 s).

The capture is in memory (the file-reading cost is excluded, as the target states): four bf16 ``[2048, 7168]``
slots of a residual-stream-like drift with a sink at token 0, and token ids drawn Zipf-like from 3000 ids
(repeats, as in text). Times, median of ``--reps`` after one warm-up, wall and process CPU:

- ``explore_state``: norms (row blocks), cosines to the previous slot and to the same id, row check, bands;
- ``Explorer(...)``: the widget object ready to display (its state and payload); the fingerprint then runs
  in its background thread (timed separately: ``fingerprint``).

Usage::

    .venv/bin/python benchmarks/bench_explore.py [--tokens 2048] [--hidden 7168] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

TARGET_S = 1.0


def make_capture(tokens: int, hidden: int):
    import torch

    from forensics.io.capture import Capture, Provenance, Slot, constant_getter

    g = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, hidden, generator=g)
    states = []
    for k in range(4):
        x = x + (k + 1) * 0.5 * torch.randn(tokens, hidden, generator=g)
        h = x.clone()
        if k:
            h[0] *= 50  # a sink
        states.append(h.to(torch.bfloat16))
    zipf = 1.0 / torch.arange(1, 3001, dtype=torch.float64)
    ids = torch.multinomial(zipf, tokens, True, generator=g)
    slots = [Slot(index=i, name=f"hidden_states[{i}]", key="hidden_states", shape=(tokens, hidden),
                  dtype=t.dtype, getter=constant_getter(t)) for i, t in enumerate(states)]
    prov = Provenance(path="<bench>", format="in-memory", size_bytes=sum(t.numel() * 2 for t in states))
    return Capture(slots=slots, input_ids=ids, loss_mask=None, provenance=prov)


def timed(fn, reps: int) -> tuple[float, float, object]:
    fn()  # warm-up
    walls, cpus, out = [], [], None
    for _ in range(reps):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args(argv)
    import forensics
    from forensics.analysis.explore import explore_state
    from forensics.views.explore.widget import Explorer

    cap = make_capture(a.tokens, a.hidden)
    print(f"capture: 4 × {a.tokens} × {a.hidden} bf16 ({cap.provenance.size_bytes / 2**20:.0f} MiB), in memory")
    wall, cpu, _ = timed(lambda: explore_state(cap, tokenizer=None), a.reps)
    print(f"explore_state:     {wall:.3f} s wall, {cpu:.3f} s CPU")
    class Unthreaded(Explorer):  # the background fingerprint is timed on its own below
        def _start(self) -> None:
            pass

    wall2, cpu2, _ = timed(lambda: Unthreaded(cap, tokenizer=None), a.reps)
    print(f"Explorer(...):     {wall2:.3f} s wall, {cpu2:.3f} s CPU (ready to display; verdicts follow)")
    wall3, cpu3, _ = timed(lambda: forensics.fingerprint(cap), 1)
    print(f"fingerprint:       {wall3:.3f} s wall, {cpu3:.3f} s CPU (background thread)")
    ok = wall2 < TARGET_S
    print(f"GOAL explorer opens a 4 × {a.tokens} × {a.hidden} bf16 capture < {TARGET_S:g} s after the read: "
          f"{'met' if ok else 'MISSED'} ({wall2:.2f} s wall, {cpu2:.2f} s CPU); load (1 min) {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
