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
# # 03 · Wiring audit: is the draft served what it was trained on?
#
# An EAGLE-3 draft's `fc` layer reads `cat(h_a, h_b, h_c)`: three hidden states of the target, one per
# input slice. The **trainer** decided which layers those were when it wrote the training data; the
# **serving engine** decides again at inference time, from the draft's config — and SGLang, vLLM,
# speculators and SpecForge number layers differently. `forensics.audit` converts both sides into one
# coordinate, r (0 = embedding output, k = output of block k), and compares them slice by slice.
#
# Two cases: the Kimi-K2.5 incident from its config alone, and the SmolLM2 sample data.

# %%
import json
import os
from pathlib import Path

from IPython.display import FileLink

import forensics
from forensics.views import plots as hp

ROOT = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "sample_data").is_dir())
SAMPLE = ROOT / "sample_data"
# outputs go to notebooks/out/ (git-ignored, inside the JupyterLab root, so the links below open in Lab)
OUT = Path(os.environ.get("HSF_NOTEBOOK_OUT") or Path.cwd() / "out")
OUT.mkdir(parents=True, exist_ok=True)


def write_draft_config(folder: Path, ids: list[int], hidden: int, top_level: bool = False) -> Path:
    """A draft folder holding only an EAGLE-3 config.json with the given aux layer ids (no weights)."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": hidden, "target_hidden_size": hidden,
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True}}
    if top_level:
        cfg["eagle_aux_hidden_state_layer_ids"] = ids
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    return folder


# %% [markdown]
# ## 1. The Kimi-K2.5 case, from configs only
#
# * Training data: speculators v1 files labelled `[embed, L3, L31, L59]`. speculators feeds the fc with
#   all but the last tensor, so the draft was trained on r = `[0, 3, 31]`.
# * Draft config: `eagle_aux_hidden_state_layer_ids = [2, 30, 58]` (the EAGLE-3 default for L = 61).
# * Served by SGLang before sgl-project/sglang#25454, which adds 1 to every id: r = `[3, 31, 59]`.
#
# No tensor is needed for this: the target's `config.json` facts (61 layers, hidden 7168) and the draft's
# config are enough.

# %%
kimi_target = {"architectures": ["KimiK25ForConditionalGeneration"],
               "text_config": {"num_hidden_layers": 61, "hidden_size": 7168, "vocab_size": 163840}}
kimi_draft = write_draft_config(OUT / "kimi-draft", [2, 30, 58], hidden=7168)
kimi = forensics.audit(data=["embed", "L3", "L31", "L59"], draft=kimi_draft, engine="sglang",
                       engine_version="pre-25454", trainer="speculators-v1", target_config=kimi_target)
print(kimi)
kimi

# %%
hp.audit_slices(kimi, title="Kimi-K2.5: fc slices trained vs served (SGLang pre-#25454)")

# %%
print("verdict:", kimi.verdict.value, "| wiring:", kimi.wiring)
print("fix:", kimi.fix.where, kimi.fix.key, "=", kimi.fix.ids)
if kimi.fix.caveat:
    print("caveat:", kimi.fix.caveat)

# %% [markdown]
# Every slice is served one step deeper than it was trained (`embed→L3`, `L3→L31`, `L31→L59`): the
# draft sees states it never saw in training. The fix writes the ids that make SGLang capture r =
# `[0, 3, 31]`. With the fixed config every slice lines up — and the audit *still* does not say
# `match`, for two reasons it shows with evidence: stock SGLang cannot capture the embedding output
# without a patch (the caveat above), and the training target was L59, not the model's last layer
# (a second, independent problem of this data that no layer-id change fixes).

# %%
kimi_fixed = forensics.audit(data=["embed", "L3", "L31", "L59"],
                             draft=write_draft_config(OUT / "kimi-draft-fixed", kimi.fix.ids, hidden=7168),
                             engine="sglang", engine_version="pre-25454", trainer="speculators-v1",
                             target_config=kimi_target)
print("verdict:", kimi_fixed.verdict.value, "| wiring:", kimi_fixed.wiring)
print("slices ok:", [s.ok for s in kimi_fixed.slices])
for f in kimi_fixed.findings:
    print(f"finding {f.kind} ({f.severity}): {f.message}")
hp.audit_slices(kimi_fixed, title="Kimi-K2.5 with the fixed ids: every slice lines up")

# %% [markdown]
# ## 2. The SmolLM2 case, on real captures
#
# The sample data `speculators_v1/` is the same wiring at L = 30: `[embed, L3, L16, L28]`. This time the
# audit reads the capture itself and **fingerprints** it, so the trained side comes from what the
# tensors are, not only from what the sidecar says. The draft config uses the default ids
# `[2, 15, 27]`; we ask what vLLM and what SGLang (pre-#25454) would serve.

# %%
data = SAMPLE / "speculators_v1" / "data_0.pt"
smol_draft = write_draft_config(OUT / "smollm2-draft", [2, 15, 27], hidden=576)
results = {}
for engine, version in (("vllm", None), ("sglang", "pre-25454")):
    results[engine] = forensics.audit(data=data, draft=smol_draft, engine=engine, engine_version=version,
                                      trainer="speculators-v1")
    print(f"{engine}: {results[engine]}")

# %% [markdown]
# SGLang adds 1 to the ids and serves `[L3, L16, L28]` to a draft trained on `[embed, L3, L16]`: the Kimi-K2.5 incident's
# bug, a list shifted by one slot, reported as its own `shifted` finding (FAIL). From the data alone only
# slice 0 is certain (the embedding is measured; L3 and L16 are what the sidecar declares), so the audit
# gives no id list that would rest on them: it says what settles them. With `model="default"` (the packaged
# SmolLM2) every slice is measured and the fix is computed.

# %%
shift = next(f for f in results["sglang"].findings if f.kind == "shifted")
print(f"{shift.severity.value.upper()} {shift.kind}: {shift.message}")
print("slices ok (data only):", [s.ok for s in results["sglang"].slices], "| to settle:", results["sglang"].settle)
assert results["sglang"].wiring == "mismatch" and results["sglang"].exit_code() == 1

# %%
results["vllm"] = forensics.audit(data=data, draft=smol_draft, engine="vllm", trainer="speculators-v1",
                                  model="default")
print("with model='default':", results["vllm"])

# %%
hp.audit_slices(results["vllm"], title="SmolLM2 draft ids [2, 15, 27] served by vLLM")

# %%
hp.audit_slices(results["sglang"], title="SmolLM2 draft ids [2, 15, 27] served by SGLang pre-#25454")

# %%
results["vllm"]  # findings with their evidence, and the fix

# %% [markdown]
# Applying vLLM's fix (top-level key, which vLLM reads) gives a match, measured slice by slice against the
# packaged SmolLM2 (data alone would say CANNOT TELL for the declared L3 and L16):

# %%
fix = results["vllm"].fix
fixed = forensics.audit(data=data, draft=write_draft_config(OUT / "smollm2-draft-fixed", fix.ids, hidden=576,
                                                            top_level=True),
                        engine="vllm", trainer="speculators-v1", model="default")
print(fixed)
hp.audit_slices(fixed, title="SmolLM2 draft with the fixed ids, vLLM")

# %% [markdown]
# ## 3. Ask the draft itself: the probe
#
# Configs and sidecars can lie; the draft's weights cannot. `sample_data/draft_eagle3/` is a tiny EAGLE-3
# draft trained on CPU on SmolLM2's `[embed, L3, L16]` (500 steps, per its `training.json`: weak, but enough to tell wirings
# apart). `forensics.probe` drafts greedy chains of 3 tokens under candidate wirings, as EAGLE-3 serves them
# (step 0 from the target's states, steps 1-2 from the draft's own output), accepts each token while it equals
# the next token, and ranks the wirings by mean acceptance length, next to a one-token-shift and a random-wiring
# control (greyed); the wiring it was trained on should win clearly. This is the Kimi-K2.5 incident's decisive
# experiment as a function (on Kimi-K2.5: 76.9 % fed `cat([embed, L3, L31])` vs 34.1 % fed
# `cat([L3, L31, L59])`).

# %%
pr = forensics.probe(SAMPLE / "draft_eagle3", SAMPLE / "speculators_v1",
                     candidates=[[0, 3, 16], [3, 16, 28], [16, 3, 0]])
print(pr)
print("best wiring:", pr.best.label, "| clear winner:", pr.clear_winner, "| verdict:", pr.verdict.value)
hp.probe_wirings(pr)

# %% [markdown]
# ## 4. The report
#
# The audit verdict, the slice table and the fix appear at the top of the report, above the evidence.

# %%
report_path = forensics.report([str(data)], layers=[0, 3, 16, 28], draft=str(smol_draft), engine="vllm",
                               trainer="speculators-v1").save(OUT / "03_wiring_audit_report.html")
print("report written:", report_path)
FileLink(os.path.relpath(report_path), result_html_prefix="open the report: ")
