"""Split assignment and texts of scripts/make_corpus.py, without any capture (no model is loaded)."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOLDOUT = ROOT / "benchmarks" / "holdout_texts.txt"
# The evaluation half of benchmarks/corpus_texts.txt as the built corpus's manifest.json recorded it before
# --split-all existed: the default split must not move (the thresholds were set on the other half).
CORPUS_EVAL = {
    "chat-04", "chat-05", "chat-07", "chat-09", "chat-10", "code-01", "code-03", "code-05", "code-09", "code-10",
    "foreign-03", "foreign-04", "foreign-06", "foreign-08", "foreign-11", "foreign-13", "list-02", "list-03",
    "list-04", "list-07", "math-02", "math-03", "math-05", "math-07", "mixed-02", "prose-01", "prose-02",
    "prose-04", "prose-05", "prose-08", "prose-11", "prose-12"}


@pytest.fixture(scope="module")
def make():
    spec = importlib.util.spec_from_file_location("make_corpus", ROOT / "scripts" / "make_corpus.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_corpus"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_default_split_is_unchanged(make):
    texts = make.parse_texts()
    split = make.split_texts(texts)
    assert {k for k, v in split.items() if v == "eval"} == CORPUS_EVAL
    assert {k for k, v in split.items() if v == "tune"} == {t["id"] for t in texts} - CORPUS_EVAL


def test_split_all_puts_every_text_in_one_split(make):
    texts = make.parse_texts(str(HOLDOUT))
    for s in ("eval", "tune"):
        assert make.split_texts(texts, split_all=s) == {t["id"]: s for t in texts}
    with pytest.raises(ValueError, match="split_all"):
        make.split_texts(texts, split_all="test")


def test_split_all_is_a_cli_choice(make, capsys):
    with pytest.raises(SystemExit) as e:  # argparse rejects it before anything is built
        make.main(["--split-all", "holdout", "--out", "/nonexistent/never-written"])
    assert e.value.code == 2
    assert "--split-all" in capsys.readouterr().err


def test_holdout_texts_are_new_and_varied(make):
    old, new = make.parse_texts(), make.parse_texts(str(HOLDOUT))
    assert len(new) >= 36
    assert all(t["id"].startswith("h-") for t in new)
    assert not {t["id"] for t in new} & {t["id"] for t in old}

    def body(t: dict) -> str:
        return t.get("text") or "\n".join(m["content"] for m in t["messages"])

    # no line of an old text reappears (lines of 48 characters or fewer are allowed: `def __init__(self, ...`)
    old_lines = {ln.strip() for t in old for ln in body(t).split("\n") if len(ln.strip()) > 48}
    for t in new:
        assert body(t).strip(), t["id"]
        if not t.get("gen"):  # a generated text shares its generator's template lines, not its content
            assert not {ln.strip() for ln in body(t).split("\n")} & old_lines, t["id"]
    kinds = Counter(t["kind"] for t in new)
    assert set(kinds) == {"code", "prose", "chat", "math", "list", "foreign"} and min(kinds.values()) >= 5
    chats = [t for t in new if t["kind"] == "chat"]
    assert all(t["messages"] and t["messages"][-1]["role"] == "assistant" for t in chats)
