"""The r coordinate every command speaks, its labels and the one layer-list parser.

``r = 0`` embedding output; ``r = k`` output of decoder block k (= HF ``hidden_states[k]``);
``r = L`` output of the last block *before* the final norm; ``"final_post"`` after the final norm.
"""

from __future__ import annotations

from typing import Any

from forensics.errors import ForensicsError

R = int | str  # an r value: int, or the word "final_post"
FINAL_POST = "final_post"


def r_label(r: R | None) -> str:
    """The label of an r value: 0 → ``embed``, 3 → ``L3``, ``final_post`` → ``final_post``."""
    if r is None:
        return "?"
    if r == FINAL_POST:
        return FINAL_POST
    return "embed" if int(r) == 0 else f"L{int(r)}"


def parse_r(text: str | int) -> R:
    """Parse one r value: ``0``/``embed`` → 0, ``L3``/``3`` → 3, ``final_post``/``post`` → ``final_post``."""
    if isinstance(text, int):
        return text
    t = str(text).strip()
    low = t.lower()
    if low in ("embed", "emb", "embedding", "e"):
        return 0
    if low in ("final_post", "post", "final-post", "postnorm"):
        return FINAL_POST
    if low.startswith("l") and low[1:].lstrip("-").isdigit():
        return int(low[1:])
    if low.lstrip("-").isdigit():
        return int(low)
    raise ValueError(f"not an r value: {text!r} (use 0/embed, 3/L3, or final_post)")


def parse_layer_list(spec: Any, what: str = "layer list") -> list[R] | None:
    """``"0,3,L16,final_post"``, ``"embed L3"`` or ``[0, "3", "final_post"]`` → ``[0, 3, 16, "final_post"]``.

    The one parser of user-given layer lists (``--layers``, ``--expect``, ``layers=``); None stays None. A list that
    names no layer or an item that is not an r value is a ForensicsError naming ``what`` and the input.

    >>> parse_layer_list("embed,L3,16, final_post")
    [0, 3, 16, 'final_post']
    """
    if spec is None:
        return None
    items = spec.replace(",", " ").split() if isinstance(spec, str) else list(spec)
    items = [i for i in items if isinstance(i, int) or str(i).strip()]
    if not items:
        raise ForensicsError(f"{what} {spec!r} names no layer (example: 0,3,16,28 or embed,L3,L16,L28)")
    try:
        return [i if isinstance(i, int) and not isinstance(i, bool) else parse_r(str(i).strip()) for i in items]
    except ValueError as e:
        raise ForensicsError(f"{what} {spec!r}: {e}") from None
