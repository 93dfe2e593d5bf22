"""The fp32 cache of the GGUF model is keyed by the file's content, not its path, and keeps one version."""

import os

from forensics.models import target


def _file(path, data: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


def test_same_gguf_in_two_places_shares_one_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(target, "CACHE_DIR", str(tmp_path / "cache"))
    data = os.urandom(3 * target.CACHE_KEY_BYTES)
    a = _file(tmp_path / "venv1" / "m.gguf", data)
    b = _file(tmp_path / "venv2" / "m.gguf", data)
    os.utime(b, (1, 1))  # another checkout: other path, other mtime
    assert target._cache_folder(a) == target._cache_folder(b)
    changed = _file(tmp_path / "venv3" / "m.gguf", data[:-1] + bytes([data[-1] ^ 1]))  # last tensor differs
    assert target._cache_folder(changed) != target._cache_folder(a)
    # another model of the same size and header (a fine-tune copied over with cp -p): the weights in between differ
    middle = bytearray(data)
    for i in range(target.CACHE_KEY_BYTES, 2 * target.CACHE_KEY_BYTES):
        middle[i] ^= 0x55
    tuned = _file(tmp_path / "venv4" / "m.gguf", bytes(middle))
    os.utime(tuned, (os.stat(a).st_atime, os.stat(a).st_mtime))
    assert target._cache_folder(tuned) != target._cache_folder(a)


def test_writing_a_cache_prunes_other_versions_of_the_same_file_name(tmp_path):
    cache = tmp_path / "cache"
    for name in ("m.gguf-aaaaaaaaaaaa-fp32", "m.gguf-bbbbbbbbbbbb-fp32", "other.gguf-aaaaaaaaaaaa-fp32"):
        (cache / name).mkdir(parents=True)
    target._prune_stale(str(cache / "m.gguf-bbbbbbbbbbbb-fp32"))
    assert sorted(os.listdir(cache)) == ["m.gguf-bbbbbbbbbbbb-fp32", "other.gguf-aaaaaaaaaaaa-fp32"]
