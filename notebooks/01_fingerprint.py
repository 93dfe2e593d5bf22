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
# # 01 · Which captured tensor is which?
#
# An EAGLE-3 draft reads a concatenation of the target model's hidden states from several layers.
# In the incident that started this toolkit, a Kimi-K2.5 draft was **trained** on
# `cat([embed, L3, L31])` but SGLang **served** it `cat([L3, L31, L59])`. Nothing crashed; acceptance
# collapsed. The files themselves never said which tensor was which.
#
# This notebook tells that story on **real** data (SmolLM2-135M, L = 30 blocks, H = 576; the same
# wiring scaled down: `[embed, L3, L16, L28]`), then on a shuffled copy, then on a **synthetic**
# Kimi-shaped sample.
#
# One coordinate throughout, **r**: r = 0 is the embedding output, r = k the output of decoder block k
# (= HF `hidden_states[k]`), r = L the last block before the final norm, `final_post` after it.
# Labels: `embed`, `L3`, …, `final_post`.

# %%
import os
from pathlib import Path

import torch

from IPython.display import FileLink

import forensics
from forensics.layers import r_label
from forensics.views import plots as hp

ROOT = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "sample_data").is_dir())
SAMPLE = ROOT / "sample_data"
# outputs go to notebooks/out/ (git-ignored, inside the JupyterLab root, so the links below open in Lab)
OUT = Path(os.environ.get("HSF_NOTEBOOK_OUT") or Path.cwd() / "out")
OUT.mkdir(parents=True, exist_ok=True)
print("sample data:", SAMPLE)
print("outputs go to:", OUT)

# %% [markdown]
# ## 1. Load a real capture
#
# `forensics.load` detects the format from the content (here speculators' legacy v1 `data_{i}.pt`).
# The sidecars (`data_config.json`, `capture.json`) declare the r of each slot; we will *not* trust them
# blindly: the fingerprint below derives each slot's identity from the numbers.

# %%
path = SAMPLE / "speculators_v1" / "data_0.pt"
cap = forensics.load(path)
print(cap)
print("declared r per slot:", [r_label(r) for r in cap.declared_r])

# %% [markdown]
# ## 2. Per-token norm statistics
#
# One line per slot, lovely-tensors style. Note the **sink**: token 0 of every layer slot has a norm many
# times the median (attention sink / massive activations, Sun et al. 2024), so the robust summaries
# (median, p5–p95, statistics with token 0 left out) describe the tensor better than μ ± σ.

# %%
st = forensics.summarize(cap)
print(st)

# %%
st  # the same statistics as an HTML table

# %%
hp.norm_distributions(st)

# %%
hp.norm_by_position(st, token_range=(0, 60))

# %% [markdown]
# ## 3. Fingerprint: role, depth order and label of every slot
#
# From the data alone: exact duplicate rows for repeated token ids mark the embedding (a table
# lookup), a token-0 sink marks a layer after massive activations emerge, a tight sinkless spread marks a
# late or post-norm state, and the masked angular-distance chain between slots orders them by depth.
# Given the expected layer list, each claim gets a verdict; only evidence labels a slot. Every line of evidence shows its raw value
# and the threshold.

# %%
fp = forensics.fingerprint(cap, layers=[0, 3, 16, 28])
fp

# %%
print("labels (stored order):", fp.labels)
print("depth order (slot indices, shallow → deep):", fp.depth_order)
print("findings:", [f.kind for f in fp.findings] or "none")

# %%
hp.depth_ladder(fp)

# %%
hp.similarity_heatmap(fp)

# %% [markdown]
# ### The Kimi-K2.5 incident's claim: a list shifted by one slot
#
# The same file checked against the list the server was given, `[L3, L16, L28, L30]`: slot 0 is the
# embedding output (repeated token ids give bit-identical rows), so the claim starts one slot too deep.
# Each slot's claim gets a verdict (PASS / FAIL / CANNOT TELL) and the whole list a `shifted` finding
# (FAIL) with the corrected list. Data-only, the layer slots stay CANNOT TELL: `model="default"` settles them.

# %%
fp_seed = forensics.fingerprint(cap, layers=[3, 16, 28, 30])
print("verdict:", fp_seed.verdict.value.upper())
print("per slot:", [(s.claim.label, s.verdict.value) for s in fp_seed.slots])
shifted = next(f for f in fp_seed.findings if f.kind == "shifted")
print(f"{shifted.severity.value.upper()} {shifted.kind}: corrected {shifted.evidence['corrected']}")
assert fp_seed.verdict.value == "fail" and shifted.evidence["corrected"] == [0, 3, 16, 28]

# %% [markdown]
# ## 4. A shuffled file: what the tool says
#
# Here is the same sample with its four slots stored in a different order (`L16, embed, L28, L3`) while
# its `capture.json` still declares `[embed, L3, L16, L28]`: the kind of silent mix-up that breaks a draft.
# The fingerprint does not read the declaration to decide; it finds each slot's depth from the numbers,
# flags the file as **reordered**, and labels every slot.

# %%
perm = [2, 0, 3, 1]  # stored slot j of the shuffled file = slot perm[j] of the original
obj = torch.load(path, weights_only=True)
obj["hidden_states"] = [obj["hidden_states"][i] for i in perm]
shuffled_dir = OUT / "shuffled"
shuffled_dir.mkdir(exist_ok=True)
torch.save(obj, shuffled_dir / "data_0.pt")
(shuffled_dir / "capture.json").write_text((SAMPLE / "speculators_v1" / "capture.json").read_text())

fp_shuffled = forensics.fingerprint(shuffled_dir / "data_0.pt", layers=[0, 3, 16, 28])
print("labels (stored order):", fp_shuffled.labels)
print("truth  (stored order):", [["embed", "L3", "L16", "L28"][i] for i in perm])
for f in fp_shuffled.findings:
    print(f"finding {f.kind}: {f.message}")

# %%
hp.depth_ladder(fp_shuffled)

# %% [markdown]
# The plots label each slot `stored index: fingerprint label (decl. what the file claims)`, so the
# mismatch is visible wherever the slot appears.

# %%
hp.norm_distributions(fp_shuffled)

# %% [markdown]
# ## 5. SYNTHETIC: a Kimi-shaped sample
#
# > **This section uses synthetic data**, generated here in the notebook. It is *not* a Kimi capture.
# > Its per-token norm statistics are tuned to the four tensors of the Kimi-K2.5 incident
# > (the per-token norms printed in that incident: embed 1.04 ± 0.22; L3 37.2 ± 92.0 with token 0 at 3321; L31 174.4 ± 99.4
# > with token 0 at 2599; L59 111.3 ± 7.9 with token 0 at 61.5), made by `forensics.io.synth.kimi_like`
# > with Kimi's 1281 tokens but a hidden size of 1024 instead of 7168, so the notebook stays fast.
#
# The point to notice: **L59's norm (≈ 111) is below L31's (≈ 174)**. Depth is not norm order: in the
# last layers the sink fades (token 0 falls *below* the median) and the spread tightens. The fingerprint
# combines those signals instead of sorting by norm.

# %%
from forensics.io.synth import kimi_like  # noqa: E402

synthetic = kimi_like(seed=0, hidden=1024)  # a SYNTHETIC Capture, in memory only
print(synthetic, "— metadata:", synthetic.meta["generator"], "synthetic =", synthetic.meta["synthetic"])
fp_kimi = forensics.fingerprint(synthetic, layers=[0, 3, 31, 59], num_layers=61)  # Kimi-K2.5: L = 61
print("SYNTHETIC — labels:", fp_kimi.labels)
print("SYNTHETIC — roles:", [s.role for s in fp_kimi.slots])
for s in fp_kimi.stats.slots:
    print(f"SYNTHETIC — slot {s.index}: median ‖x‖ {s.norm.median:.1f}, mean {s.norm.mean:.1f} ± {s.norm.std:.1f}, "
          f"token 0 {s.first:.1f}")

# %% [markdown]
# The incident's own claim on it, `[L3, L31, L59, L61]` (what the server was given), is the same shift:

# %%
fp_kimi_claim = forensics.fingerprint(synthetic, layers=[3, 31, 59, 61], num_layers=61)
kimi_shift = next(f for f in fp_kimi_claim.findings if f.kind == "shifted")
print("SYNTHETIC — verdict:", fp_kimi_claim.verdict.value.upper(), "— corrected:", kimi_shift.evidence["corrected"])
assert kimi_shift.evidence["corrected"] == [0, 3, 31, 59]

# %%
hp.norm_distributions(fp_kimi, title="SYNTHETIC Kimi-shaped sample: per-token norms (L59 < L31)")

# %%
hp.depth_ladder(fp_kimi, title="SYNTHETIC Kimi-shaped sample: depth ladder (L = 61)")

# %% [markdown]
# ## 6. The report
#
# The same results as one offline HTML file (verdicts first, evidence below), written outside the
# repository.

# %%
report_path = forensics.report([str(path), str(shuffled_dir / "data_0.pt")], layers=[0, 3, 16, 28]).save(
    OUT / "01_fingerprint_report.html")
print("report written:", report_path)
FileLink(os.path.relpath(report_path), result_html_prefix="open the report: ")
