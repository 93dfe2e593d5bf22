"""Small HTML fragment helpers shared by every ``_repr_html_`` (and so by the report): escaped by default."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from typing import Any

VERDICT_COLORS = {"pass": "#1b7837", "warn": "#b35806", "fail": "#b2182b", "info": "#4d4d4d",
                  "cannot tell": "#7b3294"}


def esc(x: Any) -> str:
    """HTML-escape any value (file names, token text and config values are untrusted)."""
    return html.escape("" if x is None else str(x), quote=True)


def html_table(headers: Iterable[Any], rows: Iterable[Iterable[Any]], cls: str = "hsf-table") -> str:
    """A plain escaped table. Cells are escaped unless wrapped with :class:`Raw`."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell(c)}</td>" for c in r) + "</tr>" for r in rows)
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


def headline_word(verdict: Any) -> str:
    """The first word of every view's headline: ``FAIL``, ``CANNOT TELL``, ``PASS`` or ``NO CLAIM``."""
    return "NO CLAIM" if verdict is None else str(getattr(verdict, "value", verdict)).upper()


def num(x: Any) -> str:
    """The one number style of every view: 3 significant digits (4 from 100 up), scientific below 1e-3 and from
    1e5 up; ``—`` for a missing value and ``nan``/``inf`` for a non-finite one."""
    if x is None:
        return "—"
    if isinstance(x, bool) or not isinstance(x, int | float):
        return str(x)
    x = float(x) if not isinstance(x, int) else x
    if isinstance(x, int):
        return str(x)
    if not math.isfinite(x):
        return "nan" if x != x else ("inf" if x > 0 else "-inf")
    ax = abs(x)
    if ax != 0 and (ax >= 1e5 or ax < 1e-3):
        return f"{x:.3g}"
    return f"{x:.4g}" if ax >= 100 else f"{x:.3g}"


def short_list(xs: Iterable[Any] | None, k: int = 6) -> str:
    """``[a, b, c, …]``: the first ``k`` items of a list (``?`` for a missing one)."""
    items = list(xs or [])
    return "[" + ", ".join("?" if x is None else str(x) for x in items[:k]) + (", …" if len(items) > k else "") + "]"
