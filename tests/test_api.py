"""The Python API takes what a notebook has: transformers' ``output.hidden_states``, lists, stacks and dicts in memory
give the same exact answer as the CLI on the saved file; ``dir(forensics)`` lists the verbs; wrong types are one
clear ``ForensicsError``; ``explain()`` reads as text."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import forensics
from forensics.cli import main
from forensics.errors import ForensicsError
from forensics.layers import FINAL_POST

SEL = [0, 3, 16, 28]


def test_dir_lists_the_verbs_and_import_stays_light():
    names = dir(forensics)
    for verb in ("load", "as_capture", "summarize", "fingerprint", "audit", "probe", "scan", "report", "capture"):
        assert verb in names
    assert "fingerprint" in (forensics.__doc__ or "") and "output.hidden_states" in forensics.__doc__
    code = "import sys, forensics; dir(forensics); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


@pytest.mark.parametrize("bad,match", [(42, "got int"), ([torch.randn(4, 8), "x"], r"\[1\] is str"),
                                       ({"a": "b"}, "no floating-point hidden-state tensors")])
def test_wrong_types_are_one_clear_error(bad, match):
    with pytest.raises(ForensicsError, match=match) as e:
        forensics.fingerprint(bad)
    assert "\n" not in str(e.value) and str(e.value).startswith("<in memory>")


def test_in_memory_layouts_synthetic():
    g = torch.Generator().manual_seed(0)
    hs = [torch.randn(20, 8, generator=g) for _ in range(3)]
    ids = torch.arange(20)
    for obj in (hs, tuple(h[None] for h in hs), torch.stack(hs), {"input_ids": ids, "hidden_states": torch.stack(hs)}):
        cap = forensics.as_capture(obj, input_ids=ids)
        assert cap.format == "in-memory" and len(cap.slots) == 3
        assert all(torch.equal(s.tensor(), h) for s, h in zip(cap.slots, hs, strict=True))
    st = forensics.summarize(torch.stack(hs), input_ids=ids)
    assert len(st.slots) == 3
    assert st.slots[1].norm.n == 20  # every token row counted


def test_explain_reads_as_text():
    g = torch.Generator().manual_seed(1)
    fp = forensics.fingerprint([torch.randn(24, 8, generator=g) for _ in range(2)], input_ids=torch.arange(24))
    ex = fp.explain()
    assert isinstance(ex, str) and repr(ex) == str(ex) and "depth order" in ex  # a REPL shows lines, not '\n'
    assert ex._repr_html_().startswith("<pre>")


@pytest.fixture(scope="module")
def out(smollm2, sample_data):
    model, tok = smollm2
    ids = tok((sample_data / "texts" / "english_lighthouse.txt").read_text(), return_tensors="pt").input_ids[:, :40]
    with torch.no_grad():
        return ids, model(ids, output_hidden_states=True)


def test_list_in_memory_equals_the_cli_on_the_saved_file(out, smollm2, tmp_path, capsys):
    ids, o = out
    pick = [o.hidden_states[i][0] for i in SEL]
    fp = forensics.fingerprint(pick, input_ids=ids, model=smollm2)
    torch.save(pick, tmp_path / "list.pt")
    torch.save(ids, tmp_path / "ids.pt")
    code = main(["fingerprint", str(tmp_path / "list.pt"), "--ids", str(tmp_path / "ids.pt"), "--model", "default",
                 "--json", "-q"])
    doc = json.loads(capsys.readouterr().out)["files"][0]
    assert code == 0
    assert [s.r_exact for s in fp.slots] == [s["r_exact"] for s in doc["slots"]] == SEL
    assert repr(fp).startswith("IDENTIFIED [embed, L3, L16, L28] (exact")


def test_the_whole_transformers_output(out, smollm2):
    ids, o = out
    fp = forensics.fingerprint(o, input_ids=ids, model=smollm2)  # a ModelOutput: its hidden_states tuple
    L = smollm2[0].config.num_hidden_layers
    assert [s.r_exact for s in fp.slots] == [*range(L), FINAL_POST]  # transformers' last entry is post-norm
    fp2 = forensics.fingerprint(o.hidden_states, input_ids=ids[0].tolist(), model=smollm2,
                                layers=[*range(L), "final_post"])
    assert fp2.verdict.value == "pass"


def test_readme_three_lines_save_a_capture_hsf_identifies(smollm2, repo_root, tmp_path, monkeypatch, capsys):
    import re

    text = (repo_root / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Bring your own captures", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    shown = re.search(r"```console\n\$ hsf (.*?)\n(.*?)\n```", section, re.S)
    model, tok = smollm2
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {"torch": torch, "model": model, "tok": tok})
    args = shown.group(1).replace("smollm2-hf", "default").split()
    assert main(args) == 0
    want = shown.group(2).splitlines()  # the headline, wrapped as the README shows it
    assert [x.rstrip() for x in capsys.readouterr().out.splitlines()[:len(want)]] == want


def test_report_takes_tensors_in_memory(tmp_path):
    g = torch.Generator().manual_seed(2)
    hs = [torch.randn(24, 16, generator=g) * (i + 1) for i in range(3)]
    rep = forensics.report(torch.stack(hs), input_ids=torch.arange(24))
    (f,) = rep.context["files"]
    assert f.error is None and f.fp is not None and len(f.fp.slots) == 3
    assert "<in memory>" not in rep.html  # the name is escaped like any other
