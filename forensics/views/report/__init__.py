"""The single-file offline HTML report (Jinja2 templates inside)."""
