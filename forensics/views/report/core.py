"""The offline HTML report: verdicts first, evidence below, in one self-contained file (``hsf report``).

Layout puts verdicts before evidence (the order deepchecks' reports use):
verdict block → per-slot cards → cross-slot figures → checks table → the explorer (static) → provenance.
Every result object contributes its own ``_repr_html_`` fragment verbatim (the notebook's view, escaped by
its producer); everything else goes through Jinja2 autoescaping, so a ``<script>`` in a file name, token
text or config value renders as text. Images are inline (SVG built from numbers only, as elements or base64
data URIs); the file makes no network request and stays under ``SIZE_BUDGET_BYTES`` on ``sample_data/`` by
capping the per-file panels (``MAX_CARD_FILES``, ``forensics.analysis.report.MAX_EXPLORED_FILES``) and
summarising the rest.

Example:
    >>> import forensics
    >>> forensics.report(["sample_data"]).save("out/report.html")     # doctest: +SKIP
"""

from __future__ import annotations

import datetime
import html
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from forensics import __version__
from forensics.analysis.report import MAX_ANALYSED_FILES, OUTCOMES, ReportResult
from forensics.analysis.report import report as analyse
from forensics.display import renders
from forensics.io.output import atomic_output, check_output
from forensics.views.explore.wire import report_embed
from forensics.views.format import count, headline_word
from forensics.views.report.figures import Figures
from forensics.views.report.panels import (
    build_cards,
    build_checks,
    build_cross,
    build_key_numbers,
    fragment,
)
from forensics.views.report.verdicts import build_provenance, build_verdicts

SIZE_BUDGET_BYTES = 5_000_000  # ≤ 5 MB for sample_data/: one file a reviewer can attach or mail
TEMPLATE = "report.html.j2"


@dataclass
class Report:
    """A ``ReportResult`` rendered: ``.html`` (str), ``.save(path)``, ``.counts``, ``.exit_code()``, ``.verdict()``
    (read from ``result``, decided in ``forensics.analysis.report``); ``context`` is what the template reads."""

    result: ReportResult
    context: dict = field(repr=False)
    output: str | None = None

    @classmethod
    def of(cls, result: ReportResult, progress: Callable[[str, int, int], None] | None = None) -> Report:
        """Build the template context of ``result`` (figures drawn now: ``progress("figures", done, total)``)."""
        return cls(result=result, context=build_context(result, progress))

    @property
    def argv(self) -> list[str]:
        return self.result.argv

    def command(self) -> str:
        """The exact ``hsf report …`` command that regenerates this report."""
        return shlex.join(["hsf", "report", *self.argv, "-o", self.output or "report.html"])

    @property
    def counts(self) -> dict:
        return self.result.counts

    def exit_code(self, fail_on: str = "fail", decided_only: bool = False) -> int:
        """The exit code of ``hsf report`` (:meth:`ReportResult.exit_code`)."""
        return self.result.exit_code(fail_on, decided_only=decided_only)

    def verdict(self, fail_on: str = "fail") -> str:
        """``pass`` / ``fail`` / ``cannot tell`` over what was read (:meth:`ReportResult.decide`)."""
        return self.result.decide(fail_on).value

    def to_dict(self, fail_on: str = "fail") -> dict:
        """The decision as ``hsf report --json`` gives it (:meth:`ReportResult.to_dict`)."""
        return self.result.to_dict(fail_on)

    @property
    def html(self) -> str:
        return render(self.context, command=self.command())

    def save(self, path: str | os.PathLike) -> str:
        """Write the report to ``path`` (parent folders created; written to a temporary file, then renamed) and
        return the absolute path. A directory, a file that looks like a capture, an input or an input's side file
        (its ``capture.json``, a draft's ``config.json``) is refused."""
        inputs = [a for a in self.result.argv if not a.startswith("--") and os.path.exists(a)]  # paths, option values
        path = check_output(path, inputs)
        self.output = path
        text = self.html
        with atomic_output(path) as f:
            f.write(text)
        return os.path.abspath(path)

    def __repr__(self) -> str:
        c = self.counts
        audit = self.result.audit
        slots = ", ".join(f"{c[k]} {k}" for k in OUTCOMES if c.get(k)) or "no slots"
        return (f"Report({headline_word(self.result.overall)}: {count(len(self.result.files), 'file')}; slots: "
                f"{slots}; audit {audit.wiring if audit is not None else '—'})")

    def _repr_html_(self) -> str:
        return (f"<iframe srcdoc=\"{html.escape(self.html, quote=True)}\" "
                "style='width:100%;height:720px;border:1px solid #ccc'></iframe>")


@renders(ReportResult, "line")
def result_line(res: ReportResult) -> str:
    """``ReportResult(CANNOT TELL: 8 files, 51 cannot tell, 9 pass)``: the headline's word (the report's overall
    outcome, as every view writes it) and the slot outcomes counted."""
    c = res.counts
    return (f"ReportResult({headline_word(res.overall)}: {len(res.files)} files"
            + "".join(f", {c[k]} {k}" for k in OUTCOMES if c[k]) + ")")


@renders(ReportResult, "html")
def result_html(res: ReportResult) -> str:
    """The whole report in a notebook cell (an ``<iframe>``)."""
    return Report.of(res)._repr_html_()


def render(context: dict, command: str) -> str:
    """Render the Jinja2 template (autoescape on) with a context built by :func:`build_context`."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("forensics.views.report", "templates"),
                             autoescape=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    here = os.path.join(os.path.dirname(__file__), "templates")
    with open(os.path.join(here, "report.css"), encoding="utf-8") as f:
        css = f.read()
    with open(os.path.join(here, "report.js"), encoding="utf-8") as f:
        js = f.read()
    explorer = context.get("explorer") or {}
    css, js = css + explorer.get("css", ""), js + explorer.get("js", "")
    return env.get_template(TEMPLATE).render(**context, command=command, css=css, js=js)


def build_context(res: ReportResult, progress: Callable[[str, int, int], None] | None = None) -> dict:
    """The template's context for ``res``: text, formatted numbers, SVG figures and the explorer's static copy,
    read from the result (nothing is decided or recomputed here)."""
    tick = progress or (lambda stage, done, total: None)
    ok = res.readable
    verdicts = build_verdicts(res)
    focus = _focus(res, verdicts)
    figures = Figures()  # requested by the panels below, drawn together before the context is returned
    audit_fig = figures.request("audit_slices", res.audit) if res.audit is not None else None
    probe_fig = figures.request("probe_wirings", res.probe) if res.probe is not None else None
    context = {
        "title": res.title or "Hidden-state forensics report",
        "version": __version__,
        "generated": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "inputs": res.inputs,
        "files": res.files,
        "verdicts": verdicts,
        "overall": res.overall,
        "provenance": build_provenance(res),
        "focus": focus,
        # why the Key numbers panel shows that file: the audited training file, else the first failing one
        "focus_why": "audited" if res.training else "fails" if focus and any(
            r["file"] == focus and r["verdict"] == "fail" for r in verdicts["rows"]) else None,
        "key_numbers": build_key_numbers(ok, focus, figures),
        "cards": build_cards(ok, focus),
        "cross": build_cross(ok, focus=focus, figures=figures),
        "checks": build_checks(ok, res.audit, res.scan),
        # the notebook's explorer, static: the report's one sample browser (states computed with the result)
        "explorer": report_embed([(f.rel or os.path.basename(f.path), f.explore, f.outcome) for f in ok
                                  if f.explore is not None]),
        "audit_html": fragment(res.audit),
        "audit": res.audit,  # the result objects, for Python callers and tests
        "probe": res.probe,
        "audit_verdict": res.audit.wiring if res.audit is not None else None,
        "audit_fig": audit_fig,
        "probe_fig": probe_fig,
        "probe_html": fragment(res.probe),
        "scan_html": fragment(res.scan),
        "errors": res.errors,
        "notes": res.notes,
        "skipped": res.skipped,
        "max_analysed": res.max_analysed,
    }
    figures.draw(progress=lambda done, total: tick("figures", done, total))
    return context


def report(paths, layers=None, model=None, draft=None, engine=None, engine_version=None, trainer=None,
           target_config=None, served=None, scan=None, title=None,
           progress: Callable[[str, int, int], None] | None = None, input_ids=None) -> Report:
    """Analyse capture files/directories (:func:`forensics.analysis.report.report`) and render the offline HTML
    report; the arguments are that function's.

    Returns:
        :class:`Report` — ``.html``, ``.save(path)``, ``.counts``, ``.exit_code()``, ``.verdict()``, ``.result``.
    """
    res = analyse(paths, layers=layers, model=model, draft=draft, engine=engine, engine_version=engine_version,
                  trainer=trainer, target_config=target_config, served=served, scan=scan, title=title,
                  progress=progress, input_ids=input_ids)
    return Report.of(res, progress)


def _focus(res: ReportResult, verdicts: dict) -> str | None:
    """The file the reader looks at first: the audited (training) file, else the first failing one, else the
    first readable one."""
    if res.training:
        return res.training[0].rel
    failing = [r["file"] for r in verdicts["rows"] if r["verdict"] == "fail" and not r["error"]]
    ok = res.readable
    return failing[0] if failing else (ok[0].rel if ok else None)


__all__ = ["MAX_ANALYSED_FILES", "Report", "SIZE_BUDGET_BYTES", "build_context", "render", "report"]
