"""``hsf inspect PATH… [--json]``: per-slot norm statistics and the detected format of capture files.

Text mode prints one table per file (shape, dtype, declared r, norm mean/std/median/p5/p95, token 0, last
token, mean without token 0, and flags for sinks, massive activations and NaN/Inf). ``--json`` prints one
``{"files": [...]}`` document whose entries are ``CaptureStats.to_dict()``. An unreadable file is reported
on stderr (and as an ``error`` entry in JSON) and makes the exit code 2; NaN/Inf values are findings, not
errors.
"""

from __future__ import annotations

from forensics.cli._common import for_each_file, print_json


def add_arguments(p) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="capture files or directories (searched recursively)")


def run(args) -> int:
    from forensics.analysis.stats import summarize

    results = {}

    def one(path: str) -> dict:
        st = summarize(path)
        entry = st.to_dict()
        results[id(entry)] = st
        return entry

    entries, code = for_each_file(args.paths, one, out=args.console, what="inspect")
    out = args.console
    for e in entries:
        if e["error"]:
            out.error(e["error"])
    if args.json:
        print_json({"files": entries})
        return code
    from forensics.views.stats import table

    first = True
    for e in entries:
        if e["error"]:
            continue
        if not first:
            out.text("")
        first = False
        out.text(table(results[id(e)], width=out.width))
    bad = sum(1 for e in entries if e["error"])
    if bad and len(entries) > 1:
        out.note(f"{bad} of {len(entries)} files unreadable (see above)")
    return code
