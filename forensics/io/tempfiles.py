"""Temporary files and folders hsf writes beside a target, named so that what a killed run left is found again.

A name is ``.NAME.hsf-tmp-PID-XXXXXXXX`` in the target's folder (:func:`temp_path`): it says which target and
which process it belongs to. The next write of the same target removes those whose process is no longer running
(:func:`clean_stale`): a ``kill -9`` of ``hsf export-model``, ``report`` or ``stamp`` never leaves hidden files
that pile up unnamed.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil

TEMP_MARK = ".hsf-tmp-"


def temp_path(target: str) -> str:
    """A new temporary name beside ``target``: ``.NAME.hsf-tmp-PID-XXXXXXXX`` (nothing is created)."""
    folder, name = os.path.split(os.path.abspath(target))
    return os.path.join(folder, f".{name}{TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}")


def clean_stale(target: str) -> list[str]:
    """Remove the temporaries a killed hsf run left beside ``target`` (:func:`temp_path` names whose PID is not
    a running process); returns what was removed. Best effort: an error leaves the file, never raises."""
    folder, name = os.path.split(os.path.abspath(target))
    pattern = re.compile(re.escape(f".{name}{TEMP_MARK}") + r"(\d+)-[0-9a-f]{8}")
    removed: list[str] = []
    try:
        entries = os.listdir(folder)
    except OSError:
        return removed
    for entry in entries:
        m = pattern.fullmatch(entry)
        if m is None or _alive(int(m.group(1))):
            continue
        path = os.path.join(folder, entry)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
            removed.append(path)
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True
