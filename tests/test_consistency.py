"""One verdict per result (issue 24): for each input, every command and view states the same decision.

For the wiring audit: the CLI exit code, the JSON's ``outcome`` (pass / fail / cannot tell; ``verdict`` keeps the
audit's own words match / mismatch / cannot-tell), the CLI headline, ``_repr_html_``'s badge, and the report built
on the same inputs (its exit code, its ``verdict()`` and its audit section). Real SmolLM2 states, r known from how
they were captured (``sample_data/README.md``): the training data is ``[0, 3, 16, 30]`` of the ladder text without
a sidecar. The row-corruption and probe cases are added by their owners.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from test_draft_config import make_draft, speculators_config

from forensics import load
from forensics.analysis.audit.core import audit
from forensics.cli import main
from forensics.findings import EXIT_CANNOT_TELL, EXIT_FAIL, EXIT_OK
from forensics.views.audit import HEAD
from forensics.views.report.core import report

SHARED = 24  # tokens the two chat samples share (the system prompt): "other text" starts after them
EXIT = {"pass": EXIT_OK, "fail": EXIT_FAIL, "cannot tell": EXIT_CANNOT_TELL}


@pytest.fixture(scope="module")
def inputs(sample_data, tmp_path_factory):
    t = tmp_path_factory.mktemp("consistency")
    lad = load(sample_data / "ladder" / "capture_0.safetensors")
    by_r = dict(zip(lad.declared_r, lad.slots, strict=True))
    (t / "train").mkdir()
    torch.save({"input_ids": lad.input_ids, "hidden_states": [by_r[r].tensor().clone() for r in (0, 3, 16, 30)],
                "loss_mask": torch.ones_like(lad.input_ids)}, t / "train" / "data_0.pt")
    other = load(sample_data / "speculators_v1" / "data_0.pt")

    def served(name, tensors, ids):
        save_file({"hidden_states": torch.stack(tensors).contiguous(), "token_ids": ids.to(torch.int64).contiguous()},
                  str(t / name))
        return str(t / name)

    target = t / "target.json"
    target.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                  "num_hidden_layers": 30, "hidden_size": 576, "vocab_size": 49152}))
    return {"train": str(t / "train" / "data_0.pt"), "target": str(target),
            "draft": make_draft(t / "draft", speculators_config([0, 3, 16], 576, V=49152, Vd=8192), H=576,
                                V=49152, Vd=8192, weights=False),  # config only: nothing to probe
            "clean": served("clean.safetensors", [by_r[r].tensor() for r in (0, 3, 16)], lad.input_ids),
            "shifted": served("shifted.safetensors", [by_r[r].tensor() for r in (3, 16, 28)], lad.input_ids),
            "cannot_tell": served("other.safetensors", [s.tensor()[SHARED:] for s in other.slots[:3]],
                                  other.input_ids[SHARED:])}


@pytest.mark.parametrize(("case", "decision", "words"), [
    ("clean", "pass", "match"), ("shifted", "fail", "mismatch"), ("cannot_tell", "cannot tell", "cannot-tell")])
def test_audit_says_one_verdict_everywhere(inputs, case, decision, words, capsys):
    args = ["--data", inputs["train"], "--draft", inputs["draft"], "--engine", "vllm", "--target-config",
            inputs["target"], "--served", inputs[case]]
    res = audit(data=inputs["train"], draft=inputs["draft"], engine="vllm", target_config=inputs["target"],
                served=inputs[case])
    assert (res.verdict, res.decision.value, res.exit_code()) == (words, decision, EXIT[decision])
    assert f"hsf-{decision.replace(' ', '-')}" in res._repr_html_()
    code = main(["audit", *args, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert (code, doc["verdict"], doc["outcome"]) == (EXIT[decision], words, decision)
    assert main(["audit", *args]) == code
    assert capsys.readouterr().out.startswith(f"hsf audit: {HEAD[words]}:")
    rep = report([inputs["train"]], draft=inputs["draft"], engine="vllm", target_config=inputs["target"],
                 served=inputs[case])
    assert rep.context["audit_verdict"] == words and rep.context["verdicts"]["audit"]["verdict"] == words
    assert (rep.exit_code(), rep.verdict()) == (EXIT[decision], decision)
