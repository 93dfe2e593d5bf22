"""Dataset scan: every capture file checked in parallel, rows streamed to disk, anomalies found, resumable.

``scan(DIR)`` lists the capture files (any supported layout), computes one row per file in worker
processes (:mod:`forensics.scan_rows`: chunked norm statistics, fingerprint fields, a mergeable norm
sketch), appends each row to a JSON Lines file as it finishes (flushed), and folds rows into a dataset
summary (:mod:`forensics.scan_summary`). ``resume=True`` skips files whose row is already in ``out``
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
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .errors import ForensicsError
from .scan_rows import empty_row, init_worker, json_safe, scan_batch
from .scan_summary import Aggregator

BATCH_BYTES = 64 * 1000 * 1000  # small files are grouped into one task up to this many bytes ...
BATCH_MAX_FILES = 64  # ... or this many files (a task costs ~1–2 ms of dispatch: ecosystem.md §6.8)
INFLIGHT_PER_WORKER = 4  # tasks queued per worker (bounded, so a 100 000-file listing is not all queued)
SAMPLE_SEED = 0  # --sample K draws the same K files every time
# Files fingerprinted by default, evenly spread: a fingerprint costs ~4 s and ~0.7 GB per Kimi-sized sample
# (measured 2026-11-30), the statistics ~0.05 s; every file gets the statistics-based checks regardless.
FINGERPRINT_FILES = 64
MAX_HTML_ANOMALIES = 200

Item = tuple  # (absolute path, size in bytes, mtime in ns[, fingerprint this file?])


def list_files(path: str | os.PathLike | list, sample: int | None = None) -> tuple[list[Item], list[dict]]:
    """The capture files under ``path`` (sorted naturally), with size and mtime; unstat-able files as rows."""
    from .formats import iter_files

    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    files: list[str] = []
    for p in paths:
        files.extend(os.path.abspath(f) for f in iter_files(p))
    files = list(dict.fromkeys(files))  # a file reached through two given paths is scanned once
    if not files:
        raise ForensicsError("no capture files found (expected .pt/.safetensors/.ckpt[.gz] files)", path=str(path))
    if sample is not None and sample < len(files):
        keep = set(random.Random(SAMPLE_SEED).sample(range(len(files)), int(sample)))
        files = [f for i, f in enumerate(files) if i in keep]
    items, bad = [], []
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


def fingerprint_choice(n: int, fingerprint: bool | int) -> Callable[[int], bool]:
    """Which file numbers get a fingerprint: all, none, or every ⌈n / N⌉-th (a fixed choice, so a resumed
    scan fingerprints the same files as an uninterrupted one)."""
    if fingerprint is True or (not isinstance(fingerprint, bool) and int(fingerprint) >= n):
        return lambda i: True
    if not fingerprint or int(fingerprint) <= 0:
        return lambda i: False
    stride = -(-n // int(fingerprint))
    return lambda i: i % stride == 0


def read_rows(out: str) -> Iterator[dict]:
    """Rows of a scan's JSON Lines file; a torn last line (killed mid-write) is skipped."""
    if not os.path.exists(out):
        return
    with open(out, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and "path" in row:
                yield row


def _batches(items: list[Item]) -> list[list[Item]]:
    out, cur, size = [], [], 0
    for it in items:
        if cur and (size + it[1] > BATCH_BYTES or len(cur) >= BATCH_MAX_FILES):
            out.append(cur)
            cur, size = [], 0
        cur.append(it)
        size += it[1]
    if cur:
        out.append(cur)
    return out


def _prefetch(batch: list[Item]) -> None:
    """Ask the kernel to start reading a queued batch's files into the page cache now
    (``POSIX_FADV_WILLNEED``), so a cold dataset's disk reads overlap the work on earlier files."""
    if not hasattr(os, "posix_fadvise"):
        return
    for it in batch:
        try:
            fd = os.open(it[0], os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass
        finally:
            os.close(fd)


@contextmanager
def _main_not_reimported() -> Iterator[None]:
    """Start workers without re-running the caller's ``__main__`` in them.

    Fork-server and spawn workers normally re-import the parent's main script (to unpickle functions
    defined there), which re-runs an unguarded top-level ``scan(...)`` in every worker: each then dies
    with "An attempt has been made to start a new process before ... bootstrapping". Workers here only
    run :func:`forensics.scan_rows.scan_batch`, so the script is hidden from multiprocessing while
    workers start (``__main__.__file__``/``__spec__``, restored at once)."""
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    try:
        if main is not None:
            main.__dict__.pop("__file__", None)
            main.__dict__["__spec__"] = None
        yield
    finally:
        if main is not None:
            main.__dict__.pop("__spec__", None)
            main.__dict__.update(saved)


def _run_inline(batches: list[list[Item]], opts: dict) -> Iterator[list[dict]]:
    for b in batches:
        yield scan_batch(b, opts)


def _run_pool(batches: list[list[Item]], opts: dict, workers: int) -> Iterator[list[dict]]:
    """Process pool with a bounded queue; a worker that dies costs only the files it was reading."""
    import multiprocessing as mp
    from collections import deque
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    ctx = mp.get_context("forkserver")
    # torch and the readers are imported once in the fork server, not once per worker
    ctx.set_forkserver_preload(["torch", "forensics.scan_rows", "forensics.formats", "forensics.stats",
                                "forensics.fingerprint"])  # a module that fails to import is skipped
    pending, quarantine = deque(batches), deque()
    while pending or quarantine:
        ex = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=init_worker,
                                 initargs=(opts.get("tune_malloc", True),))
        inflight: dict = {}
        try:
            while pending or quarantine or inflight:
                if quarantine:  # suspects of a dead worker run alone, one file at a time
                    if not inflight:
                        b = quarantine.popleft()
                        with _main_not_reimported():
                            inflight[ex.submit(scan_batch, b, opts)] = b
                else:
                    while pending and len(inflight) < workers * INFLIGHT_PER_WORKER:
                        b = pending.popleft()
                        if opts.get("prefetch"):
                            _prefetch(b)
                        with _main_not_reimported():  # submit may start a worker process
                            inflight[ex.submit(scan_batch, b, opts)] = b
                done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
                for fut in done:
                    rows = fut.result()  # raises BrokenProcessPool if a worker died
                    del inflight[fut]
                    yield rows
        except BrokenProcessPool:
            if len(inflight) == 1 and len(next(iter(inflight.values()))) == 1:
                (it,) = next(iter(inflight.values()))  # it ran alone: this file killed the worker
                row = empty_row(*it)
                row.update(error=f"{it[0]}: the worker process died while reading this file (crash, or killed: "
                                 "out of memory?)", error_kind="unreadable")
                yield [row]
            else:
                quarantine.extend([it] for b in inflight.values() for it in b)
        finally:
            ex.shutdown(wait=False, cancel_futures=True)


def _run_dask(batches: list[list[Item]], opts: dict, workers: int, address: Any) -> Iterator[list[dict]]:
    """Dask distributed: ``address`` is ``"local"`` (a LocalCluster here), a scheduler address or a Client.
    Workers must see the files at the same paths (shared file system)."""
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise ForensicsError("Dask is not installed: pip install 'hidden-state-forensics[dask]'") from None
    cluster = client = None
    try:
        if isinstance(address, Client):
            client = address
        elif address in ("local", True):
            cluster = LocalCluster(n_workers=max(1, workers), threads_per_worker=1, processes=True,
                                   dashboard_address=None)
            client = Client(cluster)
        else:
            client = Client(address)
        batch_of = {client.submit(scan_batch, b, opts, pure=False): b for b in batches}
        queue = as_completed(list(batch_of))
        for fut in queue:
            b = batch_of.pop(fut)
            try:
                yield fut.result()
            except Exception as e:  # noqa: BLE001 - e.g. KilledWorker: retry each file alone, then report it
                if len(b) > 1:
                    for it in b:
                        single = client.submit(scan_batch, [it], opts, pure=False)
                        batch_of[single] = [it]
                        queue.add(single)
                    continue
                row = empty_row(*b[0])
                row.update(error=f"{b[0][0]}: the Dask task for this file failed ({type(e).__name__}: "
                                 f"{str(e)[:200]})", error_kind="unreadable")
                yield [row]
    finally:
        if client is not None and client is not address:
            client.close()
        if cluster is not None:
            cluster.close()


def scan(path: str | os.PathLike | list, workers: int = 2, out: str | os.PathLike | None = None,
         resume: bool = False, sample: int | None = None, dask: Any = None, *,
         fingerprint: bool | int = FINGERPRINT_FILES,
         tune_malloc: bool = True, prefetch: bool = False, progress: bool | None = None,
         on_row: Callable[[dict], None] | None = None) -> ScanResult:
    """Scan every capture file under ``path``; return rows, dataset summary and anomalies.

    Args:
        path: a dataset directory (any supported layout), a file, or a list of them.
        workers: worker processes (0: in this process). With ``dask``: workers of a local cluster.
        out: JSON Lines file; one row per file is appended and flushed as each file finishes.
        resume: keep the rows already in ``out`` (same path, size, mtime) and scan only the rest.
        sample: scan K files drawn at random (seed ``SAMPLE_SEED``, so the same K every time).
        dask: ``"local"`` (LocalCluster), a scheduler address ``"tcp://host:8786"`` or a ``Client``.
        fingerprint: :func:`forensics.fingerprint` about N files evenly spread over the listing (an int,
            default ``FINGERPRINT_FILES``), every file (True) or none (False). Every file gets the
            statistics-based checks (NaN/Inf, duplicates, norm-rank order, outlier norms) either way.
        tune_malloc: set glibc mmap/trim thresholds in workers (ecosystem.md §6.10).
        prefetch: ``posix_fadvise(WILLNEED)`` the files of queued tasks. Off: on this project's VM disk, cold
            scans of 16 Kimi-sized files measured 0.48–0.67 GB/s with it and 0.52–0.90 GB/s without.
        progress: tqdm bar on stderr (files/s, GB/s); default: when stderr is a terminal.
        on_row: called with each new row (without its sketch) as it is written.
    """
    t_start = time.perf_counter()
    items, bad = list_files(path, sample)
    out = os.fspath(out) if out is not None else None
    if resume and out is None:
        raise ForensicsError("resume needs the output file of the interrupted scan (out=... / -o FILE)")
    number = {it[0]: i for i, it in enumerate(items)}
    agg = Aggregator([it[0] for it in items])
    held: dict[int, dict] | None = {} if out is None else None
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
        for row in read_rows(out):
            no = wanted.get((row.get("path"), row.get("size"), row.get("mtime_ns")))
            if no is not None:
                last[no] = row
        for no, row in sorted(last.items()):
            fold(no, row)
        resumed = len(last)
    chosen = fingerprint_choice(len(items), fingerprint)
    todo = [(*it, chosen(i)) for i, it in enumerate(items) if i not in done and it[1] is not None]
    opts = {"tune_malloc": tune_malloc, "prefetch": prefetch}
    if os.environ.get("HSF_SCAN_TEST_DIE_ON"):  # test hook: simulate a worker being killed
        opts["_test_die_on"] = os.environ["HSF_SCAN_TEST_DIE_ON"]
    sink = _open_out(out, resume)
    bar = _progress(len(items), resumed, progress)
    t_work, new_bytes = time.perf_counter(), 0
    if dask is not None:
        runner = _run_dask(_batches(todo), opts, workers, dask)
    elif workers <= 0:
        runner = _run_inline(_batches(todo), opts)
    else:
        runner = _run_pool(_batches(todo), opts, workers)
    try:
        for row in bad:
            if number[row["path"]] not in done:
                _write(sink, row)
                fold(number[row["path"]], row)
        for rows in runner:
            for row in rows:
                _write(sink, row)
                fold(number[row["path"]], row)
                new_bytes += row.get("size") or 0
                if bar is not None:
                    dt = max(time.perf_counter() - t_work, 1e-9)
                    rate = new_bytes / dt
                    bar.set_postfix_str(f"{rate / 1e9:.2f} GB/s" if rate >= 1e8 else f"{rate / 1e6:.1f} MB/s",
                                        refresh=False)
                    bar.update(1)
                if on_row is not None:
                    on_row(_public(row))
    finally:
        runner.close()  # shuts the pool / cluster down at once, however the loop ended
        if sink is not None:
            sink.close()
        if bar is not None:
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


def _public(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "sketch"}


def _open_out(out: str | None, resume: bool):
    if out is None:
        return None
    d = os.path.dirname(os.path.abspath(out))
    os.makedirs(d, exist_ok=True)
    if resume and os.path.exists(out) and os.path.getsize(out) > 0:
        with open(out, "rb") as f:
            f.seek(-1, os.SEEK_END)
            torn = f.read(1) != b"\n"
        sink = open(out, "a", encoding="utf-8")
        if torn:  # killed mid-line: start a fresh line (the torn one is skipped on reading)
            sink.write("\n")
        return sink
    return open(out, "w", encoding="utf-8")


def _write(sink, row: dict) -> None:
    if sink is not None:
        try:
            line = json.dumps(row, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError):  # a numpy scalar or a NaN from some field: make it plain JSON
            line = json.dumps(json_safe(row), allow_nan=False, separators=(",", ":"))
        sink.write(line + "\n")
        sink.flush()



def _progress(total: int, initial: int, enabled: bool | None):
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="file", file=sys.stderr, dynamic_ncols=True, smoothing=0.1)


from .scan_result import ScanResult  # noqa: E402  (result type lives beside, re-exported here)

__all__ = ["scan", "ScanResult", "list_files", "read_rows"]
