"""Backend-free pieces shared by ``rpg_jax``, ``rpg_llm`` and ``paper_figures``.

Imports neither jax nor torch (DESIGN.md section 1): the command-line helper (:mod:`rpg_core.cli`)
and, as written against an array namespace, the Normal-Inverse-Wishart algebra.
"""
