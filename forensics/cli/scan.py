"""``hsf scan DIR [--workers N] [--dask ADDRESS | --dask-local] [-o OUT] [--resume] [--sample K] [--json]``.

Exit codes (``forensics.findings``): 0 no fail; 1 an anomaly or a dataset-wide finding of severity fail; 2
unreadable files or bad arguments; 3 a claim no fingerprinted file could decide (data-only layer claims).
"""

from __future__ import annotations

from forensics.cli._common import add_stamp_argument, print_json


def add_arguments(p) -> None:
    p.add_argument("paths", nargs="+", metavar="DIR", help="dataset directories (or capture files)")
    p.add_argument("--layers", "--expect", dest="layers", metavar="LIST",
                   help="claimed r per slot checked in every fingerprinted file, e.g. 3,16,28,30 (default: each "
                        "file's own sidecar and format)")
    p.add_argument("--workers", "-j", type=int, default=2, metavar="N",
                   help="worker processes (default 2; 0 = in this process)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--dask", metavar="ADDRESS", help="Dask scheduler, e.g. tcp://host:8786 (files must be at "
                                                     "the same paths on every worker)")
    g.add_argument("--dask-local", action="store_true", help="run on a local Dask cluster of N worker processes")
    p.add_argument("-o", "--out", metavar="OUT", help="JSON Lines file (one row per file, appended as it finishes) "
                   "or, with --format parquet, a folder of Parquet parts (one typed record per file × slot)")
    p.add_argument("--format", dest="out_format", choices=("jsonl", "parquet"), default=None,
                   help="format of OUT (default: parquet when OUT ends in .parquet, else jsonl)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted scan from OUT (needs -o)")
    p.add_argument("--sample", type=int, metavar="K", help="scan K randomly drawn files (same K every time)")
    p.add_argument("--fingerprint", default=None, metavar="N|all|none",
                   help="fingerprint about N files spread over the dataset (default 64; a fingerprint costs about "
                        "twice a file's statistics), all, or none; every file gets the statistics, "
                        "norm-rank order and outlier checks either way")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--file-timeout", type=float, default=None, metavar="SECONDS",
                   help="time budget per file (default 300); a file that takes longer becomes an error row")
    add_stamp_argument(p)


def run(args) -> int:
    from forensics.analysis.scan.core import scan
    from forensics.errors import ForensicsError

    if args.resume and not args.out:
        raise ForensicsError("--resume needs -o OUT (the output file of the interrupted scan)")
    if args.sample is not None and args.sample < 1:
        raise ForensicsError(f"--sample must be ≥ 1, got {args.sample}")
    if args.file_timeout is not None and not args.file_timeout > 0:
        raise ForensicsError(f"--file-timeout must be > 0 seconds, got {args.file_timeout}")
    dask = "local" if args.dask_local else args.dask
    try:
        budget = {} if args.file_timeout is None else {"file_seconds": args.file_timeout}
        res = scan(args.paths if len(args.paths) > 1 else args.paths[0], workers=args.workers, out=args.out,
                   **budget,
                   resume=args.resume, sample=args.sample, dask=dask, fingerprint=args.fingerprint,
                   progress=False if (args.no_progress or args.json or args.quiet) else None,
                   out_format=args.out_format, layers=args.layers, stamp_check=args.stamp_check)
    except KeyboardInterrupt:
        if args.out:  # the one line (re-raised, the command's own "interrupted" followed it: two lines)
            args.console.error(f"interrupted; rows so far are in {args.out}: continue with --resume")
            return 130
        raise
    if args.json:
        print_json(res.to_dict())
    else:
        from forensics.views.scan import text

        args.console.text(text(res, width=args.console.width) + (f"\nrows: {args.out}" if args.out else ""))
    return res.exit_code()
