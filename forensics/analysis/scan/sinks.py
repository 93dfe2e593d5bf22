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

Example:
    >>> import pandas as pd                                                    # doctest: +SKIP
    >>> t = pd.read_parquet("scan.parquet")                                    # doctest: +SKIP
    >>> t[(t.slot == 2) & (t.token0_norm > 1000)].path.unique()                # doctest: +SKIP
"""

from __future__ import annotations

import glob
import json
import os
import time
from collections.abc import Iterator
from typing import Any

from forensics.errors import ForensicsError
from forensics.layers import r_label

PARQUET_PART_FILES = 64  # a Parquet part (one row group) is written after this many finished files ...
PARQUET_PART_SECONDS = 10.0  # ... or this many seconds since the last part, whichever comes first
PART_GLOB = "part-*.parquet"
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


def records(row: dict) -> list[dict]:
    """The typed records (one per slot; one with ``slot`` null for an unreadable file) of one scan row."""
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
        os.makedirs(out, exist_ok=True)
        for stale in glob.glob(os.path.join(out, ".part-*.tmp")):  # a part being written when a scan was killed
            os.remove(stale)
        parts = sorted(glob.glob(os.path.join(out, PART_GLOB)))
        if not resume:
            for p in parts:
                os.remove(p)
            parts = []
        self.out = out
        self._next = 1 + max((_part_no(p) for p in parts), default=-1)
        self._pending: list[dict] = []
        self._files = 0
        self._since = time.monotonic()
        self._schema = _arrow_schema()

    def write(self, row: dict) -> None:
        """Queue the records of one (JSON-safe) scan row; write a part when enough files are queued."""
        self._pending.extend(records(row))
        self._files += 1
        if self._files >= PARQUET_PART_FILES or time.monotonic() - self._since >= PARQUET_PART_SECONDS:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist(self._pending, schema=self._schema)
        name = f"part-{self._next:06d}.parquet"
        tmp = os.path.join(self.out, f".{name}.tmp")
        pq.write_table(table, tmp, row_group_size=max(1, table.num_rows))
        os.replace(tmp, os.path.join(self.out, name))
        self._next += 1
        self._pending, self._files, self._since = [], 0, time.monotonic()

    def close(self) -> None:
        self.flush()


def _part_no(path: str) -> int:
    try:
        return int(os.path.basename(path)[5:-8])
    except ValueError:
        return -1


def read_parquet_rows(out: str) -> Iterator[dict]:
    """Whole scan rows from a Parquet folder's ``row_json`` column, part by part."""
    import pyarrow.parquet as pq

    for part in sorted(glob.glob(os.path.join(out, PART_GLOB))):
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
