"""The report in a real browser: headless Debian Chromium driven by Playwright (never ``playwright install``,
Debian's chromium). No console errors, zero network requests, the sample selector switches panels, the
verdict block is visible, injected markup stays inert; a full-page screenshot goes to test-artifacts/.

Skips with the reason when Chromium or Playwright is missing, except under ``CI=true`` where that fails.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest
from browser_tools import headless_chromium
from test_report import ROOT, SAMPLE, XSS, make_synthetic, sample_report

from forensics.views.report.core import report

pytestmark = pytest.mark.browser
ARTIFACTS = ROOT / "test-artifacts"


@pytest.fixture(scope="module")
def browser():
    with headless_chromium() as b:
        yield b


def open_page(browser, path: str):
    """A page on ``file://path`` recording console errors, page errors, dialogs and every request."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, offline=True)
    page = ctx.new_page()
    log = {"console": [], "pageerror": [], "requests": [], "dialogs": []}
    page.on("console", lambda m: log["console"].append((m.type, m.text)))
    page.on("pageerror", lambda e: log["pageerror"].append(str(e)))
    page.on("dialog", lambda d: (log["dialogs"].append(d.message), d.dismiss()))
    ctx.on("request", lambda r: log["requests"].append(r.url))
    page.goto(pathlib.Path(path).resolve().as_uri(), wait_until="load")
    page.wait_for_timeout(300)
    return ctx, page, log


def _no_network(log: dict) -> None:
    outside = [u for u in log["requests"] if not u.startswith(("file://", "data:"))]
    assert outside == [], outside
    assert len([u for u in log["requests"] if u.startswith("file://")]) == 1  # the report itself, nothing else


@pytest.fixture(scope="module")
def report_path(tmp_path_factory):
    """The report on the real sample_data/ when present (the demo's report), else on a synthetic capture."""
    tmp = tmp_path_factory.mktemp("browser")
    if SAMPLE.is_dir():
        return sample_report()[0]
    out = tmp / "syn.html"
    report([str(make_synthetic(tmp / "syn", n=3))]).save(out)
    return str(out)


def test_report_in_chromium(browser, report_path):
    ctx, page, log = open_page(browser, report_path)
    try:
        assert [m for m in log["console"] if m[0] == "error"] == []
        assert log["pageerror"] == []
        _no_network(log)
        # verdict block first and visible, with at least one slot verdict badge
        assert page.locator("#verdicts").is_visible()
        assert page.locator("#verdicts .vt tbody .badge").count() > 0
        first = page.evaluate("document.querySelector('main section').id")
        assert first == "verdicts"
        # the static sample browser: one panel at a time; the selector and the buttons switch it
        panels = page.locator(".sample-panel")
        n = panels.count()
        assert n >= 2
        assert page.locator("#sample-0").is_visible() and not page.locator("#sample-1").is_visible()
        page.select_option("#sample-select", "1")
        assert page.locator("#sample-1").is_visible() and not page.locator("#sample-0").is_visible()
        assert page.locator("#sample-pos").inner_text() == f"2 / {n}"
        page.click("#sample-next")
        assert page.locator("#sample-2" if n > 2 else "#sample-1").is_visible()
        page.click("#sample-prev")
        page.click("#sample-prev")
        assert page.locator("#sample-0").is_visible()
        assert sum(panels.nth(i).is_visible() for i in range(n)) == 1
        ARTIFACTS.mkdir(exist_ok=True)  # the page as a reviewer first sees it (groups folded, first sample)
        shot = ARTIFACTS / "report_full_page.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        # the checks filter hides passing rows
        page.evaluate("document.querySelectorAll('#checks details').forEach(d => d.open = true)")
        passing = page.locator("#checks tr.o-pass").first
        assert passing.is_visible()
        page.check("#only-problems")
        assert passing.is_hidden()
        page.uncheck("#only-problems")
        assert passing.is_visible()
        # printing shows every sample panel and hides the navigation
        page.emulate_media(media="print")
        assert sum(panels.nth(i).is_visible() for i in range(n)) == n
        assert page.locator("nav.topnav").is_hidden()
        page.emulate_media(media="screen")
        _no_network(log)
    finally:
        ctx.close()


def test_injected_markup_is_inert_in_chromium(browser, tmp_path):
    data = make_synthetic(tmp_path / "syn", n=2)
    evil = tmp_path / "in" / "<script>alert(1)<"
    evil.mkdir(parents=True)
    shutil.copy(data / "data_0.pt", evil / "script>data_0.pt")
    shutil.copy(data / "data_1.pt", tmp_path / "in" / "<img src=x onerror=alert(2)>data_1.pt")
    (tmp_path / "in" / "capture.json").write_text(json.dumps({"model": XSS}))
    out = tmp_path / "xss.html"
    report([str(tmp_path / "in")], title=XSS).save(out)
    ctx, page, log = open_page(browser, str(out))
    try:
        assert log["dialogs"] == []
        assert page.locator("img[onerror]").count() == 0
        assert page.evaluate("document.scripts.length") == 1
        assert page.title() == XSS  # shown as text
        assert XSS in page.locator("#provenance").inner_text()
        _no_network(log)
        assert [m for m in log["console"] if m[0] == "error"] == []
    finally:
        ctx.close()
