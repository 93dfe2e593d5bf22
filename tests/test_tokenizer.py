"""forensics.io.tokenizer: a plain tokenizer.json is read without transformers and decodes as transformers does."""

from __future__ import annotations

import json
import random
import shutil

import pytest

from forensics.io import tokenizer as tz


@pytest.fixture()
def fresh_cache(monkeypatch):
    monkeypatch.setattr(tz, "_CACHE", {})


def _reference(folder):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)


def test_sample_tokenizer_decodes_like_transformers_for_every_id(sample_data, fresh_cache):
    tok, why = tz.load_tokenizer(str(sample_data / "tokenizer"))
    assert why is None and isinstance(tok, tz.TokenizerFile)
    ref = _reference(sample_data / "tokenizer")
    assert len(tok) == len(ref)
    ids = list(range(len(ref)))
    assert tz.decode_tokens(tok, ids) == [ref.decode([i]) for i in ids]
    rng = random.Random(0)
    for _ in range(300):  # runs of ids: byte-level pieces merge across tokens
        run = [rng.randrange(len(ref)) for _ in range(rng.randrange(1, 24))]
        assert tz.decode_text(tok, run) == ref.decode(run)
    assert tz.decode_tokens(tok, [-100, len(ref)]) == ["<id -100>", f"<id {len(ref)}>"]


@pytest.mark.parametrize("extra", [{"tokenizer_class": "LlamaTokenizer"}, {"clean_up_tokenization_spaces": True}])
def test_configs_asking_for_more_go_through_transformers(tmp_path, sample_data, fresh_cache, extra):
    folder = tmp_path / "tokenizer"
    shutil.copytree(sample_data / "tokenizer", folder)
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**cfg, **extra}))
    tok, _ = tz.load_tokenizer(str(folder))
    assert not isinstance(tok, tz.TokenizerFile)
