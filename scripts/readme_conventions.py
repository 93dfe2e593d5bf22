"""Rewrite the generated conventions table of docs/conventions.md from the registry (``hsf conventions --markdown``).

Usage::

    .venv/bin/python scripts/readme_conventions.py [docs/conventions.md]
"""

from __future__ import annotations

import pathlib
import sys

from forensics.models.conventions.rules import RULES
from forensics.views.conventions import MARKDOWN_BEGIN, MARKDOWN_END, markdown


def main(path: str = "docs/conventions.md") -> int:
    p = pathlib.Path(path)
    text = p.read_text()
    if MARKDOWN_BEGIN not in text or MARKDOWN_END not in text:
        print(f"{path}: no generated-table markers", file=sys.stderr)
        return 2
    head, rest = text.split(MARKDOWN_BEGIN, 1)
    tail = rest.split(MARKDOWN_END, 1)[1]
    new = head + markdown(RULES) + tail
    if new != text:
        p.write_text(new)
        print(f"{path}: conventions table updated")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
