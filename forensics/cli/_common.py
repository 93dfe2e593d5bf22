"""One module per ``hsf`` command: ``add_arguments(parser)`` and ``run(args) -> int``."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any


def print_json(doc: Any) -> None:
    json.dump(doc, sys.stdout, indent=1, default=_default, allow_nan=False)
    sys.stdout.write("\n")


def _default(o: Any):
    import numpy as np

    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if hasattr(o, "to_dict"):
        return o.to_dict()
    return str(o)


def for_each_file(paths: Iterable[str], fn: Callable[[str], dict], out: Any = None,
                  what: str = "reading") -> tuple[list[dict], int]:
    """Run ``fn`` on every capture file under ``paths``; an unreadable file becomes an error entry.

    Returns ``(entries, exit_code)``: exit 2 when any file was unreadable, else 0. With ``out`` (the command's
    :class:`~forensics.cli._console.Out`), a progress bar on stderr counts the files.
    """
    from forensics.errors import ForensicsError
    from forensics.io.formats import iter_files

    entries: list[dict] = []
    code = 0
    todo: list[str] = []
    for p in paths:
        try:
            files = list(iter_files(p))
        except ForensicsError as e:
            entries.append(error_entry(p, e))
            code = 2
            continue
        if not files:
            entries.append(error_entry(p, ForensicsError("no capture files found", path=p)))
            code = 2
        todo += files
    if out is None or len(todo) < 2:
        steps: Any = None
    else:
        steps = out.progress(what, len(todo))
    step = steps.__enter__() if steps is not None else (lambda *a, **k: None)
    try:
        for f in todo:
            try:
                entries.append(fn(f))
            except ForensicsError as e:
                entries.append(error_entry(f, e))
                code = 2
            step(os.path.basename(f))
    finally:
        if steps is not None:
            steps.__exit__(None, None, None)
    return entries, code


def error_entry(path: str, e: Exception) -> dict:
    return {"path": str(path), "format": None, "num_tokens": None, "hidden_size": None, "error": str(e),
            "slots": []}


def positive_int(text: str) -> int:
    """argparse type for L and H: a whole number >= 1 (0 or -5 were taken as 'unknown' or as L = -5)."""
    import argparse

    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v
