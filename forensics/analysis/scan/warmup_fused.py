"""Loaded in the scan's fork server when the scan is large enough for the fused bf16 norm kernel
(:data:`forensics.analysis.scan.core.FUSED_NORMS_MIN_BYTES`): numba is imported and the kernel loaded from its cache
(compiled the first time) once, here, so every forked worker starts with it instead of paying ~0.5 s each."""

from __future__ import annotations

from forensics.analysis import fastnorms

fastnorms.enable()
