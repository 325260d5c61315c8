"""One module per paper figure: ``python -m paper_figures.<name>``."""
