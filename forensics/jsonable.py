"""One JSON sanitiser for every ``to_dict()`` and ``--json`` document."""

from __future__ import annotations

import math
from typing import Any


def json_safe(x: Any) -> Any:
    """A value ``json.dumps(..., allow_nan=False)`` accepts, with the same meaning.

    Mappings get string keys; lists, tuples and arrays become lists; numpy and torch scalars become Python
    numbers; a non-finite float becomes None (JSON has no NaN); an object with ``to_dict()`` is converted by it;
    anything else is its ``str``. Numpy is not imported: arrays and scalars are recognised by ``tolist``.

    >>> import math
    >>> json_safe({1: (2.5, float("nan")), "x": [math.inf, None, "a", True]})
    {'1': [2.5, None], 'x': [None, None, 'a', True]}
    """
    if x is None or isinstance(x, (str, bool)):
        return x
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        return [json_safe(v) for v in x]
    if hasattr(x, "to_dict"):
        return json_safe(x.to_dict())
    if hasattr(x, "tolist"):  # numpy arrays and scalars, torch tensors
        return json_safe(x.tolist())
    return str(x)
