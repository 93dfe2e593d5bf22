"""Which tensor is which: data-only signals (depth.py), exact mode against a reference (exact.py),
roles/order/labels/findings (rules.py), the Fingerprint result and the verb (core.py)."""
