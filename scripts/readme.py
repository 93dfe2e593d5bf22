"""Regenerate the docs' generated blocks: the README's from real runs on ``sample_data/``, the finding-kind list
in ``docs/commands.md`` from ``forensics.findings.FindingKind`` (run from the repository root).

    .venv/bin/python scripts/readme.py          # rewrite README.md and docs/commands.md in place
    .venv/bin/python scripts/readme.py --check  # exit 1 if either differs from what the code says now

A block sits between ``<!-- generated: NAME -->`` and ``<!-- end: NAME -->``; ``tests/test_readme.py`` runs the
check, so the docs say what the code prints, not what someone typed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AUDIT_ARGS = ["audit", "--data", "sample_data/speculators_v1", "--draft", "sample_data/draft_eagle3", "--engine",
              "sglang"]
AUDIT_LINES = 10  # the README shows the head of the output: verdict, wiring and the slice table
COLUMNS = 100  # the terminal width the README's block is rendered for


def run_hsf(args: list[str]) -> str:
    """``hsf ARGS`` as a user sees it on a 100-column terminal without colour, paths relative to the repository."""
    hsf = Path(sys.executable).with_name("hsf")
    env = dict(os.environ, COLUMNS=str(COLUMNS), NO_COLOR="1", TERM="dumb", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1")
    out = subprocess.run([str(hsf), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300).stdout
    return out.replace(f"{ROOT}{os.sep}", "")


def blocks() -> dict[str, str]:
    """Each generated block's body, by name."""
    head = run_hsf(AUDIT_ARGS).splitlines()[:AUDIT_LINES]
    audit = "\n".join(["```console", "$ hsf " + " ".join(AUDIT_ARGS), *head, "```"])
    return {"hsf-audit": audit}


def finding_kinds() -> str:
    """The ``finding-kinds`` block of ``docs/commands.md``: every ``FindingKind`` with its one-line meaning."""
    sys.path.insert(0, str(ROOT))
    from forensics.findings import FindingKind

    rows = [f"| `{k.value}` | {k.meaning} |" for k in FindingKind]
    return "\n".join(["| kind | meaning |", "|---|---|", *rows])


def doc_blocks() -> dict[str, str]:
    """``docs/commands.md``'s generated blocks, by name (no command runs: cheap)."""
    return {"finding-kinds": finding_kinds()}


def render(text: str, bodies: dict[str, str], where: str = "README.md") -> str:
    """``text`` with every generated block replaced by its new body."""
    for name, body in bodies.items():
        begin, end = f"<!-- generated: {name} -->", f"<!-- end: {name} -->"
        pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
        if not pattern.search(text):
            raise SystemExit(f"{where}: no block {begin} ... {end}")
        new = f"{begin}\n{body}\n{end}"
        text = pattern.sub(lambda _, new=new: new, text)
    return text


def main() -> int:
    stale = 0
    for name, make in (("README.md", blocks), ("docs/commands.md", doc_blocks)):
        path = ROOT / name
        old = path.read_text(encoding="utf-8")
        new = render(old, make(), name)
        if "--check" in sys.argv[1:]:
            if new != old:
                print(f"{name} is out of date: run python scripts/readme.py", file=sys.stderr)
                stale = 1
            continue
        path.write_text(new, encoding="utf-8")
    return stale


if __name__ == "__main__":
    raise SystemExit(main())
