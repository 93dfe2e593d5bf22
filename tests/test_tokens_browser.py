"""Token text from ``--model`` and the logit-lens overview in a real browser (headless Debian Chromium driven by
Playwright, never ``playwright install``): a capture saved the plain-transformers way (no tokenizer of its own) shows
its words in the report made with ``--model`` and in the explorer, and the overview draws one cell per slot × token
whose text and colour are the top-1 next token and its probability, computed here in float64.

Skips with the reason when Chromium or Playwright is missing, except under ``CI=true``.
"""

from __future__ import annotations

import json
import pathlib

import pytest
import torch
from browser_tools import headless_chromium
from test_tokens import _lens_top1, make_world

import forensics
from forensics.cli import main as hsf_main

pytestmark = pytest.mark.browser
ROOT = pathlib.Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"


def _visible(t: str) -> str:  # the explorer's showToken
    return t.replace("\n", "⏎").replace("\t", "⇥").replace(" ", "·") or "∅"


def _page(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, offline=True)
    page = ctx.new_page()
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    return ctx, page, errors


def test_report_and_lens_overview_show_words_for_a_capture_without_a_tokenizer(tmp_path, sample_data):
    from forensics.views.explore import wire

    folder, cap, ids, _, tok, model = make_world(tmp_path, sample_data)
    words = [tok.decode([i]) for i in ids.tolist()]
    report = tmp_path / "report.html"
    assert hsf_main(["report", str(cap), "--model", str(folder), "-o", str(report)]) in (0, 3)
    ex = forensics.explore(cap, model=str(folder), background=False)
    st = ex.state()
    st.lens_map = {k: v for k, v in ex.lens_map.items() if k != "file"}
    embed = wire.report_embed([("capture.pt", st, st.file_verdict)])
    page_html = tmp_path / "explorer.html"
    page_html.write_text(f"<!doctype html><html><head><meta charset='utf-8'><style>{embed['css']}</style></head>"
                         f"<body>{embed['html']}<script>{embed['js']}</script></body></html>", encoding="utf-8")
    ARTIFACTS.mkdir(exist_ok=True)
    with headless_chromium() as browser:
        # the report made with --model: hover token 2 of its explorer, read the word
        ctx, page, errors = _page(browser)
        page.goto(report.as_uri(), wait_until="load")
        root = page.locator(".hsf-explore-static .hsf-x")
        root.wait_for(timeout=10_000)
        heat = root.locator(".hsf-x-heat")
        heat.scroll_into_view_if_needed()
        box = heat.bounding_box()
        page.mouse.move(box["x"] + 2.5 / len(words) * box["width"], box["y"] + box["height"] - 3)
        tip = root.locator(".hsf-x-tip")
        tip.wait_for(state="visible", timeout=10_000)
        assert f"“{_visible(words[2])}”" in tip.locator(".hsf-x-tiphead").inner_text()
        ctx.close()
        assert errors == [], errors
        # the explorer with the lens overview: open it, check cells against float64, click one
        ctx, page, errors = _page(browser)
        page.goto(page_html.as_uri(), wait_until="load")
        root = page.locator(".hsf-explore-static .hsf-x")
        root.wait_for(timeout=10_000)
        lm = root.locator(".hsf-x-lensmap")
        lm.locator("summary").click()
        cells = lm.locator("td.hsf-x-lmcell")
        S, n = len(st.labels), min(len(words), 96)
        assert cells.count() == S * n
        capture = forensics.load(cap)
        for slot, pos in ((1, 3), (2, 7), (3, 10)):
            cell = lm.locator(f"td.hsf-x-lmcell[data-slot='{slot}'][data-pos='{pos}']")
            h = capture.slots[slot].tensor()[pos]
            want = _lens_top1(model, h, post=st.labels[slot] == "final_post")
            title = cell.get_attribute("title")
            assert f"→ “{_visible(tok.decode([want]))}”" in title, (slot, pos, title)
            assert f"“{_visible(words[pos])}”" in title
            logits = model.lm_head.weight.double() @ (h.double() if st.labels[slot] == "final_post" else
                                                      _normed(model, h))
            p = float(torch.softmax(logits.detach(), -1).max())
            shown = float(title.rsplit("p=", 1)[1])
            assert shown == pytest.approx(p, rel=0.02, abs=2e-3), (slot, pos, shown, p)
        lm.locator("td.hsf-x-lmcell[data-slot='2'][data-pos='7']").click()
        assert root.locator(".hsf-x-sel").inner_text().startswith(f"token 7 “{_visible(words[7])}”")
        wrap, box = lm.locator(".hsf-x-lmwrap").bounding_box(), root.bounding_box()
        assert box["height"] <= 800 and wrap["y"] + wrap["height"] <= box["y"] + box["height"]  # in view, not cut
        page.screenshot(path=str(ARTIFACTS / "explorer_lens_overview.png"), full_page=True)
        ctx.close()
        assert errors == [], errors
    doc = json.loads(embed["html"].split('data-state="', 1)[1].split('"', 1)[0].replace("&quot;", '"')
                     .replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").replace("&#x27;", "'"))
    assert doc["states"][0]["tokens"] == words


def _normed(model, h):
    g = model.model.norm.weight.double()
    x = h.double()
    return g * x / torch.sqrt(x.pow(2).mean() + model.config.rms_norm_eps)
