"""``hsf report PATH… [--layers …] [--model …] [--draft … --engine … --trainer …] -o report.html``."""

from __future__ import annotations

import os

from . import print_json


def add_arguments(p) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="capture files or directories")
    p.add_argument("-o", "--output", default="report.html", metavar="FILE",
                   help="where to write the HTML report (default: report.html)")
    p.add_argument("--layers", "--expect", dest="layers", metavar="LIST",
                   help="expected layers for labels, e.g. 0,3,16,28 or embed,L3,L16,L28")
    p.add_argument("--model", metavar="PATH", help="model (HF folder, safetensors dir or .gguf) for exact mode")
    p.add_argument("--draft", metavar="PATH", help="EAGLE-3 draft folder (config.json [+ model.safetensors])")
    p.add_argument("--engine", metavar="NAME", help="serving engine: sglang | vllm")
    p.add_argument("--engine-version", metavar="V", help="engine version (conventions changed over time)")
    p.add_argument("--trainer", metavar="NAME", help="trainer: speculators-v1 | speculators | specforge")
    p.add_argument("--target-config", metavar="PATH", help="the target model's config.json")
    p.add_argument("--served", metavar="PATH", help="a capture of what the server actually fed the draft")
    p.add_argument("--scan", action="store_true", help="also scan the first PATH as a dataset (hsf scan)")
    p.add_argument("--title", metavar="TEXT", help="report title")


def run(args) -> int:
    from ..report import report

    rep = report(args.paths, layers=args.layers, model=args.model, draft=args.draft, engine=args.engine,
                 engine_version=args.engine_version, trainer=args.trainer, target_config=args.target_config,
                 served=args.served, scan=True if args.scan else None, title=args.title)
    out = rep.save(args.output)
    size = os.path.getsize(out)
    files = rep.context["files"]
    unreadable = sum(1 for f in files if f.error)
    doc = {"output": out, "bytes": size, "files": len(files), "unreadable": unreadable,
           "verdicts": rep.counts, "overall": rep.context["overall"],
           "audit": rep.context.get("audit_verdict"), "command": rep.command()}
    if args.json:
        print_json(doc)
    else:
        c = rep.counts
        print(f"{len(files)} files" + (f" ({unreadable} unreadable)" if unreadable else "") +
              f"; slots: {c.get('fail', 0)} fail, {c.get('warn', 0)} warn, {c.get('pass', 0)} pass, "
              f"{c.get('info', 0)} info" + (f"; audit: {doc['audit']}" if doc["audit"] else ""))
        print(f"report written: {out} ({size / 1e6:.2f} MB)")
    return 2 if unreadable else 0
