"""Benchmark: naive per-token norms vs forensics' chunked statistics on one Kimi-shaped sample.

Generates a speculators-v1 sample at run time (4 × bf16 ``[1281, 7168]``, the Kimi-K2.5 shape),
then times, in the same process on a warm page cache (one warm-up, median of 5):

- naive: ``torch.load(weights_only=True)`` + ``[h.float().norm(dim=-1) for h in hidden_states]``;
- ours, norms only: ``forensics.load`` (mmap) + ``forensics.analysis.stats.token_norms`` per slot;
- ours, full stats: ``forensics.summarize`` (norms, aminmax, median |x| sample, NaN/Inf, massive, summaries).

and checks that our norms are bit-identical to the naive ones (``torch.equal``).

Usage::

    .venv/bin/python benchmarks/bench_stats.py [--tokens 1281] [--hidden 7168] [--slots 4] [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

TARGET_SPEEDUP = 3.0


def make_sample(path: str, tokens: int, hidden: int, slots: int) -> str:
    """Write one speculators-v1 ``data_0.pt`` with Kimi-like norms; returns what generated it."""
    import torch

    try:  # the synthetic Kimi-shaped sample (seed's norm statistics, massive dims at the sink token)
        from forensics.io.synth import kimi_like, write_speculators_v1
    except ImportError:
        kimi_like = None
    if kimi_like is not None and slots == 4:
        write_speculators_v1(kimi_like(tokens=tokens, hidden=hidden), path)
        return "forensics.io.synth.kimi_like"
    g = torch.Generator().manual_seed(0)
    hs = []
    for i in range(slots):
        h = torch.randn(tokens, hidden, generator=g) * (0.05 * (4 ** i))
        h[0] *= 40.0  # an attention-sink-like first token
        hs.append(h.to(torch.bfloat16))
    torch.save({"input_ids": torch.arange(tokens), "loss_mask": torch.ones(tokens, dtype=torch.bool),
                "hidden_states": hs}, path)
    return "scaled torch.randn (sink at token 0)"


def timed(fn, reps: int) -> tuple[float, float, object]:
    """(median, min, last result) of ``reps`` timed runs after one warm-up run."""
    fn()  # warm-up (page cache, allocator, lazy imports)
    times, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=1281)
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    args = ap.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    import forensics
    from forensics.analysis.stats import STATS_THREADS, token_norms

    with tempfile.TemporaryDirectory(prefix="hsf-bench-") as tmp:
        path = os.path.join(tmp, "data_0.pt")
        source = make_sample(path, args.tokens, args.hidden, args.slots)
        size = os.path.getsize(path)

        def naive():
            d = torch.load(path, weights_only=True)
            return [h.float().norm(dim=-1) for h in d["hidden_states"]]

        def ours_norms():
            cap = forensics.load(path)
            return [token_norms(s.tensor()) for s in cap.slots]

        def ours_full():
            return forensics.summarize(path)

        t_naive, m_naive, ref = timed(naive, args.reps)
        t_norms, m_norms, got = timed(ours_norms, args.reps)
        t_full, m_full, st = timed(ours_full, args.reps)

    identical = all(torch.equal(a, b) for a, b in zip(ref, got, strict=True))
    identical_full = all(torch.equal(a, torch.from_numpy(s.norms)) for a, s in zip(ref, st.slots, strict=True))
    print(f"sample: speculators-v1, {args.slots} × bf16 [{args.tokens}, {args.hidden}], {size / 1e6:.1f} MB "
          f"({source}), "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads (ours reduces with "
          f"forensics.analysis.stats.STATS_THREADS={STATS_THREADS})")
    print(f"{'method':<44} {'median ms':>10} {'min ms':>8} {'GB/s':>7} {'speed-up':>9}")
    rows = [("naive: torch.load + .float().norm(dim=-1)", t_naive, m_naive),
            ("ours, norms only: load(mmap) + token_norms", t_norms, m_norms),
            ("ours, full stats: forensics.summarize", t_full, m_full)]
    for name, t, m in rows:
        print(f"{name:<44} {t * 1e3:>10.1f} {m * 1e3:>8.1f} {size / t / 1e9:>7.2f} {t_naive / t:>8.1f}×")
    print(f"norms bit-identical to naive (torch.equal): norms only {identical}, full stats {identical_full}")
    ok = identical and identical_full and t_naive / t_norms >= TARGET_SPEEDUP
    print(f"GOAL statistics norms ≥ {TARGET_SPEEDUP:g}× naive, bit-identical: {'met' if ok else 'MISSED'} "
          f"(norms only {t_naive / t_norms:.1f}×, full stats {t_naive / t_full:.1f}×; "
          f"by min time {m_naive / m_norms:.1f}× / {m_naive / m_full:.1f}×); load (1 min) {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
