"""``hsf inspect PATH… [--json]``: per-slot norm statistics and the detected format of capture files.

Text mode prints one table per file (shape, dtype, declared r, norm mean/std/median/p5/p95, token 0, last
token, mean without token 0, and flags for sinks, massive activations and NaN/Inf). ``--json`` prints one
``{"verdict": ..., "files": [...]}`` document (``verdict``: pass / fail / cannot tell over the row
findings) whose entries are ``CaptureStats.to_dict()``. An unreadable file is reported
on stderr (and as an ``error`` entry in JSON) and makes the exit code 2; NaN/Inf values are findings, not
errors. Each file's rows are checked (``forensics.analysis.rows``: zero blocks, NaN rows, rows ≠ ids, token
shifts, foreign rows): the findings are listed under the table and in each JSON entry's ``findings``, and a
FAIL among them makes the exit code 1. ``--ids FILE`` gives the token ids of a capture saved without them (one
file), so the row checks can place its rows.
"""

from __future__ import annotations

from forensics.cli._common import add_stamp_argument, for_each_file, ids_of, print_json, verdict_of


def add_arguments(p) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="capture files or directories (searched recursively)")
    p.add_argument("--ids", metavar="FILE", help="token ids of a capture saved without them (one file): a .pt/.npy "
                                                 "tensor or list, or a text file of integers")
    add_stamp_argument(p)


def run(args) -> int:
    from forensics.analysis.rows import check_rows
    from forensics.analysis.stats import summarize
    from forensics.findings import decide, exit_code
    from forensics.io.formats import load_all

    results = {}
    row_findings: dict[int, list] = {}
    ids = ids_of(args)

    def one(path: str) -> list[dict]:
        return [sample(cap) for cap in load_all(path, input_ids=ids)]  # every sample of the file, read once

    def sample(cap) -> dict:
        reader = None
        if args.stamp_check:  # the stamp's checksums ride on the statistics' norm pass
            from forensics.analysis.stamp import StampReader

            reader = StampReader(cap)
        st = summarize(cap, taps=reader.taps if reader is not None and reader.feeds else None)
        entry = st.to_dict()
        # zero blocks, rows ≠ ids, shifts, foreign rows; zero/NaN rows found from the statistics' norms
        found = check_rows(cap, norms=[s.norms for s in st.slots]).findings
        from forensics.analysis.loss_mask import capture_loss_mask_findings

        found = found + capture_loss_mask_findings(cap)  # a stored loss mask against the chat turns
        sc = reader.check() if reader is not None else None  # the file's stamp against the slots just read
        found = found + ([] if sc is None else sc.findings)
        entry["findings"] = [f.to_dict() for f in found]
        entry["verdict"] = decide(found).value
        results[id(entry)] = st
        row_findings[id(entry)] = found
        return entry

    entries, code = for_each_file(args.paths, one, out=args.console, what="inspect")
    code = max(code, exit_code([f for fs in row_findings.values() for f in fs])) if code != 2 else code
    out = args.console
    for e in entries:
        if e["error"]:
            out.error(e["error"])
    if args.json:
        print_json({"verdict": verdict_of(entries), "files": entries})
        return code
    from forensics.views.format import shown_name
    from forensics.views.stats import table

    first = True
    for e in entries:
        if e["error"]:
            continue
        if not first:
            out.text("")
        first = False
        out.text(table(results[id(e)], width=out.width))
        for f in row_findings.get(id(e), []):
            out.text(shown_name(f"  {f.severity.value.upper()} {f.kind}: {f.message}"))
    bad = sum(1 for e in entries if e["error"])
    if bad and len(entries) > 1:
        out.note(f"{bad} of {len(entries)} files unreadable (see above)")
    return code
