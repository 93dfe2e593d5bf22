"""The report's compute (``forensics.report``, ``hsf report``): every input fingerprinted, the wiring audit, the draft
probe and the dataset scan run with every piece of evidence given, and each slot's outcome decided — one typed
:class:`ReportResult`, rendered by ``forensics.views.report``.

A slot's outcome is one word of the report's vocabulary (``fail`` / ``cannot tell`` / ``warn`` / ``pass`` /
``info``; a file that was not read is ``unreadable``, ranked by ``forensics.findings.OUTCOME_RANK``), decided here
from the fingerprint's claim verdict and the severity of the findings on that slot (set where they were made), with
the one piece of evidence that decided it as data (:class:`Deciding`). The report's verdict and exit code are read
from these typed fields.

Example:
    >>> from forensics.analysis.report import report
    >>> res = report(["sample_data/speculators_v1"])                      # doctest: +SKIP
    >>> res.verdict.value, res.exit_code(), res.counts["cannot tell"]     # doctest: +SKIP
    ('cannot tell', 3, 15)
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from forensics.analysis.audit.core import audit
from forensics.analysis.explore import LENS_MAP_COLUMNS, explore_state, lens_map
from forensics.analysis.fingerprint.core import fingerprint
from forensics.analysis.probe import probe
from forensics.analysis.scan.core import scan as run_scan
from forensics.analysis.stamp import stamp_status
from forensics.analysis.stats import summarize
from forensics.display import render
from forensics.errors import ForensicsError, ModelMismatch
from forensics.findings import (
    UNREADABLE,
    Finding,
    Severity,
    Verdict,
    exit_code,
    sort_findings,
    worst_outcome,
)
from forensics.io.formats import as_capture, expand_paths, load_all, write_capture
from forensics.io.sigbus import FileChangedSize
from forensics.io.tokenizer import decode_tokens, find_tokenizer, load_tokenizer
from forensics.jsonable import json_safe
from forensics.layers import r_label
from forensics.models import conventions as cv
from forensics.models.draft import has_weights
from forensics.models.target import model_tokenizer, resolve_model, target_facts
from forensics.models.verifier import open_verifier

MAX_ANALYSED_FILES = 64  # files fingerprinted one by one; a larger dataset is summarised by `forensics.scan`
# a slot's or a file's outcome words, worst first (identified: nothing claimed, exact mode named it; info: no claim;
# unreadable: a file not read, never a fail of the data)
OUTCOMES = ("fail", UNREADABLE, "cannot tell", "warn", "pass", "identified", "info")
# fingerprint ``decided_by`` names → the evidence signals that carry its number, best first
DECIDED_ALIASES = {"exact": ("ladder_match", "exact_embedding", "exact_gamma")}
MAX_EXPLORED_FILES = 24  # files in the report's explorer (its state is ≤ 16 B × slots × 4096 columns per file)
# a token's text is kept cut to this many characters + "…(+N chars)" (forensics.io.tokenizer.cut_text: a hostile
# tokenizer's 2,000,000-character token at 1,000 positions made a 384 MB report)
from forensics.io.tokenizer import MAX_TOKEN_TEXT_CHARS as TOKEN_TEXT_CHARS  # noqa: E402, F401


@dataclass
class ReportError:
    """A section or input the report could not read or run: where, and the error's own message."""

    where: str
    message: str

    def to_dict(self) -> dict:
        return {"where": self.where, "message": self.message}


@dataclass
class Deciding:
    """The one piece of evidence that decided a slot's outcome, as data (views word it).

    ``kind``: ``nonfinite`` (``value`` = [NaN count, Inf count], ``threshold`` 0), ``claim`` (the fingerprint's
    claim verdict excluded the claim ``value``: ``message`` = why), ``undecided`` (its claim verdict is cannot
    tell: ``message`` = why), ``finding`` (``signal`` = the finding kind, ``message`` its message), ``order`` (the
    file's depth order decided: ``signal`` = the fingerprint's deciding signal, ``message`` = its detail, such as
    "sink, lowest norm"), ``evidence`` (a fingerprint evidence line: ``signal``,
    ``value``, ``threshold``, ``message`` = what it says), ``token0`` (no evidence: ``value`` = token-0 norm ÷
    median of the rest), ``none``.
    """

    kind: str
    message: str = ""
    signal: str | None = None
    value: Any = None
    threshold: Any = None


@dataclass
class SlotOutcome:
    """One slot as the report decides it: what is claimed (and by whom), what the evidence infers, the outcome."""

    index: int
    name: str
    claimed: str | None
    claim_source: str  # "<source>: <detail>" of the fingerprint's claim; "" when the claim is only declared
    role: str | None
    label: str | None  # the inferred label (the fingerprint's, else the exact r's)
    r_exact: Any
    r_estimate: float | None
    confidence: float | None
    outcome: str  # fail / cannot tell / warn / pass / info
    deciding: Deciding

    @property
    def r(self) -> Any:
        """The exact r when known, else the estimate (``r_exact`` says which)."""
        return self.r_exact if self.r_exact is not None else self.r_estimate


@dataclass
class FileReport:
    """One input file as the report reads it: the capture, its stats and fingerprint (or the error), its token text,
    and each slot's outcome (decided on construction)."""

    path: str
    rel: str = ""
    capture: Any = field(default=None, repr=False)
    stats: Any = field(default=None, repr=False)
    fingerprint: Any = field(default=None, repr=False)
    error: str | None = None
    tokens: list[str] | None = field(default=None, repr=False)
    tokenizer: Any = field(default=None, repr=False)  # the tokenizer ``tokens`` came from (its own, else --model's)
    stamp: dict | None = field(default=None, repr=False)  # ``forensics.analysis.stamp.stamp_status`` of the file
    explore: Any = field(default=None, repr=False)  # its ``ExploreState`` (the report's explorer), when drawn
    mismatch: Any = field(default=None, repr=False)  # the ModelMismatch that made it unreadable (--model ≠ its model)
    slots: list[SlotOutcome] = field(init=False, default_factory=list, repr=False)
    outcome: str = field(init=False, default="info")  # the file's one badge, everywhere the report shows the file

    def __post_init__(self) -> None:
        if self.error is not None or self.stats is None:  # not read: nothing about it is decided, it fails nothing
            self.outcome = UNREADABLE if self.error is not None else "info"
            return
        fp = self.fingerprint
        findings = list(fp.findings) if fp is not None else []
        fslots = {s.index: s for s in (fp.slots if fp is not None else [])}
        order = list(fp.order_evidence or []) if fp is not None else []
        # a file-level fact (no ids, too few tokens) is the file's, said once; a fail stays on every slot it names
        facts = {id(x) for x in self.facts}
        on_slots = [x for x in findings if x.severity is Severity.FAIL or id(x) not in facts]
        self.slots = [slot_outcome(fslots.get(ss.index), ss, on_slots, order) for ss in self.stats.slots]
        if fp is not None and fp.outcome == "identified":  # nothing claimed, every slot named by the reference
            for s in self.slots:
                if s.outcome == "info":
                    s.outcome = "identified"
        # the fingerprint's own outcome word first (it decides among pass / identified / info): the report never says
        # less than, or otherwise than, `hsf fingerprint`
        self.outcome = worst_outcome(([fp.outcome] if fp is not None else []) + [s.outcome for s in self.slots] +
                                     [x.severity.value for x in findings if x.severity is not Severity.INFO])

    @property
    def facts(self) -> list[Finding]:
        """The findings about the whole file: those naming no slot or every slot (a capture without token ids, too
        few tokens, a shifted list), counted once per file, not once per slot."""
        if self.stats is None:
            return []
        every = {ss.index for ss in self.stats.slots}
        return [x for x in self.findings if not x.slots or every <= set(x.slots)]

    @property
    def fp(self) -> Any:
        """The fingerprint (the name the report's callers have used)."""
        return self.fingerprint

    @property
    def findings(self) -> list[Finding]:
        return list(self.fingerprint.findings) if self.fingerprint is not None else []


def slot_outcome(fs: Any, ss: Any, findings: list[Finding], order: list | None = None) -> SlotOutcome:
    """fail / cannot tell / warn / pass / info for one slot (``fs`` its ``SlotFingerprint`` or None, ``ss`` its
    ``SlotStats``), read from the fingerprint's claim verdict and the severity of the findings on it, worst rule
    first: non-finite values, an excluded claim, a fail finding, an undecided claim, a warn finding, a supported
    claim; else info. The deciding evidence comes with it."""
    claim = fs.claim if fs is not None else None
    claimed = claim.label if claim is not None else _label(ss.declared_r) or ss.claimed or None
    claim_source = f"{claim.source.value}: {claim.detail}" if claim is not None else ""
    role = label = conf = r_exact = r_est = None
    evidence: list = []
    if fs is not None:
        role, label, conf = fs.role, fs.label, fs.confidence
        r_exact, r_est = fs.r_exact, fs.r_estimate
        evidence = list(fs.evidence or [])
    inferred = label or (_label(r_exact) if r_exact is not None else None)
    mine = sort_findings(f for f in findings if ss.index in (f.slots or []))
    v = fs.verdict if fs is not None else None
    fails = [f for f in mine if f.severity is Severity.FAIL]
    outcome, decided = "info", None
    if ss.nan or ss.inf:
        outcome, decided = "fail", Deciding("nonfinite", signal="non-finite values", value=[ss.nan, ss.inf],
                                            threshold=0)
    elif v is Verdict.FAIL:
        outcome, decided = "fail", Deciding("claim", message=fs.verdict_why, value=claim.label if claim else "?")
    elif fails:
        outcome, decided = "fail", Deciding("finding", message=fails[0].message, signal=str(fails[0].kind))
    elif v is Verdict.CANNOT_TELL:  # what would settle it is said once, in the headline, not on every slot
        outcome, decided = "cannot tell", Deciding("undecided", message=fs.verdict_why)
    elif mine and mine[0].severity is Severity.WARN:
        outcome, decided = "warn", Deciding("finding", message=mine[0].message, signal=str(mine[0].kind))
    elif v is Verdict.PASS:
        outcome = "pass"  # the deciding evidence line carries its raw value and threshold
    if decided is None:
        decided = _deciding_evidence(evidence, (fs.decided_signal or fs.decided_by) if fs is not None else None,
                                     fs.decided_detail if fs is not None else "", order)
    if decided is None:
        decided = (Deciding("token0", signal="token-0 norm / median of the rest", value=ss.first_ratio)
                   if math.isfinite(ss.first_ratio) else Deciding("none"))
    return SlotOutcome(index=ss.index, name=ss.name, claimed=claimed, claim_source=claim_source, role=role,
                       label=inferred, r_exact=r_exact, r_estimate=r_est, confidence=conf, outcome=outcome,
                       deciding=decided)


def _deciding_evidence(evidence: list, signal: str | None, detail: str, order: list | None) -> Deciding | None:
    """The evidence line of the signal the fingerprint says decided (``signal``, ``detail``; ``order`` = the depth
    chain), else the first one."""
    pool = list(evidence)
    if signal == "order" and order:
        # the depth chain decided: its evidence is the file's, said once in the file's row, not on every slot
        return Deciding("order", message=detail, signal=signal)
    if signal:
        names = DECIDED_ALIASES.get(signal, (signal,))
        pool = sorted((e for e in evidence if e.signal in names), key=lambda e: names.index(e.signal)) or \
            (list(order or []) if signal == "order" else []) or pool
    for e in pool:
        return Deciding("evidence", message=str(e.verdict) if getattr(e, "verdict", None) else "",
                        signal=str(e.signal), value=e.value, threshold=getattr(e, "threshold", None))
    return None


def _label(r: Any) -> str | None:
    return None if r is None else r_label(r)


def error_text(e: BaseException) -> str:
    """A ForensicsError's own message (it names the file); anything else with its type."""
    return str(e) if isinstance(e, ForensicsError) else f"{type(e).__name__}: {e}"


def load_tokens(cap: Any, errors: list[ReportError], model: Any = None) -> list[str] | None:
    """Token text per position (the capture's own local tokenizer, never remote code; else the tokenizer of
    ``model``, the ``--model`` given), or None when unknown; each distinct id decoded once, its text cut to
    ``TOKEN_TEXT_CHARS`` characters + "…"."""
    return file_tokens(cap, errors, model)[0]


def file_tokens(cap: Any, notes: list[ReportError], model: Any = None) -> tuple[list[str] | None, Any]:
    """:func:`load_tokens` and the tokenizer the text came from (None when there is no text).

    A tokenizer that is broken or absent costs the token text, never the report: the token ids are shown instead and
    ``notes`` gets one line naming the folder and why (once per reason), which decides nothing (no exit 2)."""
    if cap.input_ids is None:
        return None, None
    folder = find_tokenizer(cap.path, cap.meta)
    tok, why = load_tokenizer(folder)
    named = cap.meta.get("tokenizer") if isinstance(cap.meta, dict) else None
    if folder is None and isinstance(named, str) and named:  # capture.json names one that is not there
        why = f"capture.json names the tokenizer folder {named!r}: absent (or outside the capture's folder)"
    if tok is None and model is not None:
        tok, why_model = model_tokenizer(model)
        why, folder = (why, folder) if why else (why_model, "of --model")
    if tok is None:
        why = f"{why}; token ids are shown instead of token text" if why else None
        if why and not any(_message(e) == why for e in notes):
            notes.append(ReportError("tokenizer", why))
        return None, None
    ids = [int(i) for i in cap.input_ids.tolist()]
    text = {}
    for i in dict.fromkeys(ids):
        text[i] = decode_tokens(tok, [i])[0]  # cut to TOKEN_TEXT_CHARS with a count
    return [text[i] for i in ids], tok


def explore_file(fr: FileReport) -> Any:
    """The explorer's state of one readable file as the report decided it: the fingerprint's labels, and each
    slot's verdict the report's own slot outcome (a slot without a claim shows none), so the explorer, the
    verdict table and every badge agree. None when the state cannot be computed (the file's other sections
    still show it)."""
    try:
        st = explore_state(fr.capture, fingerprint=fr.fp, stats=fr.stats,  # the report's token text, same tokenizer
                           tokenizer="auto" if fr.tokenizer is None else fr.tokenizer)
    except ForensicsError:
        return None
    for s in fr.slots[:len(st.verdicts)]:
        st.verdicts[s.index] = None if s.outcome == "info" else s.outcome  # "identified": exact, no claim
    st.file_verdict = fr.outcome
    return st


LENS_MAP_REPORT_ROWS = 2048  # slot × token rows of lm_head the report's lens overviews may cost (≈ 2 s on CPU for
# SmolLM2's 49,152 × 576 head); files past the budget show none


def add_lens_maps(files: list[FileReport], model: Any, errors: list[ReportError]) -> None:
    """The logit-lens overview of each explored file (``--model``: the model the exact fingerprint ran), within
    ``LENS_MAP_REPORT_ROWS`` rows in all; a model the lens cannot read is one report error."""
    budget = LENS_MAP_REPORT_ROWS
    verifier = None
    for fr in files:
        rows = len(fr.capture.slots) * min(fr.capture.num_tokens, LENS_MAP_COLUMNS)
        if rows > budget:
            break
        try:
            verifier = verifier or open_verifier(model)
            st = fr.explore
            st.lens_map = lens_map(fr.capture, verifier, st.tokenizer, labels=st.labels).to_dict()
        except ForensicsError as e:
            errors.append(ReportError("logit lens", error_text(e)))
            return
        budget -= rows


def _message(e: Any) -> str | None:
    return e.get("message") if isinstance(e, dict) else getattr(e, "message", None)


@dataclass
class FileFact:
    """One kind of file-level finding (:attr:`FileReport.facts`) across the report: the files it holds for, each
    counted once, with each file's own message."""

    kind: str
    severity: str
    files: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "severity": self.severity, "files": self.files, "messages": self.messages}


@dataclass
class ReportResult:
    """What ``hsf report`` decided: every file's fingerprint and slot outcomes, the audit, the probe, the scan.

    ``verdict`` (pass / fail / cannot tell), ``counts`` (slot outcomes; an unreadable file counts as one
    ``unreadable``),
    ``overall`` (the worst outcome word anywhere: the report header's colour) and :meth:`exit_code` are read from
    these fields; views render them and decide nothing.
    """

    inputs: list[str]
    files: list[FileReport]
    audit: Any = None  # AuditResult
    probe: Any = None  # ProbeResult
    scan: Any = None  # ScanResult
    facts: dict | None = None  # the target model's facts (--model)
    errors: list[ReportError] = field(default_factory=list)
    # what the report did without, deciding nothing (a tokenizer that does not load: token ids instead of text)
    notes: list[ReportError] = field(default_factory=list)
    skipped: int = 0  # files beyond MAX_ANALYSED_FILES: covered by the dataset scan, not analysed one by one
    training: list[FileReport] = field(default_factory=list, repr=False)  # what the audit and the probe read
    settings: dict = field(default_factory=dict)  # what the user passed (layers, model, draft, engine, …)
    argv: list[str] = field(default_factory=list)  # the `hsf report` arguments that rebuild this result
    title: str | None = None
    max_analysed: int = MAX_ANALYSED_FILES

    @property
    def readable(self) -> list[FileReport]:
        return [f for f in self.files if f.error is None]

    @property
    def slots(self) -> list[SlotOutcome]:
        """Every slot outcome of every readable file, in file order."""
        return [s for f in self.files for s in f.slots]

    @property
    def counts(self) -> dict[str, int]:
        """Slot outcomes by word (every word present, worst first); an unreadable file counts as one ``unreadable``."""
        counts = {k: 0 for k in OUTCOMES}
        for f in self.files:
            if f.error:
                counts[UNREADABLE] += 1
            for s in f.slots:
                counts[s.outcome] += 1
        return counts

    @property
    def file_facts(self) -> list[FileFact]:
        """The file-level findings grouped by kind, worst first: "3 files have no token ids", once per file."""
        groups: dict[tuple[str, str], FileFact] = {}
        for f in self.files:
            for x in f.facts:
                g = groups.setdefault((str(x.kind), x.severity.value), FileFact(str(x.kind), x.severity.value))
                name = f.rel or f.path
                if name not in g.files:
                    g.files.append(name)
                    g.messages.append(x.message)
        return sorted(groups.values(), key=lambda g: -Severity(g.severity).rank)

    @property
    def items(self) -> list[tuple[str, str]]:
        """Everything the report decides, each once with its one outcome word: every file (its badge; a file not
        read is ``unreadable``), the wiring audit (its wiring and its findings), the draft probe, the dataset scan."""
        out = [(f.rel or f.path, f.outcome) for f in self.files]
        if self.audit is not None:
            out.append(("wiring audit", worst_outcome([self.audit.outcome.value] + [
                x.severity.value for x in self.audit.findings if x.severity is not Severity.INFO])))
        if self.probe is not None:
            out.append(("draft probe", self.probe.verdict.value))
        if self.scan is not None:
            out.append(("dataset scan", self.scan.verdict.value))
        return out

    @property
    def item_counts(self) -> dict[str, int]:
        """:attr:`items` by outcome word (every word present, worst first): the report's tiles. The worst word
        with a count is :attr:`overall`."""
        counts = {k: 0 for k in OUTCOMES}
        for _, word in self.items:
            counts[word] += 1
        return counts

    @property
    def findings(self) -> list[Finding]:
        """The findings that decide: every file's and the audit's (the probe decides by its verdict; its findings
        explain it and stay on ``probe``)."""
        out = [x for f in self.files for x in f.findings]
        return out + (list(self.audit.findings) if self.audit is not None else [])

    @property
    def overall(self) -> str:
        """The worst outcome word anywhere (files, slots, the audit's verdict and findings, the probe's and the scan's
        verdicts), so a single fail is never under a green header."""
        words = [f.outcome for f in self.files] + [s.outcome for s in self.slots]
        if self.audit is not None:
            words += [self.audit.outcome.value] + [x.severity.value for x in self.audit.findings
                                                   if x.severity is not Severity.INFO]
        if self.probe is not None:
            words.append(self.probe.verdict.value)
        if self.scan is not None:
            words.append(self.scan.verdict.value)
        return worst_outcome(words)

    @property
    def unreadable(self) -> bool:
        """An input or a section could not be read (exit 2)."""
        return any(f.error for f in self.files) or bool(self.errors)

    def _verdicts(self) -> list:
        out: list = []  # a file not read decides nothing (exit 2 and, in `decide`, no pass beside it)
        for f in self.files:
            if f.fingerprint is not None:
                out += [s.verdict for s in f.fingerprint.slots]
            out += [s.outcome for s in f.slots if s.outcome in ("fail", "cannot tell")]
        if self.audit is not None:
            out.append(self.audit.outcome)
        if self.probe is not None:  # the probe's verdict as `hsf probe` exits on it
            out.append(self.probe.verdict)
        if self.scan is not None:  # the dataset scan's, as `hsf scan` exits on it (files beyond the cap included)
            out.append(self.scan.verdict)
        return out

    def exit_code(self, fail_on: str = "fail", decided_only: bool = False) -> int:
        """The exit code of ``hsf report`` (``forensics.findings.exit_code``): 2 when an input or a section could not
        be read (unless ``decided_only``), else 1 on a fail (``fail_on="warn"``: a warn too), 3 on cannot tell."""
        return exit_code(self.findings, self._verdicts(), unreadable=self.unreadable and not decided_only,
                         fail_on=fail_on)

    def decide(self, fail_on: str = "fail") -> Verdict:
        """The verdict over what was read, with ``fail_on`` (``"warn"``: a warn is a fail); never a pass beside a
        file that was not read (``forensics.findings.decide``: CANNOT TELL, a FAIL of what was read stays)."""
        got = {1: Verdict.FAIL, 3: Verdict.CANNOT_TELL}.get(self.exit_code(fail_on, decided_only=True), Verdict.PASS)
        return Verdict.CANNOT_TELL if got is Verdict.PASS and any(f.error for f in self.files) else got

    @property
    def verdict(self) -> Verdict:
        """pass / fail / cannot tell over every file, slot, the audit, the probe and the scan (a file that was not
        read is no fail, and no pass either: CANNOT TELL at best)."""
        return self.decide()

    def to_dict(self, fail_on: str = "fail") -> dict:
        """The decision as ``hsf report --json`` gives it (the CLI adds where the HTML went, its size, its headline
        sentence and the regenerating command)."""
        doc = {"verdict": self.decide(fail_on).value, "files": len(self.files),
               "unreadable": sum(1 for f in self.files if f.error), "verdicts": self.counts, "overall": self.overall,
               "audit": self.audit.wiring if self.audit is not None else None}
        if self.audit is not None:  # the audit's own decision and fix, as `hsf audit --json` gives them
            doc["audit_fix"] = None if self.audit.fix is None else self.audit.fix.to_dict()
            doc["audit_exit_code"] = self.audit.exit_code()
        return json_safe(doc)

    def __repr__(self) -> str:
        return render(self, "line")

    def _repr_html_(self) -> str:
        return render(self, "html")


def _spelled(sys_: cv.System | None) -> str | None:
    """A resolved name as the user wrote it (the report's settings and its command line repeat the user's word)."""
    return None if sys_ is None else (sys_.given or sys_.name)


def training_files(files: list[FileReport], trainer: cv.System | None) -> list[FileReport]:
    """The files that are the draft's training data, out of everything the report reads.

    A report folder can mix formats (sample_data/ holds a 32-slot ladder beside the speculators-v1
    training files): the audit and the probe must see the trainer's own format (``--trainer``), else the
    format most files share; never simply the first file found.
    """
    ok = [f for f in files if f.error is None and f.capture is not None]
    want = trainer.data_format if trainer is not None else None  # any alias: the System knows its data's format
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


def _analyse(path: str, layers: Any, model: Any, errors: list[ReportError], stamp_check: bool = True,
             limit: int = MAX_ANALYSED_FILES, input_ids: Any = None) -> tuple[list[FileReport], int]:
    """Load every sample of one file (read once: TensorRT-LLM records, SGLang objects, ``[B, T]`` batch rows, each
    a ``FILE#i`` entry; with ``input_ids`` from outside it, when given), fingerprint the first ``limit``, and keep
    what the report needs; and how many samples were left to the dataset scan."""
    try:
        caps = load_all(path, input_ids=input_ids)
    except ForensicsError as e:
        return [FileReport(path=path, error=error_text(e))], 0
    return [_analyse_sample(cap, layers, model, errors, stamp_check) for cap in caps[:limit]], max(0, len(caps) - limit)


def _analyse_sample(cap: Any, layers: Any, model: Any, errors: list[ReportError], stamp_check: bool) -> FileReport:
    path = cap.name
    fp = None
    try:
        fp = fingerprint(cap, layers=layers, model=model, stamp_check=stamp_check)
    except (FileChangedSize, ModelMismatch) as e:  # the file went away under us, or cannot be from --model (a
        return FileReport(path=path, error=error_text(e),  # size that differs): unreadable, not a failing section
                          mismatch=e if isinstance(e, ModelMismatch) else None)
    except ForensicsError as e:  # a failing section is listed in the report, not fatal (the message names the file)
        errors.append(ReportError("fingerprint", error_text(e)))
    try:
        stats = fp.stats if fp is not None else summarize(cap)
    except ForensicsError as e:
        return FileReport(path=path, error=error_text(e))
    return FileReport(path=path, capture=cap, stats=stats, fingerprint=fp)


def _argv(paths: list[str], settings: dict, scan: Any) -> list[str]:
    """The ``hsf report`` arguments that rebuild the result (``-o`` is the view's)."""
    argv = list(paths)
    layers = settings.get("layers")
    if layers is not None:
        argv += ["--layers", layers if isinstance(layers, str) else ",".join(str(x) for x in layers)]
    for key in ("model", "draft", "engine", "engine_version", "trainer", "target_config", "served", "title"):
        v = settings.get(key)
        if v is not None:
            argv += ["--" + key.replace("_", "-"), os.fspath(v) if isinstance(v, os.PathLike) else str(v)]
    if scan is True:
        argv.append("--scan")
    return argv


@cv.resolve_names("engine", "trainer")
def report(paths: Any, layers: Any = None, model: Any = None, draft: Any = None,  # noqa: C901
           engine: cv.SystemName | None = None,
           engine_version: str | None = None, trainer: cv.SystemName | None = None, target_config: Any = None,
           served: Any = None, scan: Any = None, title: str | None = None,
           progress: Callable[[str, int, int], None] | None = None, input_ids: Any = None,
           stamp_check: bool = True) -> ReportResult:
    """Analyse capture files/directories: fingerprints, the wiring audit, the draft probe, the dataset scan.

    Args:
        paths: capture files or directories (a single path is accepted too), or one capture in memory: a
            ``Capture``, transformers' ``output.hidden_states``, a list or stack of tensors (with ``input_ids``).
        layers: the expected layer list (``"0,3,16,28"``, ``[0, 3, 16, 28]`` or ``"embed,L3,…"``) for labels.
        model: model path (HF folder, safetensors dir or .gguf) for exact-mode fingerprints and model facts.
        draft, engine, engine_version, trainer, target_config, served: passed to :func:`forensics.audit`
            (run when any of them is given; a draft with weights is also probed).
        scan: a ``ScanResult`` to include, or ``True`` to scan the paths.
        title: the report title (kept for the view and the regenerating command).
        progress: called as ``progress(stage, done, total)`` while files are fingerprinted and the draft is probed.
        stamp_check: check each stamped file's stamp against the values its fingerprint reads (default): a file
            changed since stamping is a ``stamp_drift`` FAIL in its fingerprint, and its stamp cell says so.
        input_ids: the token ids of one capture saved without them (one file path, or hidden states in memory):
            exact mode, token text and the row checks read them (``hsf report FILE --ids IDS``).

    Returns:
        :class:`ReportResult`.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    elif not (isinstance(paths, (list, tuple)) and paths and all(isinstance(p, (str, os.PathLike)) for p in paths)):
        # a capture in memory (tensors, transformers' output.hidden_states, a Capture): the report reads files
        # (stamps, tokenizers, scans), so it is written once as a plain safetensors capture and read back
        paths, input_ids = [write_capture(as_capture(paths, input_ids=input_ids))], None
    paths = [os.fspath(p) for p in paths]
    if input_ids is not None and (len(paths) != 1 or os.path.isdir(paths[0])):
        raise ForensicsError("input_ids are the tokens of one capture file; pass exactly one file",
                             path=paths[0] if paths else None)
    model_arg = model  # as given ("default"), for the regenerating command
    if model is not None:
        model = resolve_model(model)
    if isinstance(layers, (list, tuple)):
        layers = ",".join(str(x) for x in layers)
    tick = progress or (lambda stage, done, total: None)
    errors: list[ReportError] = []
    notes: list[ReportError] = []
    files: list[FileReport] = []
    found, bad = expand_paths(paths)
    files += [FileReport(path=e.path or "", error=error_text(e)) for e in bad]
    todo = found[:max(0, MAX_ANALYSED_FILES - len(files))]
    skipped = len(found) - len(todo)  # beyond the cap: covered by the dataset scan, not analysed one by one
    for i, f in enumerate(todo):
        tick("fingerprint files", i, len(todo))
        room = max(1, MAX_ANALYSED_FILES - len(files))  # samples of many-sample files count against the cap too
        got, more = _analyse(f, layers, model, errors, stamp_check, room, input_ids)
        skipped += more
        files += got
    if files and all(f.mismatch is not None for f in files):
        # --model is not the model of any input: a wrong argument, one error line (exit 2) as `hsf fingerprint`
        # says it, not a report whose every file is unreadable
        raise files[0].mismatch
    root = os.path.commonpath([os.path.dirname(os.path.abspath(p)) for p in paths]) if paths else os.getcwd()
    for fr in files:
        fr.rel = os.path.relpath(os.path.abspath(fr.path), root)
        if fr.capture is not None:
            fr.tokens, fr.tokenizer = file_tokens(fr.capture, notes, model)
            fr.stamp = stamp_status(fr.capture.path)  # the file's stamp (fr.path is FILE#i for one of its samples)
            checked = getattr(fr.fingerprint, "stamp", None)
            if checked is not None and fr.stamp.get("status") == "stamped":  # the values, checked in the read
                fr.stamp["check"] = checked.check.status
                fr.stamp["message"] = checked.check.message
    for fr in [f for f in files if f.capture is not None][:MAX_EXPLORED_FILES]:
        fr.explore = explore_file(fr)
    if model is not None:
        add_lens_maps([f for f in files if f.explore is not None and f.fingerprint is not None], model, errors)

    audit_res = probe_res = scan_res = facts = None
    training = training_files(files, cast("cv.System | None", trainer))  # resolved on entry
    if any(v is not None for v in (draft, engine, trainer, served, target_config)):
        try:
            audit_res = audit(data=training[0].capture if training else (paths[0] if paths else None),
                              draft=draft, engine=engine, engine_version=engine_version, trainer=trainer,
                              target_config=target_config, served=served, model=model)  # every piece of evidence
        except ForensicsError as e:
            errors.append(ReportError("audit", error_text(e)))
    if draft is not None and paths and has_weights(draft):
        try:
            probe_res = probe(draft, [f.capture for f in training] or paths[0], model=model, engine=engine,
                              engine_version=engine_version, stamp_check=stamp_check,
                              exact_r=[[sf.r_exact for sf in f.fingerprint.slots] if f.fingerprint is not None
                                       else None for f in training] if training and model is not None else None,
                              progress=lambda done, total: tick("probe wirings × files", done, total))
        except ForensicsError as e:
            errors.append(ReportError("draft probe", error_text(e)))
    if (scan is True or (scan is None and skipped)) and paths:
        try:
            scan_res = run_scan(paths if len(paths) > 1 else paths[0], progress=False, layers=layers,
                                stamp_check=stamp_check)
        except ForensicsError as e:
            errors.append(ReportError("scan", error_text(e)))
    elif scan not in (None, False):
        scan_res = scan
    if model is not None:
        try:
            facts = target_facts(model)
        except ForensicsError as e:
            errors.append(ReportError("model facts", error_text(e)))
    for fr in files:
        if fr.error:
            errors.append(ReportError("unreadable input", fr.error))  # the error names the file
    eng, tsys = cast("cv.System | None", engine), cast("cv.System | None", trainer)  # resolved on entry
    settings = {"layers": layers, "model": model, "draft": draft, "engine": _spelled(eng),
                "engine_version": engine_version, "trainer": _spelled(tsys), "served": served}
    given = {**settings, "model": model_arg, "target_config": target_config, "title": title}
    audited = audit_res is not None or probe_res is not None
    return ReportResult(inputs=paths, files=files, audit=audit_res, probe=probe_res, scan=scan_res, facts=facts,
                        errors=errors, notes=notes, skipped=skipped, training=training if audited else [],
                        settings=settings, argv=_argv(paths, given, scan), title=title,
                        max_analysed=MAX_ANALYSED_FILES)
