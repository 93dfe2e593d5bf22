"""``hsf conventions [--markdown]``: the registry of what each engine's and trainer's layer ids mean, per drafter
family and version, with the public source of every rule (``--markdown`` prints the table in docs/conventions.md)."""

from __future__ import annotations

from forensics.cli._common import print_json


def add_arguments(p) -> None:
    p.add_argument("--markdown", action="store_true", help="print the Markdown table of docs/conventions.md")


def run(args) -> int:
    from dataclasses import asdict

    from forensics.models.conventions.rules import RULES
    from forensics.views.conventions import markdown, text

    if args.json:
        print_json({"rules": [{**asdict(r), "meaning": r.meaning()} for r in RULES]})
    else:
        if args.markdown:
            print(markdown(RULES))
        else:
            args.console.text(text(RULES, width=args.console.width))
    return 0
