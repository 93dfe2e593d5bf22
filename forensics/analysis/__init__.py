"""Pure compute on captures: statistics, fingerprints, the wiring audit, the draft probe, dataset scans.

Every function returns a typed result; none formats text or HTML (the views do)."""
