"""One vocabulary of problems and verdicts: ``Finding`` + ``Severity``, ``Verdict``, and the exit-code table.

A finding's severity is set where the finding is made and read by every view (text, JSON, notebook HTML,
report, sample browser, scan) and by every command's exit code — no view keeps its own table
(ydata-profiling's one ``Alert`` class is the model). Severities:

* ``fail``: the evidence excludes a claim, or the data is broken (NaN, all-zero, a slot captured twice);
* ``warn``: something to look at that contradicts no claim;
* ``info``: a fact.

A claim (what a slot is said to be) gets a ``Verdict``: ``pass`` when the evidence supports it, ``fail``
when the evidence excludes it, ``cannot tell`` when it does neither (then ``settle`` says what would).

Exit codes, the same for every ``hsf`` command (:func:`exit_code`):

====  ==========================================================
0     no fail (and nothing left undecided)
1     a fail (``hsf report --fail-on warn``: a warn too)
2     unreadable input or bad arguments
3     cannot tell: no fail, but some claim could not be decided
====  ==========================================================

Example:
    >>> f = Finding("shifted", Severity.FAIL, [0, 1, 2, 3], "the list is shifted by one slot")
    >>> f.severity.value, exit_code([f])
    ('fail', 1)
    >>> exit_code([], verdicts=[Verdict.PASS, Verdict.CANNOT_TELL])
    3
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Severity(StrEnum):
    """How bad a finding is; ordered ``info < warn < fail``."""

    INFO = "info"
    WARN = "warn"
    FAIL = "fail"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]



_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARN: 1, Severity.FAIL: 2}


class Verdict(StrEnum):
    """The answer to one claim: the evidence supports it, excludes it, or does neither."""

    PASS = "pass"
    FAIL = "fail"
    CANNOT_TELL = "cannot tell"

    @property
    def rank(self) -> int:
        """Worst first: fail 2, cannot tell 1, pass 0."""
        return _VERDICT_RANK[self]



_VERDICT_RANK = {Verdict.PASS: 0, Verdict.CANNOT_TELL: 1, Verdict.FAIL: 2}

class FindingKind(StrEnum):
    """What a finding is about: one member per kind any command makes, each with a one-line meaning
    (:attr:`meaning`; ``docs/commands.md`` lists them, generated from this enum).

    ``data_<kind>`` is a capture finding (``<kind>``) made on the *training data* inside ``hsf audit``.
    """

    # ---- one capture: the data itself (fingerprint, scan) ----
    NONFINITE = "nonfinite"
    OVERFLOW = "overflow"
    ALL_ZERO = "all_zero"
    CONSTANT = "constant"
    FEW_TOKENS = "few_tokens"
    NO_REFERENCE_MATCH = "no_reference_match"
    NO_TOKEN_IDS = "no_token_ids"
    DUPLICATE = "duplicate"
    CONCATENATED = "concatenated"
    # ---- one capture: rows (row forensics) ----
    ZERO_ROWS = "zero_rows"
    ROW_COUNT = "row_count"
    TOKEN_SHIFT = "token_shift"
    SLOT_MISALIGNED = "slot_misaligned"
    FOREIGN_ROWS = "foreign_rows"
    LOSS_MASK = "loss_mask"
    CONTEXT_LOST = "context_lost"
    PADDING = "padding"
    # ---- one capture: a claimed layer list against the evidence ----
    COUNT_MISMATCH = "count_mismatch"
    SHIFTED = "shifted"
    IDS_OFF_BY_ONE = "ids_off_by_one"
    REORDERED = "reordered"
    OFF_BY_ONE = "off_by_one"
    OFFSET = "offset"
    WRONG_LAYER = "wrong_layer"
    MISSING_EMBEDDING = "missing_embedding"
    UNEXPECTED_EMBEDDING = "unexpected_embedding"
    PRENORM = "prenorm"
    POSTNORM = "postnorm"
    NOT_RESIDUAL = "not_residual"
    # ---- audit: the training side ----
    DECLARED_VS_DATA = "declared_vs_data"
    UNKNOWN_SLICES = "unknown_slices"
    ASSUMED_FROM_CONFIG = "assumed_from_config"
    TRAINER_VS_FORMAT = "trainer_vs_format"
    ORDER = "order"
    POSTNORM_AUX = "postnorm_aux"
    TARGET_POSTNORM = "target_postnorm"
    TARGET_NOT_FINAL = "target_not_final"
    TARGET_PRENORM = "target_prenorm"
    LAYERS_BEYOND_L = "layers_beyond_L"
    HIDDEN_SIZE = "hidden_size"
    # ---- audit: the serving side (draft config, checkpoint, engine) ----
    IDS_MISSING = "ids_missing"
    IDS_IGNORED_KEY = "ids_ignored_key"
    IDS_DISAGREE = "ids_disagree"
    AUX_DISABLED = "aux_disabled"
    ENGINE_CANNOT_CAPTURE = "engine_cannot_capture"
    FC_WIDTH = "fc_width"
    FC_VS_DATA = "fc_vs_data"
    FC_SKIP = "fc_skip"
    VOCAB_MAPS = "vocab_maps"
    WEIGHT_NAMES = "weight_names"
    ASSUMPTION = "assumption"
    # ---- audit: training against serving ----
    SLICES = "slices"
    CONFIG_VS_SERVED = "config_vs_served"
    SERVED_DATA = "served_data"
    SERVED_UNDECIDED = "served_undecided"
    # ---- audit without data (doctor / pre-flight) ----
    ID_IS_COUNT = "id_is_count"
    IDS_OUT_OF_RANGE = "ids_out_of_range"
    IDS_DUPLICATE = "ids_duplicate"
    IDS_ORDER = "ids_order"
    IDS_INCLUDE_LAST = "ids_include_last"
    FC_VS_IDS = "fc_vs_ids"
    TRAINER_IDS_MISSING = "trainer_ids_missing"
    TRAINER_IDS_VS_CONFIG = "trainer_ids_vs_config"
    TRAINER_IDS_INCLUDE_LAST = "trainer_ids_include_last"
    TRAINER_IDS_INVALID = "trainer_ids_invalid"
    TRAINER_VS_LAYOUT = "trainer_vs_layout"
    NO_RULE = "no_rule"
    READINGS = "readings"
    # ---- the draft probe (chain acceptance per wiring) ----
    PROBE_DECLARED_BEATEN = "probe_declared_beaten"
    PROBE_SERVED_BEATEN = "probe_served_beaten"
    PROBE_NEAR_CONTROLS = "probe_near_controls"
    PROBE_TIE = "probe_tie"
    PROBE_NO_INTERVAL = "probe_no_interval"
    PROBE_FEW_POSITIONS = "probe_few_positions"
    PROBE_VOCAB_MISMATCH = "probe_vocab_mismatch"
    PROBE_NO_ENGINE_IDS = "probe_no_engine_ids"
    DRAFT_COLLAPSED = "draft_collapsed"
    # ---- stamp / verify (a file against the identity recorded when it was captured) ----
    STAMP_DRIFT = "stamp_drift"
    STAMP_SHAPE = "stamp_shape"
    STAMP_MOVED = "stamp_moved"
    STAMP_UNREADABLE = "stamp_unreadable"
    UNSTAMPED = "unstamped"
    NOT_STAMPED = "not_stamped"
    # ---- a capture finding made on the training data inside the audit (``data_`` + the capture kind) ----
    DATA_NONFINITE = "data_nonfinite"
    DATA_OVERFLOW = "data_overflow"
    DATA_ALL_ZERO = "data_all_zero"
    DATA_FEW_TOKENS = "data_few_tokens"
    DATA_NO_REFERENCE_MATCH = "data_no_reference_match"
    DATA_NO_TOKEN_IDS = "data_no_token_ids"
    DATA_DUPLICATE = "data_duplicate"
    DATA_CONCATENATED = "data_concatenated"
    DATA_ZERO_ROWS = "data_zero_rows"
    DATA_ROW_COUNT = "data_row_count"
    DATA_TOKEN_SHIFT = "data_token_shift"
    DATA_SLOT_MISALIGNED = "data_slot_misaligned"
    DATA_FOREIGN_ROWS = "data_foreign_rows"
    DATA_LOSS_MASK = "data_loss_mask"
    DATA_CONTEXT_LOST = "data_context_lost"
    DATA_COUNT_MISMATCH = "data_count_mismatch"
    DATA_SHIFTED = "data_shifted"
    DATA_IDS_OFF_BY_ONE = "data_ids_off_by_one"
    DATA_REORDERED = "data_reordered"
    DATA_OFF_BY_ONE = "data_off_by_one"
    DATA_WRONG_LAYER = "data_wrong_layer"
    DATA_MISSING_EMBEDDING = "data_missing_embedding"
    DATA_UNEXPECTED_EMBEDDING = "data_unexpected_embedding"
    DATA_PRENORM = "data_prenorm"
    DATA_POSTNORM = "data_postnorm"
    DATA_NOT_RESIDUAL = "data_not_residual"

    @property
    def meaning(self) -> str:
        """One line: what this kind of finding says."""
        if self.value.startswith("data_"):
            return "in the training data: " + FindingKind(self.value[len("data_"):]).meaning
        return _MEANINGS[self]

    def on_training_data(self) -> FindingKind:
        """This capture kind as found on the training data inside ``hsf audit`` (``shifted`` → ``data_shifted``)."""
        return FindingKind("data_" + self.value)


def finding_kind(value: FindingKind | str) -> FindingKind:
    """A ``FindingKind`` from itself or its name; an unknown name is a ``ValueError`` listing the known kinds."""
    if isinstance(value, FindingKind):
        return value
    try:
        return FindingKind(str(value))
    except ValueError:
        raise ValueError(f"unknown finding kind {value!r}; known kinds: "
                         f"{', '.join(k.value for k in FindingKind)}") from None


_MEANINGS: dict[FindingKind, str] = {
    FindingKind.NONFINITE: "a slot holds NaN or Inf values",
    FindingKind.OVERFLOW: "a slot's values sit at the dtype's limit (fp16 overflow clamped)",
    FindingKind.ALL_ZERO: "a slot is all zeros: nothing was captured into it",
    FindingKind.CONSTANT: "every row of a slot is the same vector (a broadcast, one token copied): nothing per token",
    FindingKind.FEW_TOKENS: "too few tokens for the statistics to decide a slot's role",
    FindingKind.NO_REFERENCE_MATCH: "with --model, some slots equal no state of the reference forward",
    FindingKind.NO_TOKEN_IDS: "with --model, exact mode cannot run: the capture has no token ids; give them with "
                              "--ids FILE or --text FILE for one capture file, or save input_ids with the states",
    FindingKind.DUPLICATE: "the same layer is captured (or fed to the fc) twice",
    FindingKind.CONCATENATED: "one slot looks like k states side by side ([T, k·H], EAGLE-3's concatenated aux states)",
    FindingKind.ZERO_ROWS: "some rows of a slot (or of every slot) are all zeros while its other rows are not",
    FindingKind.ROW_COUNT: "the slots hold another number of rows than there are token ids (a cut tail, a suffix)",
    FindingKind.TOKEN_SHIFT: "every slot's row t holds the state of token t + k, not of token t",
    FindingKind.SLOT_MISALIGNED: "one slot's rows sit at a token offset from the other slots' rows",
    FindingKind.FOREIGN_ROWS: "rows that are not the state of their token in this sequence (another request's)",
    FindingKind.LOSS_MASK: "the stored loss mask is not the assistant turns its chat template marks: over the "
                           "system/user turns (fail; SpecForge#885, EAGLE#317), one token off (warn), partial, "
                           "or of another length than the tokens (fail)",
    FindingKind.CONTEXT_LOST: "rows from position p on were computed without tokens 0..p-1: a chunked prefill whose "
                              "later chunk lost the earlier context (vllm#52909), or a second sequence packed in",
    FindingKind.PADDING: "a batch saved without attention_mask: the pad rows found at one end were removed, not judged",
    FindingKind.COUNT_MISMATCH: "the claimed layer list has another length than the capture has slots",
    FindingKind.SHIFTED: "the whole claimed list is shifted by one slot (the embedding is or is not the first slot)",
    FindingKind.IDS_OFF_BY_ONE: "every slot is exactly one block from its claimed layer, all the same way: the layer "
                                "ids are counted off by one (from 1 where the data counts the embedding as 0, or the "
                                "reverse), not the slots shifted (exact r against the reference forward)",
    FindingKind.REORDERED: "the claimed layers are all there but stored in another order than claimed",
    FindingKind.OFF_BY_ONE: "a slot (or every fc slice) is one block away from the claimed layer",
    FindingKind.OFFSET: "every fc slice is served the same number (>1) of blocks away from the trained layer",
    FindingKind.WRONG_LAYER: "a slot is another layer than claimed (exact r from the reference forward)",
    FindingKind.MISSING_EMBEDDING: "a slot claimed to be the embedding output is not one",
    FindingKind.UNEXPECTED_EMBEDDING: "a slot claimed to be a block's output is the embedding output",
    FindingKind.PRENORM: "a slot claimed post-final-norm is a pre-norm state",
    FindingKind.POSTNORM: "a slot claimed to be a block's pre-norm output is post-final-norm",
    FindingKind.NOT_RESIDUAL: "a slot is not the residual stream: a block's attention or MLP output, or the state "
                              "inside a block (sglang#39286, nnsight#630, vLLM-Hook#11, vllm#55423)",
    FindingKind.DECLARED_VS_DATA: "the training data's declared layer for a slot is excluded by the data",
    FindingKind.UNKNOWN_SLICES: "the data alone cannot name the layer of some fc slices (--model or --served settles)",
    FindingKind.ASSUMED_FROM_CONFIG: "the data declares no layers: the fc inputs were assumed from the draft config",
    FindingKind.TRAINER_VS_FORMAT: "--trainer names another trainer than the one that reads the data's format",
    FindingKind.ORDER: "training fed the fc layers out of ascending order; engines concatenate in layer order",
    FindingKind.POSTNORM_AUX: "a post-norm final state is fed to the fc; engines capture pre-norm states only",
    FindingKind.TARGET_POSTNORM: "the training target is post-norm but the trainer applies the final norm itself",
    FindingKind.TARGET_NOT_FINAL: "the training target is not the last block's pre-norm output",
    FindingKind.TARGET_PRENORM: "the training target is pre-norm but the trainer needs the post-norm final state",
    FindingKind.LAYERS_BEYOND_L: "the training data holds layers deeper than the target has blocks",
    FindingKind.HIDDEN_SIZE: "hidden sizes of draft, data and target disagree: they belong to different models",
    FindingKind.IDS_MISSING: "the draft config has no layer ids: the engine silently uses its default",
    FindingKind.IDS_IGNORED_KEY: "the layer ids sit in a key the engine does not read: it uses its default",
    FindingKind.IDS_DISAGREE: "the top-level and nested layer ids of the draft config disagree",
    FindingKind.AUX_DISABLED: "the draft config disables aux hidden states: the engine feeds the draft none",
    FindingKind.ENGINE_CANNOT_CAPTURE: "the engine cannot capture the layers the config asks for",
    FindingKind.FC_WIDTH: "the fc weight's input width is not the number of states the engine concatenates",
    FindingKind.FC_VS_DATA: "the fc weight's input width is not the number of states the training data fed",
    FindingKind.FC_SKIP: "the fc input width equals the hidden size: some engines skip the fc silently",
    FindingKind.VOCAB_MAPS: "the draft's vocabulary maps (d2t/t2d) are inconsistent",
    FindingKind.WEIGHT_NAMES: "the checkpoint's weight names are ones the engine may silently skip",
    FindingKind.ASSUMPTION: "the served layers rest on an assumption (engine version, architecture) not given",
    FindingKind.SLICES: "some fc slices are served another layer than they were trained on",
    FindingKind.CONFIG_VS_SERVED: "the served capture shows other layers than the draft config predicts",
    FindingKind.SERVED_DATA: "a served state is not what its fc slice was trained on (or the counts differ)",
    FindingKind.SERVED_UNDECIDED: "a served state cannot be matched to its fc slice on other text",
    FindingKind.ID_IS_COUNT: "the last layer id is the layer count, not an index",
    FindingKind.IDS_OUT_OF_RANGE: "layer ids lie outside the target's blocks",
    FindingKind.IDS_DUPLICATE: "the layer ids repeat a layer",
    FindingKind.IDS_ORDER: "the layer ids are not ascending",
    FindingKind.IDS_INCLUDE_LAST: "the draft config's aux ids end with the final layer, the training target",
    FindingKind.FC_VS_IDS: "the fc weight takes another number of states than the config lists ids",
    FindingKind.TRAINER_IDS_MISSING: "the trainer was invoked without layer ids: it used its default",
    FindingKind.TRAINER_IDS_VS_CONFIG: "the trainer was invoked with other ids than the draft config records",
    FindingKind.TRAINER_IDS_INCLUDE_LAST: "the training ids include the final layer, which is the target, not an aux",
    FindingKind.TRAINER_IDS_INVALID: "the trainer's ids are ones the trainer would refuse",
    FindingKind.TRAINER_VS_LAYOUT: "the trainer's ids and the trained layout give different fc layers",
    FindingKind.NO_RULE: "no known rule says how this engine numbers this draft family's layers",
    FindingKind.READINGS: "the served layers depend on something not given or not settled by the sources",
    FindingKind.PROBE_DECLARED_BEATEN: "the draft's declared wiring reaches a clearly shorter acceptance length than "
                                       "the best wiring",
    FindingKind.PROBE_SERVED_BEATEN: "the wiring the engine would feed reaches a clearly shorter acceptance length "
                                     "than the best wiring",
    FindingKind.PROBE_NEAR_CONTROLS: "the best wiring is not clearly above the shift/random controls: the draft, "
                                     "not the wiring, is the problem (on fewer than 200 positions: or too few "
                                     "samples)",
    FindingKind.PROBE_TIE: "the best wiring and the runner-up are not clearly apart in acceptance length",
    FindingKind.PROBE_NO_INTERVAL: "too few sequences (or blocks) for an interval on the acceptance length",
    FindingKind.PROBE_FEW_POSITIONS: "too few positions scored for a stable ranking",
    FindingKind.PROBE_VOCAB_MISMATCH: "the model's vocabulary differs from the draft's target vocabulary",
    FindingKind.PROBE_NO_ENGINE_IDS: "the best wiring cannot be written as engine ids (L unknown or slots without r)",
    FindingKind.DRAFT_COLLAPSED: "every wiring and both controls reach acceptance length <= 1.1: the draft is "
                                 "broken whatever it is fed (TensorRT-LLM#18905: a collapsed drafter scored 1.09)",
    FindingKind.STAMP_DRIFT: "a slot's values no longer match the checksum its stamp recorded (changed, swapped, "
                             "re-encoded)",
    FindingKind.STAMP_SHAPE: "the file has another number or shape of slots than its stamp recorded",
    FindingKind.STAMP_MOVED: "the stamp was made for another file (a copy or a renamed file carries it)",
    FindingKind.STAMP_UNREADABLE: "the file or its stamp could not be read, so it could not be verified",
    FindingKind.UNSTAMPED: "the file carries no stamp: there is nothing to verify it against",
    FindingKind.NOT_STAMPED: "hsf stamp could not stamp the file (it says why); the file was left unchanged",
}


EXIT_OK = 0  # no fail, nothing undecided
EXIT_FAIL = 1  # a fail: the evidence excludes a claim, or the data is broken
EXIT_BAD_INPUT = 2  # unreadable input or bad arguments
EXIT_CANNOT_TELL = 3  # no fail, but a claim could not be decided (non-zero: a CI gate never passes on it)
EXIT_CODES = {EXIT_OK: "no fail", EXIT_FAIL: "a fail", EXIT_BAD_INPUT: "unreadable input or bad arguments",
              EXIT_CANNOT_TELL: "cannot tell"}


def severity(value: Severity | str) -> Severity:
    """A ``Severity`` from itself or its name (``"fail"``, ``"warn"``, ``"info"``); anything else is an error."""
    if isinstance(value, Severity):
        return value
    try:
        return Severity(str(value).strip().lower())
    except ValueError:
        raise ValueError(f"severity must be one of {[s.value for s in Severity]}, got {value!r}") from None


def verdict(value: Verdict | str) -> Verdict:
    """A ``Verdict`` from itself or its name (``"pass"``, ``"fail"``, ``"cannot tell"``/``"cannot-tell"``)."""
    if isinstance(value, Verdict):
        return value
    text = str(value).strip().lower().replace("-", " ").replace("_", " ")
    try:
        return Verdict(text)
    except ValueError:
        raise ValueError(f"verdict must be one of {[v.value for v in Verdict]}, got {value!r}") from None


@dataclass
class Finding:
    """One problem or fact, with the slots it concerns and the evidence that shows it.

    ``severity`` is decided here, by whoever makes the finding; views and exit codes only read it.
    ``evidence`` holds numbers as numbers (JSON-safe values), never formatted text.
    """

    kind: FindingKind
    severity: Severity
    slots: list[int] = field(default_factory=list)
    message: str = ""
    evidence: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.kind = finding_kind(self.kind)
        self.severity = severity(self.severity)
        self.slots = [int(i) for i in (self.slots or [])]

    @property
    def is_fail(self) -> bool:
        return self.severity is Severity.FAIL

    def to_dict(self) -> dict:
        return {"kind": self.kind.value, "severity": self.severity.value, "slots": list(self.slots),
                "message": self.message, "evidence": dict(self.evidence)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Finding:
        """The inverse of :meth:`to_dict` (scan rows and JSON documents carry findings as dicts)."""
        return cls(finding_kind(d["kind"]), severity(d["severity"]), list(d.get("slots") or []),
                   str(d.get("message", "")), dict(d.get("evidence") or {}))


def _sev_of(f: Finding | Mapping[str, Any]) -> Severity:
    return f.severity if isinstance(f, Finding) else severity(f["severity"])


def worst_severity(findings: Iterable[Finding | Mapping[str, Any]]) -> Severity | None:
    """The worst severity among ``findings`` (Finding objects or their dicts); None when there are none."""
    sevs = [_sev_of(f) for f in findings]
    return max(sevs, key=lambda s: s.rank) if sevs else None


def worst_verdict(verdicts: Iterable[Verdict | str | None]) -> Verdict | None:
    """The worst of ``verdicts`` (fail > cannot tell > pass); None entries (no claim) are skipped."""
    vs = [verdict(v) for v in verdicts if v is not None]
    return max(vs, key=lambda v: v.rank) if vs else None


UNREADABLE = "unreadable"
"""The outcome word of a file that was not read (corrupt, not a capture, or not from ``--model``: ``ModelMismatch``):
nothing about it was decided, so it is no fail of the data; the command exits 2 beside it."""

OUTCOME_RANK = {"pass": 0, "identified": 0, "info": 0, "warn": 1, "cannot tell": 2, UNREADABLE: 3, "fail": 4}
"""The one ranking of outcome words that mix severities and verdicts (a report row, a check): worst is fail, then
unreadable, then cannot tell, then warn; pass, identified and info rank lowest. Agrees with ``Severity.rank`` and
``Verdict.rank``.

The outcome of a file or slot is one of these words: ``pass`` (every claim holds), ``identified`` (nothing is
claimed and the reference forward named every slot: exact r), ``info`` (nothing claimed, roles and depth order
only; every view writes it NO CLAIM), ``unreadable`` (a file that was not read: below a fail, so it never makes
a FAIL, above every other word, so nothing beside it reads as a pass; a verdict over it is at best CANNOT TELL,
:func:`decide`)."""

_TIE = {"identified": 0}  # among the lowest: identified only when every word is; else the first word given


def worst_outcome(words: Iterable[str | None]) -> str:
    """The worst of pass / identified / info / warn / cannot tell / fail by :data:`OUTCOME_RANK` (``info`` when
    none); among the lowest the first given, except that ``identified`` yields to any other (a file is identified
    only when every slot is).

    >>> worst_outcome(["pass", "warn", "cannot tell"]), worst_outcome([None]), worst_outcome(["identified", "info"])
    ('cannot tell', 'info', 'info')
    """
    vs = [str(v) for v in words if v]
    return max(vs, key=lambda v: (OUTCOME_RANK.get(v, 0), _TIE.get(v, 1))) if vs else "info"


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Worst first (fail, warn, info), otherwise in the order they were made."""
    return sorted(findings, key=lambda f: -f.severity.rank)


def exit_code(findings: Iterable[Finding | Mapping[str, Any]] = (), verdicts: Iterable[Verdict | str | None] = (),
              unreadable: bool = False, fail_on: Severity | str = Severity.FAIL) -> int:
    """The exit code every ``hsf`` command returns (table in the module docstring).

    Args:
        findings: every finding the command made (objects or dicts with a ``severity``).
        verdicts: every claim's verdict (``Verdict`` or its name; None = no claim).
        unreadable: an input could not be read, or an argument was bad.
        fail_on: ``"warn"`` makes a warn count as a fail (``hsf report --fail-on warn``).

    Precedence: 2 (nothing can be trusted about an input that was not read), then 1, then 3, then 0.
    """
    if unreadable:
        return EXIT_BAD_INPUT
    bar = severity(fail_on)
    worst = worst_severity(findings)
    if worst is not None and worst.rank >= bar.rank and worst is not Severity.INFO:
        return EXIT_FAIL
    v = worst_verdict(verdicts)
    if v is Verdict.FAIL:
        return EXIT_FAIL
    if v is Verdict.CANNOT_TELL:
        return EXIT_CANNOT_TELL
    return EXIT_OK


def decide(findings: Iterable[Finding | Mapping[str, Any]] = (), verdicts: Iterable[Verdict | str | None] = (),
           fail_on: Severity | str = Severity.FAIL, unreadable: bool = False) -> Verdict:
    """The one verdict of a command over what it read: FAIL when :func:`exit_code` would be 1, CANNOT TELL when 3,
    else PASS. An unreadable input is exit 2 and is reported as an error beside the verdict; with ``unreadable``
    it also keeps the verdict from reading PASS (nothing was decided about that input: CANNOT TELL; a FAIL stays
    a FAIL), so a consumer that reads only the verdict never acts on a pass of a file that was not read.

    >>> decide([], [Verdict.PASS, None]), decide([{"severity": "warn"}], ["cannot tell"])
    (<Verdict.PASS: 'pass'>, <Verdict.CANNOT_TELL: 'cannot tell'>)
    >>> decide([], [Verdict.PASS], unreadable=True), decide([{"severity": "fail"}], unreadable=True)
    (<Verdict.CANNOT_TELL: 'cannot tell'>, <Verdict.FAIL: 'fail'>)
    """
    got = {EXIT_FAIL: Verdict.FAIL, EXIT_CANNOT_TELL: Verdict.CANNOT_TELL}.get(
        exit_code(findings, verdicts, fail_on=fail_on), Verdict.PASS)
    return Verdict.CANNOT_TELL if unreadable and got is Verdict.PASS else got


__all__ = ["decide",
           "Finding", "FindingKind", "finding_kind", "Severity", "Verdict", "severity", "verdict", "worst_severity",
           "worst_verdict", "worst_outcome", "OUTCOME_RANK", "UNREADABLE", "sort_findings", "exit_code", "EXIT_OK",
           "EXIT_FAIL", "EXIT_BAD_INPUT", "EXIT_CANNOT_TELL", "EXIT_CODES"]
