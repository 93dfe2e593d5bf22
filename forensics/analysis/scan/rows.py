"""One scan row per capture file, computed in a worker process (local pool or Dask).

A row holds what a dataset scan needs to know about one file: its format and shape, per-slot norm
summaries, role/label/depth rank from :func:`forensics.fingerprint` (for the files chosen to be
fingerprinted), the rank of each slot's median token norm (always: a cheap order signature), findings,
the row checks of :func:`forensics.analysis.rows.check_rows` on every file (``rows``: the offset, each slot's
bad row ranges, the row kinds; their findings with their evidence), and a mergeable sketch of every slot's
per-token norms (:mod:`forensics.analysis.scan.sketch`), so the parent process never holds per-token arrays.
An unreadable file becomes a row with ``error`` set; nothing a file contains can crash the scan.
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np

from forensics.analysis import fastnorms
from forensics.analysis.context import check_context, without_sink_starts
from forensics.analysis.fingerprint.residual import token0_empty
from forensics.analysis.loss_mask import capture_loss_mask_findings
from forensics.analysis.rows import ROW_KINDS, RowHashTaps, check_rows
from forensics.analysis.scan.sinks import read_parquet_rows
from forensics.analysis.scan.sketch import LogHistogram, Moments
from forensics.analysis.stamp import StampReader
from forensics.analysis.stats import summarize
from forensics.errors import ForensicsError, escape, one_line
from forensics.findings import worst_verdict
from forensics.io.formats import load_all
from forensics.io.pages import TrailingRelease, checked_once
from forensics.jsonable import json_safe
from forensics.layers import r_label

MALLOC_TUNE_BYTES = 1 << 30  # glibc mmap/trim thresholds in workers (page faults: measured)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc <malloc.h> mallopt parameters
# A statistics-only row releases the file pages behind its pass in runs of this many bytes: each release is a page
# table read and an madvise (with its TLB flush); 4 MB runs cost ~1 ms per Kimi-shaped file more than 16 MB runs
# (27.4 vs 26.5 ms CPU, 2026-12-05), and a worker holds at most one run and a block of its file mapped either way.
RELEASE_RUN_BYTES = 16 << 20
_worker_ready = False
# A file's row is computed within this many seconds or becomes an error row. The slowest real file measured
# (a Kimi-sized sample fingerprinted on one thread) takes ~4 s, so 300 s leaves ~75× for slow disks and
# shared CPUs while a hostile file cannot stall a dataset scan.
FILE_TIME_BUDGET_S = 300.0
# A worker stuck in native code, where the budget's alarm is not delivered, ends itself this much later;
# the pool then reports the file as one that killed its worker.
HARD_STOP_GRACE_S = 30.0
_current_start: float | None = None  # when the file now being read was started (worker watchdog)


class FileTimeout(Exception):
    """A file used up its time budget."""


@contextmanager
def time_budget(seconds: float | None) -> Iterator[None]:
    """Raise :class:`FileTimeout` in this (main) thread after ``seconds`` (``SIGALRM``); elsewhere, or with
    no budget, nothing is timed."""
    global _current_start
    _current_start = time.monotonic()
    if not seconds or seconds <= 0 or threading.current_thread() is not threading.main_thread():
        try:
            yield
        finally:
            _current_start = None
        return

    def expired(signum, frame):
        raise FileTimeout

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        _current_start = None


_pool_worker = False  # set in the scan's pool workers (forked from its fork server)


def init_worker(tune_malloc: bool = True) -> None:
    """Per-process set-up: one torch thread (processes give the parallelism) and, optionally, glibc
    thresholds that keep large freed blocks for reuse instead of ``munmap``-ing them (so fresh blocks
    are not page-faulted in again). Idempotent; also called on Dask workers."""
    global _worker_ready
    if _worker_ready:
        return
    import torch

    torch.set_num_threads(1)
    if tune_malloc:
        try:
            import ctypes

            libc = ctypes.CDLL("libc.so.6")
            libc.mallopt(_M_MMAP_THRESHOLD, MALLOC_TUNE_BYTES)
            libc.mallopt(_M_TRIM_THRESHOLD, MALLOC_TUNE_BYTES)
        except (OSError, AttributeError):  # not glibc: nothing to tune
            pass
    _worker_ready = True


def scan_batch(items: list[tuple[str, int, int, bool]], opts: dict) -> list[dict]:
    """Rows for a batch of ``(path, size, mtime_ns, fingerprint?)`` items (the unit of work of a worker)."""
    init_worker(opts.get("tune_malloc", True))
    die_on = opts.get("_test_die_on")  # test hook: simulate a worker killed while reading this file
    sleep_on = opts.get("_test_sleep_on")  # test hook: a file that takes forever
    budget = opts.get("file_seconds", FILE_TIME_BUDGET_S)
    rows = []
    # the fused kernel where the scan is large enough; a pool worker uses it only if its fork server loaded it
    with fastnorms.scope(load=not _pool_worker) if opts.get("fused_norms") else nullcontext():
        for path, size, mtime_ns, use_fp in items:
            if die_on and path.endswith(die_on):
                os._exit(3)
            rows.append(file_row(path, size, mtime_ns, use_fingerprint=use_fp, budget=budget,
                                 _sleep=bool(sleep_on and path.endswith(sleep_on)), layers=opts.get("layers"),
                                 row_checks=opts.get("rows", True), stamp_check=opts.get("stamp_check", True)))
    return rows


def empty_row(path: str, size: int | None, mtime_ns: int | None, *_: object) -> dict:
    return {"path": path, "size": size, "mtime_ns": mtime_ns, "format": None, "num_tokens": None,
            "hidden": None, "num_slots": 0, "basis": None, "slots": [], "findings": [], "error": None,
            "error_kind": None, "rows": None, "elapsed": 0.0, "sketch": []}


def error_kind(message: str) -> str:
    """``length_mismatch`` for token/state or slot length disagreements, else ``unreadable``."""
    m = message.lower()
    return "length_mismatch" if ("length mismatch" in m or "ragged" in m) else "unreadable"


def file_row(path: str, size: int, mtime_ns: int, use_fingerprint: bool = True,
             budget: float | None = FILE_TIME_BUDGET_S, _sleep: bool = False, layers: Any = None,
             row_checks: bool = True, stamp_check: bool = True) -> dict:
    """The scan row of one file within ``budget`` seconds; every failure becomes ``error`` (never an
    exception)."""
    t0 = time.perf_counter()
    row = empty_row(path, size, mtime_ns)
    try:
        with time_budget(budget):
            if _sleep:
                time.sleep(10 * (budget or 1))
            _fill(row, path, use_fingerprint, layers, row_checks, stamp_check)
    except ForensicsError as e:
        row.update(error=str(e), error_kind=error_kind(str(e)), slots=[], sketch=[], findings=[])
    except FileTimeout:
        row.update(error=f"{escape(path)}: not read within the per-file time budget of {budget:g} seconds",
                   error_kind="unreadable", slots=[], sketch=[], findings=[])
    except MemoryError:
        row.update(error=f"{escape(path)}: out of memory while reading", error_kind="unreadable", slots=[],
                   sketch=[], findings=[])
    except Exception as e:  # noqa: BLE001 - a scan must survive any file (reported, not raised)
        msg = f"{escape(path)}: internal error while scanning: {type(e).__name__}: {one_line(e)[:300]}"
        row.update(error=msg, error_kind="unreadable", slots=[], sketch=[], findings=[])
    row["elapsed"] = round(time.perf_counter() - t0, 6)
    # plain JSON types only: rows held in memory equal rows read back from the file. The sketch (last key) is
    # built from plain ints/floats already (``tolist``, ``math.fsum``); walking its ~1000 bin counts per file
    # through json_safe cost ~1 ms per Kimi-sized file (cProfile, 2026-11-30), so it is passed through as is.
    sketch = row.pop("sketch")
    row = json_safe(row)
    row["sketch"] = sketch
    return row


def _fingerprint_fn():
    try:
        from forensics.analysis.fingerprint.core import fingerprint  # noqa: PLC0415 - optional: else statistics only
    except ImportError:
        return None
    return fingerprint


def _fill(row: dict, path: str, use_fingerprint: bool, layers: Any = None, row_checks: bool = True,
          stamp_check: bool = True) -> None:
    """The row of one file: of its one sample, or of every sample of a many-sample file (TensorRT-LLM records,
    SGLang objects, ``[B, T]`` batch rows: ``FILE#i``), the file read once (:func:`forensics.io.formats.load_all`)."""
    caps = load_all(path)
    _fill_capture(row, caps[0], use_fingerprint, layers, row_checks, stamp_check)
    if len(caps) > 1:
        _fold_samples(row, caps, use_fingerprint, layers, row_checks, stamp_check)


def _fold_samples(row: dict, caps: list, use_fingerprint: bool, layers: Any, row_checks: bool,
                  stamp_check: bool = True) -> None:
    """Every sample judged: each one's findings join the file's row, named by its sample (``sample``: ``FILE#i``,
    the message led by it); its norms join the slot sketches when it has the same slots; ``samples`` lists each
    sample's tokens, verdict and finding count; the row's verdict is the worst sample's."""
    def tag(fs: list[dict], name: str) -> list[dict]:
        base = os.path.basename(name)
        return [{**f, "sample": name, "message": f"{base}: {f['message']}"} for f in fs]

    row["findings"] = tag(row["findings"], caps[0].name)
    row["samples"] = [{"path": caps[0].name, "num_tokens": caps[0].num_tokens, "verdict": row.get("verdict"),
                       "findings": len(row["findings"])}]
    verdicts = [row.get("verdict")]
    for cap in caps[1:]:
        sub = empty_row(row["path"], row["size"], row["mtime_ns"])
        _fill_capture(sub, cap, use_fingerprint, layers, row_checks, stamp_check)
        found = tag(sub["findings"], cap.name)
        row["findings"] += found
        verdicts.append(sub.get("verdict"))
        row["samples"].append({"path": cap.name, "num_tokens": cap.num_tokens, "verdict": sub.get("verdict"),
                               "findings": len(found)})
        if len(sub["slots"]) != len(row["slots"]):
            continue  # another slot layout: judged (findings above), its norms not merged into these slots
        for s, t, a, b in zip(row["slots"], sub["slots"], row["sketch"], sub["sketch"], strict=True):
            s["nan"] += t["nan"]
            s["inf"] += t["inf"]
            h = LogHistogram.from_dict(a["hist"])
            h.merge(LogHistogram.from_dict(b["hist"]))
            a.update(n=a["n"] + b["n"], s1=a["s1"] + b["s1"], s2=a["s2"] + b["s2"], hist=h.to_dict())
    v = worst_verdict(verdicts)
    row["verdict"] = None if v is None else v.value


def _fill_capture(row: dict, cap: Any, use_fingerprint: bool, layers: Any = None, row_checks: bool = True,
                  stamp_check: bool = True) -> None:
    with checked_once([s.tensor() for s in cap.slots]):  # its page releases read each slot's page table once
        _fill_checked(row, cap, use_fingerprint, layers, row_checks, stamp_check)


def _fill_checked(row: dict, cap: Any, use_fingerprint: bool, layers: Any = None, row_checks: bool = True,
                  stamp_check: bool = True) -> None:
    fp_fn = _fingerprint_fn() if use_fingerprint else None
    fp = fp_fn(cap, layers=layers, expected_source="--layers", stamp_check=stamp_check) if fp_fn is not None \
        else None
    reader = None
    if fp is None and stamp_check:  # the stamp's checksums ride on the statistics' norm pass

        reader = StampReader(cap)
    hash_taps = RowHashTaps(cap) if fp is None and row_checks else None  # the row checks' hashes ride on it too
    # ... and the file pages behind it are released: the rows read later (a finding's few) fault back in
    release = {s.index: TrailingRelease(s.tensor(), RELEASE_RUN_BYTES) for s in cap.slots} if fp is None else {}
    st = fp.stats if fp is not None else summarize(cap, taps=_taps(reader, hash_taps, release))
    for r in release.values():
        r.finish()
    row.update(format=cap.format, num_tokens=cap.num_tokens, hidden=cap.hidden_size, num_slots=len(st.slots),
               basis="fingerprint" if fp is not None else "stats")
    fps = {s.index: s for s in fp.slots} if fp is not None else {}
    # Cheap order signature of every file: the rank of each slot's token-0-excluded median norm. Not a depth
    # (norms are not monotone in depth: Kimi-K2.5's L59 is below its L31); only its agreement across files is used.
    med = [s.norm_excl_first.median for s in st.slots]
    rank = {i: r for r, i in enumerate(sorted(range(len(med)), key=lambda i: (_sort_key(med[i]), i)))}
    for s in st.slots:
        f = fps.get(s.index)
        row["slots"].append({
            "index": s.index, "name": s.name, "dtype": s.dtype, "shape": list(s.shape),
            "norm": {"median": json_safe(s.norm.median), "mean": json_safe(s.norm.mean), "std": json_safe(s.norm.std),
                     "p05": json_safe(s.norm.p05), "p95": json_safe(s.norm.p95)},
            "median_excl_first": json_safe(s.norm_excl_first.median),
            "first": json_safe(s.first), "first_ratio": json_safe(s.first_ratio), "nan": s.nan, "inf": s.inf,
            "sinks": list(s.sinks), "num_sinks": getattr(s, "num_sinks", len(s.sinks)),
            "massive_dims": list(s.massive_dims), "claimed": s.claimed,
            "declared": None if s.declared_r is None else r_label(s.declared_r),
            "role": getattr(f, "role", None), "label": getattr(f, "label", None),
            "depth_rank": int(f.depth_rank) if f is not None and f.depth_rank is not None else None,
            "norm_rank": rank[s.index],
            "confidence": json_safe(getattr(f, "confidence", None)),
            "r_exact": getattr(f, "r_exact", None),
            "claim": None if f is None or f.claim is None else f.claim.label,
            "verdict": None if f is None or f.verdict is None else f.verdict.value,
        })
        hist = LogHistogram()
        hist.add(s.norms)
        n, s1, s2 = Moments.file_sums(s.norms)
        row["sketch"].append({"n": n, "s1": s1, "s2": s2, "hist": hist.to_dict()})
    rep = _row_report(cap, st, fp, hash_taps) if row_checks else None
    if fp is not None:
        row["verdict"] = None if fp.verdict is None else fp.verdict.value
        for x in fp.findings:
            if rep is not None and x.kind in ROW_KINDS:
                continue  # the row report's own findings (below) carry the same ones with their evidence
            row["findings"].append({"kind": x.kind, "severity": x.severity.value, "slots": list(x.slots or []),
                                    "message": x.message})
    if rep is not None:
        row["rows"] = {"num_rows": rep.num_rows, "num_tokens": rep.num_tokens, "offset": rep.offset,
                       "kinds": rep.kinds(), "bad_rows": {str(k): [list(r) for r in v]
                                                          for k, v in sorted(rep.bad_rows.items())}}
        for x in rep.findings:
            if x.kind == "nonfinite" and any(f["kind"] == "nonfinite" for f in row["findings"]):
                continue  # reported by the fingerprint already (the NaN/Inf counts are in the slots)
            row["findings"].append({"kind": x.kind, "severity": x.severity.value, "slots": list(x.slots or []),
                                    "message": x.message, "evidence": x.evidence})
    if not any(x["kind"] == "duplicate" for x in row["findings"]):
        row["findings"].extend(_duplicates(st.slots))
    if fp is None:  # a fingerprint made these already
        row["findings"].extend(_context_findings(cap, st, rep))
        row["findings"].extend(_loss_mask_findings(cap))
        if reader is not None:
            row["findings"].extend(_stamp_findings(reader))


def _context_findings(cap: Any, st: Any, rep: Any) -> list[dict]:
    """A sequence start inside the rows (``context_lost``, data only, as the fingerprint finds it): reads token 0's
    row and the candidate rows' one dimension of each sink slot, never the slot again."""
    found = check_context(cap, [s.tensor() for s in cap.slots], st.slots, rep).findings
    if found and getattr(rep, "offset", 0) in (0, None) and any(s.norm.n and token0_empty(s) for s in st.slots):
        # a slot with a nearly empty token-0 row is no residual state (a sub-layer output): the sink premise of the
        # data-only sequence start does not hold, as the fingerprint drops it (fingerprint.core)
        found = without_sink_starts(found)
    return [{"kind": x.kind.value, "severity": x.severity.value, "slots": list(x.slots), "message": x.message,
             "evidence": x.evidence} for x in found]


def _loss_mask_findings(cap: Any) -> list[dict]:
    """The stored loss mask against the chat turns its tokenizer's template marks (nothing without both)."""
    return [{"kind": x.kind.value, "severity": x.severity.value, "slots": [], "message": x.message,
             "evidence": x.evidence} for x in capture_loss_mask_findings(cap)]


def _stamp_findings(reader: Any) -> list[dict]:
    """The file's stamp (``hsf stamp``) checked on the row blocks the statistics read; nothing without one."""
    sc = reader.check()
    return [] if sc is None else [{"kind": x.kind.value, "severity": x.severity.value, "slots": list(x.slots),
                                   "message": x.message, "evidence": x.evidence} for x in sc.findings]


def _taps(reader: Any, hash_taps: Any, release: dict | None = None) -> Any:
    """The statistics' block taps: the stamp's checksums, the row hashes and, last, the release of the file pages
    behind the pass (:class:`forensics.io.pages.TrailingRelease`: a worker then holds at most one run,
    ``RELEASE_RUN_BYTES``, and a block of its file mapped, not all of it, ~70 MB for a Kimi-sized capture). None when
    none is wanted."""
    stamp = reader.taps if reader is not None and reader.feeds else None
    release = release or {}
    if stamp is None and hash_taps is None and not release:
        return None
    return lambda i: [*(stamp(i) if stamp is not None else ()), *(hash_taps.taps(i) if hash_taps is not None else ()),
                      *((release[i],) if i in release else ())]


def _row_report(cap: Any, st: Any, fp: Any, hash_taps: Any = None) -> Any:
    """The file's :class:`~forensics.analysis.rows.RowReport`: the fingerprint's when it made one (every check),
    else :func:`~forensics.analysis.rows.check_rows` on the capture without the cross-slot offset test (its
    float32 row sample costs ~6× a file's statistics; the scan's 1.3× budget for row checks has no room for it)."""
    rep = getattr(fp, "rows", None)
    if rep is not None and hasattr(rep, "bad_rows"):
        return rep

    return check_rows(cap, cross_slots=False, norms=[s.norms for s in st.slots],
                      hashes=None if hash_taps is None else hash_taps.hashes())


def _sort_key(v: float) -> float:
    return v if v is not None and math.isfinite(v) else math.inf


def _duplicates(slots) -> list[dict]:
    """Pairs of slots whose per-token norms are bit-identical (a slot captured or copied twice)."""
    out = []
    for i, a in enumerate(slots):
        for b in slots[i + 1:]:
            if a.norms.shape == b.norms.shape and np.array_equal(a.norms, b.norms, equal_nan=True):
                out.append({"kind": "duplicate", "severity": "fail", "slots": [a.index, b.index],
                            "message": f"slots {a.index} ({a.name}) and {b.index} ({b.name}) have identical "
                                       "per-token norms: the same tensor stored twice?"})
    return out


def read_rows(out: str) -> Iterator[dict]:
    """Rows of a scan's JSON Lines file (a torn last line, killed mid-write, is skipped) or Parquet folder. A
    file with text but no row at all (a binary file, some other document) is a ForensicsError: it is not a
    scan's output."""
    if os.path.isdir(out):
        yield from read_parquet_rows(out)
        return
    if not os.path.exists(out):
        return
    seen = rows = 0
    try:
        with open(out, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                seen += 1
                try:
                    row = json.loads(line)
                except (ValueError, RecursionError):
                    continue
                if isinstance(row, dict) and "path" in row:
                    rows += 1
                    yield row
    except OSError as e:
        raise ForensicsError(f"cannot read the scan output: {e.strerror}", path=out) from None
    if seen and not rows:
        raise ForensicsError("not a scan output (no JSON Lines row with a path); refusing to resume from it",
                             path=out)
