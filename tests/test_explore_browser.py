"""The explorer in a real browser: notebook 02 run in a real JupyterLab, and the report's static copy, both in
headless Debian Chromium driven by Playwright (never ``playwright install``).

Hover a heatmap cell and read the token's text in the tooltip, click it and see the linked view name that token
with the norms of the tensors (float64 references from the capture), move with the keyboard, export SVG, and
require zero console errors; in Lab also the logit lens (L30 and final_post decode to the same top-5) and the
≤ 800 px height of the 32-slot ladder's explorer at 1280 px.

Skips with the reason when Chromium, Playwright or JupyterLab is missing, except under ``CI=true``.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import sys

import pytest
import torch
from browser_tools import headless_chromium, jupyter_lab, unavailable

pytestmark = pytest.mark.browser
ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data"
ARTIFACTS = ROOT / "test-artifacts"
NOTEBOOK = ROOT / "notebooks" / "02_browse_samples.ipynb"


def _visible(t: str) -> str:  # the explorer's showToken
    return t.replace("\n", "⏎").replace("\t", "⇥").replace(" ", "·") or "∅"


def _truth(path: pathlib.Path) -> tuple[list[str], list[list[float]]]:
    """Token texts (the capture's own tokenizer) and float64 norms per slot, computed here."""
    import forensics
    from forensics.io.tokenizer import decode_tokens, find_tokenizer, load_tokenizer

    cap = forensics.load(path)
    tok = load_tokenizer(find_tokenizer(cap.path, cap.meta))[0]
    texts = decode_tokens(tok, [int(i) for i in cap.input_ids.flatten().tolist()])
    return texts, [s.tensor().to(torch.float64).norm(dim=-1).tolist() for s in cap.slots]


def _hover_and_click(page, root, texts: list[str], norms: list[list[float]], pos: int) -> None:
    """Hover token ``pos`` of the explorer ``root`` (one column per token), read the tooltip, click, check."""
    heat = root.locator(".hsf-x-heat")
    heat.scroll_into_view_if_needed()
    box = heat.bounding_box()
    T = len(texts)
    x, y = box["x"] + (pos + 0.5) / T * box["width"], box["y"] + box["height"] - 3
    page.mouse.move(x, y)
    tip = root.locator(".hsf-x-tip")
    tip.wait_for(state="visible", timeout=10_000)
    head = tip.locator(".hsf-x-tiphead").inner_text()
    assert f"“{_visible(texts[pos])}”" in head and f"token {pos}" in head, head
    assert tip.locator("tr").count() == len(norms)
    page.mouse.click(x, y)
    sel = root.locator(".hsf-x-sel")
    sel.wait_for(timeout=10_000)
    assert sel.inner_text().startswith(f"token {pos} “{_visible(texts[pos])}”"), sel.inner_text()
    cells = root.locator(".hsf-x-table tbody tr")
    assert cells.count() == len(norms)
    for i, ref in enumerate(norms):
        shown = float(cells.nth(i).locator("td").nth(2).inner_text())
        assert shown == pytest.approx(ref[pos], rel=6e-3), (i, shown, ref[pos])
    page.keyboard.press("ArrowRight")
    page.wait_for_function("([el, want]) => (el.querySelector('.hsf-x-sel') || {}).textContent?.startsWith(want)",
                           arg=[root.element_handle(), f"token {pos + 1} "], timeout=10_000)


# ------------------------------------------------------------------------------------------- JupyterLab


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab on a free loopback port, its root a temp folder holding notebook 02 and sample_data."""
    jupyter = pathlib.Path(sys.executable).with_name("jupyter")
    if not jupyter.exists():
        unavailable("jupyter (the notebooks extra)")
    root = tmp_path_factory.mktemp("explore-lab")
    os.symlink(SAMPLE, root / "sample_data")
    shutil.copy(NOTEBOOK, root / "02.ipynb")
    settings = root / ".settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    nbset = root / ".settings" / "@jupyterlab" / "notebook-extension"
    nbset.mkdir(parents=True)  # every cell rendered (Lab 4 virtualises cells out of view by default)
    (nbset / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    with jupyter_lab(jupyter, root, "02.ipynb", {"HSF_NOTEBOOK_OUT": str(root / "out")}) as url:
        yield url


def test_notebook_02_in_jupyterlab(lab):
    errors: list[str] = []
    with headless_chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 1000}, accept_downloads=True)
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
        page.goto(lab, timeout=120_000)
        page.wait_for_selector(".jp-Notebook", timeout=120_000)
        page.wait_for_selector("text=Python 3 (ipykernel) | Idle", timeout=120_000)
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile("^Run$")).click()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Run All Cells$")).click()
        page.locator(".jp-OutputArea-output", has_text="report written:").wait_for(timeout=300_000)
        explorers = page.locator(".hsf-x")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "jupyterlab_explorer.png"))
        assert explorers.count() == 3, errors
        first = explorers.nth(0)
        # the notebook switched the folder's explorer to data_1.pt and selected token 3
        first.locator(".hsf-x-file.current", has_text="data_1.pt").wait_for(timeout=60_000)
        assert first.locator(".hsf-x-file").count() == 5
        texts, norms = _truth(SAMPLE / "speculators_v1" / "data_1.pt")
        _hover_and_click(page, first, texts, norms, 10)
        # the zero-row block's band sits on slot 2, rows 40-47
        band = explorers.nth(1).locator(".hsf-x-band[data-kind=zero_rows]")
        assert band.count() == 1
        assert [band.get_attribute(a) for a in ("data-slot", "data-first", "data-last")] == ["2", "40", "47"]
        # the logit lens: click a token of the ladder; L30 and final_post decode to the model's own top-5
        ladder = explorers.nth(2)
        assert ladder.bounding_box()["height"] <= 800
        lt, ln = _truth(SAMPLE / "ladder" / "capture_0.safetensors")
        _hover_and_click(page, ladder, lt, ln, 7)
        lens = ladder.locator(".hsf-x-table tbody tr td.lens")
        page.wait_for_function("el => { const c = el.querySelectorAll('.hsf-x-table tbody tr td.lens'); "
                               "return c.length === 32 && !c[31].textContent.includes('computing'); }",
                               arg=ladder.element_handle(), timeout=120_000)
        l30, post = lens.nth(30).inner_text().split(), lens.nth(31).inner_text().split()
        assert l30 and l30[::2] == post[::2]  # the same five tokens (their probabilities differ in the last digit)
        with page.expect_download() as dl:
            first.locator(".hsf-x-export[data-format=svg]").click()
        assert pathlib.Path(dl.value.path()).read_text().startswith("<svg")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "jupyterlab_explorer.png"))
    assert errors == [], errors


# ------------------------------------------------------------------------------------------- the report
def test_report_static_explorer(tmp_path):
    from test_report import sample_report

    path = sample_report()[0] if SAMPLE.is_dir() else pytest.skip("sample_data not present")
    with headless_chromium() as browser:
        ctx = browser.new_context(viewport={"width": 1280, "height": 900}, offline=True, accept_downloads=True)
        page = ctx.new_page()
        errors: list[str] = []
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
        page.goto(pathlib.Path(path).as_uri(), wait_until="load")
        root = page.locator(".hsf-explore-static .hsf-x")
        root.wait_for(timeout=10_000)
        doc = json.loads(page.locator(".hsf-explore-static").get_attribute("data-state"))
        names = [f["name"] for f in doc["files"]]
        # the first file with token text: ↓ to it (keyboard navigation between files), then hover and click
        k = next(i for i, s in enumerate(doc["states"]) if s["tokens"] and not s["meta"]["binned"])
        root.focus()
        for _ in range(k):
            page.keyboard.press("ArrowDown")
        page.wait_for_function("n => document.querySelector('.hsf-explore-static .hsf-x-title').textContent"
                               ".startsWith(n)", arg=names[k], timeout=10_000)
        texts, norms = _truth(ROOT / names[k])
        _hover_and_click(page, root, texts, norms, 5)
        # zoom in around the selection (token 6 after →) to the narrowest window: 16 tokens, token 6 in it
        for _ in range(12):
            page.keyboard.press("+")
        a, b = map(int, re.search(r"showing tokens (\d+)–(\d+)", root.locator(".hsf-x-title").inner_text()).groups())
        assert b - a + 1 == 16 and a <= 6 <= b
        box = root.locator(".hsf-x-heat").bounding_box()
        page.mouse.move(box["x"] + box["width"] * 1.5 / 16, box["y"] + 3)
        assert f"“{_visible(texts[a + 1])}” token {a + 1}" in root.locator(".hsf-x-tiphead").inner_text()
        page.keyboard.press("-")
        assert "showing tokens" in root.locator(".hsf-x-title").inner_text()  # 32 of the file's tokens
        with page.expect_download() as dl:
            root.locator(".hsf-x-export[data-format=png]").click()
        assert pathlib.Path(dl.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert root.bounding_box()["height"] <= 800
        ctx.close()
    assert errors == [], errors
