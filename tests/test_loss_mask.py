"""The stored loss mask against the chat turns (issue 33 item 3: SpecForge#885, EAGLE#317).

Ground truth: real SmolLM2 chat captures made here with ``hsf capture`` from conversations written for this test
(its recorder sets the mask from character spans of the rendered conversation: an independent construction from
the token-marker search under test), then corrupted here in known ways: the mask moved onto the system/user turns,
set everywhere, moved by one token either way. The clean captures must get no ``loss_mask`` finding.
"""

from __future__ import annotations

import json

import pytest
import torch

from forensics.analysis.fingerprint.core import fingerprint
from forensics.analysis.loss_mask import assistant_spans, capture_markers, check_loss_mask
from forensics.analysis.scan.core import scan
from forensics.cli import main
from forensics.io.chat import chat_markers_from
from forensics.io.formats import load

CHATS = [
    [{"role": "system", "content": "You answer questions about tide tables in one sentence."},
     {"role": "user", "content": "Why are there two high tides a day in Brest?"},
     {"role": "assistant", "content": "Because the Moon's pull raises a bulge on both the near and the far side "
                                      "of the Earth, and Brest rotates through both."},
     {"role": "user", "content": "And why is the second one later each day?"},
     {"role": "assistant", "content": "The Moon moves along its orbit, so the Earth needs about fifty more "
                                      "minutes to face it again."}],
    [{"role": "user", "content": "Write a haiku about a broken umbrella."},
     {"role": "assistant", "content": "Ribs bent to the wind, / a black flower turned inside out, / rain finds "
                                      "my collar."}],
]


@pytest.fixture(scope="module")
def chat_capture(smollm2, tmp_path_factory):
    """Real SmolLM2 captures of CHATS (speculators-v1 ``data_{i}.pt``: ids, 4 slots, loss mask)."""
    root = tmp_path_factory.mktemp("chats")
    texts = []
    for i, msgs in enumerate(CHATS):
        p = root / f"chat_{i}.json"
        p.write_text(json.dumps(msgs))
        texts.append(str(p))
    out = root / "cap"
    argv = ["capture", "-q", "--layers", "0,3,16,28", "--out", str(out)]
    for t in texts:
        argv += ["--text", t]
    assert main(argv) == 0
    return out


def _rewrite_mask(src, dst, make):
    """``dst``: the capture ``src`` with its loss mask replaced by ``make(mask, spans)``; the sidecar and
    tokenizer come along (the folder is copied whole by the caller)."""
    obj = torch.load(src, weights_only=True)
    obj["loss_mask"] = make(obj["loss_mask"].clone())
    torch.save(obj, dst)


def _kinds(fp):
    return [(f.severity.value, f.evidence.get("problem"), f.evidence.get("offset")) for f in fp.findings
            if f.kind == "loss_mask"]


def test_the_turns_found_by_the_template_markers_equal_the_recorders_mask(chat_capture):
    for i in range(len(CHATS)):
        cap = load(chat_capture / f"data_{i}.pt")
        m = capture_markers(cap)
        assert m is not None and m.source.startswith("chat template of")
        spans = assistant_spans(cap.input_ids.tolist(), m)
        assert len(spans) == sum(x["role"] == "assistant" for x in CHATS[i])
        # the recorder marks each reply and its end-of-turn marker; the markers find the same tokens
        want = [t for s, e, f in spans for t in range(s, f)]
        assert [t for t, v in enumerate(cap.loss_mask.tolist()) if v] == want
        assert _kinds(fingerprint(cap)) == []


CORRUPTIONS = {
    "prompt": lambda m: 1 - m,  # the mask over the system/user turns (and the headers) instead of the replies
    "everything": lambda m: torch.ones_like(m),  # every token supervised
    "late": lambda m: torch.cat([m.new_zeros(1), m[:-1]]),  # moved one token later
    "early": lambda m: torch.cat([m[1:], m.new_zeros(1)]),  # moved one token earlier
}
EXPECTED = {"prompt": ("fail", "prompt", None), "everything": ("fail", "prompt", None),
            "late": ("warn", "offset", 1), "early": ("warn", "offset", -1)}


@pytest.mark.parametrize("how", list(CORRUPTIONS))
def test_a_corrupted_mask_is_named(chat_capture, tmp_path, how, capsys):
    import shutil

    folder = tmp_path / "cap"
    shutil.copytree(chat_capture, folder)
    for i in range(len(CHATS)):
        _rewrite_mask(folder / f"data_{i}.pt", folder / f"data_{i}.pt", CORRUPTIONS[how])
        fp = fingerprint(str(folder / f"data_{i}.pt"), stamp_check=False)
        assert _kinds(fp) == [EXPECTED[how]], (how, i, _kinds(fp))
    res = scan(str(folder), workers=0, fingerprint="none", stamp_check=False)
    sev = {a.severity for a in res.anomalies if a.kind == "loss_mask"}
    assert sev == {EXPECTED[how][0]}
    rc = main(["fingerprint", str(folder / "data_0.pt"), "--no-stamp-check"])
    out = capsys.readouterr().out
    assert "loss_mask" in out
    if EXPECTED[how][0] == "fail":
        assert rc == 1 and "SpecForge#885" in out


def test_raw_text_has_no_turns_and_no_finding(sample_data):
    """A capture of raw text (mask all ones, no assistant header in its ids) says nothing about turns."""
    for i in range(5):
        cap = load(sample_data / "speculators_v1" / f"data_{i}.pt")
        assert _kinds(fingerprint(cap)) == []


LLAMA3 = ("{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}"
          "<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n"
          "{% endif %}")


def test_markers_of_another_template_family():
    """A Llama-3-style template: header ``<|start_header_id|>assistant<|end_header_id|>\\n\\n``, end ``<|eot_id|>``
    (a byte encoder stands in for its tokenizer); a mask over the user turn is a FAIL, the reply alone passes."""
    def enc(s):
        return list(s.encode())

    m = chat_markers_from(LLAMA3, enc)
    assert bytes(m.assistant_header).decode() == "<|start_header_id|>assistant<|end_header_id|>\n\n"
    assert bytes(m.end).decode() == "<|eot_id|>"
    text = ("<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nhello<|eot_id|>")
    ids = enc(text)
    s = text.index("hello")
    good = [1 if s <= t < s + len("hello") else 0 for t in range(len(ids))]
    assert check_loss_mask(ids, good, m) == []
    bad = [1 if t < text.index("<|start_header_id|>assistant") else 0 for t in range(len(ids))]
    assert [f.severity.value for f in check_loss_mask(ids, bad, m)] == ["fail"]


def test_a_template_that_raises_gives_no_markers():
    assert chat_markers_from("{{ raise_exception('no system role') }}", lambda s: list(s.encode())) is None
    assert chat_markers_from("{{ ''.__class__.__mro__[1].__subclasses__() }}", lambda s: list(s.encode())) is None


def test_the_models_template_when_the_capture_has_no_tokenizer(chat_capture, tmp_path):
    """A capture without its tokenizer folder: the packaged SmolLM2-Instruct's own template (``--model default``,
    carried in its GGUF) locates the turns; without a model nothing is said."""
    import shutil

    folder = tmp_path / "cap"
    shutil.copytree(chat_capture, folder)
    shutil.rmtree(folder / "tokenizer")
    doc = json.loads((folder / "capture.json").read_text())
    doc.pop("tokenizer", None)
    (folder / "capture.json").write_text(json.dumps(doc))
    _rewrite_mask(folder / "data_0.pt", folder / "data_0.pt", CORRUPTIONS["prompt"])
    cap = load(folder / "data_0.pt")
    from forensics.analysis.loss_mask import capture_loss_mask_findings

    assert capture_markers(cap) is None and capture_loss_mask_findings(cap) == []
    found = capture_loss_mask_findings(cap, "default")
    assert [(f.severity.value, f.evidence["problem"]) for f in found] == [("fail", "prompt")]
    assert found[0].evidence["source"].startswith("chat template of") and ".gguf" in found[0].evidence["source"]
