"""Typed results keep the JSON they replace (issue 24, "typed results replace the dicts").

``AuditResult.slices/fix/trained/served/context``, ``ScanResult.anomalies`` and ``Fingerprint.exact`` are
dataclasses now; their ``to_dict()`` must give the keys the ``--json`` documents always had, per branch (a side
read from the draft config has other keys than one read from a served capture). Each expected dict below is
built from what the inputs are, not from the code's output: the sample captures' recorded r
(``sample_data/README.md``: ``speculators_v1`` holds ``[0, 3, 16, 28]``, the ladder every r of one text), the
draft config's ids ``[0, 3, 16]`` (vLLM reads r = id), and float64 recomputations of the numbers. Message
strings are wording: their keys are pinned, their text is only checked to be text.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from forensics import load
from forensics.analysis.audit.core import audit
from forensics.analysis.audit.doctor import preflight
from forensics.analysis.audit.parts import AuditSlice, Fix, ServedSide, TrainedSide
from forensics.analysis.audit.served import W1_NAME, W1_THRESHOLD
from forensics.analysis.scan.core import scan
from forensics.analysis.scan.result import Anomaly
from forensics.models import conventions as cv

CONFIG_KEYS = {"r", "source", "engine", "version", "arch", "key", "ids", "id_source", "notes"}
CAPTURE_KEYS = {"r", "ok", "source", "distances", "matrix", "distance", "threshold", "notes", "joined_tokens",
                "cosine", "rel", "config_prediction"}
DATA_KEYS = {"fc_r", "target_r", "source", "slot_source", "trainer", "view", "target_norm", "slots_r",
             "slots_status", "fc_status", "target_status", "roles"}
CONTEXT_KEYS = {"engine", "engine_version", "trainer", "num_layers", "hidden_size", "arch", "draft", "target"}
FIX_KEYS = {"ids", "key", "where", "engine", "version", "r", "caveat", "family", "snippet"}
V1_VIEW = cv.system("speculators-v1").trainer_view(4)  # fc = slots 0..2, target = slot 3


def _pin(actual: dict, expected: dict, wording: tuple = ()) -> None:
    """``actual`` has exactly the keys of ``expected`` plus ``wording``; values equal; wording is text."""
    assert set(actual) == set(expected) | set(wording), set(actual) ^ (set(expected) | set(wording))
    assert {k: actual[k] for k in expected} == expected
    for k in wording:
        v = actual[k]
        assert isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v)), (k, v)


def _slices(trained, served, ok, status) -> list[dict]:
    return [{"slice": k, "trained_r": t, "served_r": s, "ok": o, "trained_status": st}
            for k, (t, s, o, st) in enumerate(zip(trained, served, ok, status, strict=True))]


def _config_side(ids: list) -> dict:
    v = cv.system("vllm").version(None)
    return {"r": list(ids), "engine": "vllm", "version": v, "arch": "generic", "key": cv.TOP_KEY, "ids": list(ids),
            "id_source": "config", "notes": []}


def _check_audit(res, d: dict) -> None:
    """The typed fields and the JSON say the same thing (``to_dict`` is the JSON's source)."""
    assert d["slices"] == [s.to_dict() for s in res.slices] and all(isinstance(s, AuditSlice) for s in res.slices)
    assert isinstance(res.trained, TrainedSide) and isinstance(res.served, ServedSide)
    assert d["fix"] == (None if res.fix is None else res.fix.to_dict())


def test_audit_without_model_json_is_unchanged(sample_data):
    """No --model: the embedding is measured (duplicate rows), L3/L16 only claimed; vLLM serves r = id."""
    data = sample_data / "speculators_v1"
    res = audit(data=str(data), draft=str(sample_data / "draft_eagle3"), engine="vllm", num_layers=30)
    d = res.to_dict()
    _check_audit(res, d)
    assert d["slices"] == _slices([0, 3, 16], [0, 3, 16], [True, None, None], ["measured", "claimed", "claimed"])
    _pin(d["served"], _config_side([0, 3, 16]), wording=("source",))
    _pin(d["trained"], {"fc_r": [0, 3, 16], "target_r": 28, "trainer": "speculators-v1", "view": V1_VIEW.source,
                        "target_norm": V1_VIEW.target_norm, "slots_r": [0, 3, 16, 28],
                        "slots_status": ["measured", "claimed", "claimed", "claimed"],
                        "fc_status": ["measured", "claimed", "claimed"], "target_status": "claimed",
                        "roles": ["embedding", "early", "middle", "late"]}, wording=("source", "slot_source"))
    assert set(d["trained"]) == DATA_KEYS
    ctx = {k: v for k, v in d["context"].items() if k != "draft"}
    assert set(d["context"]) == CONTEXT_KEYS and d["context"]["draft"]["ids_top"] == [0, 3, 16]
    assert ctx == {"engine": "vllm", "engine_version": cv.system("vllm").version(None), "trainer": "speculators-v1",
                   "num_layers": 30, "hidden_size": 576, "arch": "generic", "target": {}}
    assert d["fix"] is None and d["wiring"] == "cannot-tell" and "--model" in d["settle"]


@pytest.mark.model
def test_audit_with_model_json_is_unchanged(sample_data, smollm2):
    """--model default (the packaged SmolLM2, the captures' own model): every slot's r is exact."""
    res = audit(data=str(sample_data / "speculators_v1"), draft=str(sample_data / "draft_eagle3"), engine="vllm",
                num_layers=30, model="default")
    d = res.to_dict()
    _check_audit(res, d)
    assert d["slices"] == _slices([0, 3, 16], [0, 3, 16], [True] * 3, ["exact"] * 3)
    _pin(d["trained"], {"fc_r": [0, 3, 16], "target_r": 28, "trainer": "speculators-v1", "view": V1_VIEW.source,
                        "target_norm": "pre", "slots_r": [0, 3, 16, 28], "slots_status": ["exact"] * 4,
                        "fc_status": ["exact"] * 3, "target_status": "exact",
                        "roles": ["embedding", "early", "middle", "late"]}, wording=("source", "slot_source"))
    assert d["trained"]["slot_source"] == ["fingerprint (exact)"] * 4
    _pin(d["served"], _config_side([0, 3, 16]), wording=("source",))
    assert d["wiring"] == "match" and d["fix"] is None and d["settle"] is None


def test_served_audit_json_is_unchanged(sample_data, tmp_path):
    """A served capture of [L3, L16, L28] (the seed's shift) against training [embed, L3, L16]: the two chat texts
    share 24 tokens, so rows are joined on them; per-token cosines recomputed in float64 (their median: a minority
    of corrupt rows does not decide the slot)."""
    lad = load(sample_data / "ladder" / "capture_0.safetensors")
    by_r = dict(zip(lad.declared_r, lad.slots, strict=True))
    served = str(tmp_path / "served.safetensors")
    save_file({"hidden_states": torch.stack([by_r[r].tensor() for r in (3, 16, 28)], 0).contiguous(),
               "token_ids": lad.input_ids.to(torch.int64).contiguous()}, served)
    train = load(sample_data / "speculators_v1" / "data_0.pt")
    a, b = lad.input_ids.reshape(-1), train.input_ids.reshape(-1)
    n = min(len(a), len(b))
    P = int((a[:n] != b[:n]).nonzero()[0]) if bool((a[:n] != b[:n]).any()) else n
    res = audit(data=str(sample_data / "speculators_v1"), served=served, draft=str(sample_data / "draft_eagle3"),
                engine="vllm", num_layers=30)
    d = res.to_dict()
    _check_audit(res, d)
    s = d["served"]
    assert set(s) == CAPTURE_KEYS
    _pin({k: s[k] for k in CAPTURE_KEYS - {"distances", "matrix", "cosine", "rel"}},
         {"r": [3, 16, 28], "ok": [False, False, False], "distance": W1_NAME, "threshold": W1_THRESHOLD, "notes": [],
          "joined_tokens": P, "config_prediction": [0, 3, 16]}, wording=("source",))
    cos = np.array([[np.median([float(torch.nn.functional.cosine_similarity(
        by_r[r].tensor()[t:t + 1].double(), train.slots[i].tensor()[t:t + 1].double()).item()) for t in range(P)])
        for i in range(4)] for r in (3, 16, 28)])
    assert np.allclose(np.array(s["cosine"]), cos, atol=2e-5)
    assert np.array(s["matrix"]).shape == (3, 4) and len(s["distances"]) == 3
    assert d["slices"] == _slices([0, 3, 16], [3, 16, 28], [False] * 3, ["measured", "claimed", "claimed"])


def test_preflight_fix_json_is_unchanged(sample_data):
    """The doctor: speculators trained on ids [2, 15, 27] (r = id + 0 in its numbering), the config holds
    [0, 3, 16]: the fix writes [2, 15, 27] at vLLM's top-level key; the context adds the drafter family."""
    res = preflight(draft=str(sample_data / "draft_eagle3"), engine="vllm", trainer="speculators",
                    target_layer_ids=[2, 15, 27], num_layers=30)
    d = res.to_dict()
    _check_audit(res, d)
    assert isinstance(res.fix, Fix)
    assert d["fix"] == {"ids": [2, 15, 27], "key": cv.TOP_KEY, "where": "top-level", "engine": "vllm",
                        "version": cv.system("vllm").version(None), "r": [2, 15, 27], "caveat": None,
                        "family": "eagle3", "snippet": {cv.TOP_KEY: [2, 15, 27]}, "already_set": False}
    assert set(d["fix"]) == FIX_KEYS | {"already_set"}
    assert set(d["context"]) == CONTEXT_KEYS | {"family"} and d["context"]["family"] == "eagle3"
    assert d["trained"]["fc_r"] == [2, 15, 27] and d["trained"]["target_r"] is None
    assert d["trained"]["trainer"] == "speculators" and set(d["trained"]) == DATA_KEYS
    assert d["slices"] == _slices([2, 15, 27], [0, 3, 16], [False] * 3, ["layout"] * 3)


def test_audit_without_sides_keeps_the_short_keys(sample_data):
    """Nothing read on a side: ``{"r": None, "source": "none"}`` and ``{"fc_r", "target_r", "source"}`` only."""
    res = audit(draft=str(sample_data / "draft_eagle3"))
    d = res.to_dict()
    assert d["served"] == {"r": None, "source": "none"}
    assert d["trained"] == {"fc_r": None, "target_r": None, "source": "none"} and d["slices"] == []


def test_scan_anomalies_json_is_unchanged(sample_data, tmp_path):
    """Five real files, one captured as [L3, L16, L28, L30] where the others hold [embed, L3, L16, L28], one
    unreadable: each anomaly is an ``Anomaly`` with the seven JSON keys."""
    src = sample_data / "speculators_v1"
    for name in ("capture.json", "data_config.json"):
        shutil.copy(src / name, tmp_path / name)
    for i in range(5):
        shutil.copy(src / f"data_{i}.pt", tmp_path / f"data_{i}.pt")
    lad = load(sample_data / "ladder" / "capture_0.safetensors")
    torch.save({"input_ids": lad.input_ids, "loss_mask": lad.loss_mask,
                "hidden_states": [lad.slots[r].tensor().clone() for r in (3, 16, 28, 30)]}, tmp_path / "data_5.pt")
    (tmp_path / "broken.pt").write_bytes(b"not a torch file")
    res = scan(tmp_path, workers=0)
    assert all(isinstance(a, Anomaly) for a in res.anomalies)
    doc = res.to_dict()["anomalies"]
    assert doc == [a.to_dict() for a in res.anomalies]
    keys = {"file", "kind", "slot", "message", "value", "threshold", "severity"}
    assert all(set(a) == keys for a in doc)
    broken = [a for a in doc if os.path.basename(a["file"]) == "broken.pt"]
    assert [{k: v for k, v in a.items() if k != "message"} for a in broken] == [
        {"file": str(tmp_path / "broken.pt"), "kind": "unreadable", "slot": None, "value": None, "threshold": None,
         "severity": "fail"}]
    bad = {a["kind"]: a for a in doc if os.path.basename(a["file"]) == "data_5.pt"}
    assert bad["role"]["value"] == ["early", "middle", "middle", "late"]  # no embedding where the others have one
    assert bad["role"]["threshold"] == ["embedding", "early", "middle", "late"] and bad["role"]["slot"] is None
    assert {os.path.basename(a["file"]) for a in doc} == {"broken.pt", "data_5.pt"}
    assert res.summary["anomaly_counts"] == {k: sum(a["kind"] == k for a in doc) for k in {a["kind"] for a in doc}}


def test_exact_block_json_is_unchanged(sample_data):
    """The ladder against itself: every slot equals its own r; no γ or embedding rows in a ladder reference."""
    from forensics.analysis.fingerprint.core import fingerprint
    from forensics.analysis.fingerprint.exact import ExactMatch, ExactResult
    from forensics.layers import r_label

    lad = load(sample_data / "ladder" / "capture_0.safetensors")
    fp = fingerprint(lad, model=lad)
    assert isinstance(fp.exact, ExactResult) and all(isinstance(x, ExactMatch) for x in fp.exact.slots)
    d = fp.exact.to_dict()
    slots = d.pop("slots")
    assert d == {"source": lad.path, "num_layers": 30, "notes": [], "ran": True, "tokens": lad.num_tokens,
                 "labels": {i: r_label(r) for i, r in enumerate(lad.declared_r)}, "compute_dtype": None,
                 "stream": None}
    for x, r in zip(slots, lad.declared_r, strict=True):
        assert set(x) == {"embedding", "postnorm", "ladder", "r_exact", "lens", "sublayer"}
        assert x["r_exact"] == r and x["embedding"] is None and x["postnorm"] is None and x["lens"] is None
        assert x["sublayer"] is None  # a residual-stream slot of the ladder is no block's attention or MLP output
        assert x["ladder"]["best"] == r and x["ladder"]["match"] is True
    assert fp.to_dict()["exact_source"] == lad.path and fp.to_dict()["exact_stream"] is None
