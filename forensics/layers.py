"""The r coordinate every command speaks, its labels and the one layer-list parser.

``r = 0`` embedding output; ``r = k`` output of decoder block k (= HF ``hidden_states[k]``);
``r = L`` output of the last block *before* the final norm; ``"final_post"`` after the final norm.
"""

from __future__ import annotations

import re
from typing import Any

from forensics.errors import ForensicsError

R = int | str  # an r value: int, or the word "final_post"
FINAL_POST = "final_post"
_INT = re.compile(r"-?[0-9]{1,9}")  # an r or a layer id: a few ASCII digits (no model has 10**9 layers)
_SHOWN = 60  # characters of a list option quoted back in an error


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
    digits = low[1:] if low.startswith("l") else low
    if _INT.fullmatch(digits):  # ASCII digits only: "²" is a digit to str.isdigit, not to int()
        return int(digits)
    raise ValueError(f"not an r value: {_shown(text)} (use 0/embed, 3/L3, or final_post)")


def parse_layer_list(spec: Any, what: str = "layer list") -> list[R] | None:
    """``"0,3,L16,final_post"``, ``"embed L3"`` or ``[0, "3", "final_post"]`` → ``[0, 3, 16, "final_post"]``.

    The one parser of user-given layer lists (``--layers``, ``--expect``, ``--trained-layout``, ``hsf stamp
    --layers``, each ``--candidates`` wiring, ``layers=``): items separated by commas and/or white space; None stays
    None. A list that names no layer or an item that is not an r value is one ForensicsError naming ``what`` and
    the input.

    >>> parse_layer_list("embed,L3,16, final_post")
    [0, 3, 16, 'final_post']
    >>> parse_layer_list("embed L3 L16 L28")
    [0, 3, 16, 28]
    """
    if spec is None:
        return None
    items = _items(spec)
    if not items:
        raise ForensicsError(f"{what} {_shown(spec)} names no layer (example: 0,3,16,28 or embed,L3,L16,L28)")
    try:
        return [i if isinstance(i, int) and not isinstance(i, bool) else parse_r(str(i).strip()) for i in items]
    except ValueError as e:
        raise ForensicsError(f"{what} {_shown(spec)}: {e}") from None


def parse_id_list(spec: Any, what: str = "layer ids") -> list[int] | None:
    """``"2,15,27"``, ``"2 15 27"`` or ``[2, 15, 27]`` → ``[2, 15, 27]``: a system's own layer ids (``--layer-ids``,
    ``--target-layer-ids``; negative ids are some systems' words, e.g. TensorRT-LLM's -1), parsed like a layer
    list. None stays None; anything but whole numbers is one ForensicsError naming ``what`` and the input.

    >>> parse_id_list("2, 15 27")
    [2, 15, 27]
    """
    if spec is None:
        return None
    items = _items(spec)
    if not items:
        raise ForensicsError(f"{what} {_shown(spec)} names no id (example: 2,15,27)")
    out = []
    for i in items:
        t = str(i).strip()
        if isinstance(i, bool) or not (isinstance(i, int) or _INT.fullmatch(t)):
            raise ForensicsError(f"{what} {_shown(spec)}: not a layer id: {_shown(t)} (expected whole numbers such as "
                                 "2,15,27)")
        out.append(int(i))
    return out


def _shown(x: Any) -> str:
    """``repr(x)``, cut to ``_SHOWN`` characters: an error quotes what was typed, in one line."""
    text = repr(x)
    return text if len(text) <= _SHOWN else text[:_SHOWN - 1] + "…"


def _items(spec: Any) -> list:
    """The items of a list option: a string split at commas and white space, or a sequence's non-blank items."""
    items = spec.replace(",", " ").split() if isinstance(spec, str) else list(spec)
    return [i for i in items if isinstance(i, int) or str(i).strip()]
