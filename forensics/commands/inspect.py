"""``hsf inspect PATH… [--json]``: per-slot statistics and the detected format."""

from __future__ import annotations

from . import for_each_file, print_json


def add_arguments(p) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="capture files or directories")


def run(args) -> int:
    from ..stats import summarize

    results = {}

    def one(path: str) -> dict:
        st = summarize(path)
        results[st.path] = st
        return st.to_dict()

    entries, code = for_each_file(args.paths, one)
    if args.json:
        print_json({"files": entries})
        return code
    for e in entries:
        if e["error"]:
            print(f"ERROR {e['error']}")
        else:
            print(repr(results[e["path"]]) if e["path"] in results else e["path"])
            for note in e.get("notes") or []:
                print(f"  note: {note}")
            if e.get("layout"):
                print(f"  layout: {e['layout']}")
        print()
    return code
