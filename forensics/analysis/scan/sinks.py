"""Scan rows as Parquet: one typed record per file × slot, for pandas / DuckDB / pyarrow queries.

``scan(..., out=OUT, out_format="parquet")`` (``hsf scan --format parquet -o OUT``) writes ``OUT`` as a
folder of Parquet parts instead of a JSON Lines file. Like the JSON Lines file it is append-only and
survives a killed scan: each part is written to a hidden temporary file and renamed into place
(``os.replace`` is atomic), so a part is either complete or absent, and a SIGKILL loses only the files
finished since the last part (they are scanned again by ``resume=True``). Each file's whole scan row
(with its norm sketch) is kept in the ``row_json`` column of its first record, so a resumed scan folds
the same rows into the same summary whichever format wrote them.

Parquet layout: ``OUT`` is a folder of ``part-NNNNNN.parquet`` files (readable as one table by pandas,
pyarrow, DuckDB ``read_parquet('OUT/*.parquet')``); each part is one row group holding the rows of the
files that finished since the previous part. Columns: see :data:`PARQUET_COLUMNS`.

The folder is hsf's only if it carries the marker file ``.hsf-scan`` (written when hsf creates or first
adopts the folder); a non-empty folder without it (a Spark or Hive table, anything else) is refused, and only
hsf's own ``part-NNNNNN.parquet`` files (six digits) are ever removed. A resumed scan leaves one record set per
file: the records of a file scanned again (an error row retried, a file that changed) are dropped from the
older parts, each part rewritten atomically (a resumed JSON Lines file likewise keeps the last row of each
file: :func:`drop_superseded_lines`). Text columns hold file names as the text outputs show them (an
undecodable byte as ``\\xNN``); ``row_json`` keeps the exact name. A part that cannot be written (no room, the
file-size limit) is one line, ``cannot write OUT/part-…: …``; the parts before it stay.

Example:
    >>> import pandas as pd                                                    # doctest: +SKIP
    >>> t = pd.read_parquet("scan.parquet")                                    # doctest: +SKIP
    >>> t[(t.slot == 2) & (t.token0_norm > 1000)].path.unique()                # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from typing import Any

from forensics.errors import ForensicsError
from forensics.io.output import TEXT_ERRORS, atomic_output
from forensics.layers import r_label

PARQUET_PART_FILES = 64  # a Parquet part (one row group) is written after this many finished files ...
PARQUET_PART_SECONDS = 10.0  # ... or this many seconds since the last part, whichever comes first
PART_GLOB = "part-*.parquet"
PART_NAME = re.compile(r"part-\d{6}\.parquet")  # hsf's own parts; nothing else in the folder is ever removed
TMP_NAME = re.compile(r"\.part-\d{6}\.parquet\.tmp")
MARKER = ".hsf-scan"  # marks a folder as an hsf scan's output
ROW_JSON = "row_json"  # the file's whole scan row (sketch included) on its first slot's record: resume + rows

# (column, arrow type, description): the typed columns of one record per file × slot
PARQUET_COLUMNS: list[tuple[str, str, str]] = [
    ("path", "string", "absolute path of the capture file"),
    ("size", "int64", "file size in bytes"),
    ("mtime_ns", "int64", "modification time in ns (with path and size: the resume key)"),
    ("format", "string", "detected capture format"),
    ("num_tokens", "int64", "tokens in the file"),
    ("hidden", "int64", "hidden size"),
    ("num_slots", "int32", "slots in the file"),
    ("basis", "string", "'fingerprint' or 'stats': what role/label/depth_rank come from"),
    ("error", "string", "why the file could not be read (its only record, slot null)"),
    ("error_kind", "string", "unreadable or length_mismatch"),
    ("slot", "int32", "slot index in stored order"),
    ("slot_name", "string", "slot name in the file"),
    ("dtype", "string", "stored dtype"),
    ("claimed", "string", "what the file's keys claim the slot is"),
    ("r_claimed", "string", "r the capture declares for the slot (embed, L3, …, final_post)"),
    ("role", "string", "fingerprint role: embedding, early, middle, late, final_prenorm, final_postnorm"),
    ("label", "string", "fingerprint label assigned from the expected layer list"),
    ("depth_rank", "int32", "fingerprint depth rank among the file's slots"),
    ("norm_rank", "int32", "rank of the slot's token-0-excluded median norm"),
    ("confidence", "float64", "fingerprint role confidence"),
    ("r_exact", "string", "exact r from a reference model (null without one)"),
    ("norm_median", "float64", "median per-token L2 norm"),
    ("norm_mean", "float64", "mean per-token L2 norm"),
    ("norm_std", "float64", "std of per-token L2 norms"),
    ("norm_p05", "float64", "5th percentile of per-token L2 norms"),
    ("norm_p95", "float64", "95th percentile of per-token L2 norms"),
    ("median_excl_first", "float64", "median norm without token 0"),
    ("token0_norm", "float64", "token 0's L2 norm"),
    ("token0_ratio", "float64", "token 0's norm over the median of the others"),
    ("num_sinks", "int32", "tokens with a norm ≥ SINK_RATIO × median"),
    ("sinks", "list<int32>", "sink positions (first MAX_LISTED_POSITIONS)"),
    ("massive_dims", "list<int32>", "feature dims of massive activations"),
    ("nan", "int64", "NaN values in the slot"),
    ("inf", "int64", "Inf values in the slot"),
    ("anomaly_kinds", "list<string>", "kinds of the file's findings that involve this slot (known per file; "
                                      "dataset-level anomalies are in the scan result)"),
    ("num_rows", "int64", "rows per slot (differs from num_tokens when the rows do not match the ids: row_count)"),
    ("row_offset", "int32", "row t holds token t + row_offset's state (0 aligned; null: the data cannot say)"),
    ("row_kinds", "list<string>", "row-forensics finding kinds that involve this slot (zero_rows, nonfinite, "
                                  "row_count, token_shift, slot_misaligned, foreign_rows)"),
    ("bad_rows", "list<list<int32>>", "this slot's bad row ranges, inclusive [first, last] (zero, non-finite, "
                                      "foreign, or outside the ids)"),
    ("bad_row_count", "int64", "rows in this slot's bad row ranges"),
    (ROW_JSON, "string", "the file's whole scan row as JSON, on its first record only (resume, rows)"),
]


def _arrow_schema():
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64(), "int32": pa.int32(), "float64": pa.float64(),
             "list<int32>": pa.list_(pa.int32()), "list<string>": pa.list_(pa.string()),
             "list<list<int32>>": pa.list_(pa.list_(pa.int32()))}
    return pa.schema([pa.field(name, types[t], metadata={"description": d}) for name, t, d in PARQUET_COLUMNS])


def _text(v: Any) -> Any:
    """A string as the text outputs write it (an undecodable file-name byte as ``\\xNN``; Arrow strings are
    UTF-8); lists element-wise; anything else as is."""
    if isinstance(v, str):
        return v.encode("utf-8", TEXT_ERRORS).decode("utf-8")
    if isinstance(v, list):
        return [_text(x) for x in v]
    return v


def records(row: dict) -> list[dict]:
    """The typed records (one per slot; one with ``slot`` null for an unreadable file) of one scan row."""
    return [{k: v if k == ROW_JSON else _text(v) for k, v in rec.items()} for rec in _records(row)]


def _records(row: dict) -> list[dict]:
    base = {k: row.get(k) for k in ("path", "size", "mtime_ns", "format", "num_tokens", "hidden", "num_slots",
                                    "basis", "error", "error_kind")}
    whole = json.dumps(row, allow_nan=False, separators=(",", ":"))
    slots = row.get("slots") or []
    if not slots:
        return [{**base, ROW_JSON: whole}]
    findings = row.get("findings") or []
    rows = row.get("rows") or {}
    out = []
    for j, s in enumerate(slots):
        norm = s.get("norm") or {}
        kinds = sorted({f["kind"] for f in findings if not f.get("slots") or s["index"] in f["slots"]})
        bad = (rows.get("bad_rows") or {}).get(str(s["index"])) or []
        out.append({
            **base, "slot": s["index"], "slot_name": s.get("name"), "dtype": s.get("dtype"),
            "claimed": s.get("claimed"), "r_claimed": s.get("declared"), "role": s.get("role"),
            "label": s.get("label"), "depth_rank": s.get("depth_rank"), "norm_rank": s.get("norm_rank"),
            "confidence": s.get("confidence"),
            "r_exact": None if s.get("r_exact") is None else r_label(s["r_exact"]),
            "norm_median": norm.get("median"), "norm_mean": norm.get("mean"), "norm_std": norm.get("std"),
            "norm_p05": norm.get("p05"), "norm_p95": norm.get("p95"),
            "median_excl_first": s.get("median_excl_first"), "token0_norm": s.get("first"),
            "token0_ratio": s.get("first_ratio"), "num_sinks": s.get("num_sinks"), "sinks": s.get("sinks"),
            "massive_dims": s.get("massive_dims"), "nan": s.get("nan"), "inf": s.get("inf"),
            "anomaly_kinds": kinds, "num_rows": rows.get("num_rows"), "row_offset": rows.get("offset"),
            "row_kinds": [k for k in kinds if k in set(rows.get("kinds") or [])] if rows else None,
            "bad_rows": [list(r) for r in bad] if rows else None,
            "bad_row_count": sum(b - a + 1 for a, b in bad) if rows else None,
            ROW_JSON: whole if j == 0 else None,
        })
    return out


class ParquetSink:
    """Typed records in ``OUT/part-NNNNNN.parquet``, one row group per part, each part renamed into place."""

    def __init__(self, out: str, resume: bool):
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ForensicsError("--format parquet needs pyarrow: pip install pyarrow") from None
        if os.path.exists(out) and not os.path.isdir(out):
            raise ForensicsError("--format parquet writes a folder of part files, but this is a file", path=out)
        try:
            os.makedirs(out, exist_ok=True)
            claim_folder(out)
            for name in os.listdir(out):
                if TMP_NAME.fullmatch(name):  # a part being written when a scan was killed
                    os.remove(os.path.join(out, name))
            parts = own_parts(out)
            if not resume:
                for p in parts:
                    os.remove(p)
                parts = []
        except OSError as e:
            raise ForensicsError(f"cannot write {out}: {e.strerror}") from None
        self.out = out
        self.resume = resume
        self._first = self._next = 1 + max((_part_no(p) for p in parts), default=-1)
        self._pending: list[dict] = []
        self._files = 0
        self._since = time.monotonic()
        self._schema = _arrow_schema()
        self._written: set[str] = set()  # (escaped) paths written by this run: their older records are superseded
        self._failed = False

    def write(self, row: dict) -> None:
        """Queue the records of one (JSON-safe) scan row; write a part when enough files are queued."""
        self._pending.extend(records(row))
        self._files += 1
        if self._files >= PARQUET_PART_FILES or time.monotonic() - self._since >= PARQUET_PART_SECONDS:
            self.flush()

    def flush(self) -> None:
        if not self._pending or self._failed:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        name = f"part-{self._next:06d}.parquet"
        tmp = os.path.join(self.out, f".{name}.tmp")
        try:
            table = pa.Table.from_pylist(self._pending, schema=self._schema)
            pq.write_table(table, tmp, row_group_size=max(1, table.num_rows))
            os.replace(tmp, os.path.join(self.out, name))
        except (OSError, pa.ArrowException, ValueError, TypeError) as e:
            self._failed = True  # close() must not try again
            try:
                os.remove(tmp)
            except OSError:
                pass
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e).splitlines()[0][:200]
            raise ForensicsError(f"cannot write {os.path.join(self.out, name)}: {why}; the parts before it "
                                 "are kept (continue with --resume)") from None
        self._written.update(r["path"] for r in self._pending if r.get("path") is not None)
        self._next += 1
        self._pending, self._files, self._since = [], 0, time.monotonic()

    def close(self) -> None:
        self.flush()
        if self.resume and self._written and not self._failed:
            try:
                drop_superseded(self.out, self._written, before=self._first)
            except OSError as e:  # the new parts are written; the old records stay beside them (read last-wins)
                raise ForensicsError(f"cannot write {self.out}: {e.strerror}; superseded records of the files "
                                     "scanned again are still in the older parts") from None


def claim_folder(out: str) -> None:
    """Mark ``out`` as an hsf scan folder, or refuse it: a folder is hsf's when it has the marker, or holds only
    hsf's own part files (a scan written before the marker existed); an empty one becomes hsf's."""
    marker = os.path.join(out, MARKER)
    if os.path.isfile(marker) and not os.path.islink(marker):
        return
    foreign = sorted(n for n in os.listdir(out) if not (PART_NAME.fullmatch(n) or TMP_NAME.fullmatch(n)))
    if foreign:
        shown = ", ".join(foreign[:3]) + (", …" if len(foreign) > 3 else "")
        raise ForensicsError(f"output folder is not an hsf scan (no {MARKER} marker) and holds other files "
                             f"({shown}); choose an empty or new folder", path=out)
    with open(marker, "w", encoding="utf-8") as f:
        f.write("hsf scan output: Parquet parts part-NNNNNN.parquet (see `hsf scan --help`)\n")


def own_parts(out: str) -> list[str]:
    """hsf's part files in ``out`` (``part-NNNNNN.parquet``), in order; any other file is left alone."""
    return sorted(os.path.join(out, n) for n in os.listdir(out) if PART_NAME.fullmatch(n))


def drop_superseded(out: str, paths: set[str], before: int) -> None:
    """Remove from the parts numbered below ``before`` the records of ``paths`` (scanned again since): each part
    rewritten atomically, or removed when nothing is left in it."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for part in own_parts(out):
        if _part_no(part) >= before:
            continue
        try:
            table = pq.read_table(part)
        except Exception:  # noqa: BLE001 - an unreadable part is left as it is (its files are scanned again)
            continue
        stale = pc.is_in(table.column("path"), value_set=_string_array(paths))
        if not pc.any(stale).as_py():
            continue
        keep = table.filter(pc.invert(pc.fill_null(stale, False)))
        if keep.num_rows == 0:
            os.remove(part)
            continue
        tmp = os.path.join(out, f".{os.path.basename(part)}.tmp")
        pq.write_table(keep, tmp, row_group_size=max(1, keep.num_rows))
        os.replace(tmp, part)


def drop_superseded_lines(out: str) -> int:
    """Keep one row per file in a resumed scan's JSON Lines file: the last row of each path (a file scanned
    again after an error or a change), rewritten atomically only when some row is superseded; torn lines are
    dropped too. Two passes, one path index in memory. Returns the rows dropped.

    Example:
        >>> import tempfile, os, json
        >>> p = os.path.join(tempfile.mkdtemp(), "s.jsonl")
        >>> _ = open(p, "w").write('{"path": "a", "error": "x"}\\n{"path": "b"}\\n{"path": "a"}\\n{"pa')
        >>> drop_superseded_lines(p), [json.loads(x) for x in open(p)]
        (2, [{'path': 'b'}, {'path': 'a'}])
    """
    last: dict[str, int] = {}
    lines = 0
    with open(out, "rb") as f:
        for no, line in enumerate(f):
            lines += 1
            path = _row_path(line)
            if path is not None:
                last[path] = no
    keep = set(last.values())
    if len(keep) == lines:
        return 0
    try:
        with open(out, "rb") as src, atomic_output(out, "wb") as dst:
            for no, line in enumerate(src):
                if no in keep:
                    dst.write(line if line.endswith(b"\n") else line + b"\n")
    except OSError as e:
        raise ForensicsError(f"cannot write {out}: {e.strerror}; the superseded rows stay (readers take the "
                             "last row of each file)") from None
    return lines - len(keep)


def _row_path(line: bytes) -> str | None:
    if not line.endswith(b"\n"):
        return None  # a torn last line
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return row.get("path") if isinstance(row, dict) and isinstance(row.get("path"), str) else None


def _string_array(values: set[str]):
    import pyarrow as pa

    return pa.array(sorted(values), type=pa.string())


def _part_no(path: str) -> int:
    try:
        return int(os.path.basename(path)[5:-8])
    except ValueError:
        return -1


def read_parquet_rows(out: str) -> Iterator[dict]:
    """Whole scan rows from a Parquet folder's ``row_json`` column, part by part."""
    import pyarrow.parquet as pq

    for part in own_parts(out):
        try:
            col = pq.read_table(part, columns=[ROW_JSON]).column(0).to_pylist()
        except Exception:  # noqa: BLE001 - an unreadable part: its files are scanned again
            continue
        for text in col:
            if text is None:
                continue
            try:
                row = json.loads(text)
            except (ValueError, RecursionError):
                continue
            if isinstance(row, dict) and "path" in row:
                yield row


def describe_columns() -> list[dict[str, Any]]:
    """``[{name, type, description}]`` of the Parquet records (README / notebook)."""
    return [{"name": n, "type": t, "description": d} for n, t, d in PARQUET_COLUMNS]
