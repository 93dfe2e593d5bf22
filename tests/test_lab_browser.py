"""The notebook sample browser live in a real JupyterLab, driven in headless Debian Chromium by Playwright
(never ``playwright install``): run the cell, then move every control — the sample dropdown (the 32-slot ladder
to a 4-slot file and back), the slot list and the token-range slider — and require zero console errors, the
default selection in view, the token range said and applied, and text columns left-aligned.

Skips with the reason when Chromium, Playwright or JupyterLab is missing, except under ``CI=true`` where that
fails (.ci/run installs Debian's chromium).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from browser_tools import headless_chromium, jupyter_lab, unavailable

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data"
ARTIFACTS = ROOT / "test-artifacts"
LADDER, SMALL = "ladder/capture_0.safetensors", "speculators_v1/data_0.pt"
CELL = "from forensics.views.widgets import SampleBrowser\nbrowser = SampleBrowser('sample_data')\nbrowser"
ERRORS: list[str] = []  # console errors and uncaught exceptions in the page, in order
PANEL_OF = "[...document.querySelectorAll('.hsf-panel')].some(e => e.textContent.startsWith({!r}))"






@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on a free loopback port, its root a temp folder holding the notebook and sample_data."""
    jupyter = Path(sys.executable).with_name("jupyter")
    if not jupyter.exists():
        unavailable("jupyter (the notebooks extra)")
    root = tmp_path_factory.mktemp("lab")
    os.symlink(SAMPLE, root / "sample_data")
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": CELL}],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (root / "browse.ipynb").write_text(json.dumps(nb))
    settings = root / ".settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')  # no news toast
    with jupyter_lab(jupyter, root, "browse.ipynb") as url:
        yield url


@pytest.fixture(scope="module")
def page(lab):
    with headless_chromium() as browser:
        pg = browser.new_page(viewport={"width": 1400, "height": 1100})
        pg.on("console", lambda m: m.type == "error" and ERRORS.append(m.text))
        pg.on("pageerror", lambda e: ERRORS.append(f"pageerror: {e}"))
        pg.goto(lab, timeout=120_000)
        pg.wait_for_selector(".jp-Notebook", timeout=120_000)
        pg.wait_for_selector("text=Python 3 (ipykernel) | Idle", timeout=120_000)
        pg.locator(".jp-Cell").first.click()
        pg.keyboard.press("Shift+Enter")
        pg.wait_for_selector(".hsf-panel", timeout=120_000)
        yield pg
        ARTIFACTS.mkdir(exist_ok=True)
        pg.screenshot(path=str(ARTIFACTS / "jupyterlab_sample_browser.png"))


def _choose_sample(page, name: str) -> None:
    page.locator(".widget-dropdown select").first.select_option(label=name)
    page.wait_for_function(PANEL_OF.format(os.path.basename(name)), timeout=60_000)


def test_every_control_without_a_console_error(page):
    slots = page.locator(".widget-select-multiple select").first
    # the ladder first: 32 slots, the whole list in view, so the default selection is seen
    assert slots.locator("option").count() == 32
    box = slots.bounding_box()
    for opt in slots.locator("option:checked").all():
        ob = opt.bounding_box()
        assert ob is not None and box["y"] <= ob["y"] and ob["y"] + ob["height"] <= box["y"] + box["height"] + 1
    # 32 slots -> 4 slots -> 32 -> 4: the switch that logged "Cannot set properties of undefined"
    for name in (SMALL, LADDER, SMALL):
        _choose_sample(page, name)
    assert slots.locator("option").count() == 4 and slots.locator("option:checked").count() == 4
    # the slot list: one slot only
    slots.select_option(label="1: L3")
    page.wait_for_function("[...document.querySelectorAll('.hsf-panel table.hsf-stats tbody tr')].length === 1",
                           timeout=60_000)
    # the token range: drag the lower handle to the right; the panel says the new range and what it applies to
    handle = page.locator(".noUi-handle-lower").first
    hb = handle.bounding_box()
    page.mouse.move(hb["x"] + hb["width"] / 2, hb["y"] + hb["height"] / 2)
    page.mouse.down()
    page.mouse.move(hb["x"] + 80, hb["y"] + hb["height"] / 2, steps=5)
    page.mouse.up()
    page.wait_for_function("[...document.querySelectorAll('.hsf-panel .hsf-caption')].some(e => "
                           "/^tokens [1-9]\\d*–\\d+ of \\d+ apply to the norm-by-position plot/.test(e.textContent))",
                           timeout=60_000)
    # text columns read from the left in JupyterLab, numbers from the right
    align = page.evaluate("""() => {
        const row = document.querySelector('.hsf-panel table.hsf-stats tbody tr');
        return [...row.children].map(td => getComputedStyle(td).textAlign);
    }""")
    assert align[1] == "left" and align[2] == "left" and align[0] == "right", align
    assert ERRORS == [], ERRORS
