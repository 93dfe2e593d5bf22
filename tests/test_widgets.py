"""SampleBrowser driven headlessly: set control values in Python, assert on what the Output widget holds."""

from __future__ import annotations

import html
import os
import shutil
import sys

import pytest

pytest.importorskip("ipywidgets")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from test_plots import write_capture  # noqa: E402

import forensics  # noqa: E402
from forensics.views.widgets import SampleBrowser, find_tokenizer, render_panel  # noqa: E402

SAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample_data")
V1 = os.path.join(SAMPLE, "speculators_v1", "data_0.pt")


def _g(x: float) -> str:
    from forensics.views.format import num

    return num(x)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("browse")
    write_capture(str(root / "a"), T=48)
    write_capture(str(root / "b"), T=30)
    (root / "c").mkdir()
    (root / "c" / "broken.pt").write_bytes(b"this is not a checkpoint")
    return str(root)


@pytest.fixture(scope="module")
def browser(dataset):
    return SampleBrowser(dataset, tokenizer=None)


def shown(b: SampleBrowser) -> str:
    """The HTML the Output widget holds right now (exactly one display_data item)."""
    assert len(b.out.outputs) == 1
    return b.out.outputs[0]["data"]["text/html"]


def test_controls(browser):
    assert [name for name, _ in browser.items] == ["a/data_0.pt", "b/data_0.pt", "c/broken.pt"]
    assert browser.tokens.continuous_update is False
    assert browser.slots.options == (("0: embed", 0), ("1: L3", 1), ("2: L16", 2), ("3: L28", 3))
    assert browser.tokens.max == 47


def test_slot_choice_updates_output(browser):
    browser.sample.value = 0
    st = forensics.summarize(browser.items[0][1])  # independent: recomputed here, not the browser's cache
    browser.slots.value = (1,)
    out = shown(browser)
    assert "data_0.pt" in out and "hidden_states[1]" in out
    assert _g(st.slots[1].norm.median) in out  # the selected slot's median norm
    assert _g(st.slots[3].norm.median) not in out and "hidden_states[3]" not in out
    assert out.count("<img") == 2
    browser.slots.value = (1, 3)
    out = shown(browser)
    assert _g(st.slots[3].norm.median) in out and "hidden_states[3]" in out


def test_token_range_updates_output(browser):
    browser.sample.value = 0
    browser.slots.value = (1,)
    browser.tokens.value = (5, 9)
    out = shown(browser)
    assert "tokens 5–9" in out
    st = forensics.summarize(browser.items[0][1])
    rows = out.split("class='hsf-tokens'")[1]
    assert rows.count("<tr>") == 1 + 5  # header + tokens 5..9
    assert _g(float(st.slots[1].norms[7])) in rows


def test_sample_switch_resets_range(browser):
    browser.sample.value = 1
    assert browser.tokens.max == 29 and browser.tokens.value[1] <= 29
    out = shown(browser)
    assert "30 tokens" in out


def test_unreadable_file_is_a_panel_not_a_crash(browser):
    browser.sample.value = 2
    out = shown(browser)
    assert "broken.pt" in out and "hsf-fail" in out
    assert browser.slots.options == ()
    browser.sample.value = 0
    assert "48 tokens" in shown(browser)


def test_render_panel_is_pure(browser):
    cap, st, fp, tok, err = browser.data(0)
    a = render_panel(cap, st, fp, 2, (0, 3), None)
    b = render_panel(cap, st, fp, [2], (0, 3), None)
    assert a == b and "hidden_states[2]" in a and "hidden_states[1]" not in a


def test_untrusted_names_are_escaped(tmp_path):
    path = write_capture(str(tmp_path))
    evil = tmp_path / "<script>alert(1)<script>.pt"  # no "/" in a file name
    os.rename(path, evil)
    out = shown(SampleBrowser(str(tmp_path), tokenizer=None, fingerprint=False))
    assert "<script>" not in out and "&lt;script&gt;alert(1)&lt;script&gt;.pt" in out


@pytest.mark.skipif(not os.path.exists(V1), reason="sample_data not present")
def test_real_sample_with_tokenizer(tmp_path):
    tok_dir = find_tokenizer(forensics.load(V1))
    assert tok_dir and os.path.samefile(tok_dir, os.path.join(SAMPLE, "tokenizer"))
    b = SampleBrowser(V1)  # tokenizer "auto": capture.json's "tokenizer": "../tokenizer"
    b.tokens.value = (0, 5)
    out = shown(b)
    from tokenizers import Tokenizer  # independent decode of the first token

    cap = forensics.load(V1)
    t = Tokenizer.from_file(os.path.join(SAMPLE, "tokenizer", "tokenizer.json"))
    first = t.decode([int(cap.input_ids[0])], skip_special_tokens=False)
    assert html.escape(repr(first), quote=True) in out
    assert "no tokenizer found" not in out
    # the browser over a copy without the tokenizer still works (ids only)
    shutil.copy(V1, tmp_path / "data_0.pt")
    assert "no tokenizer found" in shown(SampleBrowser(str(tmp_path)))


@pytest.mark.skipif(not os.path.exists(V1), reason="sample_data not present")
def test_fingerprint_verdict_shown_for_a_shuffled_real_file(tmp_path):
    import torch

    obj = torch.load(V1, weights_only=True)
    obj["hidden_states"] = [obj["hidden_states"][i] for i in (2, 0, 3, 1)]
    torch.save(obj, tmp_path / "data_0.pt")
    shutil.copy(os.path.join(SAMPLE, "speculators_v1", "capture.json"), tmp_path / "capture.json")
    b = SampleBrowser(str(tmp_path), layers=[0, 3, 16, 28], tokenizer=None)
    out = shown(b)
    assert "reordered" in out and "0: L16, 1: embed, 2: L28, 3: L3" in out
    assert [lab for lab, _ in b.slots.options] == ["0: L16 (decl. embed)", "1: embed (decl. L3)",
                                                   "2: L28 (decl. L16)", "3: L3 (decl. L28)"]


def test_list_of_capture_objects(dataset):
    from forensics.io.synth import kimi_like

    caps = [forensics.load(os.path.join(dataset, "b", "data_0.pt")), kimi_like(hidden=64)]
    b = SampleBrowser(caps, layers=None)
    assert [name for name, _ in b.items] == ["0: data_0.pt", "1: <synthetic kimi_like seed=0>"]
    b.sample.value = 1
    out = shown(b)
    assert "1281 tokens" in out and "&lt;synthetic kimi_like seed=0&gt;" in out and "no tokenizer found" in out
