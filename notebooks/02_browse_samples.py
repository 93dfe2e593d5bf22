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
# # 02 · Browse the samples
#
# `SampleBrowser` walks every capture under a folder (any supported format): pick a **sample**, one or
# more **slots** and a **token range**; the panel shows the fingerprint verdict, the slot statistics,
# the norm plots and the token text (the sample data ships SmolLM2's tokenizer, found through
# `capture.json`'s `"tokenizer"` entry).
#
# The token range applies to the norm-by-position plot and the token table (the panel says so); the verdict,
# the slot statistics and the norm distributions always use every token. The slot list shows every slot of the
# sample (all 32 of the ladder), so its default selection is in view.
#
# The controls only re-render when you let go of the slider (`continuous_update=False`). The panel is
# produced by a pure function, `forensics.views.widgets.render_panel`, so what you see here is also what the
# tests check and what the HTML report shows.

# %%
import os
from pathlib import Path

from IPython.display import HTML, FileLink

import forensics
from forensics.views.widgets import SampleBrowser

ROOT = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "sample_data").is_dir())
SAMPLE = ROOT / "sample_data"
# outputs go to notebooks/out/ (git-ignored, inside the JupyterLab root, so the links below open in Lab)
OUT = Path(os.environ.get("HSF_NOTEBOOK_OUT") or Path.cwd() / "out")
OUT.mkdir(parents=True, exist_ok=True)

# %%
browser = SampleBrowser(SAMPLE)
print(len(browser.items), "samples:", [name for name, _ in browser.items])
browser

# %% [markdown]
# ## Driving the browser from code
#
# The controls are ordinary widgets: setting their values re-renders the panel, exactly as clicking
# would. Here: the first speculators-v1 sample, slots `L3` and `L16`, tokens 0–24.

# %%
browser.sample.value = [name for name, _ in browser.items].index("speculators_v1/data_0.pt")
browser.slots.value = (1, 2)
browser.tokens.value = (0, 24)
print(browser)
print("slots shown:", [browser.slots.options[i][0] for i in browser.slots.value])

# %% [markdown]
# A static copy of the current panel (live widgets need a running kernel; this HTML does not):

# %%
HTML(browser.render())

# %% [markdown]
# The 32-slot ladder capture (every r from 0 to 30, plus `final_post`) is a good place to see the
# depth profile: the sink appears at token 0 after the first blocks, and the post-norm slot drops back to
# small, tight norms.

# %%
browser.sample.value = [name for name, _ in browser.items].index("ladder/capture_0.safetensors")
browser.slots.value = (0, 3, 16, 28, 30, 31)
HTML(browser.render())

# %% [markdown]
# ## The report
#
# The HTML report carries a static version of this browser (precomputed panels, a little vanilla JS).

# %%
report_path = forensics.report([str(SAMPLE / "speculators_v1")], layers=[0, 3, 16, 28]).save(
    OUT / "02_browse_report.html")
print("report written:", report_path)
FileLink(os.path.relpath(report_path), result_html_prefix="open the report: ")
