"""Parameter validation at the library boundary: the Python API gives the CLI's one-line errors.

scikit-learn's ``validate_params`` is the model: each verb checks the types, dtypes and shapes of what it was
given before any work, and a wrong argument is one ``ForensicsError`` that names the argument (and the file
and slot), never an ``IndexError`` or a ``NotImplementedError`` from deep inside, and never a silently wrong
answer. The CLI's argparse types and these checks agree on the bounds (``forensics.io.limits``).

Example:
    >>> count(8, "num_layers", hi=10_000)
    8
    >>> count("30", "num_layers")
    Traceback (most recent call last):
    ...
    forensics.errors.ForensicsError: num_layers must be a whole number, got str '30'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from forensics.errors import ForensicsError
from forensics.io.limits import MAX_HIDDEN_SIZE, MAX_NUM_LAYERS
from forensics.layers import parse_layer_list

HIDDEN_DTYPES = ("float16", "bfloat16", "float32", "float64")  # what a hidden-state slot may hold
MAX_R = MAX_NUM_LAYERS + 1  # r = L + 1 at most (a post-norm final beyond the last block)


def ascii_digits(text: str) -> bool:
    """Whether ``text`` is a whole number written in ASCII digits: ``str.isdigit`` alone also accepts ``²`` (which
    ``int`` refuses) and other scripts' digits such as ``٣``, which name no index or count here.

    Example:
        >>> ascii_digits("12"), ascii_digits("²"), ascii_digits("٣"), ascii_digits("")
        (True, False, False, False)
    """
    return text.isascii() and text.isdigit()


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'…' if len(text) > 40 else ''}"


def count(value: Any, what: str, lo: int = 1, hi: int | None = None, none: bool = False) -> int | None:
    """``value`` as an int in ``[lo, hi]`` (None allowed when ``none``); bools and strings are refused."""
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            if isinstance(value, np.integer):
                value = int(value)
            else:
                raise TypeError
        except (ImportError, TypeError):
            raise ForensicsError(f"{what} must be a whole number, got {_shown(value)}") from None
    if value < lo or (hi is not None and value > hi):
        bound = f"{lo} to {hi}" if hi is not None else f"at least {lo}"
        raise ForensicsError(f"{what} must be {bound}, got {value}")
    return int(value)


def layers(value: Any, what: str = "layers") -> list | None:
    """A layer list (``"embed,L3"``, ``[0, 3, "final_post"]``) parsed, each r inside ``0..MAX_R``."""
    if value is not None and not isinstance(value, (str, list, tuple)):
        raise ForensicsError(f"{what} must be a string such as 'embed,L3,L16' or a list of r, got {_shown(value)}")
    rs = parse_layer_list(value, what)
    for r in rs or ():
        if isinstance(r, int) and not 0 <= r <= MAX_R:
            raise ForensicsError(f"{what}: r = {r} is not a layer (expected 0 to {MAX_R})")
    return rs


def check_capture(cap: Any) -> None:
    """Every slot a ``[tokens, hidden]`` floating-point tensor of one length; ``input_ids`` 1-D integers of that
    length. An fp8 slot of an in-memory capture is refused with the conversion to make (the readers up-cast a
    file's fp8 slots themselves)."""
    tokens = None
    for s in cap.slots:
        dtype = str(s.dtype).replace("torch.", "")
        if dtype.startswith("float8") and cap.format != "in-memory":
            continue  # a reader's fp8 slot is read up-cast to bf16
        if dtype.startswith("float8"):
            raise ForensicsError(f"slot dtype {dtype} is not supported; convert it first (.to(torch.bfloat16))",
                                 path=cap.path, slot=s.name)
        if dtype not in HIDDEN_DTYPES:
            raise ForensicsError(f"slot dtype {dtype} is not a hidden state (expected one of "
                                 f"{', '.join(HIDDEN_DTYPES)})", path=cap.path, slot=s.name)
        shape = tuple(s.shape)
        if len(shape) != 2:
            raise ForensicsError(f"slot shape {list(shape)} is not [tokens, hidden]", path=cap.path, slot=s.name)
        if not (1 <= shape[1] <= MAX_HIDDEN_SIZE) or shape[0] < 1:
            raise ForensicsError(f"slot shape {list(shape)}: expected at least one token and 1 to "
                                 f"{MAX_HIDDEN_SIZE} features", path=cap.path, slot=s.name)
        if tokens is not None and shape[0] != tokens:
            raise ForensicsError(f"slot has {shape[0]} tokens, slot 0 has {tokens}", path=cap.path, slot=s.name)
        tokens = shape[0]
    ids = cap.input_ids
    if ids is not None:
        dtype = str(getattr(ids, "dtype", type(ids).__name__)).replace("torch.", "")
        if getattr(ids, "ndim", None) != 1 or not dtype.startswith(("int", "uint")):
            raise ForensicsError(f"input_ids must be a 1-D integer tensor, got {dtype} of shape "
                                 f"{list(getattr(ids, 'shape', []))}", path=cap.path)
        # rows != ids is readable: the row checks report it as a ``row_count`` finding (forensics.analysis.rows)
