"""capture's tokenizer folder: written atomically per file, left alone when identical, another tokenizer never
replaced (hardening round 3, N4 S16-b), no temporary left."""

import os

import pytest

from forensics.errors import ForensicsError
from forensics.models.recorder import check_tokenizer_dir, save_tokenizer


class _Tok:
    def __init__(self, vocab: str):
        self.vocab = vocab

    def save_pretrained(self, folder):
        with open(os.path.join(folder, "tokenizer.json"), "w") as f:
            f.write(self.vocab)
        with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
            f.write("{}")


def test_save_tokenizer_writes_skips_identical_and_refuses_another(tmp_path):
    folder = tmp_path / "out" / "tokenizer"
    save_tokenizer(_Tok('{"v": 1}'), str(folder))
    tj = folder / "tokenizer.json"
    assert tj.read_text() == '{"v": 1}' and (folder / "tokenizer_config.json").is_file()
    first = os.stat(tj).st_ino
    save_tokenizer(_Tok('{"v": 1}'), str(folder))  # identical: not rewritten
    assert os.stat(tj).st_ino == first
    check_tokenizer_dir(_Tok('{"v": 1}'), str(folder))  # the same tokenizer: accepted
    for call in (check_tokenizer_dir, save_tokenizer):  # another dataset's tokenizer: refused, left as it was
        with pytest.raises(ForensicsError, match="different tokenizer"):
            call(_Tok('{"v": 2}'), str(folder))
    assert tj.read_text() == '{"v": 1}' and os.stat(tj).st_ino == first
    assert sorted(os.listdir(tmp_path / "out")) == ["tokenizer"]  # no temporary folder left beside it


def test_a_tokenizer_dir_holding_other_files_is_refused(tmp_path):
    other = tmp_path / "table"
    other.mkdir()
    (other / "part-0.parquet").write_bytes(b"x")
    with pytest.raises(ForensicsError, match="holds other files"):
        check_tokenizer_dir(_Tok("{}"), str(other))
    assert sorted(os.listdir(other)) == ["part-0.parquet"]
