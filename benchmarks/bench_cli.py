"""Benchmark: wall time of the interactive commands, warm (files and Python modules in the page cache).

Times, each as a fresh ``hsf`` process (what a user waits for), one warm-up run then ``--reps`` runs:

- ``hsf --help``;
- ``hsf report sample_data --draft sample_data/draft_eagle3 --engine sglang --trainer speculators-v1 -o …``
  (the ``make demo`` command);
- ``hsf probe --draft sample_data/draft_eagle3 --data sample_data/speculators_v1 --model default --steps 3``
  (chains of k = 3 draft tokens under 26 candidate wirings and 2 controls, batched per file).

Prints the median wall time, its range, the CPU time (user + system, all threads: what the command costs
when it has the cores to itself) and the 1-minute load average beside each goal. The report runs through a
small wrapper of ``forensics.cli.main`` that also times the draft probe inside it, so its line splits the
time into the probe's share and the rest (loading, fingerprints, figures, HTML).

    nice .venv/bin/python benchmarks/bench_cli.py [--reps 3]

"Warm" includes Python's bytecode cache: an installed package has its ``.pyc`` files. Where the environment
sets ``PYTHONDONTWRITEBYTECODE`` (as this project's sandboxes do) every run would recompile the ~1,000 modules
torch imports (about 2 s of CPU here, more under load), so the timed runs drop that variable and keep their
bytecode under ``PYTHONPYCACHEPREFIX`` in the benchmark's temporary folder (filled by the warm-up run; nothing is
written into the installed packages).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

GOALS = {"help": 0.1, "report": 4.0, "probe": 5.0}  # seconds, warm (the probe at k = 3: issue 26)


def hsf() -> list[str]:
    exe = shutil.which("hsf", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "forensics.cli"]


def commands(out: str) -> dict[str, list[str]]:
    return {
        "help": ["--help"],
        "report": ["report", "sample_data", "--draft", "sample_data/draft_eagle3", "--engine", "sglang",
                   "--trainer", "speculators-v1", "-o", os.path.join(out, "report.html")],
        "probe": ["probe", "--draft", "sample_data/draft_eagle3", "--data", "sample_data/speculators_v1",
                  "--model", "default", "--steps", "3"],
    }


# `hsf ARGS` with the draft probe inside the report timed: wall and CPU (all threads) of probe() to PROBE_OUT
PROBE_TIMED = """
import json, sys, time
import forensics.analysis.report as core
real, spent = core.probe, [0.0, 0.0]
def probe(*a, **k):
    w, c = time.perf_counter(), time.process_time()
    try:
        return real(*a, **k)
    finally:
        spent[0] += time.perf_counter() - w
        spent[1] += time.process_time() - c
core.probe = probe
from forensics.cli import main
try:
    rc = main(sys.argv[2:])
finally:
    with open(sys.argv[1], "w") as f:
        json.dump(spent, f)
sys.exit(rc)
"""


def bench_env(tmp: str) -> dict[str, str]:
    """The timed runs' environment: offline, and a bytecode cache even where the caller disabled writing one."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if env.pop("PYTHONDONTWRITEBYTECODE", None) is not None and "PYTHONPYCACHEPREFIX" not in env:
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
    return env


def time_cmd(argv: list[str], reps: int, probe_out: str | None = None, env: dict[str, str] | None = None
             ) -> tuple[list[float], list[float], list]:
    """Wall seconds and CPU seconds (user + system of the process and its children) of each timed run, and
    with ``probe_out`` (``argv`` then runs ``PROBE_TIMED``) the probe's (wall, CPU) seconds of each run."""
    import json
    import resource

    env = env if env is not None else dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # warm-up
    ts, cs, ps = [], [], []
    for _ in range(reps):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        rc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if rc.returncode > 1:  # 0 clean, 1 findings (the demo's draft is mis-wired on purpose), 2 unreadable input
            raise SystemExit(f"{' '.join(argv)} failed ({rc.returncode}): {rc.stderr[-1000:]}")
        ts.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cs.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
        if probe_out is not None:
            with open(probe_out) as f:
                ps.append(json.load(f))
    return ts, cs, ps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--only", default=",".join(GOALS), help="comma-separated subset of help,report,probe")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hsf-bench-cli-") as tmp:
        cmds = commands(tmp)
        for name in args.only.split(","):
            load = os.getloadavg()[0]
            probe_out = os.path.join(tmp, "probe.json") if name == "report" else None
            argv = [sys.executable, "-c", PROBE_TIMED, probe_out] if probe_out else hsf()
            ts, cs, ps = time_cmd(argv + cmds[name], args.reps, probe_out, bench_env(tmp))
            med = statistics.median(ts)
            print(f"GOAL hsf {name} ≤ {GOALS[name]:g} s warm: median {med:.2f} s (range {min(ts):.2f}–{max(ts):.2f}, "
                  f"{len(ts)} runs; CPU {statistics.median(cs):.2f} s) — "
                  f"{'met' if med <= GOALS[name] else f'MISSED by {med / GOALS[name]:.1f}×'}; load (1 min) {load:.2f}")
            if ps:
                pw, pc = statistics.median(p[0] for p in ps), statistics.median(p[1] for p in ps)
                rest_w = statistics.median(t - p[0] for t, p in zip(ts, ps, strict=True))
                rest_c = statistics.median(c - p[1] for c, p in zip(cs, ps, strict=True))
                print(f"  of which the draft probe: {pw:.2f} s wall, {pc:.2f} s CPU; the rest (start-up, loading, "
                      f"fingerprints, figures, HTML): {rest_w:.2f} s wall, {rest_c:.2f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
