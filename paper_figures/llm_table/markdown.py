"""The table's text: the Markdown table and its averages, the ablation and edits sections, the
protocol paragraph (printed before the first run and with the table), and the whole
``llm_table.md`` (:func:`markdown_document`).
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Mapping, Sequence

from paper_figures.llm_table.analysis import Row
from paper_figures.llm_table.settings import ABLATION, TIME_MEASURE_WHY, TUNING_NOTE, TableSettings
from paper_figures.llm_table.stats import RunRow, TaskRow, ablation_effects, trimmed_average
from rpg_core.cli import count
from rpg_llm.config import LoopConfig
from rpg_llm.env.tasks import baseline_solutions
from rpg_llm.flags import flag_names

__all__ = [
    "table_markdown",
    "ablation_markdown",
    "edits_markdown",
    "engine_text",
    "budget_text",
    "protocol_text",
    "seeding_text",
    "machine_time_text",
    "extra_flags_text",
    "markdown_document",
]


def _cell(mean: float, se: float) -> str:
    if not math.isfinite(mean):
        return "n/a"
    return f"{mean:.3f} ± {se:.3f}" if math.isfinite(se) else f"{mean:.3f}"


def _pct(p: float) -> str:
    return "n/a" if not math.isfinite(p) else f"{p:+.1f}"


def _how(rows: Sequence[TaskRow], pcts: Sequence[float], dropped: Sequence[int]) -> str:
    if len(dropped) != 2:
        return "plain mean (fewer than 3 tasks: nothing dropped)"
    hi = rows[max(dropped, key=lambda i: pcts[i])].task
    lo = rows[min(dropped, key=lambda i: pcts[i])].task
    return f"after dropping the highest ({hi}) and the lowest ({lo})"


def table_markdown(rows: Sequence[TaskRow], average: float, dropped: Sequence[int]) -> str:
    """The markdown table (task, each arm's mean +- s.e., % improvement of RPG over each other
    arm) and the average-improvement line of each baseline (``average`` / ``dropped``: over
    vanilla, from :func:`paper_figures.llm_table.stats.trimmed_average`)."""
    arms = list(rows[0].arms)
    others = [m for m in arms if m != "rpg"]
    head = " | ".join("RPG" if m == "rpg" else m for m in arms)
    pct_head = " | ".join("% improv." if m == "vanilla" else f"% over {m}" for m in others)
    lines = [
        f"| task (raw reward, higher is better) | budget (s) | {head} | {pct_head} |",
        "| --- | --- | " + " | ".join("---" for _ in arms + others) + " |",
    ]
    for r in rows:
        cells = " | ".join(_cell(*r.arms[m][:2]) for m in arms)
        pcts = " | ".join(_pct(r.pcts[m]) for m in others)
        lines.append(f"| {r.task} ({r.raw_reward}) | {r.budget_s:.4g} | {cells} | {pcts} |")
    lines.append("")
    for m in others:
        pcts = [r.pcts[m] for r in rows]
        avg, drop = (average, dropped) if m == "vanilla" else trimmed_average(pcts)
        label = "Average improvement" if m == "vanilla" else f"Average improvement over {m}"
        have = sum(math.isfinite(p) for p in pcts)
        over = (
            f"; over the {have} task{'s' * (have != 1)} with that arm" if have < len(rows) else ""
        )
        lines.append(f"{label}: {_pct(avg)} % ({_how(rows, pcts, drop)}{over}).")
    missing = [f"{r.task} {m}" for r in rows for m in arms if not r.has_runs(m)]
    if missing:
        lines += ["", f"n/a: no finished run of that arm on that task ({'; '.join(missing)})."]
    return "\n".join(lines) + "\n"


def ablation_markdown(rows: Sequence[TaskRow]) -> str:
    """Per task, the 2 x 2 ablation (:data:`paper_figures.llm_table.settings.ABLATION`) and its
    main effects (:func:`paper_figures.llm_table.stats.ablation_effects`); ``""`` when no row
    has all four arms."""
    lines = []
    for r in rows:
        eff = ablation_effects(r.arms)
        if eff is None:
            continue
        cell = {k: _cell(*r.arms[a][:2]) for k, a in ABLATION.items()}
        lines += [
            f"**{r.task}** (mean best raw reward at B = {r.budget_s:.4g} s)",
            "",
            "| parents ranked by | trained on relative reward | trained on raw reward |",
            "| --- | --- | --- |",
            f"| r - rho_hat delta | {cell['rate', 'relative']} (rpg) | "
            f"{cell['rate', 'raw']} (vanilla-rate-parents) |",
            f"| r | {cell['raw', 'relative']} (rpg-raw-parents) | {cell['raw', 'raw']} (vanilla) |",
            "",
            f"Effect of ranking parents by rate: {eff['parents']:+.3f}; of training on the "
            f"relative reward: {eff['learning']:+.3f}; interaction {eff['interaction']:+.3f}.",
            "",
        ]
    return "\n".join(lines)


def edits_markdown(rows: Sequence[Row]) -> str:
    """The :func:`paper_figures.llm_table.analysis.edit_rows` table as markdown (counts of
    answers, summed over runs)."""
    if not rows:
        return ""
    lines = [
        "| task | arm | runs | answers | valid | changed a declared switch (valid) "
        "| same raw as parent | better than parent | time / parent's (geo. mean) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['task']} | {r['arm']} | {r['runs']} | {r['answers']} | {r['valid']} "
            f"| {r['switched']} ({r['switched_valid']}) | {r['same_as_parent']} "
            f"| {r['better_than_parent']} | {r['time_ratio_geo_mean']} |"
        )
    return "\n".join(lines) + "\n"


def engine_text(engine: str, batch_size: int, num_generations: int | None = None) -> str:
    """What ``engine`` trains, for the protocol: PPO on one answer per parent, or TRL's GRPO on
    ``batch_size / num_generations`` parents of ``num_generations`` answers each.

    Raises:
        ValueError: ``engine`` is ``trl`` and ``num_generations`` is None or does not divide
            ``batch_size`` (a run would refuse it too).
    """
    if engine == "trl":
        g = num_generations
        if g is None or g < 1 or batch_size % g:
            raise ValueError(f"num_generations {g} must divide the batch size {batch_size}")
        parents = batch_size // g
        return (
            f"trl (TRL's GRPOTrainer: {parents} parent{'s' if parents > 1 else ''} x {g} answers "
            "per step, group-relative advantages, no critic; rpg_llm.engines.trl)"
        )
    return "ppo (PPO with a critic and a KL penalty, one answer per parent; rpg_llm.learner.ppo)"


def _seconds_unit(time_measure: str) -> str:
    return "CPU-s" if time_measure == "cpu" else "s"


def budget_text(cfg: LoopConfig) -> str:
    """The runs' execution budget per chain (seconds of ``cfg``'s time measure) and step cap,
    or ``none`` and the steps every run takes."""
    if cfg.exec_budget_s is None:
        return f"none ({count(cfg.steps, 'step')} for every run; read at the common final budget)"
    unit = _seconds_unit(cfg.reward.time_measure)
    return f"{cfg.exec_budget_s:g} {unit} per chain, steps <= {cfg.steps}"


def protocol_text(s: TableSettings, cfg: LoopConfig) -> str:
    """The protocol the table runs, in one paragraph (printed before the first run): tasks, run
    seeds, arms, chains, execution budget and step cap, time measure and why, training engine,
    probe; ``cfg``: the settings the runs share (any run's config)."""
    probe = (
        f"{s.probe_answers} answers x {s.probe_parents} parents per run"
        if s.probe_answers
        else "none"
    )
    measure = cfg.reward.time_measure
    engine = engine_text(cfg.engine, cfg.batch_size, cfg.trl.num_generations)
    return (
        f"Protocol: tasks {', '.join(s.tasks)}; run seeds {', '.join(map(str, s.seeds))}; arms "
        f"{', '.join(s.arms)}; {cfg.batch_size} chains per run; execution budget "
        f"{budget_text(cfg)}; time measure: {TIME_MEASURE_WHY.get(measure, measure)}; "
        f"training engine: {engine}; probe: {probe}."
    )


def seeding_text(tasks: Sequence[str], seeded: set[bool]) -> str:
    """The rule that chose which scripts started the runs' buffers (``seeded``: the runs'
    ``seed_buffer`` values), with each task's baseline count when they were seeded."""
    if seeded == {False}:
        return "no run's buffer was seeded (--no-seed-buffer): chains start from the base prompt."
    if seeded != {True}:
        return "some runs seeded their buffer with the baselines and some did not."
    counts = ", ".join(f"{t} {len(baseline_solutions(t))}" for t in tasks)
    return (
        "every baseline script a task ships (rpg_llm.env.tasks.baseline_solutions, the same for "
        "every arm and seed) is executed, graded and stored as step 0 before training; with "
        "the edit action, parents are then chosen by the arm's ranking among stored scripts "
        f"that have constants to edit. Baselines per task: {counts}."
    )


def machine_time_text(rows: Sequence[TaskRow]) -> str:
    """One line: the table's runs' training-step wall time, hours and seconds per run
    (``step_seconds`` of the per-run rows). A TRL run records its step before TRL's generation
    and update, so its step time is execution, grading and storage only; the line says so when
    the table has such runs."""
    timed = [x for r in rows for x in r.runs if "step_seconds" in x]
    if not timed:
        return ""
    secs = [float(x["step_seconds"]) for x in timed]
    trl = sum(x.get("engine") == "trl" for x in timed)
    parts = "generation, execution, update"
    if trl:
        parts += (
            f"; for the {trl} TRL runs execution, grading and storage only, as TRL generates "
            "and updates outside the recorded step"
        )
    return (
        f"\nWall time of the runs' training steps ({parts}; not start-up, SFT, seeding or "
        f"probes): {math.fsum(secs) / 3600:.2f} h over {len(secs)} runs, "
        f"{min(secs):.0f}-{max(secs):.0f} s per run (`llm_table_runs.csv` step_seconds).\n"
    )


def _chain_counts(rows: Sequence[TaskRow], batch_size: int, n: Callable[[RunRow], int]) -> str:
    """Per task and arm, ``sum(n(run))`` over its per-run rows (chains with no value at B, or
    that ended before B), written "<task> <arm> k of <all chains>"."""
    parts = []
    for r in rows:
        for m in r.arms:
            runs = [x for x in r.runs if x["method"] == m]
            if not runs:
                continue
            k = sum(n(x) for x in runs)
            parts.append(f"{r.task} {m} {k} of {batch_size * len(runs)}")
    return "; ".join(parts)


_NAMED = (
    "engine",
    "model",
    "steps",
    "batch_size",
    "sampling.max_new_tokens",
    "sampling.max_prompt_tokens",
    "reward.timeout_s",
    "action",
    "sft_steps",
    "sft_seed",
    "exec_budget_s",
)
"""The run settings the Settings line names one by one; the others are its extra run flags."""


def extra_flags_text(run: Mapping[str, object]) -> str:
    """The run settings of ``run`` (``{dotted path: value}``) that the Settings line does not
    name, as the ``rpg_llm.run`` flags that give them (``--time cpu``); ``""`` for none."""
    names = flag_names()
    words = []
    for path, value in run.items():
        if path in _NAMED:
            continue
        flag = names[path]
        if isinstance(value, bool):
            words.append(flag if value else f"--no-{flag[2:]}")
        elif value is None:
            words += [flag, "none"]
        else:
            words += [flag, shlex.quote(repr(value) if isinstance(value, float) else str(value))]
    return " ".join(words)


def _settings_text(s: TableSettings, cfg: LoopConfig) -> str:
    def given(path: str, absent: str) -> object:
        value = s.given(path)
        return absent if value is None else value

    measure = cfg.reward.time_measure
    lam = f" (fixed lambda {s.fixed_lambda:g} per s)" if s.fixed_lambda is not None else ""
    return (
        f"engine {cfg.engine}; preset {s.preset}; model {s.given('model') or 'the preset default'}"
        f"; steps {cfg.steps}; batch {cfg.batch_size}; max new tokens "
        f"{s.given('sampling.max_new_tokens') or 'preset'}; max prompt tokens "
        f"{s.given('sampling.max_prompt_tokens') or 'preset'}; arms {', '.join(s.arms)}{lam}"
        f"; time measure: {TIME_MEASURE_WHY.get(measure, measure)}; timeout "
        f"{s.given('reward.timeout_s') or 'preset'}; action {s.given('action') or 'run default'}"
        f"; sft steps {given('sft_steps', 'run default')}; sft seed "
        f"{given('sft_seed', 'the run seed')}; execution budget {budget_text(cfg)}; seeds "
        f"{', '.join(map(str, s.seeds))}; extra run flags {extra_flags_text(s.run) or 'none'}"
    )


def markdown_document(
    s: TableSettings,
    cfg: LoopConfig,
    rows: Sequence[TaskRow],
    edits: Sequence[Row] = (),
    seeding: str = "",
    ledger: str = "",
) -> str:
    """The text of ``llm_table.md``: what the values are, the table (:func:`table_markdown`),
    the ablation and edits sections, chain counts, machine time, the slice ledger, the seeding
    rule, the protocol (:func:`protocol_text`), the settings and the tuning note; ``cfg``: the
    settings the runs share."""
    avg, dropped = trimmed_average([r.pct for r in rows])
    measure = cfg.reward.time_measure
    if cfg.exec_budget_s is not None:
        what = (
            f"the execution budget B = {cfg.exec_budget_s:g} {_seconds_unit(measure)} per "
            "chain (each run stopped once "
            "every chain had used B, or at the step cap); a chain with no sample finished within "
            "B has no value and is left out"
        )
    else:
        what = (
            "the common final budget B (the smallest final cumulative execution time over the "
            "task's runs of every arm it has, raised if needed to the slowest first sample of any "
            "chain)"
        )
    b = cfg.batch_size
    left_out = _chain_counts(rows, b, lambda x: b - int(x["n_chains"]))
    ended = _chain_counts(rows, b, lambda x: int(x["n_ended_before_b"]))
    ab, em = ablation_markdown(rows), edits_markdown(edits)
    return (
        "# RPG vs vanilla, the paper's MLE-Bench table in miniature\n\n"
        f"Mean across chains of the best raw reward within {what}; mean ± s.e. over run seeds; "
        "% improv. = 100 (RPG − vanilla) / |vanilla| (likewise over each other arm).\n\n"
        + table_markdown(rows, avg, dropped)
        + (f"\n## Ablation: choosing parents vs learning\n\n{ab}" if ab else "")
        + (f"\n## What the answers did to their parents\n\n{em}" if em else "")
        + f"\nChains without a value at B: {left_out}.\n"
        + "\nChains that ended before B (their run hit the step cap first; read at their end): "
        + f"{ended}.\n"
        + machine_time_text(rows)
        + (f"\n{ledger}\n" if ledger else "")
        + (f"\nSeeding: {seeding}\n" if seeding else "")
        + f"\n{protocol_text(s, cfg)}\n"
        + f"\nSettings: {_settings_text(s, cfg)}.\n\n{TUNING_NOTE}\n"
    )
