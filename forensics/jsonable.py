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


DATAFRAME_EXTRA = "dataframe"  # the pyproject extra that brings pandas


def data_frame(rows: list[dict], columns: list[str] | None = None) -> Any:
    """A ``pandas.DataFrame`` of ``rows`` (one dict per slot, file, slice or wiring: a result's ``to_dataframe()``),
    each value made JSON-safe first (NaN stays missing). pandas is imported here, only when asked for.

    >>> data_frame([{"slot": 0, "label": "embed"}, {"slot": 1, "label": None}]).shape   # doctest: +SKIP
    (2, 2)
    """
    try:
        import pandas as pd
    except ImportError:
        raise ImportError(f"to_dataframe() needs pandas: pip install 'hidden-state-forensics[{DATAFRAME_EXTRA}]' "
                          "(or pip install pandas)") from None
    return pd.DataFrame([json_safe(r) for r in rows], columns=columns)
