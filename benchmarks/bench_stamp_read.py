"""Benchmark: what checking a file's stamp inside another command's read costs (issue 33: ≤ 1.1× the command
without it), side by side in one run.

Generates Kimi-shaped captures (``forensics.io.synth.kimi_like``: 4 × bf16 ``[1281, 7168]``, 73.5 MB a file) in
two layouts (speculators ``hs_{i}.safetensors`` stacks, speculators-v1 ``data_{i}.pt`` lists), stamps them
(``hsf stamp``), warms the page cache and the imports, then times, interleaved (each round runs every contender
once; best of ``--reps``, the run least disturbed on a shared machine), each with and without the stamp check:

- ``fingerprint(file)`` of every file (what ``hsf fingerprint`` computes);
- ``summarize`` + ``check_rows`` of every file (what ``hsf inspect`` computes);
- ``scan(folder, workers=0)`` with its default fingerprint choice and with ``fingerprint="none"``.

Prints one ``GOAL`` line per command: the ratio with/without and whether it is ≤ 1.1.

Usage::

    PYTHONPATH=. .venv/bin/python benchmarks/bench_stamp_read.py [--files 4] [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

GOAL = 1.1  # a command with the stamp check may take at most 1.1× its time without


def make(folder: str, fmt: str, files: int) -> None:
    import torch
    from safetensors.torch import save_file

    from forensics.io.synth import kimi_like

    for i in range(files):
        cap = kimi_like(seed=i)
        states = [s.tensor() for s in cap.slots]
        ids = cap.input_ids
        if fmt == "speculators":
            p = os.path.join(folder, "hidden_states", f"hs_{i}.safetensors")
            os.makedirs(os.path.dirname(p), exist_ok=True)
            save_file({"hidden_states": torch.stack(states, dim=1).contiguous(), "token_ids": ids}, p)
        else:
            os.makedirs(folder, exist_ok=True)
            torch.save({"input_ids": ids, "hidden_states": states, "loss_mask": torch.ones_like(ids)},
                       os.path.join(folder, f"data_{i}.pt"))


def best_of(fns: dict, reps: int) -> dict[str, float]:
    for fn in fns.values():
        fn()
    best = {k: float("inf") for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t)
    return best


def measure(fmt: str, folder: str, reps: int) -> list[str]:
    """Stamp ``folder`` and time each command with and without the stamp check; the GOAL lines."""
    from forensics.analysis.fingerprint.core import fingerprint
    from forensics.analysis.rows import check_rows
    from forensics.analysis.scan.core import scan
    from forensics.analysis.stamp import check_in_read, stamp
    from forensics.analysis.stats import summarize
    from forensics.io.formats import iter_files, load

    assert stamp(folder, layers="embed,L3,L31,L59", num_layers=61).ok
    files = list(iter_files(folder))

    def fp(check: bool) -> None:
        for f in files:
            res = fingerprint(f, stamp_check=check)
            assert check is (res.stamp is not None)

    def inspect(check: bool) -> None:
        for f in files:
            cap = load(f)
            st = summarize(cap)
            check_rows(cap, norms=[s.norms for s in st.slots])
            if check:
                assert check_in_read(cap).check.status == "ok"

    contenders = {
        "fingerprint": fp, "inspect": inspect,
        "scan": lambda check: scan(folder, workers=0, progress=False, stamp_check=check),
        "scan --fingerprint none": lambda check: scan(folder, workers=0, progress=False, fingerprint="none",
                                                      stamp_check=check),
    }
    fns = {(name, c): (lambda fn=fn, c=c: fn(c)) for name, fn in contenders.items() for c in (False, True)}
    t = best_of(fns, reps)
    size = sum(os.path.getsize(f) for f in files)
    print(f"{fmt}: {len(files)} files, {size / 1e6:.0f} MB")
    lines = []
    for name in contenders:
        off, on = t[(name, False)], t[(name, True)]
        ratio = on / off
        line = (f"GOAL {fmt:15s} {name:24s} with stamp check {on:.3f} s vs without {off:.3f} s: ratio "
                f"{ratio:.3f} ({'ok' if ratio <= GOAL else 'MISSED'} <= {GOAL}); load (1 min) "
                f"{os.getloadavg()[0]:.1f}")
        print(line)
        lines.append(line)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    root = tempfile.mkdtemp(prefix="hsf-bench-stamp-")
    lines = []
    try:
        for fmt in ("speculators", "speculators-v1"):
            folder = os.path.join(root, fmt)
            make(folder, fmt, a.files)
            lines += measure(fmt, folder, a.reps)
            shutil.rmtree(folder)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
