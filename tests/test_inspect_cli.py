"""``hsf inspect`` end to end on the real SmolLM2 sample captures, checked against values computed here from
the raw tensors (float64) and against the ground truth in ``sample_data/README.md``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors import safe_open

from forensics.analysis.stats import MASSIVE_ABS_THRESHOLD, MASSIVE_REL_THRESHOLD, SINK_RATIO
from forensics.cli import main as hsf_main


@pytest.fixture(scope="module")
def inspect_doc(sample_data):
    """One ``hsf inspect --json sample_data`` run shared by the tests below."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = hsf_main(["inspect", "--json", str(sample_data)])
    return code, json.loads(buf.getvalue())


def entry(doc, suffix: str) -> dict:
    hits = [e for e in doc["files"] if e["path"].endswith(suffix)]
    assert len(hits) == 1, [e["path"] for e in doc["files"]]
    return hits[0]


def test_every_sample_file_is_read_with_its_format(inspect_doc):
    code, doc = inspect_doc
    assert code == 0
    assert all(e["error"] is None for e in doc["files"])
    formats = {os.path.relpath(e["path"]).split("sample_data/")[-1]: e["format"] for e in doc["files"]}
    assert formats == {
        "ladder/capture_0.safetensors": "generic",
        "specforge/rows_0-2000/data_0.ckpt": "specforge",
        "speculators/hidden_states/hs_0.safetensors": "speculators",
        **{f"speculators_v1/data_{i}.pt": "speculators-v1" for i in range(5)},
    }


def test_declared_r_matches_ground_truth(inspect_doc):
    _, doc = inspect_doc
    assert entry(doc, "speculators_v1/data_0.pt")["declared_r"] == [0, 3, 16, 28]
    assert entry(doc, "speculators_v1/data_0.pt")["declared_layers"] == [-1, 2, 15, 27]  # data_config.json
    sf = entry(doc, "specforge/rows_0-2000/data_0.ckpt")
    assert sf["declared_r"] == [2, 15, 27, "final_post"]
    assert [s["claimed"] for s in sf["slots"]] == ["aux[0]", "aux[1]", "aux[2]", "final_post"]
    sp = entry(doc, "hs_0.safetensors")
    assert sp["declared_r"] == [2, 15, 27, 30] and sp["layout"].startswith("[seq, k, H]")
    ladder = entry(doc, "ladder/capture_0.safetensors")
    assert ladder["declared_r"] == list(range(31)) + ["final_post"] and len(ladder["slots"]) == 32


def test_json_norms_match_float64_reference_from_raw_file(inspect_doc, sample_data):
    _, doc = inspect_doc
    raw = torch.load(sample_data / "speculators_v1" / "data_0.pt", weights_only=True)
    e = entry(doc, "speculators_v1/data_0.pt")
    assert e["num_tokens"] == raw["input_ids"].numel() and e["hidden_size"] == 576
    for s, h in zip(e["slots"], raw["hidden_states"], strict=True):
        n = h.double().norm(dim=-1).numpy()
        assert s["shape"] == list(h.shape) and s["dtype"] == "bf16"
        assert s["norm"]["mean"] == pytest.approx(n.mean(), rel=1e-5)
        assert s["norm"]["std"] == pytest.approx(n.std(), rel=1e-5)
        assert s["norm"]["median"] == pytest.approx(np.median(n), rel=1e-5)
        assert s["norm"]["p05"] == pytest.approx(np.percentile(n, 5), rel=1e-5)
        assert s["norm"]["p95"] == pytest.approx(np.percentile(n, 95), rel=1e-5)
        assert s["norm"]["first"] == pytest.approx(n[0], rel=1e-5)
        assert s["norm"]["last"] == pytest.approx(n[-1], rel=1e-5)
        assert s["norm"]["mean_excl_first"] == pytest.approx(n[1:].mean(), rel=1e-5)
        assert s["sinks"]["positions"] == [int(i) for i in np.nonzero(n / np.median(n) >= SINK_RATIO)[0]]
        assert s["nonfinite"]["nan"] == 0 and s["nonfinite"]["inf"] == 0


def test_massive_activations_on_real_states_match_brute_force(inspect_doc, sample_data):
    _, doc = inspect_doc
    e = entry(doc, "hs_0.safetensors")
    with safe_open(str(sample_data / "speculators" / "hidden_states" / "hs_0.safetensors"), "pt") as f:
        stack = f.get_tensor("hidden_states")
    for i, s in enumerate(e["slots"]):
        a = stack[:, i].double().abs()
        thr = max(MASSIVE_ABS_THRESHOLD, MASSIVE_REL_THRESHOLD * s["massive"]["median_abs"])
        assert s["massive"]["median_abs"] == pytest.approx(float(a.median()), rel=0.05)  # staggered sample
        ref = {p: sorted((int(d) for d in torch.nonzero(a[p] > thr).flatten()), key=lambda d: -float(a[p, d]))
               for p in range(a.shape[0]) if bool((a[p] > thr).any())}
        assert {t["pos"]: t["dims"] for t in s["massive"]["tokens"]} == ref
    # SmolLM2 grows a massive activation at token 0 mid-network (Sun et al. 2024): present at r=15, not r=2
    assert e["slots"][0]["massive"]["tokens"] == [] and e["slots"][1]["massive"]["tokens"][0]["pos"] == 0


def test_text_mode_table(sample_data, capsys):
    code = hsf_main(["inspect", str(sample_data / "specforge")])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert "format specforge, 116 tokens, hidden 576, 4 slots" in out
    assert "aux_hidden_state[:, 576:1152]" in out and "final_post" in out
    assert "‖x‖ mean" in out and "token 0" in out and "sinks [0]" in out


def test_console_script_multiple_paths(sample_data):
    hsf = os.path.join(os.path.dirname(sys.executable), "hsf")
    if not os.path.exists(hsf):
        pytest.skip("hsf console script not installed in this environment")
    paths = [str(sample_data / "speculators_v1" / "data_4.pt"), str(sample_data / "speculators")]
    proc = subprocess.run([hsf, "inspect", "--json", *paths], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [e["format"] for e in doc["files"]] == ["speculators-v1", "speculators"]


def test_ids_let_inspect_place_the_rows_of_a_capture_saved_without_them(sample_data, tmp_path, capsys):
    """Real SmolLM2 states saved as a bare list of [T, H] tensors whose tail was cut (T - 5 rows for T ids): without
    the ids nothing says so; ``--ids`` gives the row checks the token count, so ``row_count`` names both counts."""
    from safetensors.torch import load_file

    t = load_file(str(sample_data / "ladder" / "capture_0.safetensors"))
    ids = t["input_ids"].reshape(-1)
    T = ids.numel()
    torch.save([t[k][: T - 5].clone() for k in ("slot_0.embed", "slot_3.L3", "slot_16.L16")], tmp_path / "cut.pt")
    (tmp_path / "ids.txt").write_text(" ".join(str(int(i)) for i in ids))

    assert hsf_main(["inspect", "--json", str(tmp_path / "cut.pt")]) == 0
    assert json.loads(capsys.readouterr().out)["files"][0]["findings"] == []
    assert hsf_main(["inspect", "--json", str(tmp_path / "cut.pt"), "--ids", str(tmp_path / "ids.txt")]) == 1
    doc = json.loads(capsys.readouterr().out)
    kinds = {f["kind"]: f for f in doc["files"][0]["findings"]}
    assert doc["verdict"] == "fail" and "row_count" in kinds
    ev = kinds["row_count"]["evidence"]
    assert (ev.get("rows"), ev.get("tokens")) == (T - 5, T) or str(T - 5) in kinds["row_count"]["message"]
    # one capture's tokens: several files are refused in one line (exit 2)
    assert hsf_main(["inspect", str(tmp_path / "cut.pt"), str(tmp_path / "cut.pt"), "--ids",
                     str(tmp_path / "ids.txt")]) == 2
    assert "pass exactly one file" in capsys.readouterr().err
