"""Benchmark: ``hsf verify`` throughput against ``cat`` on the same files (target: at least half of cat's speed).

Generates, at run time, a dataset in two formats with the Kimi-K2.5 hidden size (bf16, 7168): speculators
``hs_{i}.safetensors`` files (``[tokens, 4, H]`` stacks) and speculators-v1 ``data_{i}.pt`` files (a list of 4
``[tokens, H]`` tensors). Stamps it, warms the page cache and the imports, then times (median of ``--reps``):

- ``cat FILES > /dev/null`` (a subprocess, the bytes only);
- ``forensics.analysis.stamp.verify(folder)`` in this process (every slot's checksum, the token checksum);
- the slot checksum alone, version 2 (position-dependent int8 byte mix) against version 1 (the position-blind
  uint64 row sums it replaced), on one strided slot of a stack (target: v2 within 1.5x of v1).

Usage::

    .venv/bin/python benchmarks/bench_verify.py [--files 4] [--tokens 1281] [--hidden 7168] [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

TARGET_RATIO = 0.5  # verify must run at >= half of cat's throughput
CHECKSUM_RATIO = 1.5  # the v2 checksum may take at most 1.5x the time of the v1 row sums


def make(folder: str, fmt: str, files: int, tokens: int, hidden: int) -> list[str]:
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    paths = []
    for i in range(files):
        ids = torch.randint(0, 49152, (tokens,), generator=g)
        states = [(torch.randn(tokens, hidden, generator=g) * (1 + k)).to(torch.bfloat16) for k in range(4)]
        if fmt == "speculators":
            p = os.path.join(folder, "hidden_states", f"hs_{i}.safetensors")
            os.makedirs(os.path.dirname(p), exist_ok=True)
            save_file({"hidden_states": torch.stack(states, dim=1).contiguous(), "token_ids": ids}, p)
        else:
            p = os.path.join(folder, f"data_{i}.pt")
            torch.save({"input_ids": ids, "hidden_states": states, "loss_mask": torch.ones_like(ids)}, p)
        paths.append(p)
    return paths


def timed(fn, reps: int) -> float:
    fn()  # warm-up: page cache and imports
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=1281)
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    from forensics.analysis.stamp import stamp, verify

    ok = True
    for fmt in ("speculators", "speculators-v1"):
        with tempfile.TemporaryDirectory() as d:
            paths = make(d, fmt, a.files, a.tokens, a.hidden)
            stamp(d, layers="L2,L30,L58,L61")
            size = sum(os.path.getsize(p) for p in paths)
            t_cat = timed(lambda paths=paths: subprocess.run(["cat", *paths], stdout=subprocess.DEVNULL,
                                                             check=True), a.reps)
            t_ver = timed(lambda d=d: verify(d), a.reps)
            assert verify(d).verdict == "pass"
            ratio = t_cat / t_ver
            ok &= ratio >= TARGET_RATIO
            print(f"{fmt:15s} {a.files} files, {size / 1e6:.0f} MB: cat {size / t_cat / 1e9:.2f} GB/s, "
                  f"verify {size / t_ver / 1e9:.2f} GB/s -> {ratio:.2f}x cat "
                  f"({'meets' if ratio >= TARGET_RATIO else 'MISSES'} the {TARGET_RATIO}x target)")
    ok &= bench_checksums(a.tokens, a.hidden, a.reps)
    return 0 if ok else 1


def bench_checksums(tokens: int, hidden: int, reps: int) -> bool:
    import torch

    from forensics.io import stamps

    g = torch.Generator().manual_seed(0)
    stack = torch.randn(tokens, 4, hidden, generator=g).to(torch.bfloat16)
    slot = stamps._int_array(stack)[:, 1]  # a strided view, as verify reads a speculators stack
    times = {}
    for name, fn in (("v1", stamps.checksum_v1), ("v2", stamps.checksum)):
        times[name] = timed(lambda fn=fn: fn(slot), max(reps, 5))
    mb = tokens * hidden * 2 / 1e6
    ratio = times["v2"] / times["v1"]
    print(f"slot checksum [{tokens}, {hidden}] bf16 ({mb:.0f} MB, strided): v1 {mb / 1e3 / times['v1']:.2f} GB/s, "
          f"v2 {mb / 1e3 / times['v2']:.2f} GB/s -> v2 takes {ratio:.2f}x v1 "
          f"({'meets' if ratio <= CHECKSUM_RATIO else 'MISSES'} the {CHECKSUM_RATIO}x target)")
    return ratio <= CHECKSUM_RATIO


if __name__ == "__main__":
    sys.exit(main())
