"""The views that register a renderer (``forensics.display``): importing this module registers them all.

``forensics.display`` imports it by name the first time a result asks to be shown, so a result's ``__repr__``,
``_repr_html_``, ``explain()`` and ``table()`` reach their view without the compute layer importing it.
"""

from forensics.views import audit, fingerprint, probe, scan, stamp, stats
from forensics.views.report import core as report

__all__ = ["audit", "fingerprint", "probe", "scan", "report", "stamp", "stats"]
