"""``python -m paper_figures.llm_table``: :func:`paper_figures.llm_table.cli.main`."""

from paper_figures.llm_table.cli import main

raise SystemExit(main())
