"""The compiled kernel of :mod:`forensics.analysis.fastnorms` (numba). Importing this module imports numba (~0.5 s)
and loads the kernel's machine code from numba's cache beside this file (compiles it the first time, ~1.5 s); only
:func:`forensics.analysis.fastnorms.enable` imports it. Defined at module level so numba's cache can find it again
(a function defined inside another, with closure variables, is compiled anew in every process)."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, fastmath={"reassoc", "contract"}, nogil=True, boundscheck=False)
def bf16_norms(bits, out):  # pragma: no cover - compiled by numba
    """``out[i] = sqrt(Σ_j float32(bits[i, j])²)``: each bf16 pattern widened to float32 by a 16-bit shift (exact),
    squared and summed in float32 in one loop (reassociation only: the sum may be reordered into SIMD lanes;
    NaN and Inf propagate)."""
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
