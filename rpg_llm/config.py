"""Typed settings of a training run: the contract between every launcher and a run.

:class:`LoopConfig` holds the run's own fields and four nested configs, each checked once in its
``__post_init__`` (the boundary): :class:`SamplingConfig` (decoding and token budgets),
:class:`RewardConfig` (arm, timeout, reward constants), :class:`PPOConfig` (PPO hyper-parameters,
trained by :mod:`rpg_llm.learner.ppo`) and :class:`TRLConfig` (the TRL engine). Paper settings:
DESIGN.md section 7. Each field's metadata names its command-line flag (:mod:`rpg_llm.flags`
generates the flags from the fields).

``config.json``: :meth:`LoopConfig.to_dict` (the nested layout) and :meth:`LoopConfig.from_dict`,
which also reads the flat layout written before the configs were nested, and raises on unknown keys.
This module imports neither torch nor jax.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from rpg_llm.env.actions import ACTION_FORMATS
from rpg_llm.env.sandbox.base import MAX_TIMEOUT_S

__all__ = [
    "PPOConfig",
    "SamplingConfig",
    "RewardConfig",
    "TRLConfig",
    "LoopConfig",
    "METHODS",
    "PARENT_RANKS",
    "TIME_MEASURES",
    "RAW_REWARDS",
    "TIME_FLOOR_S",
    "IMPROVEMENT_BONUS",
    "RUN_RECORD_KEYS",
    "SPEED_ONLY_SETTINGS",
    "flag",
]

RUN_RECORD_KEYS = ("competition", "seeded", "label", "torch")
"""Keys ``config.json`` holds beside the config (facts of the run, not settings)."""

SPEED_ONLY_SETTINGS = ("ppo.micro_batch_size",)
"""Settings (dotted paths in :meth:`LoopConfig.to_dict`) that change a run's speed and memory but
not what it computes, up to float rounding: the micro-batch splits the same gradient sum
(tests/llm/learner/test_ppo.py holds the splits to each other). Two runs that differ only in
these are the same experiment."""


def flag(name: str | None = None, help: str = "", choices: tuple[str, ...] | None = None) -> dict:
    """Field metadata for the generated CLI: the flag's name (None: ``--<field-name>``), its help
    and allowed values. A field with metadata ``{"cli": False}`` gets no flag."""
    return {"flag": name, "help": help, "choices": choices}


MAX_COUNT = 10**6
"""Upper bound of the step / example / token counts (a typo such as 99999999999 would start a
run that can never finish, or allocate without end)."""
MAX_BATCH = 4096
"""Upper bound of the batch, slot, worker and thread counts."""


def _int_at_least(
    obj: Any, name: str, low: int, optional: bool = False, high: int = MAX_COUNT
) -> None:
    v = getattr(obj, name)
    if optional and v is None:
        return
    if not isinstance(v, int) or isinstance(v, bool) or v < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
    if v > high:
        raise ValueError(f"{name} must be an integer <= {high}, got {v!r}")


MAX_PPO_EPOCHS = 100
"""Upper bound of ``PPOConfig.ppo_epochs`` (the paper: 1; speedrun preset: 2)."""
MAX_BATCH_SIZE = 65536
"""Upper bound of ``PPOConfig.micro_batch_size`` / ``mini_batch_size`` (samples)."""
MAX_LORA_RANK = 4096
"""Upper bound of ``PPOConfig.lora_rank``."""


@dataclass(frozen=True)
class PPOConfig:
    """PPO hyper-parameters. Defaults are the paper's settings (DESIGN.md section 7).

    Attributes:
        kl_coef: coefficient of the per-token KL penalty ``-kl_coef * (log pi - log pi_ref)``
            added to the reward.
        clip_ratio: PPO ratio clip epsilon.
        value_clip: clip range of the value update around the rollout-time value.
        entropy_coef: entropy bonus coefficient (subtracted from the actor loss).
        vf_coef: weight of the value loss (the critic has its own optimiser, so this only
            rescales its gradient).
        gamma, lam: GAE discount and trace parameters (1.0, 1.0: undiscounted Monte-Carlo
            advantages minus a value baseline).
        actor_lr, critic_lr: AdamW learning rates.
        weight_decay: AdamW weight decay.
        max_grad_norm: gradient clipping threshold (global L2 norm), per model.
        ppo_epochs: passes over each rollout batch.
        mini_batch_size: samples per optimiser step (None: the whole batch, one step per epoch).
        micro_batch_size: samples per forward/backward (gradients accumulate over a mini-batch).
            With one epoch and one mini-batch, the critic's update is done in the rollout pass
            (one critic forward fewer per micro-batch), and when one micro-batch holds the whole
            batch the update's own forward passes give the rollout-time log-probs and values
            (one actor and one critic forward fewer; ``PPOTrainer.step``). On this 2-core CPU
            one sample per micro-batch was the fastest at B = 4 (benchmarks/RESULTS.md).
        whiten_advantages: whiten advantages over all valid tokens of the batch.
        lora_rank: 0 for full fine-tuning, else LoRA rank (peft) for actor and critic.
        lora_alpha: LoRA scaling numerator.
        gradient_checkpointing: trade compute for memory in the backbones.

    Raises:
        ValueError: a value out of range, naming the field and the value (the integer fields
            ``ppo_epochs`` <= :data:`MAX_PPO_EPOCHS`, ``micro_batch_size`` /
            ``mini_batch_size`` <= :data:`MAX_BATCH_SIZE`, ``lora_rank`` <=
            :data:`MAX_LORA_RANK`; bools and floats are refused).
    """

    kl_coef: float = 0.001
    clip_ratio: float = 0.2
    value_clip: float = 0.5
    entropy_coef: float = 0.001
    vf_coef: float = 1.0
    gamma: float = 1.0
    lam: float = 1.0
    actor_lr: float = 1e-6
    critic_lr: float = 1e-5
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    ppo_epochs: int = 1
    mini_batch_size: int | None = None
    micro_batch_size: int = 4
    whiten_advantages: bool = True
    lora_rank: int = 0
    lora_alpha: float = 16.0
    gradient_checkpointing: bool = False

    def __post_init__(self) -> None:
        for name in ("clip_ratio", "value_clip", "actor_lr", "critic_lr", "max_grad_norm"):
            if not getattr(self, name) > 0:
                raise ValueError(f"PPOConfig.{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("kl_coef", "entropy_coef", "weight_decay", "vf_coef"):
            if getattr(self, name) < 0:
                raise ValueError(f"PPOConfig.{name} must be >= 0, got {getattr(self, name)!r}")
        if not (0.0 <= self.gamma <= 1.0 and 0.0 <= self.lam <= 1.0):
            raise ValueError(f"gamma and lam must lie in [0, 1], got {self.gamma}, {self.lam}")
        for name, high in (
            ("ppo_epochs", MAX_PPO_EPOCHS),
            ("micro_batch_size", MAX_BATCH_SIZE),
            ("mini_batch_size", MAX_BATCH_SIZE),
            ("lora_rank", MAX_LORA_RANK),
        ):
            value = getattr(self, name)
            if name == "mini_batch_size" and value is None:
                continue
            low = 0 if name == "lora_rank" else 1
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(
                    f"PPOConfig.{name} must be an int in [{low}, {high}]"
                    f"{' or None' if name == 'mini_batch_size' else ''}, got {value!r}"
                )


@dataclass(frozen=True)
class SamplingConfig:
    """Decoding settings and token budgets (paper: T = 0.7, top-k 20, top-p 0.8, 2560 / 2500).

    Attributes:
        temperature: sampling temperature (> 0).
        top_k: top-k filter (>= 1).
        top_p: nucleus filter in (0, 1].
        max_new_tokens: response cap, tokens (>= 1).
        max_prompt_tokens: prompt budget, tokens (>= 256).
        gen_batch_size: prompts per ``generate`` call (None: all at once).
    """

    temperature: float = field(default=0.7, metadata=flag(help="sampling temperature"))
    top_k: int = field(default=20, metadata=flag(help="top-k filter"))
    top_p: float = field(default=0.8, metadata=flag(help="nucleus (top-p) filter"))
    max_new_tokens: int = field(default=2500, metadata=flag(help="response cap, tokens"))
    max_prompt_tokens: int = field(default=2560, metadata=flag(help="prompt budget, tokens"))
    gen_batch_size: int | None = field(
        default=None, metadata=flag(help="prompts per generate call (default: all)")
    )

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, int | float) and self.temperature > 0):
            raise ValueError(f"temperature must be > 0, got {self.temperature!r}")
        if not (isinstance(self.top_p, int | float) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p!r}")
        _int_at_least(self, "top_k", 1, high=10**7)
        _int_at_least(self, "max_new_tokens", 1)
        _int_at_least(self, "max_prompt_tokens", 256)
        _int_at_least(self, "gen_batch_size", 1, optional=True, high=MAX_BATCH)


METHODS = ("rpg", "vanilla", "fixed-lambda")
"""The training arms (:class:`RewardConfig`)."""
PARENT_RANKS = ("arm", "rate", "raw")
TIME_MEASURES = ("wall", "cpu")
RAW_REWARDS = ("design", "percentile")
TIME_FLOOR_S = 0.1
"""Smallest time charged to a sample, seconds (DESIGN.md section 7)."""
IMPROVEMENT_BONUS = 0.5
"""Bonus for a new best raw reward (DESIGN.md section 7)."""


@dataclass(frozen=True)
class RewardConfig:
    """Reward settings of one arm.

    Attributes:
        method: ``"rpg"`` (relative reward), ``"vanilla"`` (raw reward) or ``"fixed-lambda"``
            (``r - fixed_lambda * delta``).
        timeout_s: execution time limit, seconds (charged to invalid samples in the RPG arm).
        c: weight of the time cost ``c * rho_hat * delta`` (paper: 1).
        bonus: improvement bonus for a new best (paper: 0.5; 0 disables it).
        time_floor_s: smallest time charged, seconds (0.1).
        time_measure: ``"wall"`` (the paper) or ``"cpu"``: which time of the script is ``delta``.
        fixed_lambda: the fixed-lambda arm's price of time, reward per second (> 0 there; must
            stay 0 in the other arms).
        parent_rank: how parents are ranked: ``"arm"``, ``"rate"`` or ``"raw"``
            (:meth:`ranking_rho`).
        raw_reward: the raw reward ``r`` of a valid script: ``"design"`` (DESIGN.md section 7:
            the score when higher is better, the leaderboard percentile when lower is better)
            or ``"percentile"`` (the leaderboard percentile in [0, 1] for every task). A reward
            rate is not invariant to a shift of ``r``: with ``"design"`` a chance-level AUC
            script still earns 0.5 per run, so the fastest chance-level script has the highest
            rate; a percentile puts such a script near 0. Invalid scripts get -10 either way.

    The ``metadata`` of each field names its ``python -m rpg_llm.run`` flag
    (:mod:`rpg_llm.config`). Numbers are cast to float here, once.

    Raises:
        ValueError: a bad value (named).
    """

    method: str = field(default="rpg", metadata={"help": "training arm", "choices": METHODS})
    timeout_s: float = field(
        default=60.0, metadata={"flag": "--timeout", "help": "seconds per script"}
    )
    c: float = field(
        default=1.0, metadata={"flag": "--time-cost", "help": "weight c of rho_hat * delta"}
    )
    bonus: float = field(
        default=IMPROVEMENT_BONUS,
        metadata={"flag": "--improvement-bonus", "help": "bonus for a new best raw reward"},
    )
    time_floor_s: float = field(
        default=TIME_FLOOR_S, metadata={"flag": "--time-floor", "help": "smallest time charged, s"}
    )
    time_measure: str = field(
        default="wall",
        metadata={
            "flag": "--time",
            "help": "delta is the script's wall time or its CPU time (user + sys, children too)",
            "choices": TIME_MEASURES,
        },
    )

    fixed_lambda: float = field(
        default=0.0,
        metadata={"help": "price of time of --method fixed-lambda, reward per second"},
    )
    parent_rank: str = field(
        default="arm",
        metadata={
            "help": "parents ranked as the arm does, by r - rho_hat * delta, or by r",
            "choices": PARENT_RANKS,
        },
    )
    raw_reward: str = field(
        default="design",
        metadata={
            "help": "raw reward of a valid script: DESIGN.md's (score; percentile if lower is "
            "better) or the leaderboard percentile for every task",
            "choices": RAW_REWARDS,
        },
    )

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.parent_rank not in PARENT_RANKS:
            raise ValueError(f"parent_rank must be one of {PARENT_RANKS}, got {self.parent_rank!r}")
        if self.raw_reward not in RAW_REWARDS:
            raise ValueError(f"raw_reward must be one of {RAW_REWARDS}, got {self.raw_reward!r}")
        if self.time_measure not in TIME_MEASURES:
            raise ValueError(
                f"time_measure must be one of {TIME_MEASURES}, got {self.time_measure!r}"
            )
        for name in ("timeout_s", "c", "bonus", "time_floor_s", "fixed_lambda"):
            v = getattr(self, name)
            if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number, got {v!r}")
            object.__setattr__(self, name, float(v))  # the one cast
        if not 0 < self.timeout_s <= MAX_TIMEOUT_S:
            raise ValueError(
                f"timeout_s must be > 0 and at most {MAX_TIMEOUT_S:g} seconds (24 h), "
                f"got {self.timeout_s!r}"
            )
        if self.c < 0 or self.bonus < 0 or self.time_floor_s <= 0:
            raise ValueError(
                f"need c >= 0, bonus >= 0, time_floor_s > 0; got {self.c}, {self.bonus}, "
                f"{self.time_floor_s}"
            )
        if self.method == "fixed-lambda" and not self.fixed_lambda > 0:
            raise ValueError(
                f"method fixed-lambda needs fixed_lambda > 0 (reward per second), "
                f"got {self.fixed_lambda!r}"
            )
        if self.method != "fixed-lambda" and self.fixed_lambda != 0:
            raise ValueError(
                f"fixed_lambda {self.fixed_lambda!r} applies to method fixed-lambda only "
                f"(method is {self.method})"
            )

    @property
    def priced(self) -> bool:
        """Whether the training reward charges time (RPG and fixed-lambda; not vanilla)."""
        return self.method != "vanilla"

    def ranking_rho(self, rho_hat: float) -> float | None:
        """The price of time, reward per second, by which parents are ranked
        (``r - price * delta``; None: by ``r``), given the current ``rho_hat``."""
        rank = self.parent_rank
        if rank == "arm":
            rank = {"rpg": "rate", "vanilla": "raw", "fixed-lambda": "lambda"}[self.method]
        return {"rate": rho_hat, "raw": None, "lambda": self.fixed_lambda}[rank]


ENGINES = ("ppo", "trl")
ESTIMATORS = ("niw", "niw-mean", "robbins-monro")  # rpg_llm.loop.estimators.make_rate_estimator
"""Training engines: ``ppo`` (:mod:`rpg_llm.learner.ppo`, the paper's) or ``trl`` (TRL's
``GRPOTrainer`` with the relative reward as a plug-in, :mod:`rpg_llm.engines.trl`)."""

GRPO_LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
"""``GRPOConfig.loss_type`` values of TRL 1.16."""


@dataclass(frozen=True)
class TRLConfig:
    """Settings of the TRL engine (``--engine trl``; TRL's ``GRPOConfig`` names them alike).

    The TRL engine is GRPO (critic-free, group-relative advantages; Shao et al. 2024): every
    prompt (one parent) gets ``num_generations`` answers, so a step of ``B`` answers has
    ``B / num_generations`` parents.  It reads the learning rate, gradient clip and LoRA settings
    from the PPO section (``--actor-lr``, ``--max-grad-norm``, ``--lora-rank``, ``--lora-alpha``).

    Attributes:
        num_generations: answers per prompt, ``G`` (>= 2; must divide ``B``).
        loss_type: TRL's loss aggregation (:data:`GRPO_LOSS_TYPES`; TRL's default ``dapo``).
        beta: KL coefficient against the reference model (0: no reference model is loaded).
        scale_rewards: divide advantages by the group's (``group``), the batch's (``batch``) or
            no (``none``) standard deviation.
        use_vllm: generate with vLLM through TRL (a CUDA GPU and the ``vllm`` package).
        vllm_mode: ``colocate`` (vLLM inside the training processes) or ``server`` (a separate
            ``trl vllm-serve`` process).

    Raises:
        ValueError: a bad value, named.
    """

    num_generations: int = field(
        default=2, metadata=flag(help="answers per prompt G, engine trl (must divide B)")
    )
    loss_type: str = field(
        default="dapo",
        metadata=flag(help="GRPO loss aggregation, engine trl", choices=GRPO_LOSS_TYPES),
    )
    beta: float = field(default=0.0, metadata=flag(help="GRPO KL coefficient, engine trl"))
    scale_rewards: str = field(
        default="group",
        metadata=flag(
            help="GRPO advantage scaling, engine trl", choices=("group", "batch", "none")
        ),
    )
    use_vllm: bool = field(
        default=False, metadata=flag(help="generate with vLLM through TRL (CUDA GPU), engine trl")
    )
    vllm_mode: str = field(
        default="colocate",
        metadata=flag(help="vLLM beside training or as a server", choices=("colocate", "server")),
    )

    def __post_init__(self) -> None:
        _int_at_least(self, "num_generations", 2, high=MAX_BATCH)
        b = self.beta
        if not (isinstance(b, int | float) and not isinstance(b, bool) and math.isfinite(b)):
            raise ValueError(f"beta must be a finite number >= 0, got {b!r}")
        if b < 0:
            raise ValueError(f"beta must be a finite number >= 0, got {b!r}")
        if not isinstance(self.use_vllm, bool):
            raise ValueError(f"use_vllm must be True or False, got {self.use_vllm!r}")
        for name in ("loss_type", "scale_rewards", "vllm_mode"):
            f = next(f for f in fields(self) if f.name == name)
            if getattr(self, name) not in f.metadata["choices"]:
                raise ValueError(
                    f"{name} must be one of {', '.join(f.metadata['choices'])}, "
                    f"got {getattr(self, name)!r}"
                )


@dataclass(frozen=True)
class LoopConfig:
    """Settings of one training run (stored in ``config.json``).

    Attributes:
        task: competition id or alias (``"text"``: the offline text competition).
        model: Hugging Face id or local folder of the policy.
        steps: PPO steps (>= 1); with ``exec_budget_s`` the most steps the run may take.
        exec_budget_s: execution budget per chain, seconds (None: none). The run stops before a
            step once every chain (batch row ``0 .. B-1``) has used at least this much measured
            execution time over its generated samples (``rpg_llm.loop.budget.budget_spent``), so
            that
            two arms can be compared at the same execution budget (the paper's section 5
            compares budget curves; RPG's cheaper scripts then buy it more steps). ``infra``
            samples use none of it. A run killed after a step's answers were saved but before
            its samples were stored re-runs those scripts on resume, so their measured times
            (and the stopping step) may differ from an uninterrupted run's.
        batch_size: prompts per step, ``B`` (one response each).
        seed: run seed (generation and estimator draws are seeded per step from it).
        seed_buffer: store the task's baseline solutions (executed and graded) as step 0.
        sandbox: sandbox kind (``auto``, ``subprocess``, ``bwrap``, ``docker``).
        executor: ``local`` (this host's pool) or ``ray`` (:mod:`rpg_llm.env.service`).
        ray_address: with ``executor="ray"``: a cluster's ``host:port`` (None or ``"local"``: a
            Ray instance started on this host).
        max_staleness: ``0``: synchronous steps (every answer of a step is executed before the
            update); ``K >= 1``: asynchronous chains (:mod:`rpg_llm.loop.asynchronous`), a
            sample trained at most ``K`` policy versions after the one that generated it.
        job_cpus, job_gpus, job_memory_gb, job_resource: what one script reserves on a Ray node
            (:class:`rpg_llm.env.service.JobResources`; the custom resource: one unit).
        workers: parallel executions.
        checkpoint_every: checkpoint period in steps (the last step is always checkpointed;
            default 1, so a kill loses at most the step under way: its samples are kept and
            replayed, only its PPO update is redone).
        keep_checkpoints: newest checkpoints kept (>= 1).
        buffer_capacity_factor: active buffer size as a multiple of ``B`` (paper: 10).
        num_slots: estimator slots (None: ``min(128, B)``).
        estimator_batches: synthetic batches ``M`` per estimate (1000).
        estimator: the reward-rate estimator, one of :data:`ESTIMATORS`
            (:func:`rpg_llm.loop.estimators.make_rate_estimator`).
        data_root: competitions folder (None: the tasks default); for ``nanogpt-speedrun`` the
            FineWeb shards.
        mlebench_dir: root of an MLE-Bench tree read directly (``--mlebench-dir``; the CLI
            stores env ``RPG_MLEBENCH_DIR`` here when the flag is absent; None: no tree).
        seed_dir: folder of seed scripts for step 0 (``--seed-dir``; None: the task's
            baseline solutions, ``[]`` for a competition without any).
        speedrun_dir: the modded-nanogpt checkout of ``nanogpt-speedrun`` (``--speedrun-dir``).
        device: torch device (None: cuda if available, else cpu).
        cpu_threads: torch threads on a CPU (None: torch's default). One thread was 4-5x faster
            than two for both decoding and the PPO step on the shared 2-core machine
            (benchmarks/RESULTS.md): the many small ops make thread barriers dominate.
        run_name: label stored with each sample (default: ``<method>-seed<seed>``).
        action: answer format (``rpg_llm.env.actions.ACTION_FORMATS``): ``script`` (the paper's: the
            fenced block is the whole script) or ``edit`` (``NAME = <literal>`` lines replacing
            the parent's editable constants; the complete script is stored).
        describe: show the competition description in the prompts (``--no-description``
            leaves it out: shorter prompts for small models).
        sft_steps: supervised warm-start steps before RL (``rpg_llm.learner.sft``; 0: none). The PPO
            trainer is built afterwards, so its reference and critic start from the SFT weights.
        sft_lr, sft_batch_size, sft_examples: AdamW learning rate, pairs per SFT step, and the
            number of prompt -> answer pairs built from the task's baselines.
        sft_switch_fraction: share of the SFT edit pairs forced to change one of their parent's
            declared switches such as ``MODEL`` (``rpg_llm.learner.sft.build_sft_examples``), in
            [0, 1]; the other pairs may change one too, drawn like any constant.
        sft_seed: seed of the SFT pairs and batch order (None: ``seed``). Runs that differ only
            in ``seed`` but share ``sft_seed`` start RL from bit-identical SFT weights, which
            :mod:`rpg_llm.learner.sft_cache` then computes once (``paper_figures.llm_table`` does
            this).
        engine: :data:`ENGINES` (``ppo``: ours; ``trl``: TRL's GRPOTrainer, settings in ``trl``).
        sampling: :class:`SamplingConfig`; reward: :class:`RewardConfig` (the arm ``method`` and
            the timeout live there); ppo: :class:`PPOConfig`.
    """

    task: str = field(default="text", metadata=flag(help="competition id or alias ('text')"))
    model: str = field(
        default="HuggingFaceTB/SmolLM2-135M-Instruct",
        metadata=flag(help="Hugging Face id or local folder"),
    )
    steps: int = field(default=3, metadata=flag(help="PPO steps"))
    exec_budget_s: float | None = field(
        default=None,
        metadata=flag(
            "--exec-budget",
            help="stop once every chain (batch row) has used this many seconds of execution "
            "(--steps stays the cap; default: no budget)",
        ),
    )
    batch_size: int = field(default=4, metadata=flag(help="prompts per step (B)"))
    seed: int = field(default=0, metadata=flag(help="run seed"))
    seed_buffer: bool = field(
        default=True, metadata=flag(help="start the buffer with the task's baseline solutions")
    )
    sandbox: str = field(
        default="auto",
        metadata=flag(help="sandbox kind", choices=("auto", "subprocess", "bwrap", "docker")),
    )
    docker_image: str | None = field(
        default=None,
        metadata=flag(help="image of --sandbox docker (default: rpg-sandbox-image build's)"),
    )
    executor: str = field(
        default="local", metadata=flag(help="where scripts run", choices=("local", "ray"))
    )
    ray_address: str | None = field(
        default=None,
        metadata=flag(help="with --executor ray: a cluster's host:port, or local (the default)"),
    )
    max_staleness: int = field(
        default=0,
        metadata=flag(
            help="policy versions a sample may lag when it trains (0: synchronous steps; K >= 1: "
            "each chain goes on as soon as its script ends)"
        ),
    )
    job_cpus: float = field(default=1.0, metadata=flag(help="CPUs one script reserves (Ray)"))
    job_gpus: float = field(default=0.0, metadata=flag(help="GPUs one script reserves (Ray)"))
    job_memory_gb: float | None = field(
        default=None, metadata=flag(help="memory one script reserves, GiB (Ray; default none)")
    )
    job_resource: str | None = field(
        default=None,
        metadata=flag(help="a custom Ray resource one script takes a unit of (e.g. grader)"),
    )
    workers: int = field(default=2, metadata=flag(help="parallel executions"))
    checkpoint_every: int = field(
        default=1, metadata=flag(help="checkpoint period, steps (1: a kill loses at most a step)")
    )
    keep_checkpoints: int = field(default=2, metadata=flag(help="newest checkpoints kept"))
    buffer_capacity_factor: int = field(
        default=10, metadata=flag(help="active buffer size as a multiple of B")
    )
    num_slots: int | None = field(
        default=None, metadata=flag(help="estimator slots (default: min(128, B))")
    )
    estimator_batches: int = field(
        default=1000, metadata=flag(help="synthetic batches per rho_hat estimate")
    )
    estimator: str = field(
        default="niw",
        metadata=flag(
            help="reward-rate estimator f_rho: niw (95th predictive percentile, the paper's), "
            "niw-mean (posterior mean) or robbins-monro (the NPG theorem's running rate)",
            choices=ESTIMATORS,
        ),
    )
    data_root: str | None = field(default=None, metadata=flag(help="competitions folder"))
    mlebench_dir: str | None = field(
        default=None,
        metadata=flag(
            help="root of an MLE-Bench tree (holding mlebench/competitions/<id>/), read without "
            "the mlebench package; default env RPG_MLEBENCH_DIR"
        ),
    )
    seed_dir: str | None = field(
        default=None,
        metadata=flag(help="folder of seed solution scripts (*.py; default: the task's baselines)"),
    )
    speedrun_dir: str | None = field(
        default=None,
        metadata=flag(help="modded-nanogpt checkout holding train_gpt.py (task nanogpt-speedrun)"),
    )
    device: str | None = field(
        default=None, metadata=flag(help="cpu | cuda (default: cuda if available)")
    )
    cpu_threads: int | None = field(default=1, metadata=flag(help="torch threads on a CPU"))
    run_name: str | None = field(default=None, metadata=flag(help="label stored with samples"))
    action: str = field(
        default="script",
        metadata=flag(
            help="answer format: script (the whole script) or edit (new values for the parent's "
            "constants)",
            choices=ACTION_FORMATS,
        ),
    )
    describe: bool = field(
        default=True,
        metadata=flag("--description", help="show the competition description in the prompts"),
    )
    sft_steps: int = field(
        default=0, metadata=flag(help="supervised warm-start steps before RL (0: none)")
    )
    sft_lr: float = field(default=4e-5, metadata=flag(help="SFT learning rate (AdamW)"))
    sft_batch_size: int = field(
        default=4, metadata=flag(help="prompt -> answer pairs per SFT step")
    )
    sft_examples: int = field(
        default=64, metadata=flag(help="SFT pairs built from the task's baseline scripts")
    )
    sft_switch_fraction: float = field(
        default=0.25,
        metadata=flag(help="share of SFT edit pairs forced to change a declared switch (MODEL)"),
    )
    sft_seed: int | None = field(
        default=None,
        metadata=flag(help="seed of the SFT pairs and batches (default: --seed)"),
    )
    engine: str = field(
        default="ppo",
        metadata=flag(
            help="training engine: ppo (ours, the paper's) or trl (TRL's GRPOTrainer)",
            choices=ENGINES,
        ),
    )
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    trl: TRLConfig = field(default_factory=TRLConfig)

    def __post_init__(self) -> None:
        for name in ("steps", "checkpoint_every", "keep_checkpoints", "estimator_batches"):
            _int_at_least(self, name, 1)
        for name in ("batch_size", "workers"):
            _int_at_least(self, name, 1, high=MAX_BATCH)
        _int_at_least(self, "buffer_capacity_factor", 1, high=1000)
        _int_at_least(self, "num_slots", 2, optional=True, high=MAX_BATCH)
        _int_at_least(self, "cpu_threads", 1, optional=True, high=MAX_BATCH)
        _int_at_least(self, "sft_steps", 0)
        _int_at_least(self, "sft_batch_size", 1, high=MAX_BATCH)
        _int_at_least(self, "sft_examples", 1)
        _int_at_least(self, "sft_seed", 0, optional=True)
        _int_at_least(self, "max_staleness", 0, high=100)
        if self.ray_address is not None and self.executor != "ray":
            raise ValueError(f"ray_address {self.ray_address!r} applies to executor ray only")
        if self.ray_address is not None and not self.ray_address.strip():
            raise ValueError("ray_address must be host:port or local, got ''")
        for name in ("job_cpus", "job_gpus", "job_memory_gb"):
            v = getattr(self, name)
            if v is None and name == "job_memory_gb":
                continue
            if not isinstance(v, int | float) or isinstance(v, bool) or not 0 <= v < 1e6:
                raise ValueError(f"{name} must be a number >= 0, got {v!r}")
        if self.job_resource is not None and not self.job_resource.strip():
            raise ValueError("job_resource must name a resource, got ''")
        if self.max_staleness and self.engine == "trl":
            raise ValueError(
                f"max_staleness {self.max_staleness} applies to engine ppo (TRL's own "
                "asynchronous trainer needs a vLLM server)"
            )
        b = self.exec_budget_s
        if b is not None and not (
            isinstance(b, int | float) and not isinstance(b, bool) and math.isfinite(b) and b > 0
        ):
            raise ValueError(f"exec_budget_s must be a number of seconds > 0, got {b!r}")
        if not (isinstance(self.sft_lr, int | float) and self.sft_lr > 0):
            raise ValueError(f"sft_lr must be > 0, got {self.sft_lr!r}")
        f = self.sft_switch_fraction
        if not (isinstance(f, int | float) and not isinstance(f, bool) and 0.0 <= f <= 1.0):
            raise ValueError(f"sft_switch_fraction must lie in [0, 1], got {f!r}")
        if not isinstance(self.describe, bool):
            raise ValueError(f"describe must be True or False, got {self.describe!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")
        for name, cls in (
            ("sampling", SamplingConfig),
            ("reward", RewardConfig),
            ("ppo", PPOConfig),
            ("trl", TRLConfig),
        ):
            if not isinstance(getattr(self, name), cls):
                raise ValueError(f"{name} must be a {cls.__name__}, got {getattr(self, name)!r}")
        for f in fields(self):
            choices = f.metadata.get("choices")
            if choices and getattr(self, f.name) not in choices:
                raise ValueError(
                    f"{f.name} must be one of {', '.join(choices)}, got {getattr(self, f.name)!r}"
                )
        g = self.trl.num_generations
        if self.engine == "trl" and self.batch_size % g:
            raise ValueError(
                f"batch_size {self.batch_size} must be a multiple of num_generations {g} "
                "(engine trl: B answers = B / G prompts x G answers)"
            )

    @property
    def method(self) -> str:
        """The arm: ``"rpg"``, ``"vanilla"`` or ``"fixed-lambda"`` (``reward.method``)."""
        return self.reward.method

    @property
    def timeout_s(self) -> float:
        """Execution time limit per script, seconds (``reward.timeout_s``)."""
        return self.reward.timeout_s

    @property
    def name(self) -> str:
        return self.run_name or f"{self.method}-seed{self.seed}"

    def to_dict(self) -> dict[str, Any]:
        """The nested layout of ``config.json``."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoopConfig:
        """Rebuild a config from ``config.json`` (nested, or the older flat layout).

        The run-record keys (:data:`RUN_RECORD_KEYS`) are skipped. A key the stored config
        lacks because it was added later takes the value that reproduces the stored run
        (``sft_switch_fraction`` 0: no forced switch edits), not today's default.

        Raises:
            ValueError: unknown keys (named) or a bad value.
        """
        d = {k: v for k, v in d.items() if k not in RUN_RECORD_KEYS}
        d = _unflatten_legacy(d)
        # a stored run made before a key existed ran as the key's "off" value, not its default
        d = {**_ADDED_KEYS_OFF, **d}
        return _build(cls, d, "")


# top-level keys added after runs were stored, with the value that reproduces those runs
_ADDED_KEYS_OFF: dict[str, Any] = {"sft_switch_fraction": 0.0}


# keys of the flat layout (before the nested configs) and where they live now
_LEGACY = {
    "method": "reward",
    "timeout_s": "reward",
    **{f.name: "sampling" for f in fields(SamplingConfig)},
}


def _unflatten_legacy(d: dict[str, Any]) -> dict[str, Any]:
    d = dict(d)
    for key, section in _LEGACY.items():
        if key in d:
            sub = dict(d.get(section) or {})
            value = d.pop(key)
            if key in sub and sub[key] != value:
                raise ValueError(
                    f"config holds {key} {value!r} at the top and {sub[key]!r} in {section}"
                )
            sub[key] = value
            d[section] = sub
    return d


def _build(cls: type, d: Any, prefix: str) -> Any:
    if not isinstance(d, dict):
        raise ValueError(f"config section {prefix.rstrip('.') or '(top)'} must be a mapping")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(d) - set(known))
    if unknown:
        raise ValueError(
            f"unknown config key(s) {', '.join(prefix + k for k in unknown)} (known in "
            f"{cls.__name__}: {', '.join(known)})"
        )
    kw = {}
    for k, v in d.items():
        t = hints[k]
        kw[k] = _build(t, v, f"{prefix}{k}.") if isinstance(t, type) and is_dataclass(t) else v
    return cls(**kw)
