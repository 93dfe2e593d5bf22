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


# ------------------------------------------------------------------------------------------ row corruptions
LADDER = ROOT / "sample_data" / "ladder"


def _raw_read(path: Path, fmt: str):
    """(slots as [T, H] tensors, ids) read with torch/safetensors directly, not with forensics' readers."""
    import torch
    from safetensors.torch import load_file

    if fmt == "speculators-v1":
        d = torch.load(path, weights_only=True)
        return list(d["hidden_states"]), d["input_ids"]
    if fmt == "speculators":
        d = load_file(str(path))
        return list(d["hidden_states"].unbind(1)), d["token_ids"]
    d = torch.load(path, weights_only=True)
    aux = d["aux_hidden_state"][0]
    h = d["hidden_state"].shape[-1]
    return [aux[:, i * h:(i + 1) * h] for i in range(aux.shape[1] // h)] + [d["hidden_state"][0]], d["input_ids"]


@pytest.fixture(scope="module")
def row_corpus(make, tmp_path_factory):
    """Every row variant written from sample_data/ladder (a real SmolLM2 ladder, 119 tokens) in all three
    formats. The foreign rows come from a second ladder: the same capture's rows rolled by 37 positions,
    a stand-in for another request's rows at the same layers."""
    import shutil

    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("rowcorpus")
    (out / "ladder").mkdir()
    shutil.copytree(LADDER, out / "ladder" / "a")
    lad = load_file(str(LADDER / "capture_0.safetensors"))
    rolled = {k: (v if k in ("input_ids", "loss_mask") else v.roll(37, 0).contiguous()) for k, v in lad.items()}
    (out / "ladder" / "b").mkdir()
    save_file(rolled, str(out / "ladder" / "b" / "capture_0.safetensors"))
    shutil.copy(LADDER / "capture.json", out / "ladder" / "b" / "capture.json")
    texts = [{"id": "a", "kind": "chat"}, {"id": "b", "kind": "chat"}]
    cases = make.write_row_cases(texts, {"a": "eval", "b": "eval"}, str(out), lambda m: None)
    return out, [c for c in cases if c["text"] == "a"], lad, rolled


def _rows_equal(x, y) -> bool:
    import torch

    return x.shape == y.shape and torch.equal(x.contiguous().view(torch.int16), y.contiguous().view(torch.int16))


def test_every_row_variant_in_every_format(make, row_corpus):
    _, cases, _, _ = row_corpus
    got = {(c["variant"], c["format"]) for c in cases}
    assert got == {(v, f) for v in make.ROW_VARIANTS for f in make.FORMATS}  # 119 tokens: every variant fits
    assert all(c["claim"] == c["truth"] for c in cases)
    assert all(c["has_embedding"] == (0 in c["truth"]) for c in cases)
    with_embed = [0 in make.row_layers(f, 30, __import__("random").Random(i)) for i in range(90) for f in make.FORMATS]
    assert 0.55 < sum(with_embed) / len(with_embed) < 0.8  # two thirds: the data-only shift/foreign checks need it


def test_row_corruptions_are_what_the_manifest_says(make, row_corpus):  # noqa: C901 - complexity 18, to be paid down
    """Each file's rows, read back raw, equal the ladder's rows moved exactly as the manifest's truth says."""
    import torch

    out, cases, lad, rolled = row_corpus
    key = {r: k for k in lad if k.startswith("slot_") for r in [_r_of(k)]}
    ids0 = lad["input_ids"]
    T0 = ids0.numel()
    for c in cases:
        slots, ids = _raw_read(out / c["file"], c["format"])
        own = [lad[key[r]] for r in c["truth"]]
        foreign = [rolled[key[r]] for r in c["truth"]]
        exp = {e["kind"]: e for e in c["expected"]}
        n_rows, n_ids = slots[0].shape[0], ids.numel()
        assert len(slots) == len(c["truth"]) and {s.shape[0] for s in slots} == {n_rows} == {c["num_rows"]}
        assert n_ids == c["num_tokens"] and torch.equal(ids, ids0[:n_ids]), c["file"]  # ids: always a prefix
        v = c["variant"]
        if v == "clean":
            assert not exp and all(_rows_equal(s, o) for s, o in zip(slots, own, strict=True))
        elif "zero_rows" in exp:
            zero = set(torch.nonzero(torch.stack([(s == 0).all(1) for s in slots]).all(0)).flatten().tolist())
            listed = {r for a, b in exp["zero_rows"]["rows"] for r in range(a, b + 1)}
            assert zero == listed and exp["zero_rows"]["slots"] == list(range(len(slots)))
            assert exp["zero_rows"]["share"] == pytest.approx(len(zero) / n_rows, abs=1e-4)
            assert 0 not in zero and n_rows - 1 not in zero  # never the sink row, never a padding-like tail
            nan = {(r, j) for j, s in enumerate(slots) for r in torch.nonzero(s.isnan().any(1)).flatten().tolist()}
            if v == "zero_share_nan":
                assert abs(len(zero) / n_rows - make.ZERO_SHARE) < 0.1
                assert sum(int(s.isnan().sum()) for s in slots) == make.NAN_VALUES
                assert {r for r, _ in nan} == {r for a, b in exp["nonfinite"]["rows"] for r in range(a, b + 1)}
                assert sorted({j for _, j in nan}) == exp["nonfinite"]["slots"]
            else:
                assert not nan
            for s, o in zip(slots, own, strict=True):  # every other row is untouched
                keep = [r for r in range(n_rows) if r not in zero and not s[r].isnan().any()]
                assert _rows_equal(s[keep], o[keep])
        elif "row_count" in exp:
            e = exp["row_count"]
            assert (e["rows"], e["tokens"]) == (n_rows, n_ids) and n_ids == T0 and n_rows < n_ids
            for s, o in zip(slots, own, strict=True):
                assert _rows_equal(s, o[e["offset"]:e["offset"] + n_rows])
            if v == "missing_tail":
                assert e["offset"] == 0 and n_ids - n_rows == 20
            if v == "prefix_suffix":
                assert e["offset"] == 32 and n_rows == n_ids - 32
        elif "token_shift" in exp:
            k = exp["token_shift"]["offset"]
            for s, o in zip(slots, own, strict=True):
                assert n_rows == n_ids
                if k > 0:
                    assert _rows_equal(s, o[k:k + n_rows])  # row t = token t + k
                else:
                    assert _rows_equal(s[1:], o[:n_rows - 1]) and _rows_equal(s[:1], o[:1])  # row t = token t - 1
        elif "slot_misaligned" in exp:
            (j,), k = exp["slot_misaligned"]["slots"], exp["slot_misaligned"]["offset"]
            assert c["truth"][j] != 0
            for i, (s, o) in enumerate(zip(slots, own, strict=True)):
                if i != j:
                    assert _rows_equal(s, o[:n_rows])
                elif k > 0:
                    assert _rows_equal(s, o[k:k + n_rows])
                else:
                    assert _rows_equal(s[1:], o[:n_rows - 1])
        else:
            (a, b), = exp["foreign_rows"]["rows"]
            assert 0 < a <= b < n_rows - 1 and c["foreign_text"] == "b"
            for s, o, f in zip(slots, own, foreign, strict=True):
                assert _rows_equal(s[a:b + 1], f[a:b + 1]) and not _rows_equal(s[a:b + 1], o[a:b + 1])
                assert _rows_equal(s[:a], o[:a]) and _rows_equal(s[b + 1:], o[b + 1:])


def _r_of(key: str):
    lab = key.split(".", 1)[1]
    return "final_post" if lab == "final_post" else 0 if lab == "embed" else int(lab[1:])


def test_row_variants_flag(make, capsys):
    assert make.parse_row_variants("all") == make.ROW_VARIANTS and make.parse_row_variants("none") == ()
    assert make.parse_row_variants("clean, zero_block") == ("clean", "zero_block")
    with pytest.raises(ValueError, match="zero_blok"):
        make.parse_row_variants("zero_blok")
    with pytest.raises(SystemExit) as e:
        make.main(["--rows", "zero_blok", "--out", "/nonexistent/never-written"])
    assert e.value.code == 2 and "zero_blok" in capsys.readouterr().err


def test_short_texts_get_only_the_clean_file(make):
    import torch

    T = make.ROW_MIN_TOKENS - 1
    states, ids = [torch.randn(T, 8) for _ in range(3)], torch.arange(T)
    for v in make.ROW_VARIANTS:
        got = make.corrupt_rows(v, states, ids, ids, [0, 5, 30], __import__("random").Random(0), states)
        assert (got is not None) == (v == "clean"), v
