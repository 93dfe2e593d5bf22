"""``hsf capture`` of a chat of thousands of turns: only the messages that reach the tokens captured are rendered
(the template rendered each assistant turn's prefix twice: 6,000 messages ran past the template's time limit and
nothing was captured), the first ``max_tokens`` ids and loss mask are the whole conversation's, and the note says how
many messages were rendered."""

from __future__ import annotations

import json
import time

import pytest


@pytest.fixture(scope="module")
def tok(sample_data):
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(str(sample_data / "tokenizer"), local_files_only=True)
    assert t.chat_template
    return t


def _chat(n: int) -> list[dict]:
    out = []
    for i in range(n):
        out += [{"role": "user", "content": f"Question number {i}: what is {i} plus {i}?"},
                {"role": "assistant", "content": f"The answer is {2 * i}."}]
    return out


def _truth(tok, msgs: list[dict], max_tokens: int) -> tuple[list[int], list[int]]:
    """The first ``max_tokens`` ids of the whole conversation's rendering, and its assistant-turn mask, computed
    here from the template directly (every turn rendered)."""
    text = tok.apply_chat_template(msgs, tokenize=False)
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    spans = []
    for i, m in enumerate(msgs):
        if m["role"] == "assistant":
            a = len(tok.apply_chat_template(msgs[:i], tokenize=False, add_generation_prompt=True))
            spans.append((a, len(tok.apply_chat_template(msgs[:i + 1], tokenize=False))))
            if a > len(text) or len(enc["input_ids"]) and a > enc["offset_mapping"][max_tokens][1]:
                break  # past the tokens kept
    mask = [int(any(s <= a < e for s, e in spans)) for a, _ in enc["offset_mapping"]]
    return list(enc["input_ids"][:max_tokens]), mask[:max_tokens]


def test_a_long_chat_is_rendered_only_as_far_as_the_tokens_captured(tok, tmp_path):
    from forensics.models.recorder import tokenize

    msgs = _chat(300)  # small enough to render whole here, for the truth
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(msgs))
    s = tokenize(tok, str(path), True, 64)
    ids, mask = _truth(tok, msgs, 64)
    assert (s.input_ids, s.loss_mask) == (ids, mask) and 0 < sum(mask) < 64
    assert s.messages is not None and s.messages[0] < s.messages[1] == 600 and s.truncated_from > 64


def test_thousands_of_turns_capture_in_bounded_time(tok, tmp_path):
    from forensics.models.recorder import tokenize

    msgs = _chat(3000)
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(msgs))
    t0 = time.perf_counter()
    s = tokenize(tok, str(path), True, 64)
    assert time.perf_counter() - t0 < 30  # the whole conversation ran past the 10 s template limit: an error
    assert s.input_ids == _truth(tok, msgs[:40], 64)[0]  # the first 64 tokens lie in the first 40 messages
    assert s.messages[1] == 6000 and s.messages[0] <= 65
