"""Per-row L2 norms of bf16 rows in one fused pass (numba), for the dataset scan.

torch on CPU reduces a bf16 tensor with float32 accumulation only by converting it to float32 first (ATen's
reduction casts its input to the result type before the reduction kernel runs), a second pass over every byte.
This kernel widens each bf16 value to float32 (a 16-bit shift: exact), squares and sums it in the same loop,
16 float32 lanes at a time (``fastmath`` reassociation only: LLVM may reorder the float32 sum, NaN and
Inf still propagate). The sums are float32 like torch's,
in another order: the norms agree with a float64 reference to float32 accumulation error (≈ 1e-7 relative; a
test checks ≤ 8 float32 ulps of the norm), not bit for bit with torch's.

Only inside :func:`scope` and only where numba is installed (the ``fast`` extra); everything else keeps torch's
kernel. The scan enters the scope in every batch, on every backend, when its files hold at least
``forensics.analysis.scan.core.FUSED_NORMS_MIN_BYTES`` (importing numba costs ~0.5 s a process, the kernel saves
~0.1 ms of CPU a MB): the fork server then loads the kernel once (``scan/warmup_fused.py``), so forked workers start
with it; numba caches the machine code beside ``_bf16_norms.py``, so a later process loads it instead of compiling.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

_kernel: Any = None
_tried = False
_active = False


def enable() -> bool:
    """Import numba and load (or compile, the first time) the kernel, once per process; False where numba is
    missing or fails (torch's kernel is kept)."""
    global _kernel, _tried
    if _kernel is not None or _tried:
        return _kernel is not None
    _tried = True
    try:
        from forensics.analysis import _bf16_norms  # noqa: PLC0415 - imports numba (~0.5 s): only when asked

        _bf16_norms.bf16_norms(np.zeros((1, 2), np.uint16), np.empty(1, np.float32))  # load or compile now
    except Exception:  # noqa: BLE001 - an optional accelerator: any failure (no numba, no LLVM) keeps torch's kernel
        return False
    _kernel = _bf16_norms.bf16_norms
    return True


@contextmanager
def scope(load: bool = True) -> Iterator[bool]:
    """Use the fused kernel (where it can be enabled) for bf16 norms inside the block; the previous choice after.
    ``load=False``: only if this process already has it (a pool worker forked from a fork server that loaded it; a
    worker that imported numba itself would pay ~1 s and ~100 MB of its own). Yields whether it is in use."""
    global _active
    before = _active
    _active = enable() if load else _kernel is not None
    try:
        yield _active
    finally:
        _active = before


def active() -> bool:
    """Whether bf16 norms use the fused kernel here (inside :func:`scope`, numba installed)."""
    return _active


def bf16_norms(bits: Any, out: Any) -> None:
    """``out[i] = ‖row i‖₂`` of ``bits`` (a C-contiguous ``[rows, H]`` uint16 array of bf16 patterns) into the
    float32 array ``out``. Only where :func:`active`."""
    _kernel(bits, out)
