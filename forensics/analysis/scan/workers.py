"""Where scan rows are computed: in this process, a local process pool, or a Dask cluster.

Each runner takes batches of ``(path, size, mtime_ns, fingerprint?)`` items and yields lists of rows as
batches finish. The pool and Dask runners survive dead workers: only the file that kills a worker, run
alone, becomes an error row.
"""

from __future__ import annotations

import os
import select
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any

from forensics.analysis.scan import rows as scan_rows  # the module: its _current_start changes while a file runs
from forensics.analysis.scan.rows import FILE_TIME_BUDGET_S, HARD_STOP_GRACE_S, empty_row, init_worker, scan_batch
from forensics.errors import ForensicsError, escape

BATCH_BYTES = 64 * 1000 * 1000  # small files are grouped into one task up to this many bytes ...
BATCH_MAX_FILES = 64  # ... or this many files (a task costs ~1–2 ms of dispatch, measured)
DASK_MIN_FILES = 8  # a Dask task holds at least this many files, however big (its scheduler costs ~1 ms a task,
#                     and a 100 000-file scan stays at ≤ 12 500 tasks); each file in it is still its own row
INFLIGHT_PER_WORKER = 4  # tasks queued per worker (bounded, so a 100 000-file listing is not all queued)
PARENT_POLL_S = 0.5  # without a pidfd, a worker checks this often whether the scanning process still exists

Item = tuple  # (absolute path, size in bytes, mtime in ns, fingerprint this file?)


def batches(items: list[Item], min_files: int = 1) -> list[list[Item]]:
    """Consecutive files grouped into tasks of at most BATCH_BYTES or BATCH_MAX_FILES, and at least
    ``min_files`` files whatever their size (a big file is alone unless ``min_files`` > 1)."""
    out: list[list[Item]] = []
    cur: list[Item] = []
    size = 0
    for it in items:
        if cur and ((size + it[1] > BATCH_BYTES and len(cur) >= min_files) or len(cur) >= BATCH_MAX_FILES):
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
    run :func:`forensics.analysis.scan.rows.scan_batch`, so the script is hidden from multiprocessing while
    workers start (``__main__.__file__``/``__spec__``, restored at once)."""
    main = sys.modules.get("__main__")
    saved: dict[str, Any] = {k: main.__dict__[k] for k in ("__file__", "__spec__")
                             if main is not None and k in main.__dict__}
    try:
        if main is not None:
            main.__dict__.pop("__file__", None)
            main.__dict__["__spec__"] = None
        yield
    finally:
        if main is not None:
            main.__dict__.pop("__spec__", None)
            main.__dict__.update(saved)


def pool_worker_init(tune_malloc: bool, parent_pid: int, budget: float | None) -> None:
    """Set up a pool worker: :func:`init_worker`, then two watchdog threads. A worker ends itself when the
    scanning process is gone (SIGKILL of ``hsf scan`` must not leave workers, and the fork server they keep
    alive, holding the caller's pipes), and when one file keeps it in native code past its time budget."""
    init_worker(tune_malloc)
    scan_rows._pool_worker = True  # the fused norm kernel only if the fork server loaded it (never imported here)
    warnings.simplefilter("ignore")  # library warnings stay off the caller's stderr (rows carry what matters)
    threading.Thread(target=_exit_with(parent_pid), daemon=True, name="hsf-parent-watch").start()
    if budget:
        threading.Thread(target=_hard_stop, args=(budget + HARD_STOP_GRACE_S,), daemon=True,
                         name="hsf-file-watch").start()


def _exit_with(pid: int) -> Callable[[], None]:
    def watch() -> None:
        try:  # a pidfd turns readable when the process exits (Linux ≥ 5.3)
            fd = os.pidfd_open(pid)
            select.select([fd], [], [])
        except (OSError, AttributeError):  # no pidfd: poll the parent's existence
            while True:
                time.sleep(PARENT_POLL_S)
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                except PermissionError:
                    pass
        os._exit(1)
    return watch


def _hard_stop(limit: float) -> None:
    while True:
        time.sleep(1.0)
        start = scan_rows._current_start
        if start is not None and time.monotonic() - start > limit:
            os._exit(70)  # EX_SOFTWARE: the pool reports the file (run alone) as one that ended its worker


def run_inline(batches: list[list[Item]], opts: dict) -> Generator[list[dict], None, None]:
    for b in batches:
        yield scan_batch(b, opts)

def _start_fork_server() -> None:
    """Start the fork server (and its resource tracker) importing what this process imports, never the current
    directory's files, and with Python's warnings off (they are not the user's business, as in the command).

    The fork server is started as ``python -c ...``, which puts the current directory first on its ``sys.path``
    (CPython 3.11's ``forkserver.main`` ignores the caller's path it is handed): run from a folder holding a
    ``torch.py``, its preload of torch executed that file, and run from a source checkout it imported the
    checkout's ``forensics`` whatever the caller imported. Started with ``PYTHONSAFEPATH`` (no directory put first)
    and the caller's ``sys.path`` as ``PYTHONPATH``, it imports the modules the caller does; the environment is
    restored at once."""
    from multiprocessing import forkserver

    saved = {k: os.environ.get(k) for k in ("PYTHONSAFEPATH", "PYTHONPATH", "PYTHONWARNINGS")}
    os.environ["PYTHONSAFEPATH"] = "1"
    # the resource tracker outlives a killed scan and then warned of "leaked semaphore objects" on the caller's
    # stderr (two lines of a library's warning after the run; the semaphores are removed all the same)
    os.environ["PYTHONWARNINGS"] = "ignore"
    os.environ["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p or os.curdir) for p in sys.path)
    try:
        with _main_not_reimported():
            forkserver.ensure_running()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_pool(batches: list[list[Item]], opts: dict, workers: int) -> Generator[list[dict], None, None]:
    """Process pool with a bounded queue; a worker that dies costs only the files it was reading."""
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    ctx = mp.get_context("forkserver")
    # torch and the readers are imported once in the fork server, not once per worker; scan_warmup computes one
    # tiny row there, so forked workers do not pay the first-file initialisation (40–110 ms → ~25 ms)
    ctx.set_forkserver_preload(["torch", "forensics.analysis.scan.rows", "forensics.io.formats",  # failed imports
                                "forensics.analysis.stats", "forensics.analysis.fingerprint.core",  # are skipped
                                "forensics.analysis.scan.warmup",
                                *(["forensics.analysis.scan.warmup_fused"] if opts.get("fused_norms") else [])])
    _start_fork_server()
    pending: deque = deque(batches)
    quarantine: deque = deque()
    while pending or quarantine:
        ex = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=pool_worker_init,
                                 initargs=(opts.get("tune_malloc", True), os.getpid(),
                                           opts.get("file_seconds", FILE_TIME_BUDGET_S)))
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
                row.update(error=f"{escape(it[0])}: the worker process died while reading this file (crash, "
                                 "killed for memory, or stuck past the per-file time budget)",
                           error_kind="unreadable")
                yield [row]
            else:
                quarantine.extend([it] for b in inflight.values() for it in b)
        except BaseException:  # Ctrl-C, SIGTERM, the caller closing the generator: stop the workers now
            _stop_workers(ex)
            raise
        finally:
            ex.shutdown(wait=False, cancel_futures=True)


def _stop_workers(ex: Any) -> None:
    """Kill a pool's worker processes. ``shutdown`` cancels only the files not started, and the interpreter's exit
    joins the pool: a worker on a file that takes long (one stuck until the per-file budget) held a stopped scan
    for minutes after its "interrupted" line."""
    for p in list((getattr(ex, "_processes", None) or {}).values()):
        try:
            p.kill()
        except (OSError, ValueError, AttributeError):
            pass


def run_dask(batches: list[list[Item]], opts: dict, workers: int, address: Any) -> Generator[list[dict], None, None]:
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
            with _main_not_reimported():  # Dask's nanny spawns workers: same re-import as the local pool
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
