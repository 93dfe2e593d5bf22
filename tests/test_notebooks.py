"""The example notebooks: committed without outputs, in sync with their jupytext `.py`, and each runs top to
bottom on sample_data with nbclient (the venv's kernel), printing the story's key results, writing its
report outside the repository and nothing into it."""

from __future__ import annotations

import os
import re
import time

import pytest

nbformat = pytest.importorskip("nbformat")
jupytext = pytest.importorskip("jupytext")
nbclient = pytest.importorskip("nbclient")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NB_DIR = os.path.join(ROOT, "notebooks")
SAMPLE = os.path.join(ROOT, "sample_data")
NOTEBOOKS = sorted(f for f in os.listdir(NB_DIR) if f.endswith(".ipynb")) if os.path.isdir(NB_DIR) else []
CELL_TIMEOUT_S = 180
NOTEBOOK_BUDGET_S = 60  # under a minute each on sample data (idle machine)


def _snapshot(*folders: str) -> dict:
    out = {}
    for folder in folders:
        for root, dirs, files in os.walk(folder):
            dirs[:] = [d for d in dirs if d != ".ipynb_checkpoints"]
            for f in files:
                p = os.path.join(root, f)
                st = os.stat(p)
                out[p] = (st.st_size, st.st_mtime_ns)
    return out


def test_notebooks_present():
    assert {"01_fingerprint.ipynb", "02_browse_samples.ipynb", "03_wiring_audit.ipynb",
            "04_dataset_scan.ipynb"} <= set(NOTEBOOKS)


def _committed(name: str):
    """The notebook as committed (``git show HEAD:…``), so running it in JupyterLab and saving does not fail
    the tests; the working-tree file when there is no git checkout or the notebook is not committed yet."""
    import subprocess

    try:
        text = subprocess.run(["git", "show", f"HEAD:notebooks/{name}"], cwd=ROOT, capture_output=True, text=True,
                              check=True, timeout=30).stdout
        return nbformat.reads(text, as_version=4)
    except (OSError, subprocess.SubprocessError):
        return nbformat.read(os.path.join(NB_DIR, name), as_version=4)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_without_outputs(name):
    nb = _committed(name)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{name}: a code cell has outputs"
    assert "widgets" not in nb.metadata, f"{name}: widget state committed"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_paired_with_py_percent(name):
    py = os.path.join(NB_DIR, name[:-len(".ipynb")] + ".py")
    assert os.path.exists(py), f"{name} has no jupytext .py twin"
    a, b = jupytext.read(os.path.join(NB_DIR, name)), jupytext.read(py)
    assert [(c.cell_type, c.source) for c in a.cells] == [(c.cell_type, c.source) for c in b.cells], \
        f"{name} and its .py differ: run `jupytext --sync notebooks/*.py`"
    with open(py) as f:
        assert "format_name: percent" in f.read(2000)


def _text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream":
                parts.append(o["text"])
            elif o.get("output_type") in ("execute_result", "display_data"):
                parts.append(o.get("data", {}).get("text/plain", ""))
                parts.append(o.get("data", {}).get("text/html", ""))
    return "\n".join(parts)


def _images(nb) -> int:
    return sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))


EXPECT = {
    "01_fingerprint.ipynb": [
        "labels (stored order): ['embed', None, None, None]",  # data only: L3/L16/L28 undecided
        "labels (stored order): ['L16', 'embed', 'L28', 'L3']",
        "finding reordered",
        "SYNTHETIC — labels: ['embed', None, None, None]",
        "SYNTHETIC — roles: ['embedding', 'early', 'middle', 'late']",
        "FAIL shifted: corrected [0, 3, 16, 28]",  # the seed's claim [L3, L16, L28, L30] on real data
        "SYNTHETIC — verdict: FAIL — corrected: [0, 3, 31, 59]",
    ],
    "02_browse_samples.ipynb": ["labels: ['embed', 'L3?', 'L16?', 'L28?']", "files: [('data_0.pt', '",
                                "Explorer(data_1.pt: 4 slots", "[('zero_rows', 2, 40, 47)]", "final_post: '"],
    "03_wiring_audit.ipynb": [
        "verdict: fail | wiring: mismatch",
        "fix: nested eagle_config.eagle_aux_hidden_state_layer_ids = [-1, 2, 30]",
        "vllm: AuditResult(fail, wiring mismatch: served ['L2', 'L15', 'L27'] but trained on ['embed', 'L3', 'L16']",
        "sglang: AuditResult(fail, wiring mismatch: served ['L3', 'L16', 'L28'] but trained on ['embed', 'L3', 'L16']",
        "FAIL shifted: the served list ['L3', 'L16', 'L28'] is shifted by one slice",
        "AuditResult(fail, wiring match: every fc slice",  # a matching wiring; a fail finding elsewhere
        "best wiring: embed+L3+L16 | clear winner: True",
    ],
    "04_dataset_scan.ipynb": ["data_5.pt: reordered", "data_6.pt: nonfinite", "data_7.pt: unreadable",
                              "FAIL shifted in 5/5 files; exit code 1",
                              "data_4.pt hidden_states[2]       L16 middle", "[reordered]", "[nonfinite]"],
}
MIN_IMAGES = {"01_fingerprint.ipynb": 8, "02_browse_samples.ipynb": 0, "03_wiring_audit.ipynb": 6,
              "04_dataset_scan.ipynb": 2}


@pytest.mark.notebook
@pytest.mark.skipif(not os.path.isdir(SAMPLE), reason="sample_data not present")
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_executes_top_to_bottom(name, tmp_path, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("HSF_NOTEBOOK_OUT", str(out))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    before = _snapshot(NB_DIR, SAMPLE)
    nb = nbformat.read(os.path.join(NB_DIR, name), as_version=4)
    t = time.perf_counter()
    nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": NB_DIR}}).execute()
    elapsed = time.perf_counter() - t
    print(f"{name}: {elapsed:.1f} s")
    text = _text(nb)
    for needle in EXPECT.get(name, []):
        assert needle in text, f"{name}: expected output {needle!r} not found"
    assert _images(nb) >= MIN_IMAGES.get(name, 0)
    reports = list(out.glob("*_report.html"))
    assert len(reports) == 1 and reports[0].stat().st_size > 10_000, f"{name}: report not written to {out}"
    after = _snapshot(NB_DIR, SAMPLE)  # new files anywhere, or changed notebooks (others may edit sample_data docs)
    assert set(after) == set(before), f"{name} wrote into the repository: {sorted(set(after) - set(before))}"
    assert {p: v for p, v in after.items() if p.startswith(NB_DIR)} == \
        {p: v for p, v in before.items() if p.startswith(NB_DIR)}, f"{name} modified files under notebooks/"
    if name == "01_fingerprint.ipynb":  # the seed's point: depth is not norm order (L59 median < L31 median)
        med = {int(m[0]): float(m[1]) for m in re.findall(r"SYNTHETIC — slot (\d): median ‖x‖ ([\d.]+)", text)}
        assert med[3] < med[2]
    if name == "02_browse_samples.ipynb":  # the explorers' widget state holds their labels and verdicts
        state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
        explorers = [m["state"] for m in state.values()
                     if m["state"].get("_anywidget_id") == "forensics.views.explore.widget.Explorer"]
        assert len(explorers) == 3 and explorers[0]["meta"]["labels"] == ["embed", "L3?", "L16?", "L28?"]
        assert explorers[2]["lens"]["rows"][31]["texts"] == explorers[2]["lens"]["rows"][30]["texts"]
    if os.environ.get("HSF_STRICT_NOTEBOOK_TIME"):
        assert elapsed < NOTEBOOK_BUDGET_S
