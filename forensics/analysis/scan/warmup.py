"""Warm-up run once in the scan's fork server, so every forked worker starts warm.

A freshly forked worker spent 40–110 ms on its first Kimi-sized file against ~20 ms on later ones (lazy
initialisation in torch's loader and reduction kernels, numpy's quantile code and first-touch page faults;
measured 2026-11-30). With a 40 ms process start that fixed cost was ~25 % of a 32-file scan. The fork
server imports this module (``set_forkserver_preload`` in :mod:`forensics.analysis.scan.workers`), which computes one
scan row of a tiny generated capture; workers forked from it inherit the initialised state.
"""

from __future__ import annotations

import gc
import os
import tempfile

from forensics.analysis.scan.rows import file_row
from forensics.io.pages import LIBRARY_PAGES, release_libraries

WARMUP_TOKENS, WARMUP_HIDDEN, WARMUP_SLOTS = 16, 64, 2  # tiny: the point is code paths, not bytes


def warm_up() -> None:
    """Compute the scan row of a tiny bf16 speculators-v1 capture in a temporary folder (then removed)."""
    import torch

    # one intra-op thread, as in the workers; and no OpenMP thread pool may be started in a process that forks
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    obj = {"input_ids": torch.arange(WARMUP_TOKENS), "loss_mask": torch.ones(WARMUP_TOKENS, dtype=torch.bool),
           "hidden_states": [torch.randn(WARMUP_TOKENS, WARMUP_HIDDEN, generator=g).to(torch.bfloat16)
                             for _ in range(WARMUP_SLOTS)]}
    with tempfile.TemporaryDirectory(prefix="hsf-scan-warmup-") as d:
        path = os.path.join(d, "warmup.pt")
        torch.save(obj, path)
        st = os.stat(path)
        file_row(path, st.st_size, st.st_mtime_ns, use_fingerprint=False)


try:  # a warm-up that fails costs speed only, never the scan
    warm_up()
except Exception:  # noqa: BLE001 - warm-up is an optimisation; the real file reports its own error
    pass
# Move everything imported and warmed so far into the collector's permanent generation: a forked worker's garbage
# collections then never write to those objects' headers, so their pages stay shared with this fork server instead
# of being copied into every worker (gc.freeze, Python 3.7: "to avoid copy-on-write"; measured on a 32-file
# fingerprinted scan: each worker's private dirty memory 53–59 → 47–50 MB, the fork server's 17 → 13 MB).
gc.collect()
gc.freeze()
# The libraries' code and constants this fork server touched while importing and warming up (torch's alone is tens
# of MB) are given back: a worker forked from it maps the pages it runs itself (a fork copies no page-table entry of
# a file mapping), so pages only this process had mapped leave the scan's memory, and its own are faulted back from
# the page cache if it ever runs them again (measured on 128 Kimi-shaped files: the fork server at the scan's peak
# 146 -> 82 MB PSS, the whole scan's peak 462-474 -> 392-402 MB; warmup_fused.py does it again after numba).
release_libraries(LIBRARY_PAGES)
