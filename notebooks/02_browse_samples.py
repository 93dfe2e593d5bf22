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
# # 02 · Explore the samples
#
# `forensics.explore(x)` shows one capture — or a folder of them — as a **slots × tokens heatmap of log
# norms**: one row per captured slot (labelled `embed`, `L3`, …, coloured by the verdict of what the data
# claims it is: green PASS, red FAIL, purple CANNOT TELL), one column per token (its text on the axis).
#
# * **hover** a cell: the token's text, position and id, and every slot's norm there (answered in the
#   browser, no kernel round trip);
# * **click** it: that token across every slot — its norm, the cosine to the previous slot and to the same
#   token id elsewhere in the sequence (1.0 in an embedding: a lookup), and with `model=` the logit lens;
# * a folder adds a **file list** with each file's verdict; **←/→** move between tokens, **↑/↓** between files,
#   **+/−** zoom around the selected token;
# * **bands** mark the rows a finding names: all-zero or NaN row blocks, sinks (token 0 at ≥ 5× the median),
#   massive activations; **SVG**/**PNG** export the view.
#
# Verdicts come from `forensics.fingerprint`, computed in the background: the heatmap shows first.

# %%
import os
from pathlib import Path

from IPython.display import FileLink

import forensics

ROOT = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "sample_data").is_dir())
SAMPLE = ROOT / "sample_data"
# outputs go to notebooks/out/ (git-ignored, inside the JupyterLab root, so the links below open in Lab)
OUT = Path(os.environ.get("HSF_NOTEBOOK_OUT") or Path.cwd() / "out")
OUT.mkdir(parents=True, exist_ok=True)

# %%
ex = forensics.explore(SAMPLE / "speculators_v1")
ex

# %% [markdown]
# ## The same state from code
#
# The widget shows a typed result, `ExploreState` (`forensics.analysis.explore`): the norms are float32
# per-token norms, `[slots, columns]` (one column per token up to 4096; longer captures are binned, each
# column keeping its largest norm so a sink or a NaN row never averages away).

# %%
ex.wait(120)  # the background fingerprints: the verdicts in the file list and on the y axis
print(ex)
print("files:", [(f["name"], f["verdict"]) for f in ex.files])
st = ex.state()
print("labels:", st.labels, "| verdicts:", st.verdicts)
print("token 3:", repr(st.tokens[3]), "| norms:", [round(float(n), 2) for n in st.norms[:, 3]])
print("cosine to the same id elsewhere, slot embed, token 2:", float(st.cos_same[0, 2]))

# %% [markdown]
# Setting `selected` is what a click does; `file` what the file list does.

# %%
ex.selected = 3
ex.file = 1
print(ex)

# %% [markdown]
# ## A zero-row block
#
# In-memory tensors work too (`[tokens, hidden]` per slot). Here slot 2 of a real capture loses eight rows,
# as a buggy capture hook would write them: the row check names rows 40–47 and the band sits there.

# %%
cap = forensics.load(SAMPLE / "speculators_v1" / "data_1.pt")
broken = [s.tensor().clone() for s in cap.slots]
broken[2][40:48] = 0
zero = forensics.explore(broken)
print([(b.kind, b.slot, b.first, b.last) for b in zero.state().bands if b.kind == "zero_rows"])
zero

# %% [markdown]
# ## The logit lens
#
# With a model, a click also shows what each slot's hidden state predicts as the next token:
# `lm_head(final_norm(h))`, top 5 (the logit lens). On the 32-slot ladder (every r of SmolLM2, plus
# `final_post`) the prediction forms in the last blocks; `L30` and `final_post` give the model's own output.

# %%
lens = forensics.explore(SAMPLE / "ladder" / "capture_0.safetensors", model="default")
lens.selected = 5
lens

# %%
rows = lens.lens["rows"]
labels = lens.state().labels
for i in (0, 16, 28, 30, 31):
    print(f"{labels[i]:>10}: " + "  ".join(f"{t!r} {p:.2f}" for t, p in zip(rows[i]["texts"], rows[i]["probs"])))

# %% [markdown]
# ## The report
#
# The HTML report carries the same explorer, static (the same JavaScript fed the state as embedded JSON:
# hover, click, files and export work without a kernel).

# %%
report_path = forensics.report([str(SAMPLE / "speculators_v1")], layers=[0, 3, 16, 28]).save(
    OUT / "02_browse_report.html")
print("report written:", report_path)
FileLink(os.path.relpath(report_path), result_html_prefix="open the report: ")
