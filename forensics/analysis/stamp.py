"""``stamp`` and ``verify``: write what each capture file's slots are into the data, and check the values later.

``stamp(dataset)`` records per file r per slot, the convention and producer, the target and its L, the file's
path relative to the stamped folder, and the value fingerprint (``forensics.io.stamps``; stored by
``forensics.io.stamp_store``). Each file is stamped or left as it was: a file that cannot be stamped (a link, a
read-only file, an immutable one, a full disk) is reported and the others go on. ``verify(dataset)`` re-reads
every file once, compares each slot's checksum with its stamp and, for a slot that changed, says what it now
looks like: another stamped slot's norm profile (slots swapped or reordered), or none (values from another
layer, or edited). A file whose stamp names another path (a copy) fails; an unreadable file or a malformed
stamp is that file's error row, and every other file still gets its verdict.

Example:
    >>> res = stamp("caps/", layers="embed,L3,L16,L28", model="SmolLM2-135M", num_layers=30)  # doctest: +SKIP
    >>> verify("caps/").ok                                                                     # doctest: +SKIP
    True
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from forensics import __version__
from forensics.analysis.claims import Claim, Claims, ClaimSource
from forensics.display import render
from forensics.errors import ForensicsError, one_line
from forensics.findings import Finding, FindingKind, Severity, Verdict, exit_code
from forensics.io import stamp_store as store
from forensics.io import stamps as st
from forensics.io import validate
from forensics.io.formats import iter_files, load, load_all, split_record
from forensics.io.limits import MAX_NUM_LAYERS
from forensics.layers import parse_layer_list, parse_r, r_label
from forensics.models import conventions as cv

NORM_MATCH_RTOL = 1e-3  # two slots' norm quantiles "match" within 0.1 % (bf16 row norms of one layer agree
# to ~1e-6 across reads; adjacent SmolLM2 layers differ by >= 1 % in median row norm)


@dataclass
class FileStamp:
    """One file's stamp and where it went."""

    path: str
    where: str  # "safetensors __metadata__" | "<stamps.jsonl path>" | "" when not stamped
    r: list
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # why this file was not stamped (it was left unchanged)

    @property
    def stamped(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class StampResult:
    """What ``stamp`` wrote."""

    files: list[FileStamp]
    convention: str | None
    producer: str | None
    model: str | None
    num_layers: int | None

    @property
    def ok(self) -> bool:
        return bool(self.files) and all(f.stamped for f in self.files)

    @property
    def failed(self) -> list[FileStamp]:
        return [f for f in self.files if not f.stamped]

    @property
    def verdict(self) -> Verdict:
        """PASS when every file was stamped, else FAIL (the unstamped files say why; the command exits 2)."""
        return Verdict.PASS if self.ok else Verdict.FAIL

    @property
    def findings(self) -> list[Finding]:
        """One ``not_stamped`` FAIL per file left unstamped (evidence: its path)."""
        return [Finding(FindingKind.NOT_STAMPED, Severity.FAIL, [], f"{f.path}: {f.error}", {"file": f.path})
                for f in self.failed]

    def to_dict(self) -> dict:
        return {"verdict": self.verdict.value, "ok": self.ok, "findings": [f.to_dict() for f in self.findings],
                "files": [f.to_dict() for f in self.files], "convention": self.convention,
                "producer": self.producer, "model": self.model, "num_layers": self.num_layers}

    def __repr__(self) -> str:
        return render(self, "line")


@dataclass
class SlotDrift:
    """One slot whose values no longer match its stamp, and what it looks like now."""

    slot: int
    name: str
    stamped_label: str | None
    kind: str  # "swapped" | "changed" | "reencoded"
    looks_like: int | None  # the stamped slot whose norm profile it now has
    stamped_median: float | None
    median: float | None
    message: str


@dataclass
class FileCheck:
    """``verify``'s answer for one file."""

    path: str
    status: str  # "ok" | "drifted" | "unstamped" | "changed-shape" | "moved" | "error"
    message: str
    drift: list[SlotDrift] = field(default_factory=list)
    stamp: dict | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["stamp"] = brief(self.stamp)
        return d


_CHECK_KINDS = {"drifted": FindingKind.STAMP_DRIFT, "changed-shape": FindingKind.STAMP_SHAPE,
                "moved": FindingKind.STAMP_MOVED, "error": FindingKind.STAMP_UNREADABLE,
                "unstamped": FindingKind.UNSTAMPED}


@dataclass
class VerifyResult:
    """Per-file checks; ``ok`` when every file is stamped and unchanged."""

    files: list[FileCheck]
    seconds: float
    bytes_read: int

    @property
    def ok(self) -> bool:
        return bool(self.files) and all(f.status == "ok" for f in self.files)

    @property
    def verdict(self) -> Verdict:
        """FAIL when a file drifted from its stamp (or could not be checked), PASS when every file matches its
        stamp, else CANNOT TELL (a file without a stamp); the exit code and every view read it."""
        if any(f.status in ("drifted", "changed-shape", "moved", "error") for f in self.files):
            return Verdict.FAIL
        return Verdict.PASS if self.ok else Verdict.CANNOT_TELL

    @property
    def findings(self) -> list[Finding]:
        """One finding per file that is not ``ok``, its kind from the file's status: ``stamp_drift`` (the drifted
        slots named), ``stamp_shape``, ``stamp_moved``, ``stamp_unreadable`` (FAIL), ``unstamped`` (INFO: nothing to
        check, so the verdict is CANNOT TELL, not FAIL)."""
        out = []
        for f in self.files:
            kind = _CHECK_KINDS.get(f.status)
            if kind is None:
                continue
            sev = Severity.INFO if kind is FindingKind.UNSTAMPED else Severity.FAIL
            out.append(Finding(kind, sev, sorted({d.slot for d in f.drift}), f"{f.path}: {f.message}",
                               {"file": f.path, "status": f.status}))
        return out

    def exit_code(self) -> int:
        """``forensics.findings.exit_code`` of the verdict: 0 pass, 1 fail, 3 cannot tell."""
        return exit_code(self.findings, [self.verdict])

    def to_dict(self) -> dict:
        return {"verdict": self.verdict.value, "findings": [f.to_dict() for f in self.findings],
                "files": [f.to_dict() for f in self.files], "seconds": self.seconds,
                "bytes_read": self.bytes_read}

    def __repr__(self) -> str:
        return render(self, "line")


def brief(stamp: dict | None) -> dict | None:
    """The identity part of a stamp (labels per slot, target, producer, convention), without the numbers."""
    if not stamp:
        return None
    return {"labels": [x.get("label") for x in stamp.get("slots") or []], "target": stamp.get("target"),
            "producer": stamp.get("producer"), "convention": stamp.get("convention"),
            "file": stamp.get("file"), "version": stamp.get("version", 1)}


def _slot_rs(cap, layers, numbering: cv.System | None, layer_ids, num_layers: int | None
             ) -> tuple[list[Any], list[str]]:
    """r per slot: ``layers`` given, else ids read in ``numbering`` (the convention's system), else what the data
    declares."""
    notes: list[str] = []
    n = len(cap.slots)
    if layers is not None:
        rs: list[Any] = parse_layer_list(layers, "--layers") or []
        if len(rs) != n:
            raise ForensicsError(f"--layers gives {len(rs)} values but the file has {n} slots", path=cap.path)
        return rs, notes
    if layer_ids is not None and numbering is not None:
        if num_layers is None:
            raise ForensicsError("--layer-ids needs --num-layers (or a capture.json that records it)")
        rs = numbering.to_r([int(i) for i in layer_ids], num_layers)
        if len(rs) != n:
            raise ForensicsError(f"{len(rs)} layer ids for {n} slots", path=cap.path)
        return rs, notes
    rs = [s.declared_r for s in cap.slots]
    if any(r is None for r in rs):
        notes.append("r unknown for slot(s) " + ", ".join(str(i) for i, r in enumerate(rs) if r is None)
                     + ": stamped as null (pass --layers to record them)")
    return rs, notes


def stamp(dataset: str | os.PathLike, layers: str | list | None = None, convention: str | None = None,
          layer_ids: list | None = None, producer: str | None = None, model: str | None = None,
          num_layers: int | None = None) -> StampResult:
    """Stamp every capture file under ``dataset`` (a file or a folder). Safetensors files get the stamp in their
    header (tensors byte-identical); torch files get a line in the ``stamps.jsonl`` beside them. Each file is
    stamped whole or not at all; ``StampResult.failed`` lists the files left unchanged and why."""
    validate.count(num_layers, "num_layers", hi=MAX_NUM_LAYERS, none=True)
    if layers is not None:
        validate.layers(layers)
    root = _dataset_arg(dataset)
    files = list(iter_files(root))
    if not files:
        raise ForensicsError("no capture files found", path=root)
    base = os.path.abspath(root) if os.path.isdir(root) else os.path.dirname(os.path.abspath(root))
    out: list[FileStamp] = []
    pending: dict[str, dict[str, dict]] = {}  # stamps.jsonl folder -> {rel: stamp}
    pending_files: dict[str, list[FileStamp]] = {}
    # the convention is a label the stamp records, read as a system's numbering only where it places layer_ids
    numbering = cv.system(convention) if layers is None and convention is not None and layer_ids is not None \
        else None
    opts = {"layers": layers, "convention": convention, "numbering": numbering, "layer_ids": layer_ids,
            "producer": producer, "model": model, "num_layers": num_layers}
    for path in files:
        if split_record(path)[1] is not None:  # FILE#i: a stamp covers a file's every sample, written at once
            out.append(FileStamp(path, "", [], [], error=f"one sample cannot be stamped alone: stamp the whole file "
                                 f"({os.path.basename(split_record(path)[0])})"))
            continue
        try:
            rec, rs, notes = _record(path, os.path.relpath(os.path.abspath(path), base), opts)
            if store.is_safetensors(path):
                store.write_safetensors_stamp(path, rec)
                out.append(FileStamp(path, "safetensors __metadata__", rs, notes))
            else:
                folder = store.stamps_folder(path)
                pending.setdefault(folder, {})[os.path.relpath(os.path.abspath(path), folder)] = rec
                fs = FileStamp(path, os.path.join(folder, store.STAMPS_FILE), rs, notes)
                pending_files.setdefault(folder, []).append(fs)
                out.append(fs)
        except (ForensicsError, OSError) as e:
            why = e.message if isinstance(e, ForensicsError) else f"cannot stamp: {e.strerror}"
            out.append(FileStamp(path, "", [], [], error=why))
    for folder, recs in pending.items():
        try:
            store.append_stamps(folder, recs)
        except ForensicsError as e:
            for fs in pending_files[folder]:
                fs.where, fs.error = "", e.message
    return StampResult(out, convention, producer, model, num_layers)


def _record(path: str, rel: str, opts: dict) -> tuple[dict, list, list[str]]:
    """The stamp of one file, its r per slot and notes (reads the file; writes nothing)."""
    caps = load_all(path)  # every sample of a many-sample file, read once
    cap = caps[0]
    meta = cap.meta or {}
    L = opts["num_layers"] or cap.num_layers
    rs, notes = _slot_rs(cap, opts["layers"], opts["numbering"], opts["layer_ids"], L)
    slots = []
    embed = None
    for s, r in zip(cap.slots, rs, strict=True):
        t = s.tensor()
        if t.ndim != 2:
            raise ForensicsError(f"cannot stamp: slot {s.name} is {t.ndim}-D, expected [tokens, hidden]", path=path)
        slots.append(st.slot_record(t, s.name, r, None if r is None else r_label(r), str(s.dtype)))
        if r == 0 and embed is None:
            embed = st.embed_rows(t, cap.input_ids)
    cap.check_unchanged()  # truncated under its map or rewritten in place while read: not stamped
    rec = st.build_record(slots, cap.input_ids, embed, fmt=cap.format,
                          producer=opts["producer"] or meta.get("tool") or cap.declared_convention,
                          convention=opts["convention"] or meta.get("convention") or cap.declared_convention,
                          layer_ids=opts["layer_ids"] or meta.get("layer_ids") or cap.declared_layers,
                          model=opts["model"] or meta.get("model"), num_layers=L, tool_version=__version__,
                          file=rel.replace(os.sep, "/"))
    if len(caps) > 1:
        if len(caps) > MAX_STAMPED_SAMPLES:
            raise ForensicsError(f"cannot stamp: the file holds {len(caps)} samples (at most {MAX_STAMPED_SAMPLES} "
                                 "are stamped per file)", path=path)
        rec["samples"] = [sample_digest(c) for c in caps]
        notes.append(f"{len(caps)} samples, each one's slots and token ids stamped (slots above: sample 0)")
    return rec, rs, notes


MAX_STAMPED_SAMPLES = 40_000  # one 16-hex digest each: the stamp line stays under stamp_store.MAX_STAMP_LINE


def sample_digest(cap: Any) -> str:
    """One sample of a many-sample file as one digest: its slots' checksums (stamp version 2) and token ids."""
    parts = [st.checksum(s.tensor()) for s in cap.slots] + [st.token_checksum(cap.input_ids) or "-"]
    return hashlib.sha256(",".join(parts).encode()).hexdigest()[:st.DIGEST_HEX]


def _moved(path: str, file: str | None) -> bool:
    """Whether the stamped relative path is not where ``path`` now is (its last components differ)."""
    if not file:
        return False
    want = [p for p in file.split("/") if p not in ("", ".")]
    have = os.path.abspath(path).split(os.sep)
    return not want or have[-len(want):] != want


def _dataset_arg(dataset: Any) -> str:
    if not isinstance(dataset, (str, os.PathLike)):
        raise ForensicsError(f"dataset must be a path to a capture file or folder, got {type(dataset).__name__}")
    return os.fspath(dataset)


def _close(a: list | None, b: list | None) -> bool:
    if not a or not b or len(a) != len(b):
        return False
    return all(abs(x - y) <= NORM_MATCH_RTOL * max(abs(x), abs(y), 1e-12) for x, y in zip(a, b, strict=True))


def check_file(path: str) -> FileCheck:
    """Verify one file against its stamp; an unreadable file or a malformed stamp is an ``error`` check."""
    try:
        return _check_file(path)
    except ForensicsError as e:
        return FileCheck(path, "error", e.message)
    except OSError as e:
        return FileCheck(path, "error", f"cannot read: {e.strerror or type(e).__name__}")
    except (ValueError, RuntimeError, IndexError, KeyError, TypeError, EOFError) as e:  # a damaged file

        return FileCheck(path, "error", f"cannot read: {type(e).__name__}: {one_line(e)[:200]}")


def _check_file(path: str) -> FileCheck:
    base, index = split_record(path)
    if index is not None:  # FILE#i: one sample of a many-sample file against the file's stamp
        return _check_record(path, base, index)
    rec = store.read_stamp(path)
    if rec is None:
        return FileCheck(path, "unstamped", "no stamp (run `hsf stamp` on it)")
    if _moved(path, rec.get("file")):
        return FileCheck(path, "moved", f"the stamp was made for {rec.get('file')}, not this file (a copy of "
                         "another file, or renamed: re-stamp after a rename)", stamp=rec)

    caps = load_all(path)  # every sample of a many-sample file, the file read once
    if len(caps) > 1:
        return _compare_samples(path, caps, rec)
    cap = caps[0]
    raw = store.raw_slot_arrays(path, cap)  # one memory map instead of one full read per slot
    return compare(cap, rec, raw if raw is not None else None)


def _check_record(path: str, base: str, index: int) -> FileCheck:
    """Sample ``index`` of ``base`` (named ``path``, ``FILE#i``) against ``base``'s stamp: sample 0 slot by slot
    (the stamp's slots are its), another sample by its digest."""
    rec = store.read_stamp(base)
    if rec is None:
        return FileCheck(path, "unstamped", f"no stamp on {os.path.basename(base)} (run `hsf stamp` on it)")
    if _moved(base, rec.get("file")):
        return FileCheck(path, "moved", f"the stamp was made for {rec.get('file')}, not this file (a copy of "
                         "another file, or renamed: re-stamp after a rename)", stamp=rec)
    cap = load(path)
    if index == 0:
        check = compare(cap, rec)
        check.path = path
        return check
    samples = _stamped_samples(rec)
    if samples is None:
        return FileCheck(path, "unstamped", f"the stamp of {os.path.basename(base)} covers sample 0 only (stamped "
                         "before hsf stamped every sample): re-stamp with `hsf stamp`", stamp=rec)
    if index >= len(samples):
        return FileCheck(path, "changed-shape", f"the stamp has {len(samples)} samples, none numbered {index}",
                         stamp=rec)
    if sample_digest(cap) != samples[index]:
        return FileCheck(path, "drifted", "the sample changed (slots or token ids) since it was stamped", [], rec)
    return FileCheck(path, "ok", f"sample {index} matches the stamp of {os.path.basename(base)}", [], rec)


def _stamped_samples(rec: dict) -> list[str] | None:
    samples = rec.get("samples")
    return samples if isinstance(samples, list) and all(isinstance(x, str) for x in samples) else None


def _compare_samples(path: str, caps: list, rec: dict) -> FileCheck:
    """Every sample of a many-sample file against its stamp: sample 0 slot by slot (the stamp's slots are its),
    each other sample by its digest (:func:`sample_digest`); one check for the file naming the samples changed."""
    samples = _stamped_samples(rec)
    if samples is None:
        return FileCheck(path, "unstamped", f"the file holds {len(caps)} samples but its stamp covers sample 0 only "
                         "(stamped before hsf stamped every sample): re-stamp with `hsf stamp`", stamp=rec)
    if len(samples) != len(caps):
        return FileCheck(path, "changed-shape", f"the stamp has {len(samples)} samples, the file {len(caps)}",
                         stamp=rec)
    first = compare(caps[0], rec)
    bad = [c.name for c, want in zip(caps[1:], samples[1:], strict=True) if sample_digest(c) != want]
    if not bad:
        if first.status != "ok":
            return first
        return FileCheck(path, "ok", f"{len(caps)} samples × {len(caps[0].slots)} slots match the stamp", [], rec)
    shown = ", ".join(os.path.basename(b) for b in bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
    msg = f"{len(bad)} of {len(caps)} samples changed (slots or token ids): {shown}"
    if first.status == "ok":
        return FileCheck(path, "drifted", msg, [], rec)
    if first.status == "drifted":
        return FileCheck(path, "drifted", f"{first.message}; {msg}", first.drift, rec)
    return first


def compare(cap, rec: dict, arrays: list | None = None, digests: dict | None = None) -> FileCheck:
    """``cap`` (a capture read from its file) against its stamp ``rec``: slot count and shapes, every slot's
    checksum over ``arrays`` (the slots' values as stored, already read by the caller: tensors or integer
    views; default: each ``slot.tensor()``; ``digests``: a slot's checksum already computed in the caller's own
    pass, :class:`StampReader`), the token ids; a slot whose checksum changed is described by its
    norm profile (swapped with another stamped slot, re-encoded, or changed). Sample i > 0 of a many-sample
    file is compared by its digest (the stamp's slots are sample 0's)."""
    path = cap.path
    version = rec.get("version", 1)
    if cap.provenance.record and int(cap.meta.get("records", 1)) > 1:
        samples = _stamped_samples(rec)
        i = int(cap.provenance.record)
        if samples is None or len(samples) <= i:
            return FileCheck(path, "unstamped", f"the stamp does not cover sample {i} (stamped before hsf stamped "
                             "every sample, or with fewer samples): re-stamp with `hsf stamp`", stamp=rec)
        if sample_digest(cap) != samples[i]:
            return FileCheck(path, "drifted", f"{os.path.basename(cap.name)} changed since stamping (slots or token "
                             "ids)", [], rec)
        return FileCheck(path, "ok", f"sample {i} matches the stamp", [], rec)
    stamped = rec.get("slots") or []
    if len(stamped) != len(cap.slots):
        return FileCheck(path, "changed-shape", f"the stamp has {len(stamped)} slots, the file {len(cap.slots)}",
                         stamp=rec)
    shapes = [list(s.shape) for s in cap.slots]
    if any(list(x.get("shape") or []) != y for x, y in zip(stamped, shapes, strict=True)):
        return FileCheck(path, "changed-shape", f"slot shapes {shapes} differ from the stamp's "
                         f"{[x.get('shape') for x in stamped]}", stamp=rec)
    drift: list[SlotDrift] = []
    checksum = st.checksum_for(version)
    def digest(i: int, s) -> str:
        done = (digests or {}).get(i) if version == st.STAMP_VERSION else None
        return done if done is not None else checksum(arrays[i] if arrays is not None else s.tensor())

    changed = [i for i, (s, x) in enumerate(zip(cap.slots, stamped, strict=True)) if digest(i, s) != x.get("checksum")]
    for i in changed:
        x = stamped[i]
        q = st.norm_quantiles(cap.slots[i].tensor())
        other = next((j for j, y in enumerate(stamped) if j != i and _close(q, y.get("norm_q"))), None)
        med, smed = q[len(q) // 2], x["norm_q"][len(q) // 2]
        lab = x.get("label") or "?"
        if other is not None:
            olab = stamped[other].get("label") or "?"
            drift.append(SlotDrift(i, cap.slots[i].name, x.get("label"), "swapped", other, smed, med,
                                   f"slot {i} (stamped {lab}) now holds what slot {other} (stamped {olab}) held: "
                                   "slots swapped or reordered"))
        elif _close(q, x.get("norm_q")):
            drift.append(SlotDrift(i, cap.slots[i].name, x.get("label"), "reencoded", None, smed, med,
                                   f"slot {i} (stamped {lab}): bytes changed but its norm profile did not "
                                   "(re-encoded, or a small edit)"))
        else:
            rel = (med - smed) / smed * 100 if smed else float("nan")
            drift.append(SlotDrift(i, cap.slots[i].name, x.get("label"), "changed", None, smed, med,
                                   f"slot {i} (stamped {lab}) changed: median row norm {med:.4g} vs stamped "
                                   f"{smed:.4g} ({rel:+.1f} %), matching no stamped slot (another layer?)"))
    cap.check_unchanged()  # a checksum of pages lost to a truncation is no evidence either way: an error row
    tok = rec.get("tokens") or {}
    notes = []
    if tok.get("checksum") and st.token_checksum(cap.input_ids) != tok["checksum"]:
        notes.append("token ids changed")
    if drift or notes:
        return FileCheck(path, "drifted", "; ".join([d.message for d in drift] + notes), drift, rec)
    if version == 1:
        return FileCheck(path, "ok", f"{len(stamped)} slots match the stamp (an old version-1 stamp: its checksum "
                         "misses swapped words or lanes and paired edits; re-stamp with `hsf stamp`)", [], rec)
    return FileCheck(path, "ok", f"{len(stamped)} slots match the stamp", [], rec)


# ---- the stamp read by every command that reads the file (fingerprint, inspect, scan, audit, probe, report) ----

_READ_KINDS = {"drifted": (FindingKind.STAMP_DRIFT, Severity.FAIL),
               "changed-shape": (FindingKind.STAMP_SHAPE, Severity.FAIL),
               "error": (FindingKind.STAMP_UNREADABLE, Severity.FAIL),
               "moved": (FindingKind.STAMP_MOVED, Severity.WARN)}


def describe_stamp(rec: dict | None, path: str) -> str:
    """``its stamp (hsf 0.1.0, in the safetensors header: embed, L3, L16, L28)``: which stamp, where, what it
    says each slot is."""
    if not rec:
        return "its stamp"
    where = "in the safetensors header" if store.is_safetensors(path) else f"in {store.STAMPS_FILE}"
    labels = ", ".join(str(x.get("label") or "?") for x in rec.get("slots") or [])
    return f"its stamp ({rec.get('tool') or 'hsf'}, {where}: {labels})"


@dataclass
class StampCheck:
    """A file's stamp checked inside another command's read of the file (no second read of its values): the
    ``verify`` answer for it, and the findings that command reports (``stamp_drift``, ``stamp_shape``,
    ``stamp_unreadable``: FAIL; ``stamp_moved``: WARN, the values were still checked)."""

    check: FileCheck
    moved: bool = False

    @property
    def stamp(self) -> dict | None:
        return self.check.stamp

    @property
    def findings(self) -> list[Finding]:
        c = self.check
        out = []
        if c.status in _READ_KINDS:
            kind, sev = _READ_KINDS[c.status]
            who = describe_stamp(c.stamp, c.path)
            if c.status == "error":
                msg = f"the file's stamp cannot be read: {c.message}"
            else:
                msg = f"the values differ from {who}: {c.message}; the file changed after it was stamped " \
                    "(`hsf verify` checks a whole folder; `--no-stamp-check` skips this)"
            out.append(Finding(kind, sev, sorted({d.slot for d in c.drift}), msg,
                               {"file": c.path, "status": c.status, "stamp": brief(c.stamp)}))
        if self.moved:
            out.append(Finding(FindingKind.STAMP_MOVED, Severity.WARN, [], (
                f"{describe_stamp(c.stamp, c.path)} was made for {(c.stamp or {}).get('file')}, not this path (a "
                "copy, or renamed); its values were checked against it"),
                {"file": c.path, "stamp": brief(c.stamp)}))
        return out

    @property
    def claim_rs(self) -> list | None:
        """The stamp's r per slot (None where it recorded none), when it matches the file's slots."""
        rec = self.stamp
        if not rec or self.check.status in ("changed-shape", "error"):
            return None
        rs = [_r_or_none(x.get("r")) for x in rec.get("slots") or []]
        return rs if any(r is not None for r in rs) else None

    def to_dict(self) -> dict:
        return {"status": self.check.status, "moved": self.moved, "message": self.check.message,
                "stamp": brief(self.stamp), "findings": [f.to_dict() for f in self.findings]}


def read_file_stamp(cap) -> tuple[dict | None, FileCheck | None]:
    """The stamp of the file ``cap`` was read from (its header or the stamps.jsonl beside it; never its values),
    or ``(None, None)`` when there is none or ``cap`` is not one whole file (in memory, one record of many);
    ``(None, error check)`` for a malformed stamp."""
    path = getattr(cap, "path", None)
    if not isinstance(path, str) or cap.provenance.record is not None or not os.path.isfile(path):
        return None, None
    try:
        return store.read_stamp(path), None
    except ForensicsError as e:
        return None, FileCheck(path, "error", e.message)
    except OSError as e:
        return None, FileCheck(path, "error", f"cannot read: {e.strerror or type(e).__name__}")


class StampReader:
    """A file's stamp, read (header or stamps.jsonl only) before a command's pass over the values, and fed that
    pass's row blocks (``summarize(cap, taps=reader.taps)``): each slot's checksum is computed on the
    blocks the norm pass has in cache, not by reading the slot again. ``check()`` then compares.

    Example:
        >>> reader = StampReader(cap)                                        # doctest: +SKIP
        >>> st = summarize(cap, taps=reader.taps if reader.feeds else None)  # doctest: +SKIP
        >>> reader.check()                                                   # doctest: +SKIP
    """

    def __init__(self, cap) -> None:
        self.cap = cap
        self.rec, self.err = read_file_stamp(cap)
        slots = (self.rec or {}).get("slots") or []
        same = self.rec is not None and self.rec.get("version", 1) == st.STAMP_VERSION and len(slots) == len(
            cap.slots) and all(list(x.get("shape") or []) == list(s.shape) for x, s in zip(slots, cap.slots,
                                                                                           strict=True))
        self.sums = {s.index: st.BlockChecksum(s.shape) for s in cap.slots} if same else {}

    @property
    def feeds(self) -> bool:
        """Whether there is anything to compute in the pass (a version-2 stamp whose slot shapes match)."""
        return bool(self.sums)

    def taps(self, slot: int) -> list:
        """The norm pass's consumers of slot ``slot``'s row blocks (``BlockTap``: first row, block as stored)."""
        b = self.sums.get(slot)
        return [] if b is None else [b.add]

    def check(self, arrays: list | None = None) -> StampCheck | None:
        """The stamp check (None without a stamp); a slot whose blocks did not all arrive is checksummed whole."""
        digests = {i: b.digest() for i, b in self.sums.items()}
        return check_in_read(self.cap, arrays, self.rec, self.err, digests)


def check_in_read(cap, arrays: list | None = None, rec: Any = None, err: FileCheck | None = None,
                  digests: dict | None = None) -> StampCheck | None:
    """Check ``cap``'s stamp against the values the caller has already read (``arrays``: one tensor or integer
    view per slot, as stored; default each ``slot.tensor()``; ``digests``: checksums computed in the caller's
    pass). None when the file has no stamp. ``rec``/``err``: the stamp already read by :func:`read_file_stamp`
    (read here otherwise)."""
    if rec is None and err is None:
        rec, err = read_file_stamp(cap)
    if err is not None:
        return StampCheck(err)
    if rec is None:
        return None
    try:
        if arrays is None and not (digests and all(v is not None for v in digests.values())):
            arrays = store.raw_slot_arrays(cap.path, cap)  # safetensors: one memory map (get_tensor copies each)
        fc = compare(cap, rec, arrays, digests)
    except ForensicsError as e:
        fc = FileCheck(cap.path, "error", e.message, stamp=rec)
    return StampCheck(fc, moved=_moved(cap.path, rec.get("file")))


def _r_or_none(r: Any) -> Any:
    """A stamp's r as a valid r (an int layer or ``final_post``), else None (a stamp is untrusted input)."""
    if r is None or isinstance(r, bool) or not isinstance(r, (int, str)):
        return None

    try:
        v = parse_r(r)
    except (ForensicsError, ValueError, TypeError):
        return None
    return None if isinstance(v, int) and not 0 <= v <= MAX_NUM_LAYERS else v


def stamp_claims(rec: dict | None, base: Any = None):
    """The stamp's r per slot as the file's claims (``ClaimSource.STAMP``); a slot the stamp left without r keeps
    ``base``'s claim (the sidecar's or the format's). None when the stamp records no r."""
    rec = rec or {}
    slots = rec.get("slots") or []
    rs = [_r_or_none(x.get("r")) for x in slots]
    if not any(r is not None for r in rs):
        return None
    detail = f"{rec.get('tool') or 'hsf'} stamp r = [{', '.join('?' if r is None else r_label(r) for r in rs)}]"
    prior = list(base.slots) if base is not None and len(base.slots) == len(rs) else [None] * len(rs)
    out = [Claim(r, ClaimSource.STAMP, detail) if r is not None else p for r, p in zip(rs, prior, strict=True)]
    return Claims(out, ClaimSource.STAMP, detail)


def verify(dataset: str | os.PathLike) -> VerifyResult:
    """Check every capture file under ``dataset`` against its stamp; names each drifted slot."""
    t0 = time.perf_counter()
    files = list(iter_files(_dataset_arg(dataset)))
    if not files:
        raise ForensicsError("no capture files found", path=os.fspath(dataset))
    checks = [check_file(p) for p in files]
    return VerifyResult(checks, time.perf_counter() - t0, sum(_size(p) for p in files))


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def stamp_status(path: str) -> dict[str, Any]:
    """For the report: ``{"status": "stamped"|"unstamped"|"error", "stamp": brief, "error": ...}``; reads only the
    header or the sidecar, never the values (``verify`` checks those)."""
    try:
        rec = store.read_stamp(path)
    except ForensicsError as e:
        return {"status": "error", "stamp": None, "error": e.message}
    except OSError as e:
        return {"status": "error", "stamp": None, "error": f"cannot read: {e.strerror}"}
    return {"status": "stamped" if rec else "unstamped", "stamp": brief(rec), "error": None}
