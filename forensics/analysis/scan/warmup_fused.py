"""Loaded in the scan's fork server when the scan is large enough for the fused bf16 norm kernel
(:data:`forensics.analysis.scan.core.FUSED_NORMS_MIN_BYTES`): numba is imported and the kernel loaded from its cache
(compiled the first time) once, here, so every forked worker starts with it instead of paying ~0.5 s each."""

from __future__ import annotations

from forensics.analysis import fastnorms
from forensics.io.pages import LIBRARY_PAGES, release_libraries

if fastnorms.enable():
    # LLVM (llvmlite's library, ~100 MB) was needed to load the kernel, not to run it: its read-only pages are given
    # back, so neither this fork server nor the workers forked from it hold them (measured: the fork server at the
    # peak of a 128-file scan 216 -> 144 MB PSS), with every other library page importing numba touched (warmup.py;
    # LIBRARY_PAGES names every shared library, llvmlite's and numba's among them)
    release_libraries(LIBRARY_PAGES)
