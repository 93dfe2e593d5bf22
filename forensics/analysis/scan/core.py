"""Dataset scan: every capture file checked in parallel, rows streamed to disk, anomalies found, resumable.

``scan(DIR)`` lists the capture files (any supported layout), computes one row per file in worker
processes (:mod:`forensics.analysis.scan.rows`: chunked norm statistics, fingerprint fields, a mergeable norm
sketch), appends each row to a JSON Lines file as it finishes (flushed), and folds rows into a dataset
summary (:mod:`forensics.analysis.scan.summary`). ``resume=True`` skips files whose row is already in ``out``
(same path, size and mtime) and gives exactly the summary of an uninterrupted scan.

Example:
    >>> res = scan("sample_data/speculators_v1", workers=2, out="scan.jsonl")   # doctest: +SKIP
    >>> res.anomalies                                                           # doctest: +SKIP
    []
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from forensics.analysis.scan.result import ScanResult
from forensics.analysis.scan.rows import FILE_TIME_BUDGET_S, empty_row, read_rows
from forensics.analysis.scan.sinks import ParquetSink, drop_superseded_lines
from forensics.analysis.scan.sketch import BINS_PER_DECADE, SKETCH_MIN
from forensics.analysis.scan.summary import Aggregator
from forensics.analysis.scan.workers import DASK_MIN_FILES, batches, run_dask, run_inline, run_pool
from forensics.errors import ForensicsError
from forensics.io import validate
from forensics.io.formats import iter_files, split_record
from forensics.io.output import append_line, check_output, lock_output, output_target
from forensics.jsonable import json_safe
from forensics.layers import parse_layer_list

SAMPLE_SEED = 0  # --sample K draws the same K files every time
# Files fingerprinted by default, evenly spread (enough for a majority depth order and labels; every file gets
# the statistics-based checks regardless). A fingerprint costs ~2× its file's statistics since the row-sampled
# distances (1.8–1.97×, ~40 ms CPU per Kimi-sized sample, measured 2026-12-01; it was 0.5–4 s before).
FINGERPRINT_FILES = 64
# The fused bf16 norm kernel (analysis/fastnorms.py, numba) saves ≈ 0.1 ms of CPU a MB of bf16 states; loading it
# (importing numba, the kernel from numba's cache) costs ≈ 1 s once a scan (the fork server's). Below this many bytes
# to read it does not pay back, and the scan keeps torch's kernel.
FUSED_NORMS_MIN_BYTES = 8 << 30


def fused_norms_pay(total_bytes: int) -> bool:
    """Whether a scan reading ``total_bytes`` uses the fused bf16 norm kernel (where numba is installed)."""
    return total_bytes >= FUSED_NORMS_MIN_BYTES

Item = tuple  # (absolute path, size in bytes, mtime in ns[, fingerprint this file?])


def list_files(path: str | os.PathLike | list, sample: int | None = None) -> tuple[list[Item], list[dict]]:
    """The capture files under ``path`` (sorted naturally), with size and mtime; unstat-able files as rows."""
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    files: list[str] = []
    for p in paths:
        # FILE#i (one sample, as the reading commands take it): scan reads whole files, every sample of FILE
        files.extend(os.path.abspath(split_record(f)[0]) for f in iter_files(p))
    files = list(dict.fromkeys(files))  # a file reached through two given paths is scanned once
    if not files:
        raise ForensicsError("no capture files found (expected .pt/.safetensors/.ckpt[.gz] files)", path=str(path))
    if sample is not None and sample < len(files):
        keep = set(random.Random(SAMPLE_SEED).sample(range(len(files)), int(sample)))
        files = [f for i, f in enumerate(files) if i in keep]
    items: list[tuple[str, int | None, int | None]] = []
    bad: list[dict] = []
    for f in files:
        try:
            st = os.stat(f)
            items.append((f, int(st.st_size), int(st.st_mtime_ns)))
        except OSError as e:
            row = empty_row(f, None, None)
            row.update(error=f"{f}: cannot stat: {e.strerror}", error_kind="unreadable")
            bad.append(row)
            items.append((f, None, None))
    return items, bad


def parse_fingerprint_option(value: bool | int | str | None) -> bool | int:
    """``"all"``/True → every file, ``"none"``/False → none, a count N → about N files; None → the default.

    The one reading of ``scan(fingerprint=...)`` and ``hsf scan --fingerprint``.

    >>> parse_fingerprint_option("all"), parse_fingerprint_option("none"), parse_fingerprint_option("8")
    (True, False, 8)
    """
    if value is None:
        return FINGERPRINT_FILES
    if isinstance(value, bool):
        return value
    which = str(value).strip().lower()
    if which == "all":
        return True
    if which == "none":
        return False
    if not validate.ascii_digits(which):
        raise ForensicsError(f"fingerprint takes all, none or a number of files, got {value!r}")
    return int(which)


def fingerprint_choice(n: int, fingerprint: bool | int) -> Callable[[int], bool]:
    """Which file numbers get a fingerprint: all, none, or every ⌈n / N⌉-th (a fixed choice, so a resumed
    scan fingerprints the same files as an uninterrupted one)."""
    if fingerprint is True or (not isinstance(fingerprint, bool) and int(fingerprint) >= n):
        return lambda i: True
    if not fingerprint or int(fingerprint) <= 0:
        return lambda i: False
    stride = -(-n // int(fingerprint))
    return lambda i: i % stride == 0


def scan(path: str | os.PathLike | list, workers: int = 2, out: str | os.PathLike | None = None,
         resume: bool = False, sample: int | None = None, dask: Any = None, *,
         fingerprint: bool | int | str | None = FINGERPRINT_FILES,
         tune_malloc: bool = True, prefetch: bool = False, progress: bool | None = None,
         on_row: Callable[[dict], None] | None = None, out_format: str | None = None,
         file_seconds: float | None = FILE_TIME_BUDGET_S, layers: Any = None, rows: bool = True,
         stamp_check: bool = True) -> ScanResult:
    """Scan every capture file under ``path``; return rows, dataset summary and anomalies.

    Args:
        path: a dataset directory (any supported layout), a file, or a list of them.
        workers: worker processes (0: in this process). With ``dask``: workers of a local cluster.
        out: JSON Lines file; one row per file is appended and flushed as each file finishes.
        resume: keep the rows already in ``out`` (same path, size, mtime) and scan only the rest.
        sample: scan K files drawn at random (seed ``SAMPLE_SEED``, so the same K every time).
        dask: ``"local"`` (LocalCluster), a scheduler address ``"tcp://host:8786"`` or a ``Client``.
        fingerprint: :func:`forensics.fingerprint` about N files evenly spread over the listing (an int,
            default ``FINGERPRINT_FILES``), every file (True or ``"all"``) or none (False or ``"none"``). Every
            file gets the statistics-based checks (NaN/Inf, duplicates, norm-rank order, outlier norms) either way.
        tune_malloc: set glibc mmap/trim thresholds in workers (fewer page faults on re-used buffers).
        prefetch: ``posix_fadvise(WILLNEED)`` the files of queued tasks. Off: on this project's VM disk, cold
            scans of 16 Kimi-sized files measured 0.48–0.67 GB/s with it and 0.52–0.90 GB/s without.
        progress: tqdm bar on stderr (files/s, GB/s); default: when stderr is a terminal.
        on_row: called with each new row (without its sketch) as it is written.
        out_format: ``"jsonl"`` (one JSON row per file) or ``"parquet"`` (a folder of Parquet parts, one typed
            record per file × slot: :mod:`forensics.analysis.scan.sinks`); default: parquet when ``out`` ends
            in ``.parquet`` (or, resuming, is a folder), else jsonl.
        file_seconds: time budget per file (default ``FILE_TIME_BUDGET_S``); a file that takes longer becomes
            an error row (None: no budget). Not applied on Dask workers (signals reach only main threads).
        layers: the claimed r per slot (``"3,16,28,30"``) checked in every fingerprinted file, as ``hsf
            fingerprint --layers`` does; default: each file's own claims (sidecar, format).
        rows: run the row checks (:func:`forensics.analysis.rows.check_rows`: zero rows, rows ≠ ids, token
            shifts, foreign rows) on every file (default); False only to measure what they cost.
        stamp_check: check each stamped file's stamp (``hsf stamp``) against the values its row reads (default);
            a file changed since stamping is a ``stamp_drift`` anomaly (FAIL).
    """
    t_start = time.perf_counter()
    validate.count(sample, "sample", none=True)
    validate.count(workers, "workers", lo=0, hi=1024)
    if file_seconds is not None and (isinstance(file_seconds, bool) or not isinstance(file_seconds, (int, float))
                                     or not file_seconds > 0):
        raise ForensicsError(f"file_seconds must be a number of seconds > 0, got {file_seconds!r}")
    fingerprint = parse_fingerprint_option(fingerprint)
    if layers is not None:
        layers = parse_layer_list(layers, "--layers")  # bad input fails here, before any worker starts
    out = os.fspath(out) if out is not None else None
    if resume and out is None:
        raise ForensicsError("resume needs the output file of the interrupted scan (out=... / -o FILE)")
    fmt = out_format or ("parquet" if out is not None and (out.endswith(".parquet") or (resume and os.path.isdir(out)))
                         else "jsonl")
    if fmt not in ("jsonl", "parquet"):
        raise ForensicsError(f"scan output format must be jsonl or parquet, got {fmt!r}")
    given = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    if out is not None:  # before any work: never an input, a capture or (for JSON Lines) a directory
        check_output(out, given, directory=fmt == "parquet")
    items, bad = list_files(path, sample)
    with ExitStack() as stack:
        sink = None
        if out is not None and fmt == "parquet":  # the folder is locked; its sink is opened in _scan
            stack.enter_context(lock_output(out, truncate=False, directory=True))
        elif out is not None:
            sink = stack.enter_context(lock_output(out, truncate=not resume))
        stack.enter_context(_sigterm_as_interrupt())
        return _scan(path, items, bad, out, sink, resume, workers, dask, fingerprint, fmt,
                     {"tune_malloc": tune_malloc, "prefetch": prefetch, "file_seconds": file_seconds,
                      "layers": layers, "rows": rows, "stamp_check": stamp_check},
                     progress, on_row, t_start)


def _scan(path: Any, items: list[Item], bad: list[dict], out: str | None, sink: Any, resume: bool,  # noqa: C901
          workers: int,
          dask: Any, fingerprint: bool | int, fmt: str, opts: dict, progress: bool | None,
          on_row: Callable[[dict], None] | None, t_start: float) -> ScanResult:
    number = {it[0]: i for i, it in enumerate(items)}
    agg = Aggregator([it[0] for it in items])
    # rows are read back from a regular -o at the end; written through a pipe or a device, they are kept here
    held: dict[int, dict] | None = {} if out is None or (fmt == "jsonl" and output_target(out)[0] == "through") \
        else None
    done: set[int] = set()

    def fold(no: int, row: dict) -> None:
        agg.add(no, row)
        done.add(no)
        if held is not None:
            held[no] = _public(row)

    resumed = 0
    if resume:
        wanted = {(p, s, m): i for i, (p, s, m) in enumerate(items)}
        last: dict[int, dict] = {}
        for row in read_rows(out) if out else ():
            no = wanted.get((row.get("path"), row.get("size"), row.get("mtime_ns")))
            if no is not None and _resumable(row):
                last[no] = row
        for no, row in sorted(last.items()):
            fold(no, row)
        resumed = len(last)
    chosen = fingerprint_choice(len(items), fingerprint)
    todo = [(*it, chosen(i)) for i, it in enumerate(items) if i not in done and it[1] is not None]
    opts.setdefault("fused_norms", fused_norms_pay(sum(it[1] for it in todo)))
    if os.environ.get("HSF_SCAN_TEST_DIE_ON"):  # test hook: simulate a worker being killed
        opts["_test_die_on"] = os.environ["HSF_SCAN_TEST_DIE_ON"]
    if os.environ.get("HSF_SCAN_TEST_SLEEP_ON"):  # test hook: a file that takes forever
        opts["_test_sleep_on"] = os.environ["HSF_SCAN_TEST_SLEEP_ON"]
    if fmt == "parquet" and out is not None:
        sink = ParquetSink(out, resume)
    elif out is not None and sink is not None and resume:
        _end_torn_line(out, sink)
    bar: Any = None  # drawn from the first file done: the pool's start-up (workers importing torch) is not in it
    t_work, new_bytes, t_bar, bar_bytes = time.perf_counter(), 0, 0.0, 0
    if dask is not None:
        runner = run_dask(batches(todo, DASK_MIN_FILES), opts, workers, dask)
    elif workers <= 0:
        runner = run_inline(batches(todo), opts)
    else:
        runner = run_pool(batches(todo), opts, workers)
    try:
        for row in bad:
            if number[row["path"]] not in done:
                _write(sink, row, out)
                fold(number[row["path"]], row)
        for rows in runner:
            for row in rows:
                _write(sink, row, out)
                fold(number[row["path"]], row)
                new_bytes += row.get("size") or 0
                if bar is None:  # the first file done: the bar starts here, or never (False: no terminal)
                    bar = _progress(len(items), len(done) - 1, progress) or False
                    t_bar, bar_bytes = time.perf_counter(), new_bytes
                if bar is not None and bar is not False:
                    dt = time.perf_counter() - t_bar
                    rate = (new_bytes - bar_bytes) / dt if dt > 0 else 0.0
                    if rate:
                        bar.set_postfix_str(f"{rate / 1e9:.2f} GB/s" if rate >= 1e8 else f"{rate / 1e6:.1f} MB/s",
                                            refresh=False)
                    bar.update(1)
                if on_row is not None:
                    on_row(_public(row))
        if resume and fmt == "jsonl" and out is not None and held is None and sink is not None:  # under the lock
            sink.flush()
            drop_superseded_lines(out)
    finally:
        runner.close()  # shuts the pool / cluster down at once, however the loop ended
        if sink is not None:
            sink.close()  # a JSON Lines sink is closed again by its lock, harmlessly
        if bar is not None and bar is not False:
            bar.close()
    summary, anomalies = agg.finish()
    wall, work = time.perf_counter() - t_start, time.perf_counter() - t_work
    timing = {"wall_s": round(wall, 4), "work_s": round(work, 4), "scanned_files": len(done) - resumed,
              "resumed_files": resumed, "scanned_bytes": new_bytes,
              "gb_per_s": round(new_bytes / work / 1e9, 4) if work > 0 else None,
              "files_per_s": round((len(done) - resumed) / work, 3) if work > 0 else None,
              "workers": workers, "dask": None if dask is None else str(dask)}
    shown = ", ".join(map(str, path)) if isinstance(path, (list, tuple)) else str(path)
    return ScanResult(path=shown, summary=summary, anomalies=anomalies, timing=timing, out=out,
                      _rows=None if held is None else [held[i] for i in sorted(held)],
                      _keys=[(it[0], it[1], it[2]) for it in items])


def _resumable(row: dict) -> bool:
    """A row from an earlier scan can be kept: one whose sketches this version can merge. Error rows are
    never kept: a failure may be transient (permission fixed with chmod, which leaves mtime alone; a worker
    killed for memory or time), so the file is read again, as an uninterrupted scan would."""
    if row.get("error"):
        return False
    sk, slots = row.get("sketch"), row.get("slots")
    if not isinstance(sk, list) or not isinstance(slots, list) or len(sk) != len(slots) or not slots:
        return False
    try:
        return all(s["hist"]["bins_per_decade"] == BINS_PER_DECADE and s["hist"]["sketch_min"] == SKETCH_MIN
                   and {"n", "s1", "s2"} <= set(s) for s in sk) and all("norm_rank" in x for x in slots)
    except (KeyError, TypeError):
        return False


def _public(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "sketch"}


def _end_torn_line(out: str, sink) -> None:
    """Start a fresh line when a killed scan left a torn one (the torn line is skipped on reading)."""
    if os.path.getsize(out) > 0:
        with open(out, "rb") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                sink.write("\n")


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, CI cancelling a job) stops a scan as Ctrl-C does: the pool is shut down, the rows so
    far stay in ``out`` and the caller hears of it (KeyboardInterrupt). Only in the main thread, where
    Python delivers signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _write(sink, row: dict, out: str | None = None) -> None:
    if isinstance(sink, ParquetSink):
        sink.write(json_safe(row))
    elif sink is not None:
        try:
            line = json.dumps(row, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError):  # a numpy scalar or a NaN from some field: make it plain JSON
            line = json.dumps(json_safe(row), allow_nan=False, separators=(",", ":"))
        append_line(sink, out or "-o", line)


def _progress(total: int, initial: int, enabled: bool | None):
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="file", file=sys.stderr, dynamic_ncols=True, smoothing=0.1)


__all__ = ["scan", "ScanResult", "list_files", "read_rows", "fingerprint_choice"]
