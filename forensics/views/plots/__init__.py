"""Figures of every result: per-slot plots (slots.py) and dataset/audit/probe plots (dataset.py).

Pure functions of result objects (nothing is recomputed), Okabe–Ito colours.
"""

from forensics.views.plots.dataset import audit_slices, probe_wirings, scan_file_medians, scan_norms
from forensics.views.plots.slots import (
    FIG_WIDTH,
    MAX_HEIGHT,
    OKABE_ITO,
    depth_ladder,
    figure_to_html,
    figure_to_png_bytes,
    massive_dims,
    norm_by_position,
    norm_distributions,
    similarity_heatmap,
    slot_colors,
    slot_labels,
)

__all__ = [
    "FIG_WIDTH", "MAX_HEIGHT", "OKABE_ITO", "audit_slices", "depth_ladder", "figure_to_html",
    "figure_to_png_bytes", "massive_dims", "norm_by_position", "norm_distributions", "probe_wirings",
    "scan_file_medians", "scan_norms", "similarity_heatmap", "slot_colors", "slot_labels",
]
