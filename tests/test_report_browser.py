"""The report in a real browser: headless Debian Chromium driven by Playwright (never ``playwright install``,
Debian's chromium). No console errors, zero network requests, the page opens at its verdict (scrollY 0, the
verdict block visible, file-level facts counted once per file, one badge per file), injected markup stays inert;
a full-page screenshot goes to test-artifacts/.

Skips with the reason when Chromium or Playwright is missing, except under ``CI=true`` where that fails.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest
from browser_tools import headless_chromium
from test_report import ROOT, SAMPLE, XSS, make_synthetic, sample_report

from forensics.analysis.report import report as analyse
from forensics.views.report.core import Report, report

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
        ARTIFACTS.mkdir(exist_ok=True)  # the page as a reviewer first sees it (groups folded)
        shot = ARTIFACTS / "report_full_page.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        # one sample browser: the explorer, not the superseded sparkline panels
        assert page.locator(".sample-panel").count() == 0 and page.locator("#samples .hsf-x").count() == 1
        # the checks filter hides passing rows
        page.evaluate("document.querySelectorAll('#checks details').forEach(d => d.open = true)")
        passing = page.locator("#checks tr.o-pass").first
        assert passing.is_visible()
        page.check("#only-problems")
        assert passing.is_hidden()
        page.uncheck("#only-problems")
        assert passing.is_visible()
        # printing hides the navigation
        page.emulate_media(media="print")
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


def _opens_at_its_verdict(page, log) -> dict:
    """The checks every report passes as a reader opens it: no console error, the window at the top (the explorer's
    first draw used to scroll the page 11–17k px down to its file list), a FAIL sentence never over a zero fail
    tile, and each file's badge the same in the verdict rows, the per-slot cards, the checks and the explorer.
    Returns the tiles and each file's badges."""
    assert [m for m in log["console"] if m[0] == "error"] == [] and log["pageerror"] == []
    assert page.evaluate("window.scrollY") == 0
    tiles = {{"no claim": "info"}.get(t.split(" ", 1)[1], t.split(" ", 1)[1]): int(t.split(" ", 1)[0])
             for t in page.locator(".counts .count").all_inner_texts()}  # the "no claim" tile counts info
    sentence = page.locator("#verdict-sentence").inner_text()
    word = sentence.split(":", 1)[0].lower()
    assert tiles.get({"no claim": "info"}.get(word, word), 0) >= 1, (sentence, tiles)  # the banner has a tile
    worst = next(k for k in ("fail", "cannot tell", "warn", "pass", "identified", "info") if tiles.get(k))
    assert sentence.startswith({"info": "NO CLAIM"}.get(worst, worst.upper())), (sentence, tiles)
    badges: dict[str, set] = {}
    rows = page.evaluate("""Array.from(document.querySelectorAll('#verdicts tr.frow')).map(r =>
        [r.querySelector('.fname').textContent, r.querySelector('.badge').textContent])""")
    cards = page.evaluate("""Array.from(document.querySelectorAll('#slots details.filecards > summary')).map(s =>
        [s.querySelector('.fname').textContent, s.querySelector('.badge').textContent])""")
    checks = page.evaluate("""Array.from(document.querySelectorAll('#checks details.cgroup')).filter(
        d => d.id !== 'checks-audit' && d.id !== 'checks-scan').map(d =>
        [d.dataset.group, d.querySelector('summary .badge').textContent])""")
    explorer = page.evaluate("""Array.from(document.querySelectorAll('.hsf-x-file')).map(r =>
        [r.title.split(': ')[0], r.querySelector('.hsf-x-badge').textContent])""")
    for name, word in rows + cards + checks + explorer:
        badges.setdefault(name, set()).add(word.strip().lower())
    assert all(len(v) == 1 for v in badges.values()), {k: v for k, v in badges.items() if len(v) > 1}
    return {"tiles": tiles, "sentence": sentence, "badges": badges}


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory):
    """``make demo``'s report: sample_data with the draft, SGLang and the speculators-v1 trainer."""
    if not SAMPLE.is_dir():
        pytest.skip("sample_data/ is not in this checkout")
    out = tmp_path_factory.mktemp("demo") / "report.html"
    report([str(SAMPLE)], draft=str(SAMPLE / "draft_eagle3"), engine="sglang", trainer="speculators-v1").save(out)
    return str(out)


def test_demo_report_opens_at_its_verdict(browser, demo_report):
    """The audit's mismatch is a FAIL banner over a non-zero fail tile (it sat over "0 fail": the tiles counted
    slots only); the banner says the audit's findings in plain words, not kind ids; the explorer's file list names
    each file by its end (five files read "sample_data/speculators…" when cut from the right); changing file
    keeps the page where it is and hides the tooltip of the file left behind."""
    ctx, page, log = open_page(browser, demo_report)
    try:
        seen = _opens_at_its_verdict(page, log)
        assert seen["sentence"].startswith("FAIL: the draft is not served the layers it was trained on")
        assert "target_not_final" not in seen["sentence"] and "ids_ignored_key" not in seen["sentence"]
        assert seen["tiles"]["fail"] >= 1
        names = page.locator(".hsf-x-file .hsf-x-fname")
        texts = [t.strip("\u200e") for t in names.all_inner_texts()]
        assert len(set(texts)) == len(texts) and any(t.endswith("data_4.pt") for t in texts)
        assert page.evaluate("getComputedStyle(document.querySelector('.hsf-x-fname')).direction") == "rtl"
        page.locator("#samples").scroll_into_view_if_needed()
        heat = page.locator(".hsf-x-heat")
        box = heat.bounding_box()
        page.mouse.move(box["x"] + 5, box["y"] + 5)
        assert page.locator(".hsf-x-tip").is_visible()
        y = page.evaluate("window.scrollY")
        page.locator(".hsf-x-file").nth(5).click()
        page.wait_for_timeout(100)
        assert page.evaluate("window.scrollY") == y  # the list scrolls itself, the page stays
        assert page.locator(".hsf-x-tip").is_hidden()
        assert "current" in (page.locator(".hsf-x-file").nth(5).get_attribute("class") or "")
        assert [m for m in log["console"] if m[0] == "error"] == [] and log["pageerror"] == []
        page.evaluate("window.scrollTo(0, 0)")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report_demo_top.png"))
    finally:
        ctx.close()


def _plain_transformers_captures(folder: pathlib.Path, n: int = 3, tokens: int = 10) -> pathlib.Path:
    """Captures saved as the README's "Bring your own captures" shows, with plain transformers: ``{"input_ids",
    "hidden_states": [k, T, H]}`` of hidden_states (0, 3, 16, 28), no sidecar, no tokenizer: real SmolLM2 states
    (the ladder's), ``tokens`` tokens each, so every file holds one file-level fact (too few tokens)."""
    import torch

    from forensics import load

    lad = load(SAMPLE / "ladder" / "capture_0.safetensors")
    by_r = dict(zip(lad.declared_r, lad.slots, strict=True))
    folder.mkdir(parents=True)
    for k in range(n):
        a = 1 + k * tokens
        hs = torch.stack([by_r[r].tensor()[a:a + tokens].clone() for r in (0, 3, 16, 28)])
        torch.save({"input_ids": lad.input_ids[a:a + tokens].clone(), "hidden_states": hs}, folder / f"capture_{k}.pt")
    return folder


def test_own_captures_report_counts_a_file_fact_once_per_file(browser, tmp_path):
    """Three captures without claims, each too short for the data-only signals: the headline and the banner say
    "3 files" (not "12 slots with a finding": one file-level fact repeated per slot), the tiles count the files,
    and no slot is marked warn for it."""
    if not SAMPLE.is_dir():
        pytest.skip("sample_data/ is not in this checkout")
    res = analyse([str(_plain_transformers_captures(tmp_path / "own"))])
    out = tmp_path / "own.html"
    Report.of(res).save(out)
    assert [g.kind for g in res.file_facts] == ["few_tokens"] and len(res.file_facts[0].files) == 3
    assert res.counts["warn"] == 0 and res.item_counts["warn"] == 3
    ctx, page, log = open_page(browser, str(out))
    try:
        seen = _opens_at_its_verdict(page, log)
        assert seen["sentence"].startswith("WARN: no failure; 3 files: too few tokens"), seen["sentence"]
        assert seen["tiles"]["warn"] == 3 and seen["badges"] and all(v == {"warn"} for v in seen["badges"].values())
        headline = page.locator("#verdicts .headline").inner_text()
        assert "3 files (" in headline and "slot(s)" not in headline and "12 slots carry a finding" not in headline
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report_own_top.png"))
    finally:
        ctx.close()
