# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: -all
#     formats: ipynb,py:percent
#     notebook_metadata_filter: kernelspec,jupytext,-jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Scan a whole dataset
#
# A real training set holds up to 100 000 samples; one mis-wired shard must be found without opening a
# notebook per file. `forensics.scan` checks every file in parallel worker processes (chunked
# statistics and the fingerprint of each file), streams one row per file to a JSON Lines file, and folds
# them into a dataset summary: per-slot norm distributions, the majority depth order and labels, and
# every anomaly with its file.
#
# Here we build a small dataset from the real speculators-v1 samples and plant three problems in it:
# a file whose slots are stored in a different order, a file with NaN values, and a file that is not a
# checkpoint at all.

# %%
import os
import shutil
from pathlib import Path

import torch

from IPython.display import FileLink

import forensics
from forensics.views import plots as hp

ROOT = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "sample_data").is_dir())
SAMPLE = ROOT / "sample_data"
# outputs go to notebooks/out/ (git-ignored, inside the JupyterLab root, so the links below open in Lab)
OUT = Path(os.environ.get("HSF_NOTEBOOK_OUT") or Path.cwd() / "out")
OUT.mkdir(parents=True, exist_ok=True)

# %%
dataset = OUT / "dataset"
shutil.rmtree(dataset, ignore_errors=True)
shutil.copytree(SAMPLE / "speculators_v1", dataset)

good = torch.load(dataset / "data_0.pt", weights_only=True)
reordered = dict(good, hidden_states=[good["hidden_states"][i] for i in (0, 2, 1, 3)])  # L3 and L16 swapped
torch.save(reordered, dataset / "data_5.pt")

with_nan = dict(good, hidden_states=[h.clone() for h in good["hidden_states"]])
with_nan["hidden_states"][2][10:12, :] = float("nan")
torch.save(with_nan, dataset / "data_6.pt")

(dataset / "data_7.pt").write_bytes(b"not a checkpoint: an interrupted copy")
print(sorted(p.name for p in dataset.iterdir()))

# %% [markdown]
# ## Scan it
#
# Two worker processes; the rows go to `scan.jsonl` as they finish (so an interrupted scan can be
# resumed with `resume=True`).

# %%
res = forensics.scan(dataset, workers=2, out=OUT / "scan.jsonl")
print(res)

# %%
res  # summary per format and the anomaly table

# %%
for a in res.anomalies:
    print(f"{os.path.basename(a.file)}: {a.kind} ({a.severity}) — {a.message}")

# %% [markdown]
# ### The seed's claim, dataset-wide
#
# Checked against the served list `[L3, L16, L28, L30]` (`layers=`, as `hsf scan --layers 3,16,28,30`), the
# real SmolLM2 files of `sample_data/speculators_v1` hold the embedding where the claim starts at L3: every
# file is `shifted`, so the scan reports one dataset-wide finding of severity fail (exit code 1), not one
# anomaly per file.

# %%
seed = forensics.scan(SAMPLE / "speculators_v1", workers=0, layers=[3, 16, 28, 30], fingerprint=True)
wide = {d["kind"]: d for d in seed.summary["dataset_findings"]}
print(f"{wide['shifted']['severity'].upper()} shifted in {wide['shifted']['files']}/{wide['shifted']['of']} files;"
      f" exit code {seed.exit_code()}")
assert seed.exit_code() == 1

# %% [markdown]
# ## Query the rows
#
# With `out_format="parquet"` (`hsf scan --format parquet`) the scan writes one typed record per
# file × slot into a folder of Parquet parts, which pandas (or DuckDB, pyarrow) reads as one table.
# Which files have slot 2 with a token-0 norm above 1000 — and which files hold a finding?

# %%
import pandas as pd  # noqa: E402

forensics.scan(dataset, workers=2, out=OUT / "scan.parquet", out_format="parquet", fingerprint=True)
table = pd.read_parquet(OUT / "scan.parquet")
print(table[(table.slot == 2) & (table.token0_norm > 1000)][["path", "slot_name", "r_claimed", "role", "token0_norm"]]
      .assign(path=lambda t: t.path.map(os.path.basename)).to_string(index=False))
print(table[table.error.notna() | table.anomaly_kinds.map(lambda k: k is not None and len(k) > 0)]
      [["path", "slot", "error_kind", "anomaly_kinds"]].assign(path=lambda t: t.path.map(os.path.basename))
      .to_string(index=False))

# %% [markdown]
# ## Dataset-level plots
#
# The distribution of token norms per slot over all files (from the scan's streaming quantile sketches),
# and the median norm of every slot file by file: a reordered file shows as two slot lines swapping
# places at its position; files with anomalies are marked.

# %%
hp.scan_norms(res)

# %%
hp.scan_file_medians(res)

# %% [markdown]
# ## The report
#
# The report embeds the scan's summary and anomaly table next to the per-file evidence.

# %%
report_path = forensics.report([str(dataset / "data_0.pt"), str(dataset / "data_5.pt")], layers=[0, 3, 16, 28],
                               scan=res).save(OUT / "04_dataset_scan_report.html")
print("report written:", report_path)
FileLink(os.path.relpath(report_path), result_html_prefix="open the report: ")
