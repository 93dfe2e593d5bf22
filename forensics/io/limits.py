"""Bounds on the sizes a file may claim, checked before anything is allocated for them.

A config or sidecar is untrusted text: ``num_hidden_layers: 10^12`` must be a one-line error, not a
``set(range(1, L))`` that fills the machine.
"""

from __future__ import annotations

from typing import Any

from forensics.errors import ForensicsError

# The deepest public decoder-only LLMs have ~130 blocks (Llama-3.1-405B: 126, DeepSeek-V3/Kimi-K2: 61,
# Qwen3-235B: 94); 10 000 is ~80× that and still allocates nothing worth mentioning for per-layer sets.
MAX_NUM_LAYERS = 10_000
# The widest public hidden sizes are ~25 000 (Llama-3.1-405B: 16 384, Grok-1: 6 144, PaLM-540B: 18 432).
MAX_HIDDEN_SIZE = 1 << 20


def _count(value: Any, what: str, limit: int, path: str | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ForensicsError(f"{what} {value!r} is not a whole number", path=path)
    if not 1 <= value <= limit:
        raise ForensicsError(f"{what} {value} is not plausible (expected 1 to {limit})", path=path)
    return value


def num_layers(value: Any, path: str | None = None, what: str = "num_hidden_layers") -> int:
    """``value`` as a layer count L, or a ForensicsError naming ``path`` when it is not 1 ≤ L ≤ MAX_NUM_LAYERS."""
    return _count(value, what, MAX_NUM_LAYERS, path)


def hidden_size(value: Any, path: str | None = None, what: str = "hidden_size") -> int:
    """``value`` as a hidden size H, or a ForensicsError when it is not 1 ≤ H ≤ MAX_HIDDEN_SIZE."""
    return _count(value, what, MAX_HIDDEN_SIZE, path)
