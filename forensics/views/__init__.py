"""Rendering: one number/label style and escaping (format.py), text and HTML of each result type,
figures (plots/), the notebook browser (widgets.py) and the offline report (report/)."""
