"""Shared by the headless-browser tests: find Debian's chromium and launch it through Playwright."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def chromium() -> str | None:
    """Debian's chromium (installed by .ci/run), or $HSF_CHROMIUM; None when there is none."""
    for cand in (os.environ.get("HSF_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                 shutil.which("chromium-browser")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def unavailable(reason: str) -> None:
    """Skip, naming what is missing; under ``CI=true`` fail instead (.ci/run installs everything needed)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"the browser tests need {reason} under CI=true (.ci/run installs Debian's chromium)")
    pytest.skip(reason)


@contextmanager
def headless_chromium() -> Iterator[Any]:
    """A Playwright browser on Debian's chromium (never ``playwright install``), closed on exit."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright (the dev extra; no `playwright install` needed)")
    exe = chromium()
    if exe is None:
        unavailable("Chromium at /usr/bin/chromium or on PATH (apt-get install chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
