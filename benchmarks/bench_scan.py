"""Benchmark of `hsf scan` on Kimi-shaped samples: `cat`, the naive loop and the scan, side by side.

Generates N distinct speculators-v1 samples (4 × bf16 [1281, 7168] hidden states, ~73.5 MB each, the
Kimi-K2.5 shape) in a temporary folder, warms the page cache, then times, on
the same files and in one run:

- ``cat FILES > /dev/null`` (the page-cache read ceiling);
- the naive loop: ``torch.load(f, weights_only=True)`` + ``[h.float().norm(dim=-1) for h in hidden_states]``
  (default malloc, torch's default threads);
- ``forensics.scan(..., workers=2)``: first call (includes starting the fork server and workers) and a
  second call in the same process (warm; the ratios use it), with the default fingerprint choice
  (``FINGERPRINT_FILES`` files), with none, with all, and with ``out_format="parquet"``; and the default scan
  without the row checks (``rows=False``), for the row checks' cost (goal: the default scan ≤ 1.3× that);
- cold cache: ``cat`` and ``dd bs=1M`` of the distinct files and a default scan, each right after the files
  were dropped from the page cache with ``posix_fadvise(POSIX_FADV_DONTNEED)``.

Every measured mode runs in its own child process, so its peak memory is its own: peak RSS and PSS summed
over the process and all its descendants (fork server and workers), sampled every 50 ms with psutil.
The larger file count reuses the N distinct files through hard links (same inodes: the page cache is
shared, so it measures per-file overheads and memory growth with the number of files, not a bigger cache).

Interleaved rounds (issue 32; the default): on a shared machine a mode timed minutes after another is timed
under another load, so each of ``--rounds`` rounds times, back to back on the same files, ``cat``, the naive
loop (its own process) and every scan mode (``--modes``: one process per round, whose fork server is warmed by
an untimed scan first, then the default scan, ``--fingerprint none`` and ``--fingerprint all`` one after the
other, peak memory reset between them). Every ratio is formed within a round, with the 1-minute load read at
each measurement, and the median over rounds is reported with the range.

    nice .venv/bin/python benchmarks/bench_scan.py            # 32 distinct files, then 128 (hard links)
    nice .venv/bin/python benchmarks/bench_scan.py --files 32 --links 0 --keep /tmp/kimi --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

T, H, K = 1281, 7168, 4  # Kimi-K2.5 sample: tokens, hidden size, captured slots


def make_samples(folder: str, n: int) -> list[str]:
    """N distinct Kimi-shaped speculators-v1 files (forensics.io.synth.kimi_like when available)."""
    import torch

    try:  # the synthetic-data module's generator, when present
        from forensics.io.synth import kimi_like, write_speculators_v1
    except ImportError:
        kimi_like = None
    g = torch.Generator().manual_seed(0)
    base = None
    paths = []
    for i in range(n):
        p = os.path.join(folder, f"data_{i}.pt")
        paths.append(p)
        if kimi_like is not None:
            write_speculators_v1(kimi_like(seed=i), p)
        else:
            if base is None:  # slot scales grow with depth; token 0 is a sink in the middle slots
                base = [torch.randn(T, H, generator=g) * (1 + 3 * j) for j in range(K)]
                for j in (1, 2):
                    base[j][0] *= 60
            scale = 1 + 0.01 * i  # distinct bytes per file, without drawing 37 M normals per file
            obj = {"input_ids": torch.randint(0, 129280, (T,), generator=g),
                   "loss_mask": torch.ones(T, dtype=torch.bool),
                   "hidden_states": [(b * scale).to(torch.bfloat16) for b in base]}
            torch.save(obj, p)
    return paths


def link_copies(paths: list[str], folder: str, total: int) -> list[str]:
    os.makedirs(folder, exist_ok=True)
    out = []
    for i in range(total):
        p = os.path.join(folder, f"data_{i}.pt")
        if not os.path.exists(p):
            os.link(paths[i % len(paths)], p)
        out.append(p)
    return out


class PeakMemory:
    """Peak RSS and PSS summed over this process and all its descendants, sampled in a thread; also the
    CPU seconds (user + system) of every descendant as last seen (``cpu_children``) and the sampler thread's
    own CPU (``own_cpu``: reading smaps costs ~0.1 CPU-s per 1 s scan, measured 2026-11-30; it is subtracted
    from the measured mode's CPU, though on 2 cores it still competes with the workers)."""

    def __init__(self, every: float = 0.05):
        import psutil

        self.me, self.every = psutil.Process(), every
        self.rss = self.pss = 0
        self.breakdown: list[dict] = []  # per process at the peak PSS Σ: role, PSS, its anonymous and file parts
        self.own_cpu = 0.0
        self._cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        i = 0
        t0 = time.thread_time()
        while not self._stop.is_set():
            procs = [self.me] + self.me.children(recursive=True)
            rss = pss = 0
            parts = []
            for p in procs:
                try:
                    if p.pid != self.me.pid:
                        c = p.cpu_times()
                        self._cpu[p.pid] = c.user + c.system
                    if i % 4 == 0:
                        m = smaps_rollup(p.pid)
                        pss += m["Pss"]
                        rss += m["Rss"]
                        parts.append({"role": self._role(p), "pss": m["Pss"], "anon": m.get("Pss_Anon", 0),
                                      "file": m.get("Pss_File", 0), "private_dirty": m.get("Private_Dirty", 0)})
                    else:
                        rss += p.memory_info().rss
                except (psutil.NoSuchProcess, psutil.AccessDenied, OSError, KeyError):
                    pass
            self.rss = max(self.rss, rss)
            if i % 4 == 0 and pss > self.pss:
                self.pss, self.breakdown = pss, parts
            i += 1
            self.own_cpu = time.thread_time() - t0
            time.sleep(self.every)

    def _role(self, p) -> str:
        """parent (the scanning process), fork server, resource tracker or worker."""
        if p.pid == self.me.pid:
            return "parent"
        cmd = " ".join(p.cmdline())
        if "resource_tracker" in cmd:
            return "resource tracker"
        if p.ppid() == self.me.pid and "forkserver" in cmd:
            return "fork server"
        return "worker"

    @property
    def cpu_children(self) -> float:
        return sum(self._cpu.values())

    def reset(self) -> None:
        """Start a new peak (the CPU seen so far is kept: CPU is measured as a difference)."""
        self.rss = self.pss = 0
        self.breakdown = []

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def smaps_rollup(pid: int) -> dict:
    """``/proc/PID/smaps_rollup`` in bytes (Rss, Pss, Pss_Anon, Pss_File, Private_Dirty, ...): one read, far
    cheaper than summing every mapping of ``/proc/PID/smaps``."""
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return out


def breakdown_line(parts: list[dict]) -> str:
    """The processes at a peak, largest first: PSS (anonymous + file-backed), private dirty."""
    mb = (lambda v: f"{v / 1e6:.0f}")
    return "; ".join(f"{x['role']} {mb(x['pss'])} MB (anon {mb(x['anon'])}, file {mb(x['file'])}, private dirty "
                     f"{mb(x['private_dirty'])})" for x in sorted(parts, key=lambda x: -x["pss"]))


def child(mode: str, list_file: str, out_dir: str) -> dict:
    """One measured mode, in this (child) process."""
    with open(list_file) as f:
        files = f.read().split()
    nbytes = sum(os.path.getsize(p) for p in files)
    res: dict = {"mode": mode, "files": len(files), "bytes": nbytes, "load1": os.getloadavg()[0]}

    def cpu(mem=None) -> float:  # user + system seconds of this process (+ descendants seen by mem), sampler excluded
        return sum(os.times()[:2]) + (mem.cpu_children - mem.own_cpu if mem is not None else 0.0)

    if mode.startswith("naive"):
        import torch

        if mode == "naive-1thread":  # on a busy machine 2 intra-op threads can be much slower than 1
            torch.set_num_threads(1)
        with PeakMemory() as mem:
            c0, t0 = cpu(mem), time.perf_counter()
            for p in files:
                d = torch.load(p, weights_only=True)
                [h.float().norm(dim=-1) for h in d["hidden_states"]]
            res["seconds"], res["cpu_s"] = time.perf_counter() - t0, cpu(mem) - c0
    else:
        from forensics import scan
        from forensics.analysis.scan.core import FINGERPRINT_FILES

        fp = {"scan": FINGERPRINT_FILES, "scan-cold": FINGERPRINT_FILES, "scan-none": False, "scan-all": True,
              "scan-untuned": FINGERPRINT_FILES, "scan-parquet": FINGERPRINT_FILES,
              "scan-norows": FINGERPRINT_FILES}[mode]
        rows = mode != "scan-norows"
        tune = "untuned" not in mode
        fmt = "parquet" if mode == "scan-parquet" else "jsonl"
        runs = []
        with PeakMemory() as mem:
            for rep in range(2):  # first: starts fork server + workers; second: warm fork server (timed)
                out = os.path.join(out_dir, f"rows_{mode}_{len(files)}_{rep}.{fmt}")
                time.sleep(0.2)  # let the sampler see every process of the previous call
                if mode == "scan-cold" and rep:  # the timed call reads every file from the disk
                    evict(files)
                c0, t0 = cpu(mem), time.perf_counter()
                r = scan(files, workers=2, out=out, fingerprint=fp, tune_malloc=tune, progress=False,
                         out_format=fmt, rows=rows)
                runs.append(time.perf_counter() - t0)
                time.sleep(0.2)
                res["cpu_s"] = cpu(mem) - c0  # the second call's: parent + fork server + its 2 workers
                assert r.summary["files"] == len(files) and r.summary["errors"] == 0, r.summary
        res["seconds_first"], res["seconds"] = runs[0], runs[-1]
        res["fingerprinted"] = sum(1 for row in r.rows if row.get("basis") == "fingerprint")
    res["peak_rss_sum"], res["peak_pss_sum"] = mem.rss, mem.pss
    return res


SCAN_FP = {"scan": None, "scan-none": False, "scan-all": True, "scan-norows": None, "scan-parquet": None}


def scan_round(modes: list[str], list_file: str, out_dir: str) -> list[dict]:
    """Every scan mode once, one after the other, in this (child) process: an untimed warm-up scan starts the
    fork server first; the peak memory (all processes) is reset before each mode."""
    from forensics import scan
    from forensics.analysis.scan.core import FINGERPRINT_FILES

    with open(list_file) as f:
        files = f.read().split()
    nbytes = sum(os.path.getsize(p) for p in files)
    out = []

    def cpu(mem) -> float:
        return sum(os.times()[:2]) + mem.cpu_children - mem.own_cpu

    with PeakMemory() as mem:
        # the whole set, as a fresh `hsf scan` of it starts its fork server (which loads the fused norm kernel for
        # scans of >= FUSED_NORMS_MIN_BYTES; a fork server started by a smaller scan would not have it)
        scan(files, workers=2, out=os.path.join(out_dir, "warm.jsonl"), fingerprint=False, progress=False)
        for mode in modes:
            fmt = "parquet" if mode == "scan-parquet" else "jsonl"
            dest = os.path.join(out_dir, f"rows_{mode}_{len(files)}.{fmt}")
            time.sleep(0.3)  # the previous call's workers are gone from the sampler's view
            mem.reset()
            load1 = os.getloadavg()[0]
            c0, t0 = cpu(mem), time.perf_counter()
            fp = SCAN_FP[mode]
            r = scan(files, workers=2, out=dest, progress=False, out_format=fmt, rows=mode != "scan-norows",
                     fingerprint=FINGERPRINT_FILES if fp is None else fp)
            seconds = time.perf_counter() - t0
            time.sleep(0.3)
            assert r.summary["files"] == len(files) and r.summary["errors"] == 0, r.summary
            out.append({"mode": mode, "files": len(files), "bytes": nbytes, "seconds": seconds,
                        "cpu_s": cpu(mem) - c0, "peak_rss_sum": mem.rss, "peak_pss_sum": mem.pss, "load1": load1,
                        "peak_breakdown": mem.breakdown,
                        "load1_after": os.getloadavg()[0],
                        "fingerprinted": sum(1 for row in r.rows if row.get("basis") == "fingerprint")})
    return out


def run_scan_round(modes: list[str], files: list[str], tmp: str) -> list[dict]:
    lst = os.path.join(tmp, f"list_round_{len(files)}.txt")
    with open(lst, "w") as f:
        f.write("\n".join(files))
    out = subprocess.run([sys.executable, __file__, "--scan-round", ",".join(modes), lst, tmp], capture_output=True,
                         text=True)
    if out.returncode:
        raise RuntimeError(f"scan round failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _median_range(xs: list[float]) -> str:
    import statistics

    return f"{statistics.median(xs):.2f}× ({min(xs):.2f}–{max(xs):.2f})" if xs else "n/a"


def round_table(results: list[dict]) -> str:
    """One line per round and file count: every mode's GB/s and its ratio to the naive loop and to cat measured
    in the same round, with the 1-minute load at each measurement."""
    lines = ["| files | round | mode | GB/s | × naive (same round) | × cat (same round) | CPU ms/file | peak RSS Σ "
             "| peak PSS Σ | load (1 min) |", "|---|---|---|---|---|---|---|---|---|---|"]
    by = {(r["files"], r.get("round"), r["mode"]): r for r in results}
    mb = (lambda v: "" if not v else f"{v / 1e6:.0f} MB")
    for r in results:
        if r.get("round") is None:
            continue
        gbps = r["bytes"] / r["seconds"] / 1e9
        nv, ct = by.get((r["files"], r["round"], "naive")), by.get((r["files"], r["round"], "cat"))
        xn = gbps / (nv["bytes"] / nv["seconds"] / 1e9) if nv and r["mode"] != "naive" else None
        xc = gbps / (ct["bytes"] / ct["seconds"] / 1e9) if ct and r["mode"] != "cat" else None
        ms = r["cpu_s"] / (r.get("cpu_bytes", r["bytes"]) / r["bytes"] * r["files"]) * 1e3 if r.get("cpu_s") else None
        lines.append(f"| {r['files']} | {r['round']} | {r['mode']} | {gbps:.2f} | "
                     f"{'' if xn is None else f'{xn:.2f}×'} | {'' if xc is None else f'{xc:.2f}×'} | "
                     f"{'' if ms is None else f'{ms:.1f}'} | {mb(r.get('peak_rss_sum'))} | "
                     f"{mb(r.get('peak_pss_sum'))} | {r.get('load1', 0):.1f} |")
    return "\n".join(lines)


GOAL_R_X_NAIVE = 2.0  # issue 32: the default scan ≥ 2 × the naive loop …
GOAL_R_X_CAT = 0.25  # … and ≥ 0.25 × cat (aim 0.5)
GOAL_R_ALL_X_NAIVE = 1.0  # --fingerprint all ≥ 1 × the naive loop
GOAL_R_MEM = 0.5e9  # peak memory of the scan's process tree ≤ 0.5 GB (PSS Σ: shared pages counted once) …
GOAL_R_FLAT = 1.15  # … flat: the largest file count's peak ≤ this × the smallest's
GOAL_FP_X_STATS = 2.0  # a fingerprint's CPU ≤ 2 × its file's statistics


def round_goals(results: list[dict], cpu_rows: list[dict] | None = None) -> list[str]:
    """Issue 32's goals from the interleaved rounds: medians (and ranges) over rounds of same-round ratios."""
    import statistics

    out = []
    sizes = sorted({r["files"] for r in results if r.get("round") is not None})
    by = {(r["files"], r.get("round"), r["mode"]): r for r in results}
    rate = (lambda r: r["bytes"] / r["seconds"])
    for n in sizes:
        rounds = sorted({r["round"] for r in results if r["files"] == n and r.get("round") is not None})

        def ratios(mode: str, ref: str, n: int = n, rounds: list = rounds) -> list[float]:
            return [rate(by[(n, k, mode)]) / rate(by[(n, k, ref)]) for k in rounds
                    if (n, k, mode) in by and (n, k, ref) in by]

        loads = [r["load1"] for r in results if r["files"] == n and r.get("round") is not None]
        lo = f"load (1 min) {min(loads):.1f}–{max(loads):.1f}"
        sn, sc, an, nn = ratios("scan", "naive"), ratios("scan", "cat"), ratios("scan-all", "naive"), \
            ratios("scan-none", "naive")
        fpd = [by[(n, k, "scan")]["fingerprinted"] for k in rounds if (n, k, "scan") in by]
        if sn and sc:
            out.append(f"GOAL hsf scan (default, {fpd[0]} of {n} fingerprinted) ≥ {GOAL_R_X_NAIVE:g}× naive: "
                       f"{_median_range(sn)} — {'met' if statistics.median(sn) >= GOAL_R_X_NAIVE else 'MISSED'}; "
                       f"≥ {GOAL_R_X_CAT:g}× cat: {_median_range(sc)} — "
                       f"{'met' if statistics.median(sc) >= GOAL_R_X_CAT else 'MISSED'}; {len(sn)} rounds, {lo}")
        if an:
            out.append(f"GOAL hsf scan --fingerprint all ≥ {GOAL_R_ALL_X_NAIVE:g}× naive ({n} files): "
                       f"{_median_range(an)} — {'met' if statistics.median(an) >= GOAL_R_ALL_X_NAIVE else 'MISSED'}"
                       f"; {lo}")
        if nn:
            out.append(f"REPORT hsf scan --fingerprint none ({n} files): {_median_range(nn)} the naive loop, "
                       f"{_median_range(ratios('scan-none', 'cat'))} cat; {lo}")
    peaks = {n: [r for r in results if r["files"] == n and r["mode"].startswith("scan") and r.get("peak_pss_sum")
                 and r.get("round") is not None] for n in sizes}
    if all(peaks.values()) and peaks:
        pss = {n: max(r["peak_pss_sum"] for r in v) for n, v in peaks.items()}
        rss = {n: max(r["peak_rss_sum"] for r in v) for n, v in peaks.items()}
        flat = pss[sizes[-1]] / pss[sizes[0]] if len(sizes) > 1 else 1.0
        worst = max(pss.values())
        out.append(f"GOAL peak memory of the scan's processes ≤ {GOAL_R_MEM / 1e9:g} GB (PSS Σ, shared pages once): "
                   + ", ".join(f"{n} files {pss[n] / 1e6:.0f} MB" for n in sizes)
                   + f" — {'met' if worst <= GOAL_R_MEM else 'MISSED'}; flat {flat:.2f}× "
                   f"(≤ {GOAL_R_FLAT:g}×) — {'met' if flat <= GOAL_R_FLAT else 'MISSED'}; RSS Σ (shared pages "
                   "counted in every process): " + ", ".join(f"{n} files {rss[n] / 1e6:.0f} MB" for n in sizes))
        for n in sizes:
            for mode in sorted({r["mode"] for r in peaks[n]}):
                top = max((r for r in peaks[n] if r["mode"] == mode), key=lambda r: r["peak_pss_sum"])
                if top.get("peak_breakdown"):
                    out.append(f"MEMORY {mode}, {n} files, at its peak PSS Σ {top['peak_pss_sum'] / 1e6:.0f} MB: "
                               + breakdown_line(top["peak_breakdown"]))
    cpu = {r["kernel"]: r["cpu_ms"] for r in cpu_rows or []}
    if "fingerprint" in cpu and "summarize" in cpu:
        x = cpu["fingerprint"] / cpu["summarize"]
        out.append(f"GOAL fingerprint CPU ≤ {GOAL_FP_X_STATS:g}× its file's statistics (one process, ms/file): "
                   f"{x:.2f}× ({cpu['fingerprint']:.1f} vs {cpu['summarize']:.1f} ms) — "
                   f"{'met' if x <= GOAL_FP_X_STATS else 'MISSED'}")
    return out


CPU_KERNELS = ("naive", "chunked-norms", "summarize", "fingerprint", "scan-row", "scan-row-norows", "fingerprint-row")


def cpu_per_file(kernel: str, files: list[str]) -> float:
    """CPU milliseconds (user + system, all threads) per file of one kernel, in this process: a measure the
    neighbours on a shared machine disturb far less than wall time. Two warm-up files, then the best of
    three rounds over the files."""
    import torch

    import forensics
    from forensics.analysis.scan.rows import file_row, init_worker
    from forensics.analysis.stats import summarize, token_norms

    if kernel.endswith("-row"):
        init_worker(tune_malloc=True)  # one torch thread, as in a scan worker
    elif kernel != "naive":
        torch.set_num_threads(1)

    def one(p: str) -> None:
        if kernel.startswith("naive"):
            d = torch.load(p, weights_only=True)
            [h.float().norm(dim=-1) for h in d["hidden_states"]]
        elif kernel == "chunked-norms":
            [token_norms(s.tensor()) for s in forensics.load(p).slots]
        elif kernel == "summarize":
            summarize(forensics.load(p))
        elif kernel == "fingerprint":
            forensics.fingerprint(forensics.load(p))
        else:
            st = os.stat(p)
            file_row(p, st.st_size, st.st_mtime_ns, use_fingerprint=kernel == "fingerprint-row",
                     row_checks=kernel != "scan-row-norows")

    for p in files[:2]:
        one(p)
    rounds = []
    for _ in range(3):  # interference only adds CPU time (cache misses, migrations): report the best round
        c0 = sum(os.times()[:2])
        for p in files:
            one(p)
        rounds.append((sum(os.times()[:2]) - c0) / len(files) * 1e3)
    return min(rounds)


def run_child(mode: str, files: list[str], tmp: str) -> dict:
    lst = os.path.join(tmp, f"list_{mode}_{len(files)}.txt")
    with open(lst, "w") as f:
        f.write("\n".join(files))
    out = subprocess.run([sys.executable, __file__, "--child", mode, lst, tmp], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{mode} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def time_cat(files: list[str], reps: int = 3) -> dict:
    import resource

    ts = []
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)
        ts.append(time.perf_counter() - t0)
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    nbytes = sum(os.path.getsize(p) for p in files)
    return {"mode": "cat", "files": len(files), "bytes": nbytes, "seconds": sorted(ts)[len(ts) // 2],
            "cpu_s": (c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime), "cpu_bytes": reps * nbytes,
            "peak_rss_sum": None, "peak_pss_sum": None, "load1": os.getloadavg()[0]}


def evict(files: list[str]) -> None:
    """Drop the files' pages from the page cache (``posix_fadvise(DONTNEED)``: clean pages are dropped at once)."""
    for p in dict.fromkeys(os.path.realpath(f) for f in files):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def cached_fraction(files: list[str]) -> float:
    """Share of the files' pages in the page cache (``mincore`` of a read-only mapping): checks an eviction."""
    import ctypes
    import mmap

    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    tot = res = 0
    for p in dict.fromkeys(os.path.realpath(f) for f in files):
        size = os.path.getsize(p)
        if not size:
            continue
        fd = os.open(p, os.O_RDONLY)
        try:
            addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            n = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vec = ctypes.create_string_buffer(n)
            if libc.mincore(addr, size, vec) == 0:
                res += sum(b & 1 for b in vec.raw)
            libc.munmap(addr, size)
        finally:
            os.close(fd)
        tot += n
    return res / tot if tot else 0.0


def time_cold_reader(tool: str, files: list[str]) -> dict:
    """``cat`` or ``dd bs=1M`` of the files right after evicting them (one process, as the scan reads)."""
    evict(files)
    distinct = list(dict.fromkeys(os.path.realpath(f) for f in files))
    t0 = time.perf_counter()
    if tool == "cat":
        subprocess.run(["cat", *distinct], stdout=subprocess.DEVNULL, check=True)
    else:
        for p in distinct:
            subprocess.run(["dd", f"if={p}", "of=/dev/null", "bs=1M", "status=none"], check=True)
    seconds = time.perf_counter() - t0
    nbytes = sum(os.path.getsize(p) for p in distinct)
    return {"mode": f"{tool} (cold)", "files": len(distinct), "bytes": nbytes, "seconds": seconds, "cpu_s": None,
            "peak_rss_sum": None, "peak_pss_sum": None, "load1": os.getloadavg()[0]}


def table(results: list[dict]) -> str:
    by = {(r["mode"], r["files"]): r for r in results}
    lines = ["| files | mode | GB/s (wall) | files/s | × naive | × cat | GB per CPU-s | CPU ms/file | peak RSS Σ "
             "| peak PSS Σ | load (1 min) | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        gbps = r["bytes"] / r["seconds"] / 1e9
        naive = by.get(("naive", r["files"]))
        cat = by.get(("cat", r["files"]))
        x_naive = gbps / (naive["bytes"] / naive["seconds"] / 1e9) if naive else None
        x_cat = gbps / (cat["bytes"] / cat["seconds"] / 1e9) if cat else None
        note = f"first call {r['bytes'] / r['seconds_first'] / 1e9:.2f} GB/s" if r.get("seconds_first") else ""
        mb = (lambda v: "n/a" if v is None else f"{v / 1e6:.0f} MB")
        eff = r.get("cpu_bytes", r["bytes"]) / r["cpu_s"] / 1e9 if r.get("cpu_s") else None
        ms = r["cpu_s"] / (r.get("cpu_bytes", r["bytes"]) / r["bytes"] * r["files"]) * 1e3 if r.get("cpu_s") else None
        lines.append(f"| {r['files']} | {r['mode']} | {gbps:.2f} | {r['files'] / r['seconds']:.1f} | "
                     f"{'' if x_naive is None else f'{x_naive:.1f}×'} | {'' if x_cat is None else f'{x_cat:.2f}×'} | "
                     f"{'' if eff is None else f'{eff:.2f}'} | {'' if ms is None else f'{ms:.1f}'} | "
                     f"{mb(r['peak_rss_sum'])} | {mb(r['peak_pss_sum'])} | {r.get('load1', 0):.2f} | {note} |")
    return "\n".join(lines)


GOAL_X_NAIVE = 4.0  # hsf scan (default settings) ≥ 4 × the naive loop ...
GOAL_X_CAT = 0.6  # ... and ≥ 0.6 × cat (warm page cache, 128 files)
GOAL_ALL_X_NAIVE = 2.0  # --fingerprint all ≥ 2 × the naive loop
GOAL_RSS = 1e9  # peak RSS summed over all processes ≤ 1 GB ...
GOAL_RSS_FLAT = 1.15  # ... and flat: the 128-file peak ≤ this × the 32-file peak
GOAL_ROWS_X = 1.3  # the default scan with the row checks ≤ 1.3 × its time without them (issue 22)


def rows_goal(results: list[dict], cpu_rows: list[dict] | None = None) -> list[str]:
    """The row checks' cost: the default scan's wall time with them over without, per file count, side by side
    in this run, and the CPU per file of one scan row with and without them (steadier on a shared machine)."""
    by = {(r["mode"], r["files"]): r for r in results}
    out = []
    for n in sorted({r["files"] for r in results if r["mode"] == "scan-norows"}):
        a, b = by.get(("scan", n)), by.get(("scan-norows", n))
        if a and b:
            x = a["seconds"] / b["seconds"]
            out.append(f"GOAL hsf scan (default) with row checks ≤ {GOAL_ROWS_X:g}× without ({n} files, wall): "
                       f"{x:.2f}× ({a['seconds']:.2f} s vs {b['seconds']:.2f} s; CPU {a['cpu_s']:.1f} vs "
                       f"{b['cpu_s']:.1f} s) — {'met' if x <= GOAL_ROWS_X else 'MISSED'}; load (1 min) "
                       f"{a['load1']:.2f}/{b['load1']:.2f}")
    cpu = {r["kernel"]: r["cpu_ms"] for r in cpu_rows or []}
    if "scan-row" in cpu and "scan-row-norows" in cpu:
        x = cpu["scan-row"] / cpu["scan-row-norows"]
        out.append(f"GOAL one scan row with row checks ≤ {GOAL_ROWS_X:g}× without (CPU ms/file, one process): "
                   f"{x:.2f}× ({cpu['scan-row']:.1f} vs {cpu['scan-row-norows']:.1f} ms) — "
                   f"{'met' if x <= GOAL_ROWS_X else 'MISSED'}")
    return out


def goals(results: list[dict]) -> list[str]:
    """The issue's goals, each as one line with the measured ratio and the load beside it."""
    by = {(r["mode"], r["files"]): r for r in results}
    rate = (lambda r: r["bytes"] / r["seconds"])
    out = []
    n = max(r["files"] for r in results if r["mode"] == "scan")
    scan, naive, cat = by.get(("scan", n)), by.get(("naive", n)), by.get(("cat", n))
    if scan and naive and cat:
        xn, xc = rate(scan) / rate(naive), rate(scan) / rate(cat)
        out.append(f"GOAL hsf scan (default, {scan.get('fingerprinted')} of {n} files fingerprinted) ≥ "
                   f"{GOAL_X_NAIVE:g}× naive: {xn:.2f}× — {'met' if xn >= GOAL_X_NAIVE else 'MISSED'}; ≥ "
                   f"{GOAL_X_CAT:g}× cat: {xc:.2f}× — {'met' if xc >= GOAL_X_CAT else 'MISSED'}; load (1 min) "
                   f"{scan['load1']:.2f}")
    fpall = by.get(("scan-all", n))
    if fpall and naive:
        x = rate(fpall) / rate(naive)
        out.append(f"GOAL hsf scan --fingerprint all ≥ {GOAL_ALL_X_NAIVE:g}× naive: {x:.2f}× — "
                   f"{'met' if x >= GOAL_ALL_X_NAIVE else 'MISSED'}; load (1 min) {fpall['load1']:.2f}")
    sizes = sorted({r["files"] for r in results if r["mode"] == "scan"})
    peaks = {f: max(r["peak_rss_sum"] for r in results if r["files"] == f and r["mode"].startswith("scan")
                    and r.get("peak_rss_sum")) for f in sizes}
    if peaks:
        worst = max(peaks.values())
        flat = peaks[sizes[-1]] / peaks[sizes[0]] if len(sizes) > 1 else 1.0
        out.append(f"GOAL peak RSS Σ (all scan modes) ≤ {GOAL_RSS / 1e9:g} GB: "
                   + ", ".join(f"{f} files {peaks[f] / 1e6:.0f} MB" for f in sizes)
                   + f" — {'met' if worst <= GOAL_RSS else 'MISSED'}; flat ({sizes[-1]} vs {sizes[0]} files "
                   f"{flat:.2f}×, ≤ {GOAL_RSS_FLAT:g}×) — {'met' if flat <= GOAL_RSS_FLAT else 'MISSED'}")
    cold = {r["mode"]: r for r in results if "cold" in r["mode"]}
    if cold:
        out.append("COLD (page cache dropped with posix_fadvise DONTNEED before each): " + ", ".join(
            f"{m} {rate(r) / 1e9:.2f} GB/s" for m, r in cold.items())
            + (f"; scan ÷ cat {rate(cold['scan-cold']) / rate(cold['cat (cold)']):.2f}×, scan ÷ dd "
               f"{rate(cold['scan-cold']) / rate(cold['dd (cold)']):.2f}×" if {"scan-cold", "cat (cold)",
                                                                               "dd (cold)"} <= set(cold) else "")
            + f"; load (1 min) {max(r['load1'] for r in cold.values()):.2f}")
    return out


def main() -> None:  # noqa: C901 - complexity 16, to be paid down
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(*sys.argv[2:5])))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--scan-round":
        print(json.dumps(scan_round(sys.argv[2].split(","), sys.argv[3], sys.argv[4])))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--cpu-child":
        with open(sys.argv[3]) as f:
            print(json.dumps({"kernel": sys.argv[2], "cpu_ms": cpu_per_file(sys.argv[2], f.read().split())}))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=32, help="distinct generated files (default 32, ~2.4 GB)")
    ap.add_argument("--links", type=int, default=128, help="also run on this many files via hard links (0: no)")
    ap.add_argument("--keep", help="folder to generate into and keep (default: a temp folder, removed)")
    ap.add_argument("--modes", default="scan,scan-none,scan-all",
                    help="scan modes timed in each round (also: scan-norows, scan-parquet)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (cat, naive, the scan modes)")
    ap.add_argument("--sequential", action="store_true",
                    help="the pre-issue-32 layout: each mode once, in its own process, one after the other")
    ap.add_argument("--no-cold", action="store_true", help="skip the cold-cache runs")
    ap.add_argument("--no-cpu", action="store_true", help="skip the per-kernel CPU table")
    args = ap.parse_args()
    need = args.files * 73.5e6 * 1.1
    root = args.keep or tempfile.mkdtemp(prefix="hsf-bench-scan-", dir="/tmp" if os.path.isdir("/tmp") else None)
    free = shutil.disk_usage(os.path.dirname(os.path.abspath(root))).free
    if free < need:
        sys.exit(f"need {need / 1e9:.1f} GB free next to {root}, have {free / 1e9:.1f} GB")
    try:
        os.makedirs(os.path.join(root, "distinct"), exist_ok=True)
        existing = sorted(os.listdir(os.path.join(root, "distinct")))
        t0 = time.perf_counter()
        files = [os.path.join(root, "distinct", f) for f in existing] if len(existing) == args.files else \
            make_samples(os.path.join(root, "distinct"), args.files)
        print(f"# {len(files)} files ready in {time.perf_counter() - t0:.1f} s under {root}", file=sys.stderr)
        sets = [files] + ([link_copies(files, os.path.join(root, "links"), args.links)] if args.links else [])
        print(f"# load average before: {os.getloadavg()}, cores: {os.cpu_count()}", file=sys.stderr)
        results = []
        for fs in sets:
            subprocess.run(["cat", *fs], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
            if not args.sequential:
                for k in range(args.rounds):
                    print(f"# round {k + 1}/{args.rounds} on {len(fs)} files: cat, naive, {args.modes} "
                          f"(load {os.getloadavg()[0]:.1f})", file=sys.stderr)
                    results.append({**time_cat(fs, reps=1), "round": k})
                    results.append({**run_child("naive", fs, root), "round": k})
                    results.extend({**r, "round": k} for r in run_scan_round(args.modes.split(","), fs, root))
                    with open(os.path.join(root, "partial.json"), "w") as f:  # what a run stopped early measured
                        json.dump(results, f)
                continue
            results.append(time_cat(fs))
            for mode in ["naive"] + args.modes.split(","):
                print(f"# {mode} on {len(fs)} files …", file=sys.stderr)
                results.append(run_child(mode, fs, root))
            results.append(time_cat(fs))  # cat again: shows how much the machine's load moved meanwhile
            results[-1]["mode"] = "cat (again)"
        if not args.no_cold:
            print("# cold cache: cat, dd, scan (each after posix_fadvise DONTNEED)", file=sys.stderr)
            for tool in ("cat", "dd"):
                results.append(time_cold_reader(tool, files))
            results.append(run_child("scan-cold", files, root))
            print(f"# pages still cached after an eviction: {(evict(files), cached_fraction(files))[1]:.1%}",
                  file=sys.stderr)
        cpu_rows = []
        if not args.no_cpu:
            lst = os.path.join(root, "list_cpu.txt")
            with open(lst, "w") as f:
                f.write("\n".join(files[:16]))
            for kernel in CPU_KERNELS:  # each kernel in a fresh process (malloc state, thread settings)
                out = subprocess.run([sys.executable, __file__, "--cpu-child", kernel, lst], capture_output=True,
                                     text=True, check=True)
                cpu_rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"# load average after: {os.getloadavg()}", file=sys.stderr)
        rounds = [r for r in results if r.get("round") is not None]
        print(round_table(rounds) if rounds else "")
        print(table([r for r in results if r.get("round") is None]) if len(rounds) < len(results) else "")
        if cpu_rows:
            size = os.path.getsize(files[0])
            naive = cpu_rows[0]["cpu_ms"]
            print(f"\nCPU per {size / 1e6:.1f} MB file (one process, 16 warm files, best of 3 rounds; user + "
                  "system, all threads):\n")
            print("| kernel | CPU ms/file | GB per CPU-s | naive ÷ this |\n|---|---|---|---|")
            for r in cpu_rows:
                print(f"| {r['kernel']} | {r['cpu_ms']:.1f} | {size / r['cpu_ms'] / 1e6:.2f} | "
                      f"{naive / r['cpu_ms']:.2f}× |")
        print()
        rest = [r for r in results if r.get("round") is None]
        print("\n".join(round_goals(rounds, cpu_rows) + (goals(rest) if any(r["mode"] == "scan" for r in rest)
                                                          else []) + rows_goal(results, cpu_rows)))
        print(json.dumps(results), file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
