"""One verdict in every view (issue 31's follow-ups): users act on the verdict, so the Python API (``repr``,
``.outcome``), ``hsf fingerprint`` (text and ``--json``), ``hsf report`` (its line, ``--json``, the HTML's verdict
rows, slot cards and static explorer) and the Jupyter explorer must say the same word and the same slot labels.

The captures are made here the way a user makes them, with plain transformers (``output_hidden_states=True``) on
SmolLM2: one sequence, a right-padded batch with its ``attention_mask``, and a 768-wide capture that is no
SmolLM2 capture. The expected word and labels come from the ground truth of each capture (which
``hidden_states[k]`` it saved, what is claimed), never from what a view printed before.
"""

from __future__ import annotations

import html
import json
import re

import pytest
import torch

import forensics
from forensics.cli import main
from forensics.errors import ModelMismatch
from forensics.layers import r_label
from forensics.views.format import headline_word

SAVED = (0, 3, 16, 28)  # the hidden_states[k] every capture here holds, in this order
TRUTH = [r_label(r) for r in SAVED]  # what each slot is: embed, L3, L16, L28
TEXT = "Lighthouses once guided sailors past the rocky coast. Today most of them run automatically."
BATCH = ["The baker opened the shop before dawn.",
         "Snow fell on the quiet mountain village all night, covering every roof and road."]
# claim → (the outcome word the truth gives, the finding kind that must say why, when it fails)
CASES = {
    "no claim": (None, "identified", None),  # nothing claimed, the reference forward names every slot
    "right claim": ("0,3,16,28", "pass", None),
    "ids off by one": ("1,4,17,29", "fail", "ids_off_by_one"),  # every claimed id one too high: counted from 1
    "slots shifted": ("3,16,28,30", "fail", "shifted"),  # the seed's Kimi-K2.5 shape: the claim omits the embed
}


@pytest.fixture(scope="module")
def caps(tmp_path_factory, smollm2):
    """``{name: path}``: one sequence, a right-padded batch of two (with attention_mask) and a 768-wide capture."""
    model, tok = smollm2
    tmp = tmp_path_factory.mktemp("one_verdict")
    ids = torch.tensor(tok(TEXT)["input_ids"])
    with torch.no_grad():
        hs = model(ids[None], output_hidden_states=True).hidden_states
    torch.save({"input_ids": ids, "hidden_states": torch.stack([hs[k][0] for k in SAVED])}, tmp / "capture.pt")
    rows = [tok(t)["input_ids"] for t in BATCH]
    T = max(len(r) for r in rows)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    input_ids = torch.tensor([r + [pad] * (T - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (T - len(r)) for r in rows])
    assert mask.sum(1).tolist() != [T, T]  # right padding is there to be removed
    with torch.no_grad():
        hs = model(input_ids, attention_mask=mask, output_hidden_states=True).hidden_states
    torch.save({"input_ids": input_ids, "attention_mask": mask, "hidden_states": torch.stack([hs[k] for k in SAVED])},
               tmp / "batch.pt")
    g = torch.Generator().manual_seed(0)
    torch.save({"input_ids": torch.randint(0, 1000, (12,), generator=g),
                "hidden_states": torch.randn(4, 12, 768, generator=g)}, tmp / "wide.pt")
    return {p.stem: str(p) for p in tmp.iterdir()}


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def _static_explorer(page: str) -> dict:
    m = re.search(r'<div class="hsf-explore-static" data-state="([^"]*)"', page)
    assert m, "the report embeds no explorer"
    return json.loads(html.unescape(m.group(1)))


def _report_badges(page: str) -> dict[str, set[str]]:
    """File name → every badge word the report writes for it (verdict rows and slot cards)."""
    out: dict[str, set[str]] = {}
    beside = r'<span class="fname">([^<]*)</span>.{0,200}?<span class="badge b-[a-z-]+">([^<]*)</span>'
    for name, word in re.findall(beside, page, flags=re.S):  # the badge beside the name (a figure group has none)
        out.setdefault(html.unescape(name), set()).add(word)
    return out


@pytest.mark.parametrize(("which", "case"), [("capture", c) for c in CASES] + [("batch", "no claim"),
                                                                              ("batch", "ids off by one")])
def test_one_verdict_and_one_set_of_labels_in_every_view(caps, smollm2, tmp_path, capsys, which, case):
    layers, word, kind = CASES[case]
    path = caps[which]
    samples = 1 if which == "capture" else len(BATCH)
    names = ["capture.pt"] if samples == 1 else [f"batch.pt#{i}" for i in range(samples)]
    shown = headline_word(word)  # the word every headline writes: IDENTIFIED, PASS, FAIL
    want_exit = 1 if word == "fail" else 0

    # the Python API: one Fingerprint per sample
    caps_in = forensics.load_all(path) if samples > 1 else [forensics.load(path)]
    fps = [forensics.fingerprint(c, layers=layers, model=smollm2[0]) for c in caps_in]
    for fp in fps:
        assert fp.outcome == word, (fp.outcome, [f.kind for f in fp.findings])
        assert [s.r_exact for s in fp.slots] == list(SAVED) and fp.labels == TRUTH
        assert repr(fp).startswith(shown + (" " if word == "identified" else ":")), repr(fp)[:120]
        if kind is not None:
            whole = [f for f in fp.findings if f.kind in ("shifted", "ids_off_by_one")]
            assert [f.kind for f in whole] == [kind] and whole[0].evidence["corrected"] == list(SAVED)
        assert not [f for f in fp.findings if f.kind == "few_tokens"]  # exact mode decided every slot

    # hsf fingerprint: text and --json
    flags = ["--model", "default"] + (["--layers", layers] if layers else [])
    code, out, _ = _cli(["fingerprint", path, *flags], capsys)
    assert code == want_exit
    words = ("FAIL", "CANNOT TELL", "WARN", "PASS", "IDENTIFIED", "NO CLAIM")
    heads = [line for line in out.splitlines() if line.startswith(words)]  # each file's headline
    assert len(heads) == samples and all(h.startswith(shown) for h in heads), heads
    if samples > 1:  # the many-file summary counts the same word
        assert out.splitlines()[0] == f"{samples} files: {samples} {shown}", out.splitlines()[0]
    code, out, _ = _cli(["fingerprint", path, *flags, "--json"], capsys)
    doc = json.loads(out)
    assert code == want_exit and len(doc["files"]) == samples
    for f in doc["files"]:
        assert f["outcome"] == word and [s["label"] for s in f["slots"]] == TRUTH
        assert f["identified"] == (TRUTH if word == "identified" else None)
        if kind is not None:
            assert kind in {x["kind"] for x in f["findings"]}

    # hsf report: the line, --json, and the HTML (verdict rows, slot cards, the static explorer)
    page_path = tmp_path / "r.html"
    code, out, _ = _cli(["report", path, *flags, "-o", str(page_path)], capsys)
    assert code == want_exit and out.startswith(shown + ":"), out[:200]
    code, out, _ = _cli(["report", path, *flags, "-o", str(page_path), "--json"], capsys)
    doc = json.loads(out)
    assert code == want_exit and doc["overall"] == word and doc["sentence"].startswith(shown + ":")
    assert doc["verdicts"][word] == 4 * samples  # every slot of every sample carries the file's word
    page = page_path.read_text(encoding="utf-8")
    badges = _report_badges(page)
    for n in names:
        assert badges[n] == {"no claim" if word == "info" else word}, (n, badges)
    state = _static_explorer(page)
    assert [(f["name"], f["verdict"]) for f in state["files"]] == [(n, word) for n in names]
    for st in state["states"]:
        assert st["meta"]["labels"] == TRUTH and st["meta"]["file_verdict"] == word
    res = forensics.report(path, layers=layers, model=smollm2[0]).result
    assert [f.outcome for f in res.files] == [word] * samples and res.overall == word
    assert [s.label for s in res.slots] == TRUTH * samples

    # the Jupyter explorer (every sample listed, one file too)
    ex = forensics.explore(path, model=smollm2[0], layers=layers, background=False)
    assert [(f["name"], f["verdict"]) for f in ex.files] == [(n, word) for n in names]
    for k in range(samples):
        ex.file = k
        assert ex.meta["labels"] == TRUTH and ex.meta["file_verdict"] == word


def test_a_capture_of_another_model_is_one_line_exit_2_in_every_command(caps, smollm2, tmp_path, capsys):
    """768 wide against the 576-wide SmolLM2: no verdict at all, one error line naming the file, exit 2."""
    wide = caps["wide"]
    with pytest.raises(ModelMismatch):
        forensics.fingerprint(wide, model=smollm2[0])
    with pytest.raises(ModelMismatch):
        forensics.report(wide, model=smollm2[0])
    for argv in (["fingerprint", wide], ["report", wide, "-o", str(tmp_path / "w.html")]):
        code, out, err = _cli([*argv, "--model", "default"], capsys)
        lines = (out + err).strip().splitlines()
        assert code == 2 and len(lines) == 1 and wide in lines[0] and "768" in lines[0], lines
    assert not (tmp_path / "w.html").exists()


@pytest.mark.browser
def test_the_report_in_a_browser_writes_the_files_word_in_every_badge(caps, smollm2, tmp_path):
    """The report's HTML in headless Chromium: the verdict row, the slot cards and the explorer (drawn by its
    script) write each file's outcome word as ``hsf fingerprint`` does (IDENTIFIED; NO CLAIM, not INFO)."""
    from browser_tools import headless_chromium

    from forensics.analysis.report import report as analyse
    from forensics.views.report.core import Report

    pages = []
    for path, model in ((caps["capture"], smollm2[0]), (caps["batch"], None)):
        res = analyse(path, model=model)
        fps = [forensics.fingerprint(fr.capture, model=model) for fr in res.files]
        want = {fr.rel: headline_word(fp.outcome) for fr, fp in zip(res.files, fps, strict=True)}
        out = tmp_path / f"{len(pages)}.html"
        Report.of(res).save(out)
        pages.append((out, want))
    assert set(pages[0][1].values()) == {"IDENTIFIED"} and "NO CLAIM" in pages[1][1].values()
    queries = ["Array.from(document.querySelectorAll('#verdicts tr.frow')).map(r => [r.querySelector('.fname')"
               ".textContent, r.querySelector('.badge').innerText])",
               "Array.from(document.querySelectorAll('#slots details.filecards > summary')).map(s => "
               "[s.querySelector('.fname').textContent, s.querySelector('.badge').innerText])"]
    with headless_chromium() as b:
        for out, want in pages:
            ctx = b.new_context(viewport={"width": 1280, "height": 900}, offline=True)
            page = ctx.new_page()
            page.goto(out.resolve().as_uri(), wait_until="load")
            page.wait_for_timeout(300)
            seen: dict[str, set] = {}
            for q in queries:
                for name, word in page.evaluate(q):
                    seen.setdefault(name, set()).add(word.strip().upper())
            assert seen == {n: {w} for n, w in want.items()}, (seen, want)
            bar = page.locator(".hsf-x-bar .hsf-x-badge, .hsf-x .hsf-x-badge").first.inner_text().strip()
            assert bar == next(iter(want.values())), bar  # the explorer opens on the first file
            listed = page.evaluate("Array.from(document.querySelectorAll('.hsf-x-file')).map(r => "
                                   "[r.title.split(': ')[0], r.querySelector('.hsf-x-badge').innerText])")
            assert {n: w.strip() for n, w in listed} == want, listed  # listed (hidden for one file)
            ctx.close()
