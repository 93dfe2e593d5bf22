"""The report's PNG figures: requested while the panels are built, drawn afterwards as one batch.

Each (figure, result object) pair is drawn once (the audited file's norm distributions appear in two panels),
and a batch is drawn by forked worker processes when the machine has a spare core: drawing a matplotlib
figure is single-threaded Python (60–250 ms CPU per figure of ``sample_data/``, 18 figures in the ``make demo``
report, 2026-12-01), while the rest of the report has finished by then. The workers inherit the result objects
from the fork (nothing is pickled on the way in) and send back base64 PNG text; where fork is unavailable, or
a worker dies, the figures are drawn in this process. The PNG bytes are the same either way. Forked drawing
costs 8–19 % more CPU in all than drawing here (copied pages, per-process caches; 16 figures, 2026-12-01), so
workers are started only when the 1-minute load leaves whole cores idle.
"""

from __future__ import annotations

import base64
import os
import sys
import warnings
from collections.abc import Callable

from forensics.errors import ForensicsError

FIG_DPI = 80  # modest: the report's size budget is 5 MB (SIZE_BUDGET_BYTES)
MAX_FIGURE_WORKERS = 2  # drawing processes at most (bounded by the CPUs this process may use)
# Fewer figures than this are drawn here: starting a forked worker costs ~20–60 ms (copying the page tables of
# a process holding torch and the captures), about one small figure.
MIN_PARALLEL_FIGURES = 4
# Forked workers that have not returned every figure within this bound (a worker stuck on a lock it inherited
# from the fork) are killed and the rest is drawn here; a figure takes 0.05–0.4 s CPU on sample_data/.
FORKED_BATCH_SECONDS, FORKED_FIGURE_SECONDS = 60.0, 5.0

_BATCH: list[tuple[str, tuple]] = []  # the batch being drawn: read by forked workers, never pickled


def draw(name: str, *args, **kw) -> dict:
    """Call ``forensics.views.plots.<name>`` and inline the Figure as a base64 PNG; the error text when it fails."""
    try:
        from forensics.views import plots
    except ImportError as e:
        return {"name": name, "src": None, "error": f"forensics.views.plots unavailable ({e})"}
    fn = getattr(plots, name, None)
    if fn is None:
        return {"name": name, "src": None, "error": f"forensics.views.plots has no {name}()"}
    try:
        png = plots.figure_to_png_bytes(fn(*args, **kw), dpi=FIG_DPI)
    except (ForensicsError, ValueError) as e:  # degenerate data (no finite norm, one token): listed
        return {"name": name, "src": None, "error": f"{type(e).__name__}: {e}"}
    return {"name": name, "src": "data:image/png;base64," + base64.b64encode(png).decode(), "error": None}


def _draw_nth(i: int) -> dict:
    name, args = _BATCH[i]
    return draw(name, *args)


def _spare_cpus() -> int:
    """CPUs this process may use that the machine is not already busy on (1-minute load average)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0]
    except OSError:
        busy = 0.0
    # The 1-minute average lags: a report's own few seconds barely show in it, so what it counts is others' work.
    return max(1, cpus - round(busy))


def _weight(args: tuple) -> int:
    """Slots drawn: a 32-slot ladder's figures cost ~3× a 4-slot file's, so they are handed out first."""
    return max((len(getattr(getattr(a, "stats", a), "slots", None) or []) for a in args), default=0)


class Figures:
    """Figures requested by the panel builders (``request`` returns the dict the template reads, filled in by
    ``draw``), each distinct (figure, result) drawn once."""

    def __init__(self, workers: int | None = None):
        self.workers = MAX_FIGURE_WORKERS if workers is None else workers
        self._jobs: dict[tuple, tuple[str, tuple]] = {}
        self._waiting: dict[tuple, list[dict]] = {}

    def request(self, name: str, *args, **extra) -> dict:
        """A figure dict (``name``, ``src``, ``error`` and ``extra`` such as a title), filled by :meth:`draw`."""
        key = (name, *(id(a) for a in args))  # args stay referenced by the job: their ids stay theirs
        self._jobs.setdefault(key, (name, args))
        fig = {"name": name, "src": None, "error": "not drawn", **extra}
        self._waiting.setdefault(key, []).append(fig)
        return fig

    def __len__(self) -> int:
        return len(self._jobs)

    def draw(self, progress: Callable[[int, int], None] | None = None) -> None:
        """Draw every requested figure (in worker processes when worthwhile) and fill the requested dicts."""
        keys = sorted(self._jobs, key=lambda k: -_weight(self._jobs[k][1]))
        results = _draw_batch([self._jobs[k] for k in keys], self.workers, progress)
        for key, res in zip(keys, results, strict=True):
            for fig in self._waiting[key]:
                fig.update(res)
        self._jobs.clear()
        self._waiting.clear()


def _draw_batch(jobs: list[tuple[str, tuple]], workers: int, progress) -> list[dict]:
    tick = progress or (lambda done, total: None)
    out: list[dict | None] = [None] * len(jobs)
    n = min(workers, _spare_cpus(), len(jobs))  # on a busy machine, workers only add start-up and contention
    if n >= 2 and len(jobs) >= MIN_PARALLEL_FIGURES and sys.platform == "linux":
        out = _draw_forked(jobs, n, tick)
    for i, res in enumerate(out):  # serial, or what a dead worker left undrawn
        if res is None:
            tick(i, len(jobs))
            out[i] = draw(jobs[i][0], *jobs[i][1])
    tick(len(jobs), len(jobs))
    return [r for r in out if r is not None]


def _warm_up() -> None:
    """Draw a tiny log-axis figure with plain, bold and math text in this process, before the fork: matplotlib
    imports its backend, builds its mathtext parser and loads its fonts on a process's first figure (0.3–0.7 s
    CPU, measured 2026-12-01), which the workers then inherit instead of each paying it."""
    from matplotlib.figure import Figure

    from forensics.views.plots import figure_to_png_bytes

    fig = Figure(figsize=(3, 2), layout="constrained")
    ax, heat = fig.subplots(1, 2)
    ax.scatter([1, 2], [1, 1000])
    ax.set_yscale("log")
    ax.set_title("w", fontsize=10)
    ax.text(1, 10, "w", weight="bold")
    fig.colorbar(heat.imshow([[0.0, 1.0]], cmap="cividis"), ax=heat)
    figure_to_png_bytes(fig, dpi=FIG_DPI)


def _draw_forked(jobs: list[tuple[str, tuple]], n: int, tick) -> list[dict | None]:
    import gc
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    global _BATCH
    _warm_up()
    gc.freeze()  # the workers' collections then skip the inherited objects (no copy-on-write of the whole heap)
    out: list[dict | None] = [None] * len(jobs)
    _BATCH = jobs
    ex = None
    try:
        with warnings.catch_warnings():  # Python ≥ 3.12 warns about fork in a process with threads (torch's
            warnings.simplefilter("ignore", DeprecationWarning)  # pool); the workers only run matplotlib
            ex = ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("fork"))
            done = ex.map(_draw_nth, range(len(jobs)), timeout=FORKED_BATCH_SECONDS + FORKED_FIGURE_SECONDS * len(jobs))
            for i, res in enumerate(done):
                out[i] = res
                tick(i + 1, len(jobs))
    except (BrokenProcessPool, OSError, TimeoutError):  # a worker died, hung or could not start: the rest is
        for proc in list((getattr(ex, "_processes", None) or {}).values()):  # drawn here
            proc.kill()
    finally:
        if ex is not None:
            ex.shutdown(wait=True, cancel_futures=True)
        _BATCH = []
        gc.unfreeze()
    return out
