"""One verdict per result (issue 24): for each input, every command and view states the same decision.

Every command's JSON has a top-level ``verdict`` in one vocabulary (pass / fail / cannot tell), the result's
``.verdict``. For the wiring audit: the CLI exit code, the JSON's ``verdict`` (``wiring`` keeps the audit's own
words match / mismatch / cannot-tell), the CLI headline, ``_repr_html_``'s badge, and the report built on the
same inputs (its exit code, its ``verdict()`` and its audit section). For the fingerprint (a clean capture with
the model, a shifted layer list, a zero block of rows, an undecided claim) the same, plus ``hsf inspect`` /
``hsf scan`` on the row-corrupted file. Real SmolLM2 states, r known from how
they were captured (``sample_data/README.md``): the training data is ``[0, 3, 16, 30]`` of the ladder text without
a sidecar. The row-corruption and probe cases are added by their owners.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from test_draft_config import make_draft, speculators_config

from forensics import fingerprint, load
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
    assert (res.wiring, res.verdict.value, res.decision, res.exit_code()) == (words, decision, decision, EXIT[decision])
    assert f"hsf-{decision.replace(' ', '-')}" in res._repr_html_() and repr(res).startswith(f"AuditResult({decision}")
    code = main(["audit", *args, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert (code, doc["verdict"], doc["wiring"]) == (EXIT[decision], decision, words)
    assert main(["audit", *args]) == code
    assert capsys.readouterr().out.startswith(f"hsf audit: {decision.upper()} (wiring {HEAD[words]}):")
    rep = report([inputs["train"]], draft=inputs["draft"], engine="vllm", target_config=inputs["target"],
                 served=inputs[case])
    assert rep.context["audit_verdict"] == words and rep.context["verdicts"]["audit"]["wiring"] == words
    assert (rep.exit_code(), rep.verdict()) == (EXIT[decision], decision)


def _zero_block(src: str, dst, slot: int, rows: slice) -> str:
    """A copy of the torch.save capture ``src`` with ``rows`` of ``slot`` set to zero (a lost write)."""
    d = torch.load(src, weights_only=True)
    d["hidden_states"][slot][rows] = 0
    torch.save(d, dst)
    return str(dst)


def _fingerprint_everywhere(path: str, layers: str | None, model: str | None, capsys) -> tuple[str, int]:
    """The verdict and exit code of one capture as the library, ``_repr_html_``, the CLI (JSON and text) and the
    report state them; asserts they agree and returns them."""
    flags = (["--layers", layers] if layers else []) + (["--model", model] if model else [])
    fp = fingerprint(path, layers=[int(x) for x in layers.split(",")] if layers else None, model=model)
    v = fp.verdict.value
    assert f"hsf-{v.replace(' ', '-')}" in fp._repr_html_()
    code = main(["fingerprint", path, *flags, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert (doc["verdict"], doc["files"][0]["verdict"], code) == (v, v, EXIT[v])
    assert main(["fingerprint", path, *flags]) == code
    assert capsys.readouterr().out.startswith(v.upper())
    rep = report([path], layers=[int(x) for x in layers.split(",")] if layers else None, model=model)
    assert (rep.verdict(), rep.exit_code()) == (v, code)
    return v, code


@pytest.mark.parametrize(("case", "layers", "want"), [
    ("shifted", "3,16,28,30", "fail"),  # slot 0 is the embedding (measured): a list shifted by one slot
    ("zero_rows", "0,3,16,30", "fail"),  # the true list, but 8 rows of slot 2 never written
    ("cannot_tell", "0,3,16,30", "cannot tell")])  # the true list: from data alone L3..L30 are not decided
def test_fingerprint_says_one_verdict_everywhere(inputs, tmp_path, case, layers, want, capsys):
    path = inputs["train"] if case != "zero_rows" else _zero_block(inputs["train"], tmp_path / "z.pt", 2,
                                                                    slice(40, 48))
    assert _fingerprint_everywhere(path, layers, None, capsys) == (want, EXIT[want])
    if case == "zero_rows":
        fp = fingerprint(path, layers=[0, 3, 16, 30])
        assert [(f.kind, f.slots) for f in fp.findings if f.kind == "zero_rows"] == [("zero_rows", [2])]
        code = main(["inspect", path, "--json"])
        doc = json.loads(capsys.readouterr().out)
        assert (code, doc["verdict"], doc["files"][0]["verdict"]) == (EXIT_FAIL, "fail", "fail")
        code = main(["scan", str(tmp_path), "--json", "-o", str(tmp_path / "scan.jsonl")])
        doc = json.loads(capsys.readouterr().out)
        assert (code, doc["verdict"]) == (EXIT_FAIL, "fail")
        from forensics.analysis.scan.core import scan

        res = scan(str(tmp_path))
        assert (res.verdict.value, res.exit_code()) == ("fail", EXIT_FAIL) and "hsf-fail" in res._repr_html_()
        assert repr(res).startswith("FAIL: scan of")


@pytest.mark.model
def test_fingerprint_clean_with_the_model_passes_everywhere(sample_data, capsys):
    # sample_data/speculators_v1 declares r = [0, 3, 16, 28] in its sidecar, as captured: exact mode proves it
    path = str(sample_data / "speculators_v1" / "data_0.pt")
    assert _fingerprint_everywhere(path, None, "default", capsys) == ("pass", EXIT_OK)
