"""The wiring audit: trained layout (training.py) vs served layout (served.py) -> verdict (core.py)."""
