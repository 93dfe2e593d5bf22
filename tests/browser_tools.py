"""Shared by the headless-browser tests."""

from __future__ import annotations

import os
import shutil


def chromium() -> str | None:
    """Debian's chromium (installed by .ci/run), or $HSF_CHROMIUM; None when there is none."""
    for cand in (os.environ.get("HSF_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                 shutil.which("chromium-browser")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None
