"""The README shows real runs: its generated blocks are what the commands print now (``scripts/readme.py``), and
its Python example runs as written."""

from __future__ import annotations

import importlib.util
import re

import pytest


@pytest.fixture(scope="module")
def readme_script(repo_root):
    spec = importlib.util.spec_from_file_location("readme_script", repo_root / "scripts" / "readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_blocks_are_what_the_commands_print(readme_script, repo_root, sample_data):
    text = (repo_root / "README.md").read_text(encoding="utf-8")
    fresh = readme_script.render(text, readme_script.blocks())
    assert fresh == text, "README.md is out of date: run .venv/bin/python scripts/readme.py"


def test_finding_kinds_listed_in_docs(readme_script, repo_root):
    """docs/commands.md lists every FindingKind with its meaning, and nothing else (generated from the enum)."""
    from forensics.findings import FindingKind

    text = (repo_root / "docs" / "commands.md").read_text(encoding="utf-8")
    fresh = readme_script.render(text, readme_script.doc_blocks(), "docs/commands.md")
    assert fresh == text, "docs/commands.md is out of date: run .venv/bin/python scripts/readme.py"
    block = text.split("<!-- generated: finding-kinds -->", 1)[1].split("<!-- end: finding-kinds -->", 1)[0]
    listed = re.findall(r"^\| `([a-zA-Z_]+)` \| (.+) \|$", block, re.M)
    assert [k for k, _ in listed] == [k.value for k in FindingKind]
    assert all(m.strip() for _, m in listed)


def test_python_example_runs(repo_root, sample_data, monkeypatch, capsys):
    text = (repo_root / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(repo_root)
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out.strip(), "the README's Python example prints nothing"
