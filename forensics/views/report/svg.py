"""The report's figures as inline SVG, written directly (no matplotlib on the report path).

Each function draws the same numbers as its namesake in :mod:`forensics.views.plots` (the data come from the
same functions: ``violins``, ``ladder``, ``massive_rows``, ``probe_bars``, ``audit_slice_rows``): same
series, axes, log scales, slot colours, labels, titles and legends, as plain SVG shapes and ``<text>``. Drawing
the 18 figures of the ``make demo`` report as
matplotlib PNGs took ~5 s CPU (constrained layout, Agg, text extents; cProfile 2026-12-01); these take tens of
milliseconds. The output is deterministic (fixed rounding, seeded jitter) and every text is XML-escaped, since
slot names and titles come from the files under audit.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from forensics.analysis.stats import SINK_RATIO
from forensics.views.format import num
from forensics.views.plots.dataset import AUDIT_TITLE, CONTROL_COLOR, PROBE_TITLE, audit_slice_rows, probe_bars
from forensics.views.plots.slots import (
    BAD_COLOR,
    FIG_WIDTH,
    MAX_ANNOTATED_CELLS,
    MAX_ANNOTATED_ROWS,
    MAX_HEIGHT,
    OK_COLOR,
    OKABE_ITO,
    UNKNOWN_COLOR,
    _name,
    _selected,
    _unpack,
    band_label,
    ladder,
    massive_rows,
    massive_title,
    position_lines,
    slot_labels,
    violins,
)

PX_PER_INCH = 80  # the figures keep the matplotlib versions' sizes in inches at the report's former 80 dpi
PT = PX_PER_INCH / 72  # px per typographic point (matplotlib marker sizes and offsets are in points)
CHAR_EM = 0.56  # mean advance of a sans-serif character in em, to reserve room for labels (no font metrics here)
FONT = "system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif"
GRID = "#b0b0b0"  # matplotlib's grid colour, drawn at 0.3 opacity like the plots' grid(alpha=0.3)
INK, MUTED = "#1f2328", "#555555"

# matplotlib's cividis colormap (Nuñez et al. 2018), its 256 entries as hex (tests compare with matplotlib)
_CIVIDIS = (
    '00224e00234f00245100255300255400265600275800285900285b00295d002a5f002a61002b62002c64002c66002d68'
    '002e6a002e6c002f6d00306f0030700031700031710132710533710833700c34700f357012357014367016377018376f'
    '1a386f1c396f1e3a6f203a6f213b6e233c6e243c6e263d6e273e6e293f6e2a3f6d2b406d2d416d2e416d2f426d31436d'
    '32436d33446d34456c35456c36466c38476c39486c3a486c3b496c3c4a6c3d4a6c3e4b6c3f4c6c404c6c414d6c424e6c'
    '434e6c444f6c45506c46516c47516c48526c49536c4a536c4b546c4c556c4d556c4e566c4f576c50576c51586d52596d'
    '535a6d545a6d555b6d555c6d565c6d575d6d585e6d595e6e5a5f6e5b606e5c616e5d616e5e626e5e636f5f636f60646f'
    '61656f62656f636670646770656870656870666970676a71686a71696b716a6c716b6d726c6d726c6e726d6f726e6f73'
    '6f70737071737172747272747273747374757474757575757676767777767777777878777979777a7a787b7a787c7b78'
    '7d7c787e7c787e7d787f7e78807f78817f788280798381798482798582798683798784788885788985788a86788b8778'
    '8c88788d88788e89788f8a78908b78918b78928c78928d78938e78948e77958f779690779791779892779992779a9376'
    '9b94769c95769d95769e96769f9775a09875a19975a29975a39a74a49b74a59c74a69c74a79d73a89e73a99f73aaa073'
    'aba072aca172ada272aea371afa471b0a571b1a570b3a670b4a76fb5a86fb6a96fb7a96eb8aa6eb9ab6dbaac6dbbad6d'
    'bcae6cbdae6cbeaf6bbfb06bc0b16ac1b26ac2b369c3b369c4b468c5b568c6b667c7b767c8b866c9b965cbb965ccba64'
    'cdbb63cebc63cfbd62d0be62d1bf61d2c060d3c05fd4c15fd5c25ed6c35dd7c45cd9c55cdac65bdbc75adcc859ddc858'
    'dec958dfca57e0cb56e1cc55e2cd54e4ce53e5cf52e6d051e7d150e8d24fe9d34eead34cebd44bedd54aeed649efd748'
    'f0d846f1d945f2da44f3db42f5dc41f6dd3ff7de3ef8df3cf9e03afbe138fce236fde334fee434fee535fee636fee838'
)

# Characters XML 1.0 cannot carry (controls other than tab/newline/CR, lone surrogates, U+FFFE/U+FFFF)
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def cividis(x: float) -> str:
    """The colour matplotlib's colormaps['cividis'](x) gives for x in [0, 1] (its lookup, not interpolated)."""
    i = min(255, max(0, int(x * 256))) if math.isfinite(x) else 0
    return "#" + _CIVIDIS[6 * i: 6 * i + 6]


def slot_colors(k: int) -> list[str]:
    """:func:`forensics.views.plots.slot_colors` as hex: Okabe–Ito up to 8 slots, then samples of cividis."""
    if k <= len(OKABE_ITO):
        return OKABE_ITO[:k]
    return [cividis(float(x)) for x in np.linspace(0.0, 0.95, k)]


def _colors_for(stats: Any, sel: list[int]) -> dict[int, str]:
    k = len(stats.slots)
    if k <= len(OKABE_ITO):
        return dict(enumerate(slot_colors(k)))
    return dict(zip(sel, slot_colors(len(sel)), strict=True))


def esc(text: Any) -> str:
    """Text safe inside an SVG element or a quoted attribute: XML-invalid characters as \\xNN, then escaped."""
    return html.escape(_NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text)), quote=True)


def _n(v: float) -> str:
    """A coordinate, rounded to 0.01 px (deterministic, compact)."""
    s = f"{v:.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def _text_px(text: str, size: float) -> float:
    return len(text) * size * CHAR_EM


class Canvas:
    """An SVG document being written: shapes appended in drawing order."""

    def __init__(self, width: float, height: float):
        self.w, self.h = round(width), round(height)
        self.parts: list[str] = []

    def add(self, tag: str, body: str | None = None, **attrs: Any) -> None:
        a = "".join(f' {k.rstrip("_").replace("_", "-")}="{_n(v) if isinstance(v, float) else esc(v)}"'
                    for k, v in attrs.items() if v is not None)
        self.parts.append(f"<{tag}{a}/>" if body is None else f"<{tag}{a}>{body}</{tag}>")

    def text(self, x: float, y: float, text: str, size: float = 10, anchor: str = "start", color: str = INK,
             bold: bool = False, rotate: float | None = None, cls: str | None = None) -> None:
        """text with its vertical centre at y."""
        tr = f"rotate({_n(rotate)} {_n(x)} {_n(y)})" if rotate else None
        self.add("text", esc(text), x=float(x), y=float(y), font_size=float(size), text_anchor=anchor,
                 dominant_baseline="central", fill=color, font_weight="bold" if bold else None, transform=tr,
                 class_=cls)

    def line(self, x1: float, y1: float, x2: float, y2: float, color: str = INK, width: float = 1.0,
             opacity: float | None = None) -> None:
        self.add("line", x1=float(x1), y1=float(y1), x2=float(x2), y2=float(y2), stroke=color,
                 stroke_width=float(width), stroke_opacity=opacity)

    def render(self, title: str) -> str:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.w}" height="{self.h}" '
                f'viewBox="0 0 {self.w} {self.h}" font-family="{esc(FONT)}" role="img">'
                f'<title>{esc(title)}</title><rect width="100%" height="100%" fill="#ffffff"/>'
                + "".join(self.parts) + "</svg>")


class Axes:
    """A plot area (pixels left/top/right/bottom) with linear or log data limits on each axis."""

    def __init__(self, c: Canvas, box: tuple[float, float, float, float], xlim: tuple[float, float],
                 ylim: tuple[float, float], xlog: bool = False, ylog: bool = False):
        self.c, (self.l, self.t, self.r, self.b) = c, box
        self.xlog, self.ylog = xlog, ylog
        self.x0, self.x1 = (math.log10(v) for v in xlim) if xlog else xlim
        self.y0, self.y1 = (math.log10(v) for v in ylim) if ylog else ylim
        self.xlim, self.ylim = xlim, ylim

    def X(self, v: float) -> float:
        u = math.log10(v) if self.xlog else v
        return self.l + (u - self.x0) / ((self.x1 - self.x0) or 1.0) * (self.r - self.l)

    def Y(self, v: float) -> float:  # ylim[0] at the bottom (pass it reversed to invert the axis)
        u = math.log10(v) if self.ylog else v
        return self.b - (u - self.y0) / ((self.y1 - self.y0) or 1.0) * (self.b - self.t)

    def frame(self) -> None:
        self.c.add("rect", x=float(self.l), y=float(self.t), width=float(self.r - self.l),
                   height=float(self.b - self.t), fill="none", stroke="#333333", stroke_width=0.8)

    def xticks(self, ticks: Sequence[float], labels: Sequence[str], size: float = 9, rotate: float = 0,
               grid: bool = False) -> None:
        for v, lab in zip(ticks, labels, strict=True):
            x = self.X(v)
            if not self.l - 0.5 <= x <= self.r + 0.5:
                continue
            if grid:
                self.c.line(x, self.t, x, self.b, GRID, 0.8, 0.3)
            self.c.line(x, self.b, x, self.b + 4, "#333333", 0.8)
            if rotate:
                self.c.text(x, self.b + 8, lab, size, "end", rotate=-rotate)
            else:
                self.c.text(x, self.b + 8 + size / 2, lab, size, "middle")

    def yticks(self, ticks: Sequence[float], labels: Sequence[str], size: float = 9, grid: bool = False) -> None:
        for v, lab in zip(ticks, labels, strict=True):
            y = self.Y(v)
            if not self.t - 0.5 <= y <= self.b + 0.5:
                continue
            if grid:
                self.c.line(self.l, y, self.r, y, GRID, 0.8, 0.3)
            self.c.line(self.l - 4, y, self.l, y, "#333333", 0.8)
            self.c.text(self.l - 6, y, lab, size, "end")

    def legend(self, entries: Sequence[tuple[str, str]], where: str = "upper right", size: float = 9) -> None:
        """Entries (marker SVG at (0, 0), label) in a framed box at a corner inside the axes."""
        h = size * 1.5
        w = 26 + max(_text_px(lab, size) for _, lab in entries)
        x = self.r - w - 6 if where.endswith("right") else self.l + 6
        y = self.t + 6
        self.c.add("rect", x=float(x), y=float(y), width=float(w), height=float(h * len(entries) + 4), fill="#ffffff",
                   fill_opacity=0.85, stroke="#cccccc", stroke_width=0.8, rx=2.0)
        for j, (marker, lab) in enumerate(entries):
            cy = y + 2 + h * (j + 0.5)
            self.c.parts.append(f'<g transform="translate({_n(x + 11)} {_n(cy)})">{marker}</g>')
            self.c.text(x + 22, cy, lab, size)


def nice_ticks(lo: float, hi: float, target: int = 6) -> list[float]:
    """Round 1-2-5 steps covering [lo, hi] (about target of them)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(1, target - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9)
    return [round(k * step, 12) for k in range(first, math.floor(hi / step + 1e-9) + 1)]


def _tick_text(v: float) -> str:
    return f"{v:g}" if abs(v) < 1e6 else f"{v:.0e}"


def log_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Decades within [lo, hi] labelled 10^k; when fewer than two fall inside, 2× and 5× steps too."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    dec = [10.0 ** k for k in range(a, b + 1) if lo <= 10.0 ** k <= hi]
    if len(dec) >= 2:
        return dec, [_decade(v) for v in dec]
    vals = sorted(m * 10.0 ** k for k in range(a, b + 1) for m in (1, 2, 5) if lo <= m * 10.0 ** k <= hi)
    if not vals:  # a span narrower than one 1-2-5 step: its middle, with 4 digits
        vals = [math.sqrt(lo * hi)]
        return vals, [num(vals[0])]
    return vals, [_tick_text(v) for v in vals]


_SUP = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _decade(v: float) -> str:
    return "10" + str(round(math.log10(v))).translate(_SUP)


def _log_limits(lo: float, hi: float, margin: float = 0.05) -> tuple[float, float]:
    """matplotlib's default autoscale on a log axis: the data range widened by 5 % of its decades each side."""
    if not (0 < lo <= hi < math.inf):
        return 1.0, 10.0
    a, b = math.log10(lo), math.log10(hi)
    d = (b - a) or 1.0
    return 10 ** (a - margin * d), 10 ** (b + margin * d)


def _lin_limits(lo: float, hi: float, margin: float = 0.05) -> tuple[float, float]:
    d = (hi - lo) or 1.0
    return lo - margin * d, hi + margin * d


def _title(c: Canvas, text: str, size: float = 12) -> None:
    c.text(c.w / 2, 14, text, size, "middle")


def _box_left(labels: Sequence[str], size: float, extra: float = 0.0) -> float:
    return 14 + extra + max((_text_px(s, size) for s in labels), default=0.0)


def _dot(r: float, color: str, edge: str | None = None, opacity: float | None = None) -> str:
    e = f' stroke="{edge}" stroke-width="{_n(0.6 * PT)}"' if edge else ""
    o = f' fill-opacity="{_n(opacity)}"' if opacity is not None else ""
    return f'<circle r="{_n(r)}" fill="{color}"{o}{e}/>'


def _marker_r(area_pt2: float) -> float:
    """Radius in px of a matplotlib scatter marker of area s (points²)."""
    return math.sqrt(area_pt2 / math.pi) * PT


def _triangle(x: float, y: float, r: float) -> str:
    return f"M{_n(x - r)} {_n(y - 0.6 * r)}L{_n(x + r)} {_n(y - 0.6 * r)}L{_n(x)} {_n(y + r)}Z"


# ------------------------------------------------------------------------------------------------ figures
def _draw_violin(c: Canvas, ax: Axes, x: int, v: Any, col: str, unit: float, many: bool) -> bool:
    """Slot ``v`` (one of :func:`violins`) at x position ``x``: its violin (KDE of log10 norms), token strip and
    median bar (annotated unless ``many``), its sinks as triangles; True when it drew a sink."""
    i, norms = v.slot, v.norms
    cx = ax.X(x)
    if v.kde is not None:
        grid, dens = v.kde
        ys = [ax.Y(10 ** g) for g in grid]
        pts = [(cx + 0.4 * d * unit, y) for d, y in zip(dens, ys, strict=True)]
        pts += [(cx - 0.4 * d * unit, y) for d, y in zip(dens[::-1], ys[::-1], strict=True)]
        c.add("polygon", points=" ".join(f"{_n(px)},{_n(py)}" for px, py in pts), fill=col, fill_opacity=0.35,
              class_=f"violin-{i}")
    if v.strip.size:
        d = "".join(f"M{_n(cx + j * unit)} {_n(ax.Y(n))}h0" for j, n in zip(v.jitter, norms[v.strip], strict=True))
        c.add("path", d=d, stroke=col, stroke_opacity=0.5, stroke_width=2.0, stroke_linecap="round",
              class_=f"tokens-{i}")
    med = v.median
    if math.isfinite(med) and med > 0:
        y = ax.Y(med)
        c.line(cx - 0.3 * unit, y, cx + 0.3 * unit, y, "#ffffff", 2.5 * PT)
        c.line(cx - 0.3 * unit, y, cx + 0.3 * unit, y, "#000000", 1.0 * PT)
        if not many:
            c.text(cx + 0.32 * unit, y, f"med {num(med)}", 8, color="#333333")
    if v.sinks:
        r = _marker_r(28)
        c.add("path", d="".join(_triangle(cx, ax.Y(norms[p]), r) for p in v.sinks), fill=BAD_COLOR,
              stroke="#000000", stroke_width=0.5 * PT, class_=f"sinks-{i}")
    return bool(v.sinks)


def norm_distributions(result: Any, slots: Sequence[int] | None = None, title: str | None = None) -> str:
    """SVG of :func:`forensics.views.plots.norm_distributions`: per slot a violin (KDE of log10 norms), the token
    strip, the median bar (annotated), sink triangles; log y axis."""
    stats, _ = _unpack(result)
    sel = _selected(stats, slots)
    labels = slot_labels(result)
    colors = _colors_for(stats, sel)
    title = title or f"Per-token norm distribution per slot — {_name(stats)}"
    c = Canvas(min(FIG_WIDTH, 2.6 + 1.1 * len(sel)) * PX_PER_INCH, 3.0 * PX_PER_INCH)
    _title(c, title)
    if not sel:
        c.text(c.w / 2, c.h / 2, "no slot selected", 11, "middle", MUTED)
        return c.render(title)
    drawn, span = violins(stats, sel)
    ylim = _log_limits(*span)
    many = len(sel) > MAX_ANNOTATED_ROWS
    rot = 90 if many else (30 if len(sel) > 6 else 0)
    xsize = 7 if many else 9
    names = [labels[i] for i in sel]
    ticks, tlabels = log_ticks(*ylim)
    bottom = c.h - (12 + (max(_text_px(s, xsize) for s in names) * math.sin(math.radians(rot)) if rot else xsize + 8))
    right = 8 if many else 8 + _text_px(f"med {num(drawn[-1].median)}", 8) - 0.1 * (c.w - 60) / len(sel)
    ax = Axes(c, (_box_left(tlabels, 9, 18), 30, c.w - max(8.0, right), bottom), (-0.6, len(sel) - 0.4), ylim,
              ylog=True)
    ax.yticks(ticks, tlabels, grid=True)
    unit = (ax.r - ax.l) / len(sel)  # px per slot on x
    sink_drawn = False
    for x, v in enumerate(drawn):
        if _draw_violin(c, ax, x, v, colors[v.slot], unit, many):
            sink_drawn = True
    ax.frame()
    ax.xticks(list(range(len(sel))), names, xsize, rotate=rot)
    c.text(12, (ax.t + ax.b) / 2, "per-token ‖x‖₂ (log)", 10, "middle", rotate=-90)
    if sink_drawn:
        tri = f'<path d="{_triangle(0, 0, _marker_r(28))}" fill="{BAD_COLOR}" stroke="#000000" stroke-width="0.6"/>'
        top = [float(np.nanmax(v.norms[v.strip])) if v.strip.size else 0.0 for v in (drawn[0], drawn[-1])]
        ax.legend([(tri, f"sink (≥{SINK_RATIO:g}× median)")], "upper left" if top[0] < top[1] else "upper right", 8)
    return c.render(title)


def _position_legend(pl: Any, sel: Sequence[int], colors: Any, labels: Any) -> list[tuple[str, str]]:
    """Legend entries ``(marker svg, label)`` of the norm-by-position chart: the bad-rows band first, one line per
    slot, then the sink and massive markers when any is drawn."""
    entries: list[tuple[str, str]] = [(f'<line x1="-8" y1="0" x2="8" y2="0" stroke="{colors[i]}" stroke-width="1.4"/>',
                                       labels[i]) for i in sel]
    if pl.bands:
        entries.insert(0, (f'<rect x="-8" y="-5" width="16" height="10" fill="{BAD_COLOR}" fill-opacity="0.15"/>',
                           band_label(pl.bands, len(sel))))
    if any(pl.sinks.values()):
        entries.append((f'<path d="{_triangle(0, 0, _marker_r(30))}" fill="{BAD_COLOR}" stroke="#000000" '
                        f'stroke-width="0.6"/>', f"sink (≥{SINK_RATIO:g}× median)"))
    if any(pl.massive.values()):
        entries.append(('<path d="M-4 -4L4 4M-4 4L4 -4" stroke="#000000" stroke-width="1.6"/>', "massive activation"))
    return entries


def _draw_norm_lines(c: Canvas, ax: Axes, pl: Any, stats: Any, colors: Any) -> None:
    """One norm path per slot of ``pl`` (:func:`position_lines`), broken at rows the log axis cannot hold, its sink
    tokens marked with triangles and its massive activations with crosses."""
    for i, pos, n in pl.lines:
        ok = np.isfinite(n) & (n > 0)  # a zero or non-finite row breaks the line (the log axis cannot hold it)
        d, pen = [], False
        for p, v, good in zip(pos.tolist(), n.tolist(), ok.tolist(), strict=True):
            if good:
                d.append(f"{'L' if pen else 'M'}{_n(ax.X(p))} {_n(ax.Y(v))}")
            pen = good
        if d:
            c.add("path", d="".join(d), fill="none", stroke=colors[i], stroke_width=1.0 * PT, class_=f"norms-{i}")
        norms = np.asarray(stats.slots[i].norms, dtype=np.float64)
        if pl.sinks[i]:
            c.add("path", d="".join(_triangle(ax.X(p), ax.Y(norms[p]), _marker_r(30)) for p in pl.sinks[i]),
                  fill=BAD_COLOR, stroke="#000000", stroke_width=0.5 * PT, class_=f"sinks-{i}")
        if pl.massive[i]:
            c.add("path", d="".join(f"M{_n(ax.X(p) - 4)} {_n(ax.Y(norms[p]) - 4)}l8 8m0 -8l-8 8"
                                    for p in pl.massive[i]), stroke="#000000", stroke_width=1.2 * PT,
                  class_=f"massive-{i}")


def norm_by_position(result: Any, slots: Sequence[int] | None = None, token_range: tuple[int, int] | None = None,
                     title: str | None = None, bad_rows: dict | None = None) -> str:
    """SVG of :func:`forensics.views.plots.norm_by_position`: one line per slot on a log y axis against token
    position, sinks and massive tokens marked, the bad row ranges shaded (same data: ``position_lines``)."""
    stats, _ = _unpack(result)
    sel = _selected(stats, slots)
    labels = slot_labels(result)
    colors = _colors_for(stats, sel)
    c = Canvas(FIG_WIDTH * PX_PER_INCH, 3.0 * PX_PER_INCH)
    if not sel:
        title = title or f"Norm by token position — {_name(stats)}"
        _title(c, title)
        c.text(c.w / 2, c.h / 2, "no slot selected", 11, "middle", MUTED)
        return c.render(title)
    pl = position_lines(result, sel, token_range, bad_rows)
    title = title or f"Norm by token position — {_name(stats)} (tokens {pl.lo}–{pl.hi})"
    _title(c, title)
    ylim = _log_limits(*pl.span)
    ticks, tlabels = log_ticks(*ylim)
    shown = _position_legend(pl, sel, colors, labels)[:MAX_ANNOTATED_ROWS + 2]
    legend_w = 30 + max(_text_px(lab, 8) for _, lab in shown)
    x0, x1 = pl.lo - 0.5, max(pl.hi, pl.lo + 1) + 0.5
    ax = Axes(c, (_box_left(tlabels, 9, 18), 30, c.w - legend_w - 8, c.h - 40), _lin_limits(x0, x1, 0.0), ylim,
              ylog=True)
    for a, b, _ in pl.bands:  # under everything else, as matplotlib's axvspan at zorder 0
        c.add("rect", x=float(ax.X(a - 0.5)), y=float(ax.t), width=float(ax.X(b + 0.5) - ax.X(a - 0.5)),
              height=float(ax.b - ax.t), fill=BAD_COLOR, fill_opacity=0.15, class_=f"bad-rows-{a}-{b}")
    ax.yticks(ticks, tlabels, grid=True)
    xt = [v for v in nice_ticks(pl.lo, pl.hi) if pl.lo <= v <= pl.hi]
    ax.xticks(xt, [_tick_text(v) for v in xt], grid=True)
    _draw_norm_lines(c, ax, pl, stats, colors)
    ax.frame()
    c.text((ax.l + ax.r) / 2, c.h - 10, "token position", 9, "middle")
    c.text(12, (ax.t + ax.b) / 2, "per-token ‖x‖₂ (log)", 10, "middle", rotate=-90)
    for j, (marker, lab) in enumerate(shown):  # outside the axes, on the right, as the matplotlib legend
        cy = ax.t + 6 + 13 * j
        c.parts.append(f'<g transform="translate({_n(ax.r + 18)} {_n(cy)})">{marker}</g>')
        c.text(ax.r + 30, cy, lab, 8)
    return c.render(title)


def massive_dims(result: Any, slots: Sequence[int] | None = None, title: str | None = None) -> str:
    """SVG of :func:`forensics.views.plots.massive_dims`: per slot row, the hidden dims its massive tokens hit
    (marker area = tokens), the most hit annotated."""
    stats, _ = _unpack(result)
    sel = _selected(stats, slots)
    labels = slot_labels(result)
    colors = _colors_for(stats, sel)
    title = title or massive_title(stats)
    c = Canvas(FIG_WIDTH * PX_PER_INCH, min(MAX_HEIGHT, max(2.2, 0.45 * len(sel) + 1.2)) * PX_PER_INCH)
    _title(c, title, 11)
    hidden = max((s.shape[1] for s in stats.slots), default=1)
    ysize = 9 if len(sel) <= 16 else 7
    names = [labels[i] for i in sel]
    ax = Axes(c, (_box_left(names, ysize), 30, c.w - 10, c.h - 40), (-0.02 * hidden, hidden * 1.02),
              (-0.7, len(sel) - 0.3))
    xt = nice_ticks(0, hidden)
    ax.xticks(xt, [_tick_text(v) for v in xt], grid=True)
    ax.yticks(list(range(len(sel))), names, ysize)
    rows = massive_rows(stats, sel)
    for row, i, dims, counts, top in rows:
        y = ax.Y(row)
        c.parts.append(f'<g class="massive-dims-{i}" fill="{colors[i]}" stroke="#000000" stroke-width="{_n(0.5 * PT)}">'
                       + "".join(f'<circle cx="{_n(ax.X(d))}" cy="{_n(y)}" r="{_n(_marker_r(20 + 25 * counts[d]))}"/>'
                                 for d in dims) + "</g>")
        for d in top:
            c.text(ax.X(d) + 4 * PT, y - 6 * PT, f"{d} ({counts[d]} tok)", 8)
    ax.frame()
    c.text((ax.l + ax.r) / 2, c.h - 10, f"hidden dimension (0–{hidden - 1})", 10, "middle")
    if not rows:
        c.text((ax.l + ax.r) / 2, (ax.t + ax.b) / 2, "no massive activations in the selected slots", 10, "middle",
               MUTED)
    return c.render(title)


def similarity_heatmap(fingerprint: Any, title: str | None = None) -> str:
    """SVG of :func:`forensics.views.plots.similarity_heatmap`: the k×k slot distances on cividis (0 to the
    largest finite distance), values written in up to MAX_ANNOTATED_CELLS slots, a colour bar."""
    sim = np.asarray(fingerprint.similarity, dtype=np.float64)
    labels = slot_labels(fingerprint)
    k = sim.shape[0]
    title = title or f"Pairwise slot distance — {_name(fingerprint.stats)}"
    c = Canvas(min(FIG_WIDTH, max(4.2, 0.5 * k + 2.8)) * PX_PER_INCH,
               min(MAX_HEIGHT, max(3.0, 0.42 * k + 1.4)) * PX_PER_INCH)
    _title(c, title)
    finite = sim[np.isfinite(sim)]
    vmax = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    fs = 9 if k <= 16 else 7
    names = labels[:k]
    rot = 45 if k > 3 else 0
    below = (max((_text_px(s, fs) for s in names), default=0) * math.sin(math.radians(rot)) + 14) if rot else fs + 14
    left = _box_left(names, fs)
    side = max(10.0, min(c.w - left - 90, c.h - 30 - below))
    ax = Axes(c, (left, 30, left + side, 30 + side), (-0.5, k - 0.5), (k - 0.5, -0.5))
    cell = side / max(k, 1)
    for a in range(k):
        for b in range(k):
            v = sim[a, b]
            x, y = ax.X(b - 0.5), ax.Y(a - 0.5)
            if math.isfinite(v):
                c.add("rect", x=float(x), y=float(y), width=float(cell), height=float(cell),
                      fill=cividis(min(1.0, max(0.0, v / vmax))), shape_rendering="crispEdges",
                      class_=f"cell-{a}-{b}")
            if k <= MAX_ANNOTATED_CELLS:
                ink = "#ffffff" if (math.isfinite(v) and v < 0.5 * vmax) else "#000000"
                c.text(x + cell / 2, y + cell / 2, num(v) if math.isfinite(v) else "–", 8, "middle", ink)
    ax.frame()
    ax.xticks(list(range(k)), names, fs, rotate=rot)
    ax.yticks(list(range(k)), names, fs)
    # colour bar: 0 … vmax bottom to top, its 256 steps as a gradient
    bx, bh = ax.r + 16, side * 0.85
    by = ax.t + (side - bh) / 2
    stops = "".join(f'<stop offset="{_n(j / 16)}" stop-color="{cividis(1 - j / 16)}"/>' for j in range(17))
    c.parts.append(f'<defs><linearGradient id="cbar" x1="0" y1="0" x2="0" y2="1">{stops}</linearGradient></defs>')
    c.add("rect", x=float(bx), y=float(by), width=12.0, height=float(bh), fill="url(#cbar)", stroke="#333333",
          stroke_width=0.6)
    for t in nice_ticks(0.0, vmax, 5):
        ty = by + bh * (1 - t / vmax)
        c.line(bx + 12, ty, bx + 15, ty, "#333333", 0.8)
        c.text(bx + 17, ty, _tick_text(t), 8)
    c.text(bx + 52, by + bh / 2, "angular distance (massive dims masked)", 9, "middle", rotate=-90)
    return c.render(title)


def depth_ladder(fingerprint: Any, title: str | None = None) -> str:
    """SVG of :func:`forensics.views.plots.depth_ladder`: rows in depth order, each slot's dot at its r (area and
    opacity = confidence), the declared r as a hollow square, the band after the last block shaded."""
    lad = ladder(fingerprint)
    labels = slot_labels(fingerprint)
    colors = slot_colors(len(fingerprint.slots))
    order = lad.order
    title = title or f"Depth ladder — {_name(fingerprint.stats)} (rows shallow → deep)"
    c = Canvas(FIG_WIDTH * PX_PER_INCH, min(MAX_HEIGHT, max(2.4, 0.5 * len(fingerprint.slots) + 1.3)) * PX_PER_INCH)
    _title(c, title)
    ysize = 9 if len(order) <= 16 else 7
    names = [labels[i] for i in order]
    ax = Axes(c, (_box_left(names, ysize), 30, c.w - 10, c.h - 44), lad.xlim, (len(order) - 0.4, -0.9))
    c.add("rect", x=float(ax.X(lad.band_from)), y=float(ax.t), width=float(ax.r - ax.X(lad.band_from)),
          height=float(ax.b - ax.t), fill="#dddddd", fill_opacity=0.5)
    ax.xticks(lad.ticks, lad.tick_labels, grid=True)
    ax.yticks(list(range(len(order))), names, ysize)
    declared_drawn = False
    for row, i in enumerate(order):
        conf, x = lad.confidence[i], lad.x[i]
        y = ax.Y(row)
        if x is not None:
            c.add("circle", cx=float(ax.X(x)), cy=float(y), r=float(_marker_r(40 + 200 * conf)), fill=colors[i],
                  fill_opacity=float(0.35 + 0.65 * conf), stroke="#000000", stroke_width=0.6 * PT, class_=f"ladder-{i}")
            if len(order) <= MAX_ANNOTATED_ROWS:
                c.text(ax.X(x), y - 9 * PT - 5, lad.notes[i], 8, "middle")
        dx = lad.declared_x[i]
        if dx is not None:
            h = math.sqrt(50) * PT
            c.add("rect", x=float(ax.X(dx) - h / 2), y=float(y - h / 2), width=float(h), height=float(h), fill="none",
                  stroke="#000000", stroke_width=PT, class_=f"declared-{i}")
            declared_drawn = True
    ax.frame()
    c.text((ax.l + ax.r) / 2, c.h - 10, lad.xlabel, 9, "middle")
    if declared_drawn:
        sq = '<rect x="-5" y="-5" width="10" height="10" fill="none" stroke="#000000"/>'
        ax.legend([(sq, "declared r")], "upper right", 8)
    return c.render(title)


def audit_slices(audit: Any, title: str | None = None) -> str:
    """SVG of :func:`forensics.views.plots.audit_slices`: per fc input slice, trained r above served r, green
    same / vermillion mismatch / grey cannot tell."""
    rows = audit_slice_rows(audit)
    title = f"{title or AUDIT_TITLE} — verdict: {audit.wiring}"
    c = Canvas(FIG_WIDTH * PX_PER_INCH, 2.6 * PX_PER_INCH)
    _title(c, title)
    if not rows:
        c.text(c.w / 2, c.h / 2, "no slice information (the audit could not map fc slices)", 10, "middle", MUTED)
        return c.render(title)
    ax = Axes(c, (10, 28, c.w - 10, c.h - 8), (-1.6, len(rows)), (-0.2, 2.3))
    c.text(ax.X(-1.5), ax.Y(1.75), "trained", 10, bold=True)
    c.text(ax.X(-1.5), ax.Y(0.35), "served", 10, bold=True)
    c.parts.append('<defs><marker id="arr" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
                   'orient="auto-start-reverse"><path d="M0 0L10 5L0 10Z" fill="context-stroke"/></marker></defs>')
    for j, sl in enumerate(rows):
        for y, text, tag in ((1.5, sl.trained, "t"), (0.1, sl.served, "s")):
            x0, y0 = ax.X(j + 0.1), ax.Y(y + 0.5)
            c.add("rect", x=float(x0), y=float(y0), width=float(ax.X(j + 0.9) - x0), height=float(ax.Y(y) - y0),
                  rx=4.0, fill=sl.color, fill_opacity=0.25, stroke=sl.color, stroke_width=1.5 * PT,
                  class_=f"slice-{j}-{tag}")
            c.text(ax.X(j + 0.5), ax.Y(y + 0.25), text, 11, "middle", bold=True)
        c.add("line", x1=float(ax.X(j + 0.5)), y1=float(ax.Y(1.48)), x2=float(ax.X(j + 0.5)), y2=float(ax.Y(0.64)),
              stroke=sl.color, stroke_width=1.2 * PT, marker_end="url(#arr)")
        c.text(ax.X(j + 0.55), ax.Y(1.06), sl.caption, 8, color="#333333")
    return c.render(title)


def probe_wirings(probe: Any, title: str | None = None) -> str:
    """SVG of :func:`forensics.views.plots.probe_wirings`: mean acceptance length per wiring (best first, green;
    the controls greyed) with its 95 % interval; the declared wiring outlined. The axis starts at 1."""
    bars = probe_bars(probe)
    title = title or PROBE_TITLE
    n = len(bars.labels)
    c = Canvas(FIG_WIDTH * PX_PER_INCH, min(MAX_HEIGHT, max(2.4, 0.32 * n + 1.2)) * PX_PER_INCH)
    _title(c, title)
    if not n:
        c.text(c.w / 2, c.h / 2, "no wiring was scored", 10, "middle")
        return c.render(title)
    hi = max(max(t + e for t, e in zip(bars.length, bars.err_hi, strict=True)), 1e-9)
    ax = Axes(c, (_box_left(bars.labels, 9), 30, c.w - 12, c.h - 42), (1.0, 1.0 + hi * 1.05), (n - 0.4, -0.6))
    xt = nice_ticks(1.0, 1.0 + hi * 1.05)
    ax.xticks(xt, [_tick_text(v) for v in xt], grid=True)
    ax.yticks(list(range(n)), bars.labels, 9)
    bh = (ax.Y(0.4) - ax.Y(-0.4))
    for k in range(n):
        y, v = ax.Y(k), 1.0 + bars.length[k]
        fill = CONTROL_COLOR if bars.control[k] else OK_COLOR if k == 0 else UNKNOWN_COLOR
        c.add("rect", x=float(ax.X(1.0)), y=float(y - bh / 2), width=float(ax.X(v) - ax.X(1.0)), height=float(bh),
              fill=fill, fill_opacity=0.8,
              stroke="#000000" if bars.declared[k] else None, stroke_width=1.5 * PT if bars.declared[k] else None,
              class_=f"probe-length-{k}")
        lo, up = ax.X(v - bars.err_lo[k]), ax.X(v + bars.err_hi[k])
        c.line(lo, y, up, y, "#000000", 1.0)
        c.line(lo, y - 2 * PT, lo, y + 2 * PT, "#000000", 1.0)
        c.line(up, y - 2 * PT, up, y + 2 * PT, "#000000", 1.0)
    ax.frame()
    c.text((ax.l + ax.r) / 2, c.h - 10, bars.xlabel, 9, "middle")
    return c.render(title)


FIGURES: dict[str, Callable[..., str]] = {
    "norm_distributions": norm_distributions, "norm_by_position": norm_by_position, "massive_dims": massive_dims,
    "similarity_heatmap": similarity_heatmap,
    "depth_ladder": depth_ladder, "audit_slices": audit_slices, "probe_wirings": probe_wirings}
