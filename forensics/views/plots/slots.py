"""Figures of result objects: pure functions (result in, matplotlib ``Figure`` out), nothing recomputed.

Every function takes a result the compute modules already produced (``CaptureStats``, ``Fingerprint``,
``AuditResult``, ``ScanResult``) and returns a new :class:`matplotlib.figure.Figure` that is *not*
registered with pyplot: no global figure state, nothing to ``plt.close``, no backend needed (PNG export
goes through Agg). In Jupyter the figures display inline (a PNG formatter is registered on first use).

    >>> import forensics, forensics.views.plots as hp                      # doctest: +SKIP
    >>> fp = forensics.fingerprint("sample_data/speculators_v1/data_0.pt")   # doctest: +SKIP
    >>> hp.norm_distributions(fp)                                     # doctest: +SKIP
    >>> png = hp.figure_to_png_bytes(hp.depth_ladder(fp), dpi=100)    # doctest: +SKIP

Slot names on every axis come from :func:`slot_labels`: ``"1: L3"`` (stored index, then the
fingerprint's label, else the r the file declares, else the slot's own name).
"""

from __future__ import annotations

import base64
import io
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from forensics.analysis.stats import MASSIVE_ABS_THRESHOLD, MASSIVE_REL_THRESHOLD, SINK_RATIO
from forensics.errors import escape
from forensics.layers import FINAL_POST, r_label
from forensics.views.format import esc, num

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    from forensics.analysis.stats import CaptureStats, SlotStats

# Okabe & Ito (2008) colour-blind-safe palette; yellow last (weak on white).
OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442"]
OK_COLOR, BAD_COLOR, UNKNOWN_COLOR = "#009E73", "#D55E00", "#999999"
SEQUENTIAL_CMAP = "cividis"  # perceptually uniform and colour-blind safe (Nuñez et al. 2018)
FIG_WIDTH = 7.0  # inches: fits a notebook cell and the report column at 100 dpi
ROW_HEIGHT = 3.0
MAX_HEIGHT = 6.0  # inches: a 32-slot ladder capture still fits a screen and the report
MAX_LEGEND_ROWS = 12  # more lines than this: the norm-by-position legend moves under the axes, 6 per row
MAX_ANNOTATED_ROWS = 12  # per-row text annotations (depth ladder, massive dims) only up to this many rows
DEFAULT_DPI = 100
MAX_STRIP_POINTS = 4000  # per slot; beyond this the token strip is strided (sinks always kept)
KDE_GRID = 128
MAX_ANNOTATED_CELLS = 12  # similarity heatmaps up to k×k cells get their values written in
# A log axis spanning at least this many decades has ≥ 2 labelled decade ticks, so its minor ticks (8 per
# decade, each a matplotlib Tick of 5 artists) are left out: 20–40 % of a norm figure's drawing time
# (cProfile and process_time, sample_data/, 2026-12-01). Narrower spans keep them: there the minor ticks
# carry the only labels.
LEAN_LOG_DECADES = 2.0


# ----------------------------------------------------------------------------------------------- helpers
def _unpack(result: Any) -> tuple[CaptureStats, Any]:
    """(CaptureStats, Fingerprint or None) from a CaptureStats or a Fingerprint."""
    if hasattr(result, "stats") and hasattr(result.stats, "slots"):  # a Fingerprint, or anything carrying stats
        return result.stats, result
    if hasattr(result, "slots") and hasattr(result, "capture"):  # a CaptureStats, or one built by hand
        return result, None
    raise TypeError(f"expected CaptureStats or Fingerprint, got {type(result).__name__}")


def slot_labels(result: Any) -> list[str]:
    """Axis labels per slot, ``"<stored index>: <label>"``.

    The label is the fingerprint's ``label`` (or exact r), else the r the file declares, else the slot
    name; when the fingerprint's label differs from the declared r, the declaration is shown too
    (``"0: L16 (decl. embed)"``), so a reordered file is visible on every plot.
    """
    stats, fp = _unpack(result)
    out = []
    for i, s in enumerate(stats.slots):
        declared = r_label(s.declared_r) if s.declared_r is not None else None
        lab = None
        if fp is not None and i < len(fp.slots):
            sf = fp.slots[i]
            lab = sf.label
            if lab is None and sf.r_exact is not None:
                lab = r_label(sf.r_exact)
        if lab is None:
            lab = declared or s.name
        elif declared and declared != lab:
            lab = f"{lab} (decl. {declared})"
        out.append(f"{s.index}: {lab}")
    return out


def slot_colors(k: int) -> list:
    """k distinct colour-blind-safe colours (Okabe–Ito up to 8, then samples of cividis)."""
    if k <= len(OKABE_ITO):
        return OKABE_ITO[:k]
    from matplotlib import colormaps

    cmap = colormaps[SEQUENTIAL_CMAP]
    return [cmap(x) for x in np.linspace(0.0, 0.95, k)]


def _colors_for(stats: CaptureStats, sel: list[int]) -> dict[int, Any]:
    """Slot index → colour: fixed per slot when the capture has ≤ 8 slots, else per selected slot (so a
    handful picked out of a 32-slot ladder still get distinct Okabe–Ito colours)."""
    k = len(stats.slots)
    if k <= len(OKABE_ITO):
        return dict(enumerate(slot_colors(k)))
    return dict(zip(sel, slot_colors(len(sel)), strict=True))


def _figure(height: float = ROW_HEIGHT, width: float = FIG_WIDTH) -> Figure:
    from matplotlib.figure import Figure

    _register_inline_png()
    return Figure(figsize=(width, min(height, MAX_HEIGHT)), dpi=DEFAULT_DPI, layout="constrained")


_INLINE_DONE = False


def _register_inline_png() -> None:
    """Inside IPython, show bare Figures as PNG (pyplot is never involved, so no inline backend hook)."""
    global _INLINE_DONE
    if _INLINE_DONE:
        return
    _INLINE_DONE = True
    try:
        from IPython import get_ipython
        from matplotlib.figure import Figure
    except ImportError:  # pragma: no cover
        return
    ip = get_ipython()
    if ip is not None:
        ip.display_formatter.formatters["image/png"].for_type(Figure, lambda f: figure_to_png_bytes(f))


def _selected(stats: CaptureStats, slots: Sequence[int] | None) -> list[int]:
    n = len(stats.slots)
    if slots is None:
        return list(range(n))
    if isinstance(slots, (int, np.integer)):
        slots = [int(slots)]
    return [int(i) for i in slots if 0 <= int(i) < n]


def _name(stats: CaptureStats) -> str:
    return escape(os.path.basename(str(stats.capture.path)))  # a non-UTF-8 name cannot be drawn: \xNN


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#555555")
    ax.set_xticks([])
    ax.set_yticks([])


# ------------------------------------------------------------------------------------------------ export
def figure_to_png_bytes(fig: Figure, dpi: int = DEFAULT_DPI) -> bytes:
    """PNG bytes of a figure (Agg; works for figures never shown, with no display).

    The figure is drawn once: the layout engine runs, is frozen for the one Agg draw, then restored.
    ``Figure.savefig`` draws a figure with a layout engine twice (a draw with rendering disabled to place
    the constrained layout, then the real one); skipping that first pass gives the same pixels for
    15–25 % less CPU per figure (measured on the report's figures, 2026-12-01).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    buf = io.BytesIO()
    old_dpi, engine = fig.get_dpi(), fig.get_layout_engine()
    canvas = FigureCanvasAgg(fig)
    try:
        fig.set_dpi(dpi)
        if engine is not None:
            engine.execute(fig)
            fig.set_layout_engine("none")  # placed: the draw below must not lay it out again
        canvas.print_png(buf)
    finally:
        if engine is not None:
            fig.set_layout_engine(engine)
        fig.set_dpi(old_dpi)
    return buf.getvalue()


def figure_to_html(fig: Figure, alt: str = "", dpi: int = DEFAULT_DPI) -> str:
    """An ``<img>`` tag with the figure inlined as a base64 PNG data URI (no network, one file)."""
    data = base64.b64encode(figure_to_png_bytes(fig, dpi=dpi)).decode("ascii")
    title = alt or (fig.axes[0].get_title() if fig.axes else "")
    return (f"<img class='hsf-plot' alt='{esc(title)}' src='data:image/png;base64,{data}' "
            f"style='max-width:100%;height:auto'/>")


# ----------------------------------------------------------------------------------------- norm figures
def kde_log10(values: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Gaussian KDE of log10(values) on a grid clipped to the data range (Silverman bandwidth): (grid, density
    scaled to a maximum of 1), None when fewer than 2 distinct values. The violins of every renderer."""
    x = np.log10(values)
    if x.size < 2 or np.ptp(x) == 0:
        return None
    bw = max(1.06 * float(x.std()) * x.size ** (-0.2), 1e-3)
    grid = np.linspace(float(x.min()), float(x.max()), KDE_GRID)
    sample = x if x.size <= 20000 else x[:: math.ceil(x.size / 20000)]
    dens = np.exp(-0.5 * ((grid[:, None] - sample[None, :]) / bw) ** 2).sum(axis=1)
    return grid, dens / dens.max()


def _lean_log_axis(axis: Any, lo: float, hi: float) -> None:
    """No minor ticks on a log axis whose data span ``LEAN_LOG_DECADES`` or more (see there)."""
    if 0 < lo < hi < math.inf and math.log10(hi / lo) >= LEAN_LOG_DECADES:
        from matplotlib.ticker import NullLocator

        axis.set_minor_locator(NullLocator())


def strip_index(n: int, keep: Sequence[int]) -> np.ndarray:
    """Token positions of a slot's strip: all of them up to ``MAX_STRIP_POINTS``, else strided (``keep`` kept)."""
    if n <= MAX_STRIP_POINTS:
        return np.arange(n)
    idx = np.arange(0, n, math.ceil(n / MAX_STRIP_POINTS))
    return np.union1d(idx, np.asarray([k for k in keep if k < n], dtype=int))


@dataclass(frozen=True)
class Violin:
    """What :func:`norm_distributions` draws for one slot (computed once by :func:`violins`, drawn by the
    matplotlib figure and the report's SVG alike).

    ``kde``: (log10 grid, density ≤ 1) or None; ``strip``: token positions drawn, ``jitter``: their x offsets
    (uniform ±0.12, seeded); ``sinks``: sink positions with a finite positive norm; ``median``: the slot's.
    """

    slot: int
    norms: np.ndarray  # float64 [T]
    kde: tuple[np.ndarray, np.ndarray] | None
    strip: np.ndarray
    jitter: np.ndarray
    median: float
    sinks: list[int]


def violins(stats: CaptureStats, sel: Sequence[int]) -> tuple[list[Violin], tuple[float, float]]:
    """The violin, strip, median and sinks of each selected slot, and the (smallest, largest) finite positive
    norm among them (inf, -inf when none)."""
    rng = np.random.default_rng(0)
    out, span = [], [math.inf, -math.inf]
    for i in sel:
        s: SlotStats = stats.slots[i]
        norms = np.asarray(s.norms, dtype=np.float64)
        ok = np.isfinite(norms) & (norms > 0)
        if ok.any():
            span = [min(span[0], float(norms[ok].min())), max(span[1], float(norms[ok].max()))]
        idx = strip_index(norms.size, s.sinks)
        idx = idx[ok[idx]]
        jitter = rng.uniform(-0.12, 0.12, idx.size)
        sinks = [p for p in s.sinks if p < norms.size and ok[p]] if s.sinks else []
        out.append(Violin(i, norms, kde_log10(norms[ok]), idx, jitter, float(s.norm.median), sinks))
    return out, (span[0], span[1])


def norm_distributions(result: Any, slots: Sequence[int] | None = None, title: str | None = None) -> Figure:
    """Per-token L2 norm distribution of each slot on a log axis: violin + token strip + median + sinks.

    Takes a ``CaptureStats`` or a ``Fingerprint`` (labels then come from the fingerprint). The strip's
    points are exactly ``SlotStats.norms`` (finite, > 0; strided beyond ``MAX_STRIP_POINTS``), the white
    bar is ``SlotStats.norm.median``, red triangles are ``SlotStats.sinks``.
    """
    stats, _ = _unpack(result)
    sel = _selected(stats, slots)
    labels = slot_labels(result)
    colors = _colors_for(stats, sel)
    fig = _figure(width=min(FIG_WIDTH, 2.6 + 1.1 * len(sel)))
    ax = fig.add_subplot()
    if not sel:
        _empty(ax, "no slot selected")
        return fig
    sink_drawn = False
    drawn, span = violins(stats, sel)
    for x, v in enumerate(drawn):
        i, norms = v.slot, v.norms
        if v.kde is not None:
            grid, dens = v.kde
            ax.fill_betweenx(10 ** grid, x - 0.4 * dens, x + 0.4 * dens, color=colors[i], alpha=0.35, lw=0,
                             gid=f"violin-{i}")
        ax.scatter(x + v.jitter, norms[v.strip], s=3, color=colors[i], alpha=0.5, lw=0, gid=f"tokens-{i}")
        med = v.median
        if math.isfinite(med) and med > 0:
            ax.hlines(med, x - 0.3, x + 0.3, color="white", lw=2.5, zorder=3)
            ax.hlines(med, x - 0.3, x + 0.3, color="black", lw=1, zorder=4, gid=f"median-{i}")
            if len(sel) <= MAX_ANNOTATED_ROWS:
                ax.annotate(f"med {num(med)}", (x + 0.32, med), fontsize=7, va="center", color="#333333")
        if stats.slots[i].sinks:
            sk = v.sinks
            ax.scatter([x] * len(sk), norms[sk], marker="v", s=28, color=BAD_COLOR, edgecolor="black", lw=0.5,
                       zorder=5, gid=f"sinks-{i}", label=None if sink_drawn else f"sink (≥{SINK_RATIO:g}× median)")
            sink_drawn = sink_drawn or bool(sk)
    ax.set_yscale("log")
    _lean_log_axis(ax.yaxis, *span)
    many = len(sel) > MAX_ANNOTATED_ROWS
    ax.set_xticks(range(len(sel)), [labels[i] for i in sel], fontsize=6 if many else 8,
                  rotation=90 if many else (30 if len(sel) > 6 else 0))
    ax.set_xlim(-0.6, len(sel) - 0.4)
    ax.set_ylabel("per-token ‖x‖₂ (log)")
    ax.set_title(title or f"Per-token norm distribution per slot — {_name(stats)}", fontsize=10)
    ax.grid(axis="y", which="major", alpha=0.3)
    if sink_drawn:
        ax.legend(fontsize=7, loc="best")
    return fig


@dataclass(frozen=True)
class PositionLines:
    """What :func:`norm_by_position` draws (computed once by :func:`position_lines`, drawn by the matplotlib
    figure and the report's SVG alike).

    ``lo``/``hi``: the inclusive token range; ``lines``: per slot ``(slot, positions, norms)`` (the norms
    exactly ``SlotStats.norms[positions]``); ``sinks``/``massive``: per slot the marked positions (finite,
    positive norms); ``bands``: the bad row ranges inside ``[lo, hi]``, ``(first, last, slots)`` inclusive,
    one per distinct range with the selected slots it covers; ``span``: the smallest and largest finite
    positive norm drawn (inf, -inf when none).
    """

    lo: int
    hi: int
    lines: list[tuple[int, np.ndarray, np.ndarray]]
    sinks: dict[int, list[int]]
    massive: dict[int, list[int]]
    bands: list[tuple[int, int, list[int]]]
    span: tuple[float, float]


ROW_RANGE_KINDS = ("zero_rows", "nonfinite", "foreign_rows")  # row findings whose evidence names row ranges


def bad_rows_of(result: Any) -> dict[int, list[tuple[int, int]]]:
    """The bad row ranges per slot of a result: its row report's (``result.rows.bad_rows``, as
    :func:`forensics.analysis.rows.check_rows` gives them), else the row ranges in the evidence of its row
    findings (a fingerprint's ``zero_rows``, ``nonfinite``, ``foreign_rows``: ``per_slot``, or ``rows`` of
    every listed slot), else none."""
    rep = getattr(result, "rows", None)
    bad = getattr(rep, "bad_rows", None)
    if isinstance(bad, dict):
        return {int(k): [(int(a), int(b)) for a, b in v] for k, v in bad.items()}
    out: dict[int, set[tuple[int, int]]] = {}
    for f in getattr(result, "findings", None) or []:
        if str(getattr(f, "kind", "")) not in ROW_RANGE_KINDS:
            continue
        ev = getattr(f, "evidence", None) or {}
        per = ev.get("per_slot") or {str(i): ev.get("rows") or [] for i in (ev.get("slots") or f.slots or [])}
        for k, runs in per.items():
            out.setdefault(int(k), set()).update((int(a), int(b)) for a, b in runs or [])
    return {k: sorted(v) for k, v in sorted(out.items()) if v}


def position_lines(result: Any, sel: Sequence[int], token_range: tuple[int, int] | None = None,
                   bad_rows: dict[int, Sequence[tuple[int, int]]] | None = None) -> PositionLines:
    """The lines, marks and bad-row bands of :func:`norm_by_position` (``bad_rows``: slot → inclusive row
    ranges; default: the result's own row report, :func:`bad_rows_of`).

    >>> from types import SimpleNamespace as NS
    >>> st = NS(capture=None, slots=[NS(norms=np.array([1.0, 2, 0, 0, 3]), sinks=[], massive_tokens=[])])
    >>> pl = position_lines(st, [0], bad_rows={0: [(2, 3)]})
    >>> pl.bands, pl.span
    ([(2, 3, [0])], (1.0, 3.0))
    """
    stats, _ = _unpack(result)
    bad = bad_rows_of(result) if bad_rows is None else {int(k): list(v) for k, v in bad_rows.items()}
    T = max((len(stats.slots[i].norms) for i in sel), default=0)
    lo, hi = (0, T - 1) if token_range is None else (max(0, int(token_range[0])), min(T - 1, int(token_range[1])))
    lines, sinks, massive = [], {}, {}
    span = [math.inf, -math.inf]
    for i in sel:
        s = stats.slots[i]
        n = np.asarray(s.norms, dtype=np.float64)
        pos = np.arange(lo, min(hi, n.size - 1) + 1)
        lines.append((i, pos, n[pos]))
        ok = n[pos][np.isfinite(n[pos]) & (n[pos] > 0)]
        if ok.size:
            span = [min(span[0], float(ok.min())), max(span[1], float(ok.max()))]
        sinks[i] = [p for p in s.sinks if lo <= p <= hi and p < n.size and np.isfinite(n[p]) and n[p] > 0]
        massive[i] = [t["pos"] for t in s.massive_tokens if lo <= t["pos"] <= hi and t["pos"] < n.size
                      and n[t["pos"]] > 0]
    ranges: dict[tuple[int, int], list[int]] = {}
    for i in sel:
        for a, b in bad.get(i, []):
            a, b = max(int(a), lo), min(int(b), hi)
            if a <= b:
                ranges.setdefault((a, b), []).append(i)
    bands = [(a, b, slots) for (a, b), slots in sorted(ranges.items())]
    return PositionLines(lo, hi, lines, sinks, massive, bands, (span[0], span[1]))


def band_label(bands: Sequence[tuple[int, int, list[int]]], k: int) -> str:
    """The legend text of the bad-row bands: which slots they cover (``"bad rows (every slot)"`` when all
    ``k`` selected slots)."""
    slots = sorted({i for _, _, ss in bands for i in ss})
    return "bad rows (every slot)" if len(slots) == k else f"bad rows (slot{'s' if len(slots) > 1 else ''} " \
        f"{', '.join(map(str, slots))})"


def _plot_norm_lines(ax: Any, pl: Any, stats: Any, colors: Any, labels: Any) -> None:
    """One norm line per slot of ``pl`` (:func:`position_lines`), its sink tokens marked ``v`` and its massive
    activations ``x``; each marker kind gets one legend entry."""
    marks = {"sink": False, "massive": False}
    for i, pos, n in pl.lines:
        ax.plot(pos, n, color=colors[i], lw=1, label=labels[i], gid=f"norms-{i}",
                marker="." if pos.size <= 64 else None, ms=3)
        norms = np.asarray(stats.slots[i].norms, dtype=np.float64)
        sk = pl.sinks[i]
        if sk:
            ax.scatter(sk, norms[sk], marker="v", s=30, color=BAD_COLOR, edgecolor="black", lw=0.5, zorder=5,
                       gid=f"sinks-{i}", label=None if marks["sink"] else f"sink (≥{SINK_RATIO:g}× median)")
            marks["sink"] = True
        mp = pl.massive[i]
        if mp:
            ax.scatter(mp, norms[mp], marker="x", s=36, color="black", lw=1.2, zorder=6, gid=f"massive-{i}",
                       label=None if marks["massive"] else "massive activation")
            marks["massive"] = True


def norm_by_position(result: Any, slots: Sequence[int] | None = None,
                     token_range: tuple[int, int] | None = None, title: str | None = None,
                     bad_rows: dict[int, Sequence[tuple[int, int]]] | None = None) -> Figure:
    """Per-token L2 norm against token position, one line per slot (log axis), sinks and massive tokens marked,
    bad rows (zero, non-finite, foreign, outside the ids: the row report's ``bad_rows``) shaded.

    ``token_range`` is inclusive ``(first, last)`` as an ``IntRangeSlider`` gives it. Line y-data are
    exactly ``SlotStats.norms[first:last + 1]``; ``bad_rows`` (slot → inclusive row ranges) defaults to the
    result's row report (a fingerprint's ``rows``).
    """
    stats, _ = _unpack(result)
    sel = _selected(stats, slots)
    labels = slot_labels(result)
    colors = _colors_for(stats, sel)
    many = len(sel) > MAX_LEGEND_ROWS
    fig = _figure(height=ROW_HEIGHT + (0.25 * math.ceil(len(sel) / 6) + 0.4 if many else 0))
    ax = fig.add_subplot()
    if not sel:
        _empty(ax, "no slot selected")
        return fig
    pl = position_lines(result, sel, token_range, bad_rows)
    lo, hi = pl.lo, pl.hi
    for j, (a, b, _ss) in enumerate(pl.bands):
        ax.axvspan(a - 0.5, b + 0.5, color=BAD_COLOR, alpha=0.15, lw=0, zorder=0, gid=f"bad-rows-{a}-{b}",
                   label=band_label(pl.bands, len(sel)) if j == 0 else None)
    _plot_norm_lines(ax, pl, stats, colors, labels)
    ax.set_yscale("log")
    ax.set_xlabel("token position")
    ax.set_ylabel("per-token ‖x‖₂ (log)")
    ax.set_title(title or f"Norm by token position — {_name(stats)} (tokens {lo}–{hi})", fontsize=10)
    ax.grid(alpha=0.3)
    if many:  # a ladder's worth of slots: the legend goes under the axes in columns
        fig.legend(*ax.get_legend_handles_labels(), fontsize=6, loc="outside lower center", ncol=6, frameon=False)
    else:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def massive_dim_counts(slot: SlotStats) -> dict[int, int]:
    """Hidden dim → number of the slot's massive tokens whose top dims include it."""
    counts: dict[int, int] = {}
    for t in slot.massive_tokens:
        for d in t["dims"]:
            counts[d] = counts.get(d, 0) + 1
    return counts


def massive_rows(stats: CaptureStats, sel: Sequence[int],
                 ) -> list[tuple[int, int, list[int], dict[int, int], list[int]]]:
    """The massive-dims figure's data, one entry per selected slot with massive tokens: ``(row, slot, dims
    (sorted), {dim: tokens}, the dims to annotate (most hit first: 4, or 1 past MAX_ANNOTATED_ROWS rows))``."""
    out = []
    for row, i in enumerate(sel):
        counts = massive_dim_counts(stats.slots[i])
        if counts:
            dims = sorted(counts)
            top = sorted(dims, key=lambda d: -counts[d])[:4 if len(sel) <= MAX_ANNOTATED_ROWS else 1]
            out.append((row, i, dims, counts, top))
    return out


def massive_title(stats: CaptureStats) -> str:
    """The massive-dims figure's default title: the threshold and the file."""
    return f"Massive-activation dims, |x| > max({MASSIVE_ABS_THRESHOLD:g}, {MASSIVE_REL_THRESHOLD:g}× median |x|) " \
        f"— {_name(stats)}"


def massive_dims(result: Any, slots: Sequence[int] | None = None, title: str | None = None) -> Figure:
    """Which hidden dims carry massive activations, per slot (x = hidden dim, marker size = tokens hitting it).

    Reads ``SlotStats.massive_tokens`` (top dims per massive token) and ``massive_threshold``.
    """
    stats, _ = _unpack(result)
    sel = _selected(stats, slots)
    labels = slot_labels(result)
    colors = _colors_for(stats, sel)
    fig = _figure(height=max(2.2, 0.45 * len(sel) + 1.2))
    ax = fig.add_subplot()
    hidden = max((s.shape[1] for s in stats.slots), default=1)
    rows = massive_rows(stats, sel)
    for row, i, dims, counts, top in rows:
        ax.scatter(dims, [row] * len(dims), s=[20 + 25 * counts[d] for d in dims], color=colors[i],
                   edgecolor="black", lw=0.5, gid=f"massive-dims-{i}", zorder=3)
        for d in top:
            ax.annotate(f"{d} ({counts[d]} tok)", (d, row), xytext=(4, 6), textcoords="offset points", fontsize=7)
    ax.set_yticks(range(len(sel)), [labels[i] for i in sel], fontsize=8 if len(sel) <= 16 else 6)
    ax.set_ylim(-0.7, len(sel) - 0.3)
    ax.set_xlim(-0.02 * hidden, hidden * 1.02)
    ax.set_xlabel(f"hidden dimension (0–{hidden - 1})")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title or massive_title(stats), fontsize=9)
    if not rows:
        ax.text(0.5, 0.5, "no massive activations in the selected slots", ha="center", va="center",
                transform=ax.transAxes, color="#555555")
    return fig


# ----------------------------------------------------------------------------------- fingerprint figures
def similarity_heatmap(fingerprint: Any, title: str | None = None) -> Figure:
    """Pairwise slot distance ``Fingerprint.similarity`` (masked angular distance, 0 = same direction)."""
    sim = np.asarray(fingerprint.similarity, dtype=np.float64)
    labels = slot_labels(fingerprint)
    k = sim.shape[0]
    fig = _figure(height=max(3.0, 0.42 * k + 1.4), width=min(FIG_WIDTH, max(4.2, 0.5 * k + 2.8)))
    ax = fig.add_subplot()
    finite = sim[np.isfinite(sim)]
    vmax = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    im = ax.imshow(np.ma.masked_invalid(sim), cmap=SEQUENTIAL_CMAP, vmin=0.0, vmax=vmax, gid="similarity")
    fs = 8 if k <= 16 else 6
    ax.set_xticks(range(k), labels[:k], rotation=45 if k > 3 else 0, ha="right" if k > 3 else "center", fontsize=fs)
    ax.set_yticks(range(k), labels[:k], fontsize=fs)
    if k <= MAX_ANNOTATED_CELLS:
        for a in range(k):
            for b in range(k):
                v = sim[a, b]
                ax.text(b, a, num(v) if math.isfinite(v) else "–", ha="center", va="center", fontsize=7,
                        color="white" if (math.isfinite(v) and v < 0.5 * vmax) else "black")
    cb = fig.colorbar(im, ax=ax, shrink=0.85)
    cb.set_label("angular distance (massive dims masked)", fontsize=8)
    ax.set_title(title or f"Pairwise slot distance — {_name(fingerprint.stats)}", fontsize=10)
    return fig


def _num_layers(fp: Any) -> int | None:
    for obj in (fp, getattr(fp, "capture", None)):
        n = getattr(obj, "num_layers", None)
        if isinstance(n, (int, np.integer)) and n > 0:
            return int(n)
    return None


def _post_x(L: float) -> float:
    """Where ``final_post`` sits on the r axis: past L, with a gap so the tick labels do not collide."""
    return L + (max(1.5, 0.1 * L) if L > 1 else 0.15)


def _r_x(r: Any, L: float) -> float | None:
    if r is None:
        return None
    if r == FINAL_POST:
        return _post_x(L)
    try:
        return float(r)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Ladder:
    """Where :func:`depth_ladder` places each slot (computed once by :func:`ladder`, drawn by the matplotlib
    figure and the report's SVG alike). Per slot (stored order): ``x`` = r_exact, else r_estimate, on the axis
    (None: not placed), ``declared_x`` = the declared r (None: none or relative axis), ``confidence``, and the
    annotation text; ``order`` = rows top to bottom; the axis: ticks, their labels, limits, label and where the
    grey "after the last block" band starts."""

    order: list[int]
    x: list[float | None]
    declared_x: list[float | None]
    confidence: list[float]
    notes: list[str]
    ticks: list[float]
    tick_labels: list[str]
    xlim: tuple[float, float]
    xlabel: str
    band_from: float


def ladder(fingerprint: Any) -> Ladder:
    """The depth ladder's positions and axis for a ``Fingerprint`` (see :func:`depth_ladder`)."""
    slots = list(fingerprint.slots)
    stats = fingerprint.stats
    order = list(fingerprint.depth_order or range(len(slots)))
    L: float | None = _num_layers(fingerprint)
    declared = [s.declared_r for s in stats.slots]
    rs = [sf.r_exact if sf.r_exact is not None else sf.r_estimate for sf in slots]
    if L is None and any(isinstance(r, int) and r > 1 for r in rs + declared):
        L = int(math.ceil(max(r for r in rs + declared if isinstance(r, (int, float)))))
    relative = L is None
    if relative:  # r_estimate is then a fraction; declared r cannot be placed on a 0–1 axis
        L = 1.0
        rs = [r if r == FINAL_POST or sf.depth_fraction is None else sf.depth_fraction
              for r, sf in zip(rs, slots, strict=True)]
        declared = [None] * len(slots)
    assert L is not None
    conf = [float(sf.confidence or 0.0) for sf in slots]
    notes = [f"{sf.role} · conf {c:.2f}" + (" exact" if sf.r_exact is not None else "")
             for sf, c in zip(slots, conf, strict=True)]
    px = _post_x(L)
    if relative:
        ticks: list[float] = [0, 0.25, 0.5, 0.75, 1.0, px]
        tick_labels = ["embed", "¼", "½", "¾", "last", "post"]
        xlim = (-0.08, px + 0.1)
        xlabel = "relative depth (0 = embedding output, 1 = last block; L unknown: pass num_layers)"
    else:
        whole = sorted({0, int(L) // 4, int(L) // 2, (3 * int(L)) // 4, int(L)})
        ticks, tick_labels = [*whole, px], [r_label(t) for t in whole] + ["post"]
        xlim = (-0.06 * px - 0.5, px * 1.08 + 0.5)
        xlabel = f"r (0 = embedding output, k = output of block k, L = {int(L)}; post = after final norm)"
    return Ladder(order, [_r_x(r, L) for r in rs], [_r_x(d, L) for d in declared], conf, notes, ticks, tick_labels,
                  xlim, xlabel, (L + px) / 2)


def depth_ladder(fingerprint: Any, title: str | None = None) -> Figure:
    """Each slot placed on the r axis at its estimated depth (marker size/opacity = confidence).

    Rows follow ``Fingerprint.depth_order`` (shallowest at the top). Filled dot = ``r_exact`` when known,
    else ``r_estimate``; hollow square = the r the file declares, when it declares one. When the model's
    L is unknown (no ``num_layers`` anywhere), the axis is the relative depth 0–1 (``depth_fraction``).
    """
    lad = ladder(fingerprint)
    labels = slot_labels(fingerprint)
    colors = slot_colors(len(fingerprint.slots))
    order = lad.order
    fig = _figure(height=max(2.4, 0.5 * len(fingerprint.slots) + 1.3))
    ax = fig.add_subplot()
    declared_drawn = False
    for row, i in enumerate(order):
        conf, x = lad.confidence[i], lad.x[i]
        if x is not None:
            ax.scatter([x], [row], s=40 + 200 * conf, color=colors[i], alpha=0.35 + 0.65 * conf,
                       edgecolor="black", lw=0.6, zorder=4, gid=f"ladder-{i}")
            if len(order) <= MAX_ANNOTATED_ROWS:
                ax.annotate(lad.notes[i], (x, row), xytext=(0, 9),
                            textcoords="offset points", fontsize=7, ha="center", va="bottom")
        dx = lad.declared_x[i]
        if dx is not None:
            ax.scatter([dx], [row], marker="s", s=50, facecolor="none", edgecolor="black", lw=1, zorder=5,
                       gid=f"declared-{i}", label=None if declared_drawn else "declared r")
            declared_drawn = True
    ax.set_yticks(range(len(order)), [labels[i] for i in order], fontsize=8 if len(order) <= 16 else 6)
    ax.set_ylim(len(order) - 0.4, -0.9)
    ax.set_xticks(lad.ticks, lad.tick_labels, fontsize=8)
    ax.set_xlim(*lad.xlim)
    ax.set_xlabel(lad.xlabel)
    ax.axvspan(lad.band_from, ax.get_xlim()[1], color="#dddddd", alpha=0.5, lw=0)
    ax.grid(axis="x", alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize=7, loc="upper right")
    ax.set_title(title or f"Depth ladder — {_name(fingerprint.stats)} (rows shallow → deep)", fontsize=10)
    return fig


# Audit and dataset-scan figures live in plots_dataset (module size); re-exported here as one namespace.
