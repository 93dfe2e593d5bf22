"""Row forensics (issue 22) on real SmolLM2 captures: every corruption of the issue's table, written in the
three trainer formats by the recorder's own writer, found with the right kind and its rows / offset / slot —
from the data alone where the data can see it, and with ``--model default`` with every slot's true r named.
No false alarm on clean captures (the sample data, fresh captures of short and long texts, an encoder).

The truth of each case is what the test did to the rows (computed here, independently of the detectors);
the thresholds of ``forensics.analysis.rows`` were set on the corpus tuning texts (``benchmarks/corpus_texts.txt``,
tuning half) and checked on ``benchmarks/holdout_texts.txt``, neither of which is used here.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

import forensics
from forensics.analysis.fingerprint.core import fingerprint
from forensics.analysis.rows import RowReport, check_rows, mask_of, runs
from forensics.findings import EXIT_FAIL, exit_code
from forensics.models.recorder import TextSample, write_sample

FORMATS = {"speculators-v1": "speculators_v1/data_0.pt", "speculators": "speculators/hidden_states/hs_0.safetensors",
           "specforge": "specforge/rows_0-2000/data_0.ckpt"}
NAMES = {"speculators-v1": "data_0.pt", "speculators": "hidden_states/hs_0.safetensors",
         "specforge": "rows_0-2000/data_0.ckpt"}


def _declared(sample_data, rel: str) -> list:
    folder = sample_data / rel.split("/")[0]
    return json.loads((folder / "capture.json").read_text())["r"]


def _base(sample_data, fmt: str):
    cap = forensics.load(sample_data / FORMATS[fmt])
    ids = cap.input_ids.reshape(-1).clone()
    return ids, [s.tensor().clone() for s in cap.slots], _declared(sample_data, FORMATS[fmt])


def _other(sample_data):
    """Another request's capture of the same model and layers (the foreign rows' source)."""
    cap = forensics.load(sample_data / "speculators_v1" / "data_1.pt")
    return [s.tensor().clone() for s in cap.slots]


def _write(tmp_path, fmt: str, ids, states, rs, name: str = "case") -> str:
    path = os.path.join(tmp_path, name, NAMES[fmt])
    ids = [int(i) for i in ids]
    write_sample(fmt, path, TextSample("t", "", False, ids, [1] * len(ids)), [s.contiguous() for s in states], rs)
    return path


def corrupt(kind: str, ids, states, other=None):
    """The corrupted ``(ids, states)`` and the truth: rows (inclusive run), offset or slot."""
    T = int(ids.numel())
    st = [s.clone() for s in states]
    if kind == "zero_block":  # the rows 96–159 of a long capture: a third of this one, in every slot
        a, b = T // 3, T // 3 + T // 3
        for s in st:
            s[a:b] = 0
        return ids, st, {"rows": [a, b - 1]}
    if kind == "zero70_nan3":
        g = torch.Generator().manual_seed(7)
        z = torch.randperm(T, generator=g)[: int(0.7 * T)]
        for s in st:
            s[z] = 0
        keep = sorted(set(range(T)) - set(z.tolist()))[:3]
        for t in keep:
            st[1][t, 5] = float("nan")
        return ids, st, {"zero": sorted(z.tolist()), "nan": keep, "T": T}
    if kind == "tail_missing":
        return ids, [s[:-20].clone() for s in st], {"offset": 0, "rows": T - 20, "tokens": T}
    if kind == "prefix_suffix":
        return ids, [s[32:].clone() for s in st], {"offset": 32, "rows": T - 32, "tokens": T}
    if kind == "all_late":
        return ids[:-1].clone(), [s[1:].clone() for s in st], {"offset": 1}
    if kind == "one_late":
        late = 2
        st = [s[:-1].clone() if i != late else s[1:].clone() for i, s in enumerate(st)]
        return ids[:-1].clone(), st, {"slot": late, "offset": 1}
    if kind == "foreign":
        a, b = T // 2, min(T, T // 2 + 30)
        m = min(b, int(other[0].shape[0])) - a
        for s, o in zip(st, other, strict=True):
            s[a:a + m] = o[a:a + m]
        return ids, st, {"rows": [a, a + m - 1]}
    raise KeyError(kind)


KIND = {"zero_block": "zero_rows", "zero70_nan3": "zero_rows", "tail_missing": "row_count",
        "prefix_suffix": "row_count", "all_late": "token_shift", "one_late": "slot_misaligned",
        "foreign": "foreign_rows"}


def _finding(fp_or_rep, kind: str):
    got = [f for f in fp_or_rep.findings if f.kind == kind]
    assert got, (kind, [(f.kind, f.message) for f in fp_or_rep.findings])
    return got[0]


def _check_evidence(kind: str, truth: dict, fp, n_slots: int, placed: bool = True) -> None:
    """``placed``: the rows can be put on the ids (an embedding slot or the model); else the offset is None."""
    f = _finding(fp, KIND[kind])
    assert f.severity.value == "fail"
    ev = f.evidence
    if kind == "zero_block":
        assert ev["rows"] == [truth["rows"]] and f.slots == list(range(n_slots))
    elif kind == "zero70_nan3":
        T = truth["T"]
        assert ev["count"] == len(truth["zero"]) and ev["share"] == pytest.approx(len(truth["zero"]) / T)
        assert ev["rows"] == [list(r) for r in runs(mask_of([(t, t) for t in truth["zero"]], T))][:32]
        nf = _finding(fp, "nonfinite")
        assert nf.slots == [1] and nf.evidence["rows"] == [list(r) for r in runs(mask_of(
            [(t, t) for t in truth["nan"]], T))]
    elif kind in ("tail_missing", "prefix_suffix"):
        assert (ev["offset"], ev["rows"], ev["tokens"]) == (truth["offset"] if placed else None, truth["rows"],
                                                            truth["tokens"])
    elif kind == "all_late":
        assert ev["offset"] == truth["offset"]
    elif kind == "one_late":
        assert f.slots == [truth["slot"]] and ev["offset"] == truth["offset"]
    elif kind == "foreign":
        a, b = truth["rows"]
        (fa, fb), = ev["rows"]  # one run, inside the planted block, covering most of it
        assert a <= fa and fb <= b and (fb - fa + 1) >= 0.7 * (b - a + 1), (ev["rows"], truth)


# the corruptions the data alone can see in each format (the table's data-only column): token shift and
# foreign rows need an embedding slot (rows a function of the id), which only the speculators-v1 sample has
DATA_ONLY = [(fmt, kind) for fmt in FORMATS for kind in KIND
             if fmt == "speculators-v1" or kind not in ("all_late", "foreign")]


@pytest.mark.parametrize("fmt,kind", DATA_ONLY)
def test_every_corruption_is_found_from_the_data_alone(sample_data, tmp_path, fmt, kind):
    ids, states, rs = _base(sample_data, fmt)
    ids2, st2, truth = corrupt(kind, ids, states, _other(sample_data))
    path = _write(tmp_path, fmt, ids2, st2, rs)
    fp = fingerprint(path)
    _check_evidence(kind, truth, fp, len(states), placed=0 in rs)
    assert exit_code(fp.findings, [s.verdict for s in fp.slots]) == EXIT_FAIL


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_clean_sample_captures_have_no_row_finding(sample_data, fmt):
    rep = check_rows(forensics.load(sample_data / FORMATS[fmt]))
    assert rep.findings == [] and rep.bad_rows == {} and rep.offset == 0


def test_rows_longer_than_ids_read_and_exit_1_on_the_command_line(sample_data, tmp_path, capsys):
    """Before issue 22 the readers refused ids ≠ rows (exit 2); the file is readable and its content wrong."""
    from forensics.cli import main

    ids, states, rs = _base(sample_data, "speculators-v1")
    path = _write(tmp_path, "speculators-v1", ids, [s[32:] for s in states], rs)
    assert main(["fingerprint", path, "--json"]) == EXIT_FAIL
    doc = json.loads(capsys.readouterr().out)
    rc = next(f for f in doc["files"][0]["findings"] if f["kind"] == "row_count")
    assert rc["evidence"]["offset"] == 32 and rc["evidence"]["tokens"] == int(ids.numel())


def test_a_zero_block_does_not_change_the_data_only_labels(sample_data, tmp_path):
    ids, states, rs = _base(sample_data, "speculators-v1")
    clean = fingerprint(_write(tmp_path, "speculators-v1", ids, states, rs, "clean"), layers=rs)
    _, st2, _ = corrupt("zero_block", ids, states)
    bad = fingerprint(_write(tmp_path, "speculators-v1", ids, st2, rs, "bad"), layers=rs)
    assert [s.role for s in bad.slots] == [s.role for s in clean.slots]
    assert bad.depth_order == clean.depth_order


def test_report_masks_and_token_map():
    rep = RowReport(num_rows=6, num_tokens=8, bad_rows={1: [(2, 3)]}, offset=2)
    assert rep.good_rows().tolist() == [True, True, False, False, True, True]
    assert rep.good_rows(0).all() and rep.good_index(1).tolist() == [0, 1, 4, 5]
    assert rep.token_of_row().tolist() == [2, 3, 4, 5, 6, 7]
    assert RowReport(num_rows=3, num_tokens=3, offset=2).token_of_row().tolist() == [2, -1, -1]


def test_a_whole_zero_slot_stays_all_zero(sample_data, tmp_path):
    ids, states, rs = _base(sample_data, "speculators-v1")
    states[2] = torch.zeros_like(states[2])
    fp = fingerprint(_write(tmp_path, "speculators-v1", ids, states, rs))
    kinds = [f.kind for f in fp.findings]
    assert "all_zero" in kinds and "zero_rows" not in kinds


def test_an_encoder_with_absolute_positions_raises_no_row_finding(tmp_path):
    """A post-LN encoder (token + position embedding, then LayerNorm; tests/test_encoder_scope.py): no twin rows,
    no embedding slot to place ids with; the cross-slot test must not call any slot misaligned."""
    from tests.test_encoder_scope import _encoder_states

    states, ids = _encoder_states(False)
    rep = check_rows(forensics.load(_write(tmp_path, "speculators-v1", torch.tensor(ids), states, [0, 1, 2, 3])))
    assert rep.findings == []


# ------------------------------------------------------------------------------------------- fresh + model
TEXTS = {"short.txt": "Hi.", "two.txt": "Yes, yes.",
         "long.txt": "The river rose in spring and the town moved its market to the hill. " * 6
         + "Every stall came back in June, the fish stall first, then the bread, the cloth and the tools."}


@pytest.fixture(scope="module")
def fresh(tmp_path_factory, smollm2):
    """Fresh ``hsf capture`` captures of short and long texts, three formats (the recorder, real SmolLM2)."""
    from forensics.models.recorder import capture

    root = tmp_path_factory.mktemp("fresh")
    for name, text in TEXTS.items():
        (root / name).write_text(text)
    out = {}
    for fmt in FORMATS:
        res = capture([str(root / n) for n in TEXTS], layers=[0, 3, 16, 28] if fmt != "specforge" else
                      [2, 15, 27, "final_post"], fmt=fmt, out=str(root / fmt), model=None, progress=False)
        out[fmt] = [os.path.join(res.out, f) for f in res.files]
    return out


@pytest.mark.model
def test_no_false_alarm_on_fresh_captures_of_short_and_long_texts(fresh):
    for fmt, files in fresh.items():
        for path in files:
            rep = check_rows(forensics.load(path))
            assert rep.findings == [], (fmt, path, [f.message for f in rep.findings])


MODEL_KINDS = list(KIND)


@pytest.mark.model
@pytest.mark.parametrize("kind", MODEL_KINDS)
def test_with_the_model_every_corruption_is_found_and_every_slot_named(sample_data, tmp_path, smollm2, kind):
    ids, states, rs = _base(sample_data, "speculators-v1")
    ids2, st2, truth = corrupt(kind, ids, states, _other(sample_data))
    fp = fingerprint(_write(tmp_path, "speculators-v1", ids2, st2, rs), model=smollm2[0])
    _check_evidence(kind, truth, fp, len(states))
    assert [s.r_exact for s in fp.slots] == rs  # the true r of every slot, from its good rows
    assert "no_reference_match" not in [f.kind for f in fp.findings]
    assert exit_code(fp.findings, [s.verdict for s in fp.slots]) == EXIT_FAIL
    if kind == "all_late":
        assert _finding(fp, "token_shift").evidence["by"] == "the reference forward"


@pytest.mark.model
def test_with_the_model_a_clean_capture_has_no_row_finding(sample_data, smollm2):
    fp = fingerprint(sample_data / FORMATS["speculators-v1"], model=smollm2[0])
    assert not [f for f in fp.findings if f.kind in {"zero_rows", "row_count", "token_shift", "slot_misaligned",
                                                     "foreign_rows", "nonfinite"}]
    assert [s.r_exact for s in fp.slots] == [0, 3, 16, 28]
