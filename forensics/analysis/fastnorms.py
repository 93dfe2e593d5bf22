"""Per-row L2 norms of bf16 rows in one fused pass (numba), for the dataset scan.

torch on CPU reduces a bf16 tensor with float32 accumulation only by converting it to float32 first (ATen's
reduction casts its input to the result type before the reduction kernel runs), a second pass over every byte.
This kernel widens each bf16 value to float32 (a 16-bit shift: exact), squares and sums it in the same loop,
16 float32 lanes at a time (``fastmath`` reassociation only: LLVM may reorder the float32 sum, NaN and
Inf still propagate). The sums are float32 like torch's,
in another order: the norms agree with a float64 reference to float32 accumulation error (≈ 1e-7 relative; a
test checks ≤ 8 float32 ulps of the norm), not bit for bit with torch's.

Only inside :func:`scope` (every scan batch, on every backend: pool workers, Dask workers, in-process) and only
where numba is installed (the ``fast`` extra); everything else keeps torch's kernel. The scan's fork server
compiles it once (:mod:`forensics.analysis.scan.warmup`), so forked workers start with it; numba caches the
machine code beside this module (``cache=True``), so a later process loads it instead of compiling.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_kernel: Any = None
_tried = False
_active = False


def enable() -> bool:
    """Import numba and compile (or load from numba's cache) the kernel, once per process; False where numba is
    missing or fails (torch's kernel is kept)."""
    global _kernel, _tried
    if _kernel is not None or _tried:
        return _kernel is not None
    _tried = True
    try:
        import numba  # noqa: PLC0415 - optional and heavy (~0.5 s): only where a scan asks for it
        import numpy as np  # noqa: PLC0415

        @numba.njit(cache=True, fastmath={"reassoc", "contract"}, nogil=True, boundscheck=False)
        def bf16_norms(bits, out):  # pragma: no cover - compiled by numba
            T, H = bits.shape
            wide = np.empty(H, np.uint32)
            f = wide.view(np.float32)
            for i in range(T):
                row = bits[i]
                for j in range(H):
                    wide[j] = np.uint32(row[j]) << np.uint32(16)
                acc = np.float32(0.0)
                for j in range(H):
                    acc += f[j] * f[j]
                out[i] = np.sqrt(acc)

        bf16_norms(np.zeros((1, 2), np.uint16), np.empty(1, np.float32))  # compile or load now, not mid-file
    except Exception:  # noqa: BLE001 - an optional accelerator: any failure (no numba, no LLVM) keeps torch's kernel
        return False
    _kernel = bf16_norms
    return True


@contextmanager
def scope() -> Iterator[bool]:
    """Use the fused kernel (where it can be enabled) for bf16 norms inside the block; the previous choice after.
    Yields whether it is in use."""
    global _active
    before = _active
    _active = enable()
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
