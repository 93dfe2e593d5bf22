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


@contextmanager
def jupyter_lab(jupyter: str, root: Any, notebook: str, env: dict | None = None) -> Iterator[str]:
    """A JupyterLab server on a free loopback port serving ``root`` (no token), until the block ends: yields
    the URL of ``notebook``. Fails the test with the server's log when it exits before answering."""
    import socket
    import subprocess
    import time
    from pathlib import Path

    root = Path(root)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, HF_HUB_OFFLINE="1", JUPYTERLAB_SETTINGS_DIR=str(root / ".settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(root / ".workspaces"), **(env or {}))
    log = open(root / "lab.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([str(jupyter), "lab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
                             "--ServerApp.token=", "--ServerApp.password=", f"--ServerApp.root_dir={root}",
                             "--allow-root"], env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(240):
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"jupyter lab exited: {(root / 'lab.log').read_text()[-2000:]}")
                time.sleep(0.25)
        yield f"http://127.0.0.1:{port}/lab/tree/{notebook}"
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
