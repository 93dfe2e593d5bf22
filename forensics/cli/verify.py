"""``hsf verify DATASET``: check every capture file's values against its stamp (``hsf stamp``) and name each slot
that drifted: swapped with another stamped slot, or holding values no stamped slot had (another layer).

Reads every byte once (a position-dependent per-slot checksum at memory speed). Every readable file gets its
verdict even when another is broken (that file is a FAIL row). Exit codes: 0 every file matches its stamp; 1 a
file drifted, its slots changed shape, its stamp names another file (a copy), its stamp is malformed or it cannot
be read; 2 no capture files or bad arguments; 3 some files are not stamped (cannot tell).
"""

from __future__ import annotations

from forensics.cli._common import print_json

EXIT = {"pass": 0, "fail": 1, "cannot-tell": 3}


def add_arguments(p) -> None:
    p.add_argument("dataset", metavar="DATASET", help="a capture file or a folder (searched recursively)")


def run(args) -> int:
    from forensics.analysis.stamp import verify
    from forensics.views.stamp import verify_text

    res = verify(args.dataset)
    if args.json:
        print_json(res.to_dict())
    else:
        args.console.text(verify_text(res))
    return EXIT[res.verdict]
