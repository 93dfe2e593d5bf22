"""Small HTML fragment helpers shared by every ``_repr_html_`` (and so by the report): escaped by default."""

from __future__ import annotations

import html
import math
import re
import textwrap
from collections.abc import Iterable
from typing import Any

from forensics.errors import escape

VERDICT_COLORS = {"pass": "#1b7837", "identified": "#2166ac", "warn": "#b35806", "fail": "#b2182b", "info": "#4d4d4d",
                  "cannot tell": "#7b3294", "unreadable": "#8c510a"}


def finding_verdict(f: Any, fallback: dict | None = None) -> str:
    """pass / warn / fail / info of one finding, read from its ``severity`` (``error`` reads as fail); a finding
    without one takes ``fallback[kind]``, else warn."""
    sev = f.get("severity") if isinstance(f, dict) else getattr(f, "severity", None)
    if sev is not None:
        return {"error": "fail", "warning": "warn"}.get(str(sev), str(sev))
    kind = f.get("kind") if isinstance(f, dict) else getattr(f, "kind", "")
    return (fallback or {}).get(kind, "warn")


def shown_name(x: Any) -> str:
    """A name from the data (a file path, a slot or key name, a message quoting them) as one line of text: control
    characters, the newline and tab included, written as Python escapes (``forensics.errors.escape``), so a file
    named ``a\\nb.pt`` cannot split a row of a text view into two. Every view that prints a path in text writes it
    through this (HTML escapes with :func:`esc`; there a newline is only whitespace).

    >>> shown_name("data/a\\nb.pt"), shown_name("\\x1b[2Jx.pt")
    ('data/a\\\\nb.pt', '\\\\x1b[2Jx.pt')
    """
    return escape("" if x is None else str(x))


def esc(x: Any) -> str:
    """HTML-escape any value (file names, token text and config values are untrusted)."""
    return html.escape("" if x is None else str(x), quote=True)


_NUMERIC = re.compile(r"[-+]?[\d,]*\.?\d+(e[+-]?\d+)?%?|—|nan|-?inf")
# JupyterLab's stylesheet right-aligns every rendered table cell (.jp-RenderedHTMLCommon td); text reads from
# the left, numbers from the right, so each cell carries its own alignment (an inline style wins there and in
# the report alike).
_LEFT, _RIGHT = " style='text-align:left'", " style='text-align:right'"


def _align(c: Any) -> str:
    if isinstance(c, Raw):
        return _LEFT
    return _RIGHT if _NUMERIC.fullmatch(str(c).strip()) else _LEFT


def _blank(c: Any) -> bool:
    return not isinstance(c, Raw) and str(c).strip() == "—"


def html_table(headers: Iterable[Any], rows: Iterable[Iterable[Any]], cls: str = "hsf-table") -> str:
    """A plain escaped table: text cells left-aligned, number cells right-aligned. Cells are escaped unless
    wrapped with :class:`Raw`."""
    rows = [list(r) for r in rows]
    headers = list(headers)

    # a column is numeric when its filled cells are; a "—" (nothing to show) takes its column's side
    filled = [[r[i] for r in rows if i < len(r) and not _blank(r[i])] for i in range(len(headers))]
    side = [_RIGHT if cs and all(_align(c) == _RIGHT for c in cs) else _LEFT for cs in filled]
    head = "".join(f"<th{side[i]}>{esc(h)}</th>" for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f"<td{side[i] if _blank(c) and i < len(side) else _align(c)}>{cell(c)}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table class='{esc(cls)}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class Raw(str):
    """Markup already escaped by its producer (only for fragments built from escaped parts)."""


def cell(c: Any) -> str:
    return str(c) if isinstance(c, Raw) else esc(c)


def badge(verdict: Any) -> Raw:
    """A coloured word for a severity (``fail``/``warn``/``info``) or a verdict (``pass``/``cannot tell``)."""
    word = str(getattr(verdict, "value", verdict))
    color = VERDICT_COLORS.get(word, "#4d4d4d")
    return Raw(f"<span class='hsf-badge hsf-{esc(word.replace(' ', '-'))}' style='color:{color};font-weight:600'>"
               f"{esc(word)}</span>")


class Shown(str):
    """Text that reads as text wherever it is shown: ``print``-like in a REPL (not a quoted string with ``\\n``),
    a ``<pre>`` block in a notebook, and a plain ``str`` to code.

    >>> Shown("a\\nb")
    a
    b
    """

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        return f"<pre>{esc(str(self))}</pre>"


def headline_word(verdict: Any) -> str:
    """The first word of every view's headline: ``FAIL``, ``CANNOT TELL``, ``WARN``, ``PASS``, ``IDENTIFIED`` or
    ``NO CLAIM`` (a verdict, or an outcome word of ``forensics.findings.OUTCOME_RANK``: ``info`` reads NO CLAIM)."""
    word = None if verdict is None else str(getattr(verdict, "value", verdict))
    return "NO CLAIM" if word in (None, "info") else word.upper()


def num(x: Any) -> str:
    """The one number style of every view (CLI, notebook, report): 3 significant digits (4 from 100 up), whole
    numbers with thousands separators from 1,000 to 10 million, scientific below 1e-3 and from 1e7 up; ``—`` for
    a missing value, ``nan``/``inf`` for a non-finite one; lists element by element.

    >>> num(25012.3), num(629.48), num(2.8017), num(0.00012), num(None), num([1.5, 2])
    ('25,012', '629.5', '2.8', '0.00012', '—', '[1.5, 2]')
    """
    if x is None:
        return "—"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, list | tuple):
        return "[" + ", ".join(num(v) for v in x) + "]"
    if isinstance(x, int) or type(x).__name__.startswith(("int", "uint")):  # numpy integers without numpy
        try:
            return str(int(x))
        except (TypeError, ValueError):
            return str(x)
    try:
        v = float(x)
    except (TypeError, ValueError):
        return str(x)
    if not math.isfinite(v):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    av = abs(v)
    if 1e3 <= av < 1e7:
        return f"{v:,.0f}"
    if av != 0 and (av >= 1e7 or av < 1e-3):
        return f"{v:.3g}"
    return f"{v:.4g}" if av >= 100 else f"{v:.3g}"


def count(n: int, word: str, many: str | None = None) -> str:
    """A count with its noun, plural right: ``1 file``, ``3 files`` (``many`` for an irregular plural).

    >>> count(1, "file"), count(3, "file"), count(2, "problem"), count(0, "match", "matches")
    ('1 file', '3 files', '2 problems', '0 matches')
    """
    return f"{n} {word if n == 1 else (many or word + 's')}"


def pct(x: float | None, digits: int = 1) -> str:
    """A fraction as a percentage (``0.5204`` → ``52.0%``); ``—`` when missing."""
    return "—" if x is None else f"{100 * x:.{digits}f}%"


def short_list(xs: Iterable[Any] | None, k: int = 6) -> str:
    """``[a, b, c, …]``: the first ``k`` items of a list (``?`` for a missing one)."""
    items = list(xs or [])
    return "[" + ", ".join("?" if x is None else str(x) for x in items[:k]) + (", …" if len(items) > k else "") + "]"


# ------------------------------------------------------------------------------------------- plain text
TEXT_WIDTH = 100  # default width of text views (``repr``, piped CLI output without $COLUMNS)
MIN_FLEX = 24  # a folding column folds down to this many characters before lower-priority columns are dropped


def wrap(line: str, width: int = TEXT_WIDTH, indent: str | None = None) -> list[str]:
    """One logical line as lines of at most ``width`` characters; continuations are indented four columns
    deeper than the line itself (or by ``indent``). A single word longer than that (a long path) is not split."""
    if len(line) <= width:
        return [line]
    lead = line[:len(line) - len(line.lstrip())]
    sub = indent if indent is not None else lead + "    "
    return textwrap.wrap(line.strip(), width=width, initial_indent=lead, subsequent_indent=sub,
                         break_on_hyphens=False, break_long_words=False) or [line[:width]]


def fit(text: str, width: int = TEXT_WIDTH) -> str:
    """Every line of ``text`` folded to ``width`` (tables are laid out by :func:`columns` to fit already)."""
    return "\n".join(out for line in text.split("\n") for out in wrap(line, width))


def columns(headers: list[str], rows: list[list[Any]], width: int = TEXT_WIDTH, indent: str = "  ",
            right: Iterable[int] = (), drop: Iterable[int] = (), flex: int | None = None) -> list[str]:
    """A plain-text table that fits ``width``: ``drop`` lists column indices to leave out, first first, while it
    is too wide; then the ``flex`` column (default: the last) folds onto continuation lines.

    Numbers should come formatted (:func:`num`); ``right`` columns are right-aligned.
    """
    cells = [[shown_name(c) for c in r] for r in rows]  # a cell is one line: a name from the data cannot split a row
    keep = list(range(len(headers)))
    right = set(right)
    gap = 2

    def need(cols: list[int], squeeze: bool = False) -> int:
        ws = [max([len(headers[i])] + [len(r[i]) for r in cells]) for i in cols]
        if squeeze:
            ws = [min(w, MIN_FLEX) if i == flex else w for i, w in zip(cols, ws, strict=True)]
        return len(indent) + sum(ws) + gap * (len(cols) - 1)

    flex = keep[-1] if flex is None else flex
    for i in drop:
        if need(keep, squeeze=True) <= width:
            break
        if i in keep and i != flex:
            keep.remove(i)
    widths = {i: max([len(headers[i])] + [len(r[i]) for r in cells]) for i in keep}
    over = need(keep) - width
    if over > 0 and flex in keep:
        widths[flex] = max(min(8, widths[flex]), widths[flex] - over)

    def fmt_row(vals: list[str]) -> list[str]:
        parts = {i: (textwrap.wrap(vals[i], widths[i], break_on_hyphens=False) or [""]) if i == flex
                 else [vals[i][:widths[i]]] for i in keep}
        depth = max(len(p) for p in parts.values())
        out = []
        for k in range(depth):
            line = []
            for i in keep:
                v = parts[i][k] if k < len(parts[i]) else ""
                line.append(v.rjust(widths[i]) if i in right else v.ljust(widths[i]))
            out.append((indent + (" " * gap).join(line)).rstrip())
        return out

    lines = fmt_row(list(headers))
    for r in cells:
        lines += fmt_row(r)
    return lines
