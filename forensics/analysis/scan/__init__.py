"""Dataset scans: per-file rows (rows.py), worker pools (workers.py), mergeable sketches (sketch.py),
dataset summaries (summary.py), the ScanResult (result.py) and the verb (core.py)."""
