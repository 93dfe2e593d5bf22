"""``hsf report PATH… [--layers …] [--model …] [--ids FILE|--text FILE] [--draft … --engine … --trainer …]
-o report.html``."""

from __future__ import annotations

import os

from forensics.cli._common import (
    add_engine_arguments,
    add_ids_arguments,
    add_model_arguments,
    add_stamp_argument,
    add_trainer_argument,
    ids_of,
    print_json,
    target_of,
)


def add_arguments(p) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="capture files or directories")
    p.add_argument("-o", "--output", default="report.html", metavar="FILE",
                   help="where to write the HTML report (default: report.html)")
    p.add_argument("--layers", "--expect", dest="layers", metavar="LIST",
                   help="expected layers for labels, e.g. 0,3,16,28 or embed,L3,L16,L28")
    add_model_arguments(p, "model (HF folder, safetensors dir or .gguf) for exact mode ('default' = packaged "
                           "SmolLM2)")
    add_ids_arguments(p)
    p.add_argument("--draft", metavar="PATH", help="EAGLE-3 draft folder (config.json [+ model.safetensors])")
    add_engine_arguments(p)
    add_trainer_argument(p)
    p.add_argument("--target-config", metavar="PATH", help="the target model's config.json")
    p.add_argument("--served", metavar="PATH", help="a capture of what the server actually fed the draft")
    p.add_argument("--scan", action="store_true", help="also scan the first PATH as a dataset (hsf scan)")
    p.add_argument("--title", metavar="TEXT", help="report title")
    add_stamp_argument(p)
    p.add_argument("--fail-on", choices=("warn", "fail"), default="fail",
                   help="exit 1 on a fail (default), or on a warn too; 3 when a claim cannot be decided, 2 when an "
                        "input or a section could not be read")


def check_arguments(args) -> None:
    """Reject a wrong option before the (slow) report is built: one line, exit 2, instead of a report that
    says "all pass" with the failure buried in its Errors section (--draft /nonexistent used to give exit 0)."""
    from forensics.errors import ForensicsError
    from forensics.io.output import check_output
    from forensics.layers import parse_layer_list

    given = [getattr(args, o) for o in ("draft", "served", "target_config", "model", "ids", "text")]
    inputs = [*args.paths, *(p for p in given if p and p != "default")]
    check_output(args.output, inputs)  # before the (slow) report: never over an input, its side files or a folder
    parse_layer_list(args.layers, "--layers")  # (--engine and --engine-version: checked by forensics.cli)
    for opt in ("draft", "served", "target_config", "model"):
        path = getattr(args, opt)
        if path is not None and not (opt == "model" and path == "default") and not os.path.exists(path):
            raise ForensicsError(f"--{opt.replace('_', '-')} {path}: no such file or directory")
    if args.draft is not None:
        from forensics.models.draft_config import read_draft

        read_draft(args.draft)


def run(args) -> int:
    from forensics.analysis.report import report
    from forensics.views.report.core import Report

    check_arguments(args)
    ids = ids_of(args)  # one capture file's tokens (refused with several files or a folder)
    con = args.console
    with con.progress("") as step:

        def tick(stage: str, done: int, total: int) -> None:
            step(stage, done=done, total=total)

        res = report(args.paths, layers=args.layers, model=target_of(args), draft=args.draft, engine=args.engine,
                     engine_version=args.engine_version, trainer=args.trainer, target_config=args.target_config,
                     served=args.served, scan=True if args.scan else None, title=args.title, progress=tick,
                     stamp_check=args.stamp_check, input_ids=ids)
        for opt in ("ids", "text"):  # the regenerating command reads the same tokens
            if getattr(args, opt):
                res.argv += [f"--{opt}", getattr(args, opt)]
        rep = Report.of(res, tick)
        step("writing HTML", done=0, total=None)
        out = rep.save(args.output)
    size = os.path.getsize(out) if args.output != "-" and os.path.isfile(out) else len(rep.html.encode())
    decided = res.to_dict(args.fail_on)
    sentence = rep.context["verdicts"]["sentence"]
    doc = {"verdict": decided["verdict"], "output": out, "bytes": size, "files": decided["files"],
           "unreadable": decided["unreadable"], "verdicts": decided["verdicts"], "overall": decided["overall"],
           "sentence": sentence, "audit": decided["audit"], "command": rep.command(),
           **{k: decided[k] for k in ("audit_fix", "audit_exit_code") if k in decided}}
    if args.json:
        print_json(doc)
    elif args.output != "-":  # with -o - stdout is the HTML itself
        c = res.counts
        from forensics.views.format import shown_name

        con.text(shown_name(sentence or res.overall.upper()))  # it names files: one line whatever their names
        n = doc["files"]
        from forensics.analysis.report import OUTCOMES
        from forensics.findings import UNREADABLE

        # identified: said when some slot is; an unreadable file is said beside the file count
        words = [k for k in OUTCOMES if k in c and k != UNREADABLE and (c[k] or k != "identified")]
        con.text(f"  {n} file{'' if n == 1 else 's'}" + (f" ({doc['unreadable']} unreadable)" if doc["unreadable"]
                                                         else "") +
                 "; slots: " + ", ".join(f"{c[k]} {k}" for k in words) +
                 (f"; audit: {doc['audit']}" if doc["audit"] else ""))
        if res.scan is None and n > 1 and any(os.path.isdir(p) for p in args.paths):
            con.text("  each file was judged on its own; the checks across files (hidden sizes, slot counts, "
                     "outlier norms: hsf scan) were not run: add --scan")
        con.text(f"report written: {args.output} ({size / 1e6:.2f} MB)")  # the path as the user gave it
    for e in res.errors:  # what could not be done is said here too, not only at the bottom of the HTML
        con.error(f"{e.where}: {e.message}")
    for e in res.notes:  # what was done without (token text): said, decides nothing
        con.note(f"note: {e.where}: {e.message}")
    return res.exit_code(args.fail_on)
