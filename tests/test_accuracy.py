"""The accuracy floors on a small slice of the calibration corpus, generated here from real SmolLM2 captures.

The slice is three short texts of the evaluation half (never tuned on), each captured once as a full ladder
with the recorder and written in all three trainer formats with every claim kind (scripts/make_corpus.py);
the floors are the issue's: embedding found 100 %, a post-norm final never ranked shallowest, bit-identical
slots share a label, decided verdicts wrong ≤ 1 %, shifted FAIL; the depth order floor is scaled to the slice.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SLICE = ["chat-07", "list-07", "foreign-13"]  # evaluation-half texts of 68, 45 and 68 tokens
SLICE_ORDER_FLOOR = 0.95


def _module(name: str, rel: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / rel)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def corpus_slice(tmp_path_factory):
    make = _module("make_corpus", "scripts/make_corpus.py")
    out = tmp_path_factory.mktemp("corpus")
    man = make.build(str(out), only=SLICE, verify=1, quiet=True)
    return make, out, man


@pytest.mark.model
def test_slice_is_the_evaluation_half_in_three_formats(corpus_slice):
    make, out, man = corpus_slice
    assert {man["texts"][t]["split"] for t in SLICE} == {"eval"}
    assert {c["format"] for c in man["cases"]} == set(make.FORMATS)
    assert json.loads((out / "manifest.json").read_text())["seed"] == make.SEED
    sidecars = list(out.rglob("capture.json")) + list(out.rglob("data_config.json"))
    assert len(sidecars) == len(SLICE) and all("ladder" in p.parts for p in sidecars)  # no case tells its truth
    kinds = {c["kind"] for c in man["cases"]}
    assert {"correct", "shifted", "shifted_reverse", "reordered", "duplicate", "postnorm_final",
            "prenorm_final"} <= kinds


@pytest.mark.model
def test_accuracy_floors_on_the_slice(corpus_slice):
    _, out, _ = corpus_slice
    acc = _module("accuracy", "benchmarks/accuracy.py")
    res = acc.evaluate(str(out), "all", ("data", "exact"))
    s = acc.summarize(res)
    e = s["evidence"]
    assert e["embedding_found"]["rate"] == 1.0, acc.failures(res)
    # 85 four-slot files cannot measure 99 % (one miss is 98.8 %; `make accuracy` measures the whole evaluation
    # half): here the order holds on ≥ 95 % and no wrong order is confident enough for a verdict to act on it
    assert e["depth_order_4slot"]["rate"] >= SLICE_ORDER_FLOOR, acc.failures(res)
    assert e["wrong_order_confident"]["ok"] == 0, acc.failures(res)
    assert e["postnorm_never_shallowest"]["rate"] == 1.0, acc.failures(res)
    assert e["identical_share_label"]["rate"] == 1.0, acc.failures(res)
    for m, v in s["modes"].items():
        if v["cases"]:  # a verdict engine is there: never confidently wrong, and the seed's shift is FAIL
            assert v["wrong"] <= acc.FLOOR_WRONG * v["decided"], (m, acc.failures(res))
            assert v["shifted_fail"]["rate"] == 1.0, (m, acc.failures(res))
