"""Seed scripts for a run's buffer: a folder of solution scripts for any competition.

``seed_scripts(DIR)`` reads every ``DIR/*.py`` (not recursive, sorted by file name) as one seed
solution; each must follow the execution convention (read ``./input/``, write
``./submission.csv``) and parse as Python. It is what ``--seed-dir DIR`` feeds to the run's step
0; without it an offline competition is seeded with its baselines
(:func:`rpg_llm.env.tasks.offline.baseline_solutions`) and any other competition starts unseeded.

The seeding rule. Which baselines enter the buffer is fixed by the task, not chosen by rank:
every baseline is executed once, graded and stored as step 0 of the run (failures included), so
all of them compete as parents from step 1 on. An offline competition's baselines are every
script of ``rpg_llm/env/tasks/solutions/<id>/`` with its default constants, sorted by file name,
then the spec's ``seeds`` variants (``specs.OfflineSpec.seeds``): for the competitions with a
time/quality frontier (``fine-foods-auc``, ``diamonds-price-rmse``, ``flights-delay-auc``) the
``family`` script at every other value of its ``MODEL`` constant, so the buffer starts with one
fast-and-weak, one fast-and-strong and slow members of each family, each of them a script whose
``MODEL`` an edit answer can change. Which of the stored seeds become parents is then the
parent ranking's business (``raw_reward - rho_hat * time``, or raw reward); the edit format's
base prompt, while the buffer is empty, cycles over the seeds that have an editable constant
(:func:`rpg_llm.env.actions.editable_baselines`).
"""

from __future__ import annotations

import ast
from pathlib import Path


def seed_scripts(seed_dir: Path) -> list[tuple[str, str]]:
    """``(name, code)`` of the solution scripts ``seed_dir/*.py``, sorted by file name.

    Args:
        seed_dir: folder of ``.py`` files; ``name`` is the file stem.

    Returns:
        One ``(name, code)`` per file, at least one.

    Raises:
        ValueError: ``seed_dir`` is not a folder, holds no ``.py`` file, or a file is not UTF-8
            text or not valid Python (the message names the file and the line).
    """
    folder = Path(seed_dir).expanduser()
    if not folder.is_dir():
        raise ValueError(f"seed folder {seed_dir} is not a directory")
    paths = sorted(p for p in folder.glob("*.py") if p.is_file())
    if not paths:
        raise ValueError(f"seed folder {seed_dir} holds no .py solution scripts")
    scripts = []
    for path in paths:
        try:
            code = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"seed script {path} is not UTF-8 text: {exc}") from exc
        try:
            ast.parse(code, filename=str(path))
        except SyntaxError as exc:
            raise ValueError(
                f"seed script {path} is not valid Python: {exc.msg} (line {exc.lineno})"
            ) from exc
        scripts.append((path.stem, code))
    return scripts
