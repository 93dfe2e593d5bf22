"""The report's figures: requested while the panels are built, drawn afterwards as one batch of inline SVG.

Each (figure, result object) pair is drawn once (the audited file's norm distributions appear in two panels)
by :mod:`forensics.views.report.svg`, which writes the SVG directly: matplotlib is not imported on the report
path (its 18 PNG figures of the ``make demo`` report cost ~5 s CPU, 2026-12-01).
"""

from __future__ import annotations

import base64
from collections.abc import Callable

from forensics.errors import ForensicsError
from forensics.views.report import svg


def draw(name: str, *args, **kw) -> dict:
    """Draw ``forensics.views.report.svg.<name>`` as a base64 SVG data URI; the error text when it fails."""
    fn = svg.FIGURES.get(name)
    if fn is None:
        return {"name": name, "src": None, "error": f"the report has no figure {name}()"}
    try:
        text = fn(*args, **kw)
    except (ForensicsError, ValueError) as e:  # degenerate data (no finite norm, one token): listed
        return {"name": name, "src": None, "error": f"{type(e).__name__}: {e}"}
    return {"name": name, "src": "data:image/svg+xml;base64," + base64.b64encode(text.encode()).decode(),
            "error": None}


class Figures:
    """Figures requested by the panel builders (``request`` returns the dict the template reads, filled in by
    ``draw``), each distinct (figure, result) drawn once."""

    def __init__(self) -> None:
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
        """Draw every requested figure and fill the requested dicts (``progress(done, total)`` per figure)."""
        tick = progress or (lambda done, total: None)
        total = len(self._jobs)
        for k, (key, (name, args)) in enumerate(self._jobs.items()):
            tick(k, total)
            res = draw(name, *args)
            for fig in self._waiting[key]:
                fig.update(res)
        tick(total, total)
        self._jobs.clear()
        self._waiting.clear()
