"""The offline HTML report: verdicts first, evidence below, in one self-contained file (``hsf report``).

Layout puts verdicts before evidence (the order deepchecks' reports use):
verdict block → provenance → per-slot cards → cross-slot figures → checks table → static sample browser.
Every result object contributes its own ``_repr_html_`` fragment verbatim (the notebook's view, escaped by
its producer); everything else goes through Jinja2 autoescaping, so a ``<script>`` in a file name, token
text or config value renders as text. Images are inline (SVG built from numbers only, as elements or base64
data URIs); the file makes no network request and stays under ``SIZE_BUDGET_BYTES`` on ``sample_data/`` by
capping the per-file panels (``MAX_CARD_FILES``, ``MAX_BROWSER_SAMPLES``) and summarising the rest.

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
from forensics.analysis.audit.core import audit
from forensics.analysis.fingerprint.core import fingerprint
from forensics.analysis.probe import probe
from forensics.analysis.scan.core import scan as run_scan
from forensics.errors import ForensicsError
from forensics.models.draft import has_weights
from forensics.views.explore.wire import report_files
from forensics.views.report.figures import Figures
from forensics.views.report.panels import (
    build_browser,
    build_cards,
    build_checks,
    build_cross,
    build_key_numbers,
    error_text,
    fragment,
)
from forensics.views.report.verdicts import FileResult, build_provenance, build_verdicts, load_tokens, worst

SIZE_BUDGET_BYTES = 5_000_000  # ≤ 5 MB for sample_data/: one file a reviewer can attach or mail
TEMPLATE = "report.html.j2"
MAX_ANALYSED_FILES = 64  # files fingerprinted one by one; a larger dataset is summarised by `forensics.scan`


@dataclass
class Report:
    """A rendered-on-demand report: ``.html`` (str), ``.save(path)``, ``.counts`` (verdict counts)."""

    context: dict = field(repr=False)
    argv: list[str] = field(default_factory=list)
    output: str | None = None

    def command(self) -> str:
        """The exact ``hsf report …`` command that regenerates this report."""
        return shlex.join(["hsf", "report", *self.argv, "-o", self.output or "report.html"])

    @property
    def counts(self) -> dict:
        return dict(self.context["verdicts"]["counts"])

    def exit_code(self, fail_on: str = "fail", decided_only: bool = False) -> int:
        """The exit code of ``hsf report`` (``forensics.findings.exit_code``): every file's findings and slot
        verdicts, the audit's findings and verdict; 2 when an input or a section could not be read."""
        from forensics.findings import exit_code

        findings, verdicts = [], []
        for f in self.context["files"]:
            if f.fp is not None:
                findings += f.fp.findings
                verdicts += [s.verdict for s in f.fp.slots]
        audit = self.context.get("audit")
        if audit is not None:
            findings += audit.findings
            verdicts.append(audit.outcome)
        bad = any(f.error for f in self.context["files"]) or bool(self.context.get("errors"))
        return exit_code(findings, verdicts, unreadable=bad and not decided_only, fail_on=fail_on)

    def verdict(self, fail_on: str = "fail") -> str:
        """``pass`` / ``fail`` / ``cannot tell`` over what was read (the exit code without the unreadable rule)."""
        return {1: "fail", 3: "cannot tell"}.get(self.exit_code(fail_on, decided_only=True), "pass")

    @property
    def html(self) -> str:
        return render(self.context, command=self.command())

    def save(self, path: str | os.PathLike) -> str:
        """Write the report to ``path`` (parent folders created; written to a temporary file, then renamed) and
        return the absolute path. A directory, or a file that looks like a capture, is refused."""
        from forensics.io.output import atomic_output, check_output

        path = check_output(path)
        self.output = path
        text = self.html
        with atomic_output(path) as f:
            f.write(text)
        return os.path.abspath(path)

    def __repr__(self) -> str:
        c = self.counts
        return (f"Report({len(self.context['files'])} files, pass {c.get('pass', 0)}, warn {c.get('warn', 0)}, "
                f"fail {c.get('fail', 0)}; audit {self.context.get('audit_verdict') or '—'})")

    def _repr_html_(self) -> str:
        return (f"<iframe srcdoc=\"{html.escape(self.html, quote=True)}\" "
                "style='width:100%;height:720px;border:1px solid #ccc'></iframe>")


def render(context: dict, command: str) -> str:
    """Render the Jinja2 template (autoescape on) with a context built by :func:`report`."""
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


def _argv(paths, layers, model, draft, engine, engine_version, trainer, target_config, served, title,
          scan=None) -> list[str]:
    argv = [os.fspath(p) for p in paths]
    if layers is not None:
        argv += ["--layers", layers if isinstance(layers, str) else ",".join(str(x) for x in layers)]
    for flag, v in (("--model", model), ("--draft", draft), ("--engine", engine),
                    ("--engine-version", engine_version), ("--trainer", trainer),
                    ("--target-config", target_config), ("--served", served), ("--title", title)):
        if v is not None:
            argv += [flag, os.fspath(v) if isinstance(v, os.PathLike) else str(v)]
    if scan is True:
        argv.append("--scan")
    return argv


def _analyse(path: str, layers, model, errors: list[dict]) -> FileResult:
    """Load one capture, fingerprint it (when that module exists) and keep what the views need."""
    from forensics.analysis.stats import summarize
    from forensics.io.formats import load

    try:
        cap = load(path)
    except ForensicsError as e:
        return FileResult(path=path, error=error_text(e))
    fp = None
    try:
        fp = fingerprint(cap, layers=layers, model=model)
    except ForensicsError as e:  # a failing section is listed in the report, not fatal
        errors.append({"where": f"fingerprint: {path}", "message": error_text(e)})
    try:
        stats = fp.stats if fp is not None else summarize(cap)
    except ForensicsError as e:
        return FileResult(path=path, error=error_text(e))
    return FileResult(path=path, capture=cap, stats=stats, fp=fp)


TRAINER_FORMATS = {"speculators-v1": "speculators-v1", "speculators": "speculators", "specforge": "specforge"}


def training_files(files: list, trainer: str | None) -> list:
    """The files that are the draft's training data, out of everything the report reads.

    A report folder can mix formats (sample_data/ holds a 32-slot ladder beside the speculators-v1
    training files): the audit and the probe must see the trainer's own format (``--trainer``), else the
    format most files share; never simply the first file found.
    """
    ok = [f for f in files if f.error is None and f.capture is not None]
    want = TRAINER_FORMATS.get(trainer or "")
    if want:
        chosen = [f for f in ok if f.capture.format == want]
        if chosen:
            return chosen
    counts: dict = {}
    for f in ok:
        counts[f.capture.format] = counts.get(f.capture.format, 0) + 1
    if not counts:
        return []
    best = max(counts, key=lambda k: counts[k])  # ties: the first format met
    return [f for f in ok if f.capture.format == best]


def report(paths, layers=None, model=None, draft=None, engine=None, engine_version=None, trainer=None,
           target_config=None, served=None, scan=None, title=None,
           progress: Callable[[str, int, int], None] | None = None, input_ids=None) -> Report:
    """Analyse capture files/directories and build the offline HTML report.

    Args:
        paths: capture files or directories (a single path is accepted too), or one capture in memory: a
            ``Capture``, transformers' ``output.hidden_states``, a list or stack of tensors (with ``input_ids``).
        layers: the expected layer list (``"0,3,16,28"``, ``[0, 3, 16, 28]`` or ``"embed,L3,…"``) for labels.
        model: model path (HF folder, safetensors dir or .gguf) for exact-mode fingerprints and model facts.
        draft, engine, engine_version, trainer, target_config, served: passed to :func:`forensics.audit`
            (run when any of them is given; the draft is also probed when ``forensics.draft`` exists).
        scan: a ``ScanResult`` to include, or ``True`` to scan the first path.
        title: the report title.
        progress: called as ``progress(stage, done, total)`` while files are fingerprinted, the draft is
            probed and figures are drawn (``hsf report`` shows it as a bar on stderr).

    Returns:
        :class:`Report` — ``.html``, ``.save(path)``.
    """
    from forensics.io.formats import as_capture, iter_files, write_capture

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    elif not (isinstance(paths, (list, tuple)) and paths and all(isinstance(p, (str, os.PathLike)) for p in paths)):
        # a capture in memory (tensors, transformers' output.hidden_states, a Capture): the report reads files
        # (stamps, tokenizers, scans), so it is written once as a plain safetensors capture and read back
        paths = [write_capture(as_capture(paths, input_ids=input_ids))]
    paths = [os.fspath(p) for p in paths]
    model_arg = model  # as given ("default"), for the regenerating command
    if model is not None:
        from forensics.models.target import resolve_model

        model = resolve_model(model)
    if isinstance(layers, (list, tuple)):
        layers = ",".join(str(x) for x in layers)
    tick = progress or (lambda stage, done, total: None)
    errors: list[dict] = []
    files: list[FileResult] = []
    skipped = 0  # files beyond MAX_ANALYSED_FILES: covered by the dataset scan, not analysed one by one
    todo: list[str] = []
    for p in paths:
        try:
            found = list(iter_files(p))
        except ForensicsError as e:
            files.append(FileResult(path=p, error=error_text(e)))
            continue
        if not found:
            files.append(FileResult(path=p, error=f"{p}: no capture files found"))
        room = max(0, MAX_ANALYSED_FILES - len(files) - len(todo))
        skipped += len(found[room:])
        todo += found[:room]
    for i, f in enumerate(todo):
        tick("fingerprint files", i, len(todo))
        files.append(_analyse(f, layers, model, errors))
    root = os.path.commonpath([os.path.dirname(os.path.abspath(p)) for p in paths]) if paths else os.getcwd()
    for f in files:
        f.rel = os.path.relpath(os.path.abspath(f.path), root)
        if f.capture is not None:
            f.tokens = load_tokens(f.capture, errors)

    audit_res = probe_res = scan_res = facts = None
    training = training_files(files, trainer)
    if any(v is not None for v in (draft, engine, trainer, served, target_config)):
        try:
            audit_res = audit(data=training[0].capture if training else (paths[0] if paths else None),
                              draft=draft, engine=engine, engine_version=engine_version, trainer=trainer,
                              target_config=target_config, served=served, model=model)  # every piece of evidence
        except ForensicsError as e:
            errors.append({"where": "audit", "message": error_text(e)})
    if draft is not None and paths and has_weights(draft):
        try:
            probe_res = probe(draft, [f.capture for f in training] or paths[0], model=model, engine=engine,
                              engine_version=engine_version,
                              progress=lambda done, total: tick("probe wirings × files", done, total))
        except ForensicsError as e:
            errors.append({"where": "draft probe", "message": error_text(e)})
    if (scan is True or (scan is None and skipped)) and paths:
        try:
            scan_res = run_scan(paths if len(paths) > 1 else paths[0], progress=False)
        except ForensicsError as e:
            errors.append({"where": "scan", "message": error_text(e)})
    elif scan not in (None, False):
        scan_res = scan
    if model is not None:
        try:
            from forensics.models.target import target_facts

            facts = target_facts(model)
        except ForensicsError as e:
            errors.append({"where": "model facts", "message": error_text(e)})

    ok = [f for f in files if f.error is None]
    for f in files:
        if f.error:
            errors.append({"where": f.rel or f.path, "message": f.error})
    verdicts = build_verdicts(files, audit_res, probe_res)
    focus = _focus(training if (audit_res is not None or probe_res is not None) else [], verdicts, ok)
    figures = Figures()  # requested by the panels below, drawn together before the report is returned
    audit_fig = figures.request("audit_slices", audit_res) if audit_res is not None else None
    probe_fig = figures.request("probe_wirings", probe_res) if probe_res is not None else None
    context = {
        "title": title or "Hidden-state forensics report",
        "version": __version__,
        "generated": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "inputs": paths,
        "files": files,
        "verdicts": verdicts,
        "overall": worst([verdicts["overall"]]),
        "provenance": build_provenance(files, layers=layers, model=model, facts=facts, draft=draft, engine=engine,
                                       engine_version=engine_version, trainer=trainer, served=served),
        "focus": focus,
        "key_numbers": build_key_numbers(ok, focus, figures),
        "cards": build_cards(ok, focus),
        "cross": build_cross(ok, focus=focus, figures=figures),
        "checks": build_checks(ok, audit_res, scan_res),
        "browser": build_browser(ok),
        "explorer": report_files(ok),  # the notebook's explorer, static (forensics.views.explore)
        "audit_html": fragment(audit_res),
        "audit": audit_res,  # the result objects, for Python callers and tests
        "probe": probe_res,
        "audit_verdict": getattr(audit_res, "verdict", None),
        "audit_fig": audit_fig,
        "probe_fig": probe_fig,
        "probe_html": fragment(probe_res),
        "scan_html": fragment(scan_res),
        "errors": errors,
        "skipped": skipped,
        "max_analysed": MAX_ANALYSED_FILES,
    }
    figures.draw(progress=lambda done, total: tick("figures", done, total))
    argv = _argv(paths, layers, model_arg, draft, engine, engine_version, trainer, target_config, served, title, scan)
    return Report(context=context, argv=argv)


def _focus(training: list, verdicts: dict, ok: list) -> str | None:
    """The file the reader looks at first: the audited (training) file, else the first failing one, else the
    first readable one."""
    if training:
        return training[0].rel
    failing = [r["file"] for r in verdicts["rows"] if r["verdict"] == "fail" and not r["error"]]
    return failing[0] if failing else (ok[0].rel if ok else None)
