"""capture's tokenizer folder: written atomically per file, left alone when identical, no temporary left."""

import os

from forensics.models.recorder import save_tokenizer


class _Tok:
    def __init__(self, vocab: str):
        self.vocab = vocab

    def save_pretrained(self, folder):
        with open(os.path.join(folder, "tokenizer.json"), "w") as f:
            f.write(self.vocab)
        with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
            f.write("{}")


def test_save_tokenizer_writes_replaces_and_skips_identical(tmp_path):
    folder = tmp_path / "out" / "tokenizer"
    save_tokenizer(_Tok('{"v": 1}'), str(folder))
    tj = folder / "tokenizer.json"
    assert tj.read_text() == '{"v": 1}' and (folder / "tokenizer_config.json").is_file()
    first = os.stat(tj).st_ino
    save_tokenizer(_Tok('{"v": 1}'), str(folder))  # identical: not rewritten
    assert os.stat(tj).st_ino == first
    save_tokenizer(_Tok('{"v": 2}'), str(folder))  # changed: a new file renamed over the old one
    assert tj.read_text() == '{"v": 2}' and os.stat(tj).st_ino != first
    assert sorted(os.listdir(tmp_path / "out")) == ["tokenizer"]  # no temporary folder left beside it
