"""PPO for language models: the trainer, read top to bottom in :meth:`PPOTrainer.step`.

The policy is a causal LM (the *actor*); the *critic* is the same architecture with a scalar value
head; the *reference* is a frozen copy of the initial actor. One PPO step takes a batch of
(query, response, scalar reward) triples, where in RPG the scalar is the relative reward
``r_tilde = r - rho_hat * delta`` (paper, section 4; DESIGN.md section 7) and in the vanilla arm
the raw reward. Token-level rewards carry a KL penalty against the reference (Ziegler et al. 2019,
"Fine-Tuning Language Models from Human Preferences"); advantages come from GAE (Schulman et al.
2016) with ``gamma = lambda = 1`` by default; the losses are the clipped surrogate, the clipped
value loss and an entropy bonus (Schulman et al. 2017, "Proximal Policy Optimization Algorithms").
The order of the step follows CleanRL's ``ppo.py``.

Where the parts live: the maths as pure functions in :mod:`rpg_llm.learner.losses`; the batch
layout ``[query | response]``, the critic and the forward passes (log-probs at the sampling
temperature, dropout off) in :mod:`rpg_llm.learner.forward`; host-memory release in
:mod:`rpg_llm.learner.memory`. This module wires them to the models, optimisers, micro-batches
and checkpoints.
"""

from __future__ import annotations

import copy
import math
import os
import pickle
import shutil
import warnings
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from rpg_core.diskfull import naming_disk_full, write_with
from rpg_llm.config import PPOConfig
from rpg_llm.learner.checkpoint import CheckpointDamaged, check_checkpoint_file
from rpg_llm.learner.forward import (
    PPOBatch,
    ValueModel,
    check_temperature,
    response_logits,
    response_values,
    update_mode,
)
from rpg_llm.learner.losses import (
    entropy_from_logits,
    gae,
    kl_penalized_rewards,
    logprobs_from_logits,
    masked_mean,
    masked_whiten,
    policy_loss,
    value_loss,
)
from rpg_llm.learner.memory import release_host_memory

if TYPE_CHECKING:
    from accelerate import Accelerator
    from peft import PeftModel
    from transformers import PreTrainedModel

__all__ = ["PPOBatch", "PPOConfig", "PPOTrainer", "takes_rollout_pass"]

_GRAD_NORMS = ("actor_grad_norm", "critic_grad_norm")


def takes_rollout_pass(config: PPOConfig, batch_size: int, single_pass: bool | None) -> bool:
    """Whether a step takes :meth:`PPOTrainer._rollout_pass_step`: the one choice of update path.

    The rollout pass applies to one epoch over one mini-batch (the parameters at the update's
    only optimiser step are the rollout's). ``single_pass`` None takes it where it applies; False
    never (the general path, for comparisons); True demands it over one micro-batch, the single
    forward/backward of actor and critic.

    Raises:
        ValueError: ``single_pass=True`` with more than one epoch, mini-batch or micro-batch.
    """
    B = batch_size
    applies = config.ppo_epochs == 1 and (config.mini_batch_size or B) >= B
    if single_pass and not (applies and config.micro_batch_size >= B):
        raise ValueError(
            f"single_pass=True needs one epoch, mini-batch and micro-batch; got ppo_epochs "
            f"{config.ppo_epochs}, mini_batch_size {config.mini_batch_size}, micro_batch_size "
            f"{config.micro_batch_size} for a batch of {B}"
        )
    return applies and single_pass is not False


class PPOTrainer:
    """Actor, critic and frozen reference with their AdamW optimisers; one :meth:`step` per batch.

    Args:
        actor: a ``transformers`` causal LM (trained in place).
        config: :class:`PPOConfig`.
        accelerator: an ``accelerate.Accelerator`` (None: a default one, single process). With
            ``accelerate launch`` and an FSDP config the models are sharded across GPUs.
        temperature: the sampling temperature of the rollouts (paper: 0.7); actor, old and
            reference log-probs and the entropy are computed from ``logits / temperature``
            (:mod:`rpg_llm.learner.forward`). Must equal the ``temperature`` given to the sampler.

    The reference model is a frozen deep copy of the initial actor (with LoRA, the actor with its
    adapters disabled). The critic is :class:`ValueModel` built from the actor's backbone.

    Raises:
        ValueError: a temperature that is not a positive finite number.
    """

    def __init__(
        self,
        actor: PreTrainedModel,
        config: PPOConfig,
        accelerator: Accelerator | None = None,
        *,
        temperature: float = 0.7,
    ):
        import accelerate  # third-party and slow to import: only where a trainer is built

        self.temperature = check_temperature(temperature)
        self.config = config
        self.accelerator = (
            accelerator if accelerator is not None else accelerate.Accelerator(cpu=False)
        )
        self.lora = config.lora_rank > 0
        critic = ValueModel.from_causal_lm(actor)
        model: nn.Module = actor
        self.ref: nn.Module | None = None
        if self.lora:
            model, critic = self._add_lora(actor, critic)
        else:
            self.ref = copy.deepcopy(actor).eval().requires_grad_(False)
        if config.gradient_checkpointing:
            actor.gradient_checkpointing_enable()
            enable = getattr(critic.backbone, "gradient_checkpointing_enable", None)
            if enable is not None:
                enable()
        actor_opt = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad],
            lr=config.actor_lr,
            weight_decay=config.weight_decay,
        )
        critic_opt = torch.optim.AdamW(
            [p for p in critic.parameters() if p.requires_grad],
            lr=config.critic_lr,
            weight_decay=config.weight_decay,
        )
        self.actor, self.critic, self.actor_opt, self.critic_opt = self.accelerator.prepare(
            model, critic, actor_opt, critic_opt
        )
        if self.ref is not None:
            self.ref = self.ref.to(self.accelerator.device)
        self.num_updates = 0

    def _add_lora(self, actor: PreTrainedModel, critic: ValueModel) -> tuple[PeftModel, ValueModel]:
        """LoRA adapters on every linear layer of actor and critic backbone; the value head
        trained in full."""
        from peft import LoraConfig, get_peft_model  # optional at import time, like accelerate

        lora: dict[str, Any] = dict(
            r=self.config.lora_rank,
            lora_alpha=self.config.lora_alpha,
            target_modules="all-linear",
            lora_dropout=0.0,
        )
        with warnings.catch_warnings():
            # peft reads transformers' deprecated ``is_gradient_checkpointing`` alias
            warnings.filterwarnings("ignore", "`is_gradient_checkpointing`", FutureWarning)
            peft_actor = get_peft_model(actor, LoraConfig(task_type="CAUSAL_LM", **lora))
            critic.backbone = get_peft_model(critic.backbone, LoraConfig(**lora))
        critic.value_head.requires_grad_(True)
        return peft_actor, critic

    @property
    def policy(self) -> nn.Module:
        """The actor without distributed wrappers (for generation and saving): the causal LM, or
        under LoRA its peft wrapper."""
        return self.accelerator.unwrap_model(self.actor)

    # -- rollout-time quantities ---------------------------------------------------------------

    @torch.no_grad()
    def _ref_logprobs(self, batch: PPOBatch) -> torch.Tensor:
        """Reference log-probs of the response tokens, ``[B, R]``: the frozen copy's, or under
        LoRA the actor's with its adapters off."""
        if self.ref is not None:
            logits = response_logits(self.ref, batch, self.temperature)
        else:
            with cast("PeftModel", self.policy).disable_adapter():
                logits = response_logits(self.actor, batch, self.temperature)
        return logprobs_from_logits(logits, batch.response_ids)

    @torch.no_grad()
    def _rollout_stats(self, batch: PPOBatch) -> dict[str, torch.Tensor]:
        """Old log-probs, reference log-probs and old values, micro-batched; each ``[B, R]``."""
        olds, refs, vals = [], [], []
        with update_mode(self.actor, self.critic):
            for rows in torch.arange(batch.scores.shape[0]).split(self.config.micro_batch_size):
                sub = batch.select(rows)
                old_logits = response_logits(self.actor, sub, self.temperature)
                olds.append(logprobs_from_logits(old_logits, sub.response_ids))
                refs.append(self._ref_logprobs(sub))
                vals.append(response_values(self.critic, sub))
        return {
            "old_logprobs": torch.cat(olds),
            "ref_logprobs": torch.cat(refs),
            "old_values": torch.cat(vals),
        }

    # -- one PPO step ---------------------------------------------------------------------------

    def step(self, batch: PPOBatch, single_pass: bool | None = None) -> dict[str, float]:
        """One PPO update on a rollout batch; returns scalar statistics (floats).

        In order (CleanRL's ``ppo.py``; Ziegler et al. 2019): the rollout-time log-probs of actor
        and reference and the critic's values, under no_grad; KL-penalised token rewards; GAE;
        whitening; then ``ppo_epochs`` passes over shuffled mini-batches, each accumulated over
        micro-batches, with the gradient clipped per model. With one epoch over one mini-batch
        (:func:`takes_rollout_pass`), :meth:`_rollout_pass_step` gives the same update with fewer
        forward passes.

        The statistics: the losses, clip fractions, ``approx_kl`` and entropy (means over the
        mini-batches), the largest gradient norms, the rollout's ``kl`` (per sequence) and mean
        advantage, return and value, the mean score, and the batch's mean prompt and response
        lengths (``query_len``, ``response_len``, tokens) and its padded length
        ``seq_len = Q + R``: every forward pass runs ``B`` rows of ``seq_len`` tokens, so an
        update's time is compared per ``B * seq_len``.

        A batch with ``behaviour_logprobs`` (answers of an older policy) takes the general
        path with the ratio ``pi / mu`` against them, clipped as usual: the importance ratio of
        off-policy PPO (Espeholt et al. 2018 use the same truncated ratio); the KL penalty is
        then taken against the behaviour policy's log-probs too.

        Args:
            batch: the rollout batch (``B`` rows).
            single_pass: as in :func:`takes_rollout_pass` (None: the cheapest path that applies).

        Raises:
            ValueError: ``single_pass=True`` with more than one epoch, mini-batch or micro-batch.
        """
        cfg = self.config
        batch = batch.to(self.accelerator.device)
        B, mask = batch.scores.shape[0], batch.response_mask.float()
        behaviour = batch.behaviour_logprobs
        if behaviour is None and takes_rollout_pass(cfg, B, single_pass):
            return self._rollout_pass_step(batch)
        # 1. rollout statistics at the rollout's parameters; the ratio's denominator is the
        #    policy that generated the answers (an older one in the asynchronous loop)
        roll = self._rollout_stats(batch)
        old_logprobs, old_values = roll["old_logprobs"], roll["old_values"]
        if behaviour is not None:
            old_logprobs = behaviour.to(old_logprobs.dtype) * mask
        # 2. token rewards: the score at the last token, the KL penalty at every token
        rewards, kl = kl_penalized_rewards(
            batch.scores.float(), old_logprobs, roll["ref_logprobs"], mask, cfg.kl_coef
        )
        # 3. advantages and returns
        advantages, returns = gae(rewards, old_values, mask, cfg.gamma, cfg.lam)
        if cfg.whiten_advantages:
            advantages = masked_whiten(advantages, mask)
        # 4. epochs x shuffled mini-batches x micro-batches of the clipped losses
        mini = cfg.mini_batch_size or B
        stats: dict[str, list[float]] = {}
        with update_mode(self.actor, self.critic):
            gen = torch.Generator().manual_seed(self.num_updates)
            for _ in range(cfg.ppo_epochs):
                order = torch.randperm(B, generator=gen)
                for start in range(0, B, mini):
                    rows = order[start : start + mini].to(batch.scores.device)
                    n_tokens = float(mask[rows].sum().clamp(min=1.0))
                    self.actor_opt.zero_grad(set_to_none=True)
                    self.critic_opt.zero_grad(set_to_none=True)
                    for micro in rows.split(cfg.micro_batch_size):
                        sub, m = batch.select(micro), mask[micro]
                        logits = response_logits(self.actor, sub, self.temperature)
                        logp = logprobs_from_logits(logits, sub.response_ids)
                        self._actor_backward(
                            logits, logp, old_logprobs[micro], advantages[micro], m, n_tokens, stats
                        )
                        v = response_values(self.critic, sub)
                        self._critic_backward(
                            v, old_values[micro], returns[micro], m, n_tokens, stats
                        )
                    self._optimiser_step(stats)
        n_mini = cfg.ppo_epochs * math.ceil(B / mini)
        return self._finish_step(batch, stats, n_mini, kl, advantages, returns, old_values)

    def _rollout_pass_step(self, batch: PPOBatch) -> dict[str, float]:
        """:meth:`step` for one epoch over one mini-batch, with the update folded into the
        rollout pass where that is exact.

        Before the only optimiser step the parameters are the rollout's, so a forward pass with
        gradient gives the rollout-time quantities (detached): the ratio is 1 and the value clip
        inactive. The rollout pass keeps the critic's graph and back-propagates the value loss
        micro-batch by micro-batch (every input of the value loss is row-local: a row's rewards,
        GAE returns and old values need only that row): one critic forward fewer. When one
        micro-batch holds the whole batch, it keeps the actor's graph too and the policy loss
        needs no second actor forward: the single pass, one actor and one critic forward fewer,
        holding both models' activations together. Otherwise the actor's loss runs after the
        batch's advantages are whitened, over the shuffled micro-batches as in :meth:`step`.
        Same result as the general path (tests/llm/learner/test_ppo.py).
        """
        cfg, T, B = self.config, self.temperature, batch.scores.shape[0]
        mask = batch.response_mask.float()
        n_tokens = float(mask.sum().clamp(min=1.0))
        micro_batches = torch.arange(B).split(cfg.micro_batch_size)
        single = len(micro_batches) == 1
        parts: dict[str, list[torch.Tensor]] = {}
        stats: dict[str, list[float]] = {}
        self.actor_opt.zero_grad(set_to_none=True)
        self.critic_opt.zero_grad(set_to_none=True)
        with update_mode(self.actor, self.critic):
            for rows in micro_batches:
                sub, m = batch.select(rows), mask[rows]
                ref_logp = self._ref_logprobs(sub)
                with torch.set_grad_enabled(single):
                    logits = response_logits(self.actor, sub, T)
                    logp = logprobs_from_logits(logits, sub.response_ids)
                if not single:
                    del logits  # no-grad logits go before the critic's forward
                v = response_values(self.critic, sub)
                old_logp, old_v = logp.detach(), v.detach()
                rewards, kl = kl_penalized_rewards(
                    sub.scores.float(), old_logp, ref_logp, m, cfg.kl_coef
                )
                advantages, returns = gae(rewards, old_v, m, cfg.gamma, cfg.lam)
                self._critic_backward(v, old_v, returns, m, n_tokens, stats)
                for k, t in (
                    ("old_logprobs", old_logp),
                    ("old_values", old_v),
                    ("kl", kl),
                    ("advantages", advantages),
                    ("returns", returns),
                ):
                    parts.setdefault(k, []).append(t)
            roll = {k: torch.cat(v) for k, v in parts.items()}
            advantages = roll["advantages"]
            if cfg.whiten_advantages:
                advantages = masked_whiten(advantages, mask)
            if single:
                self._actor_backward(
                    logits, logp, roll["old_logprobs"], advantages, mask, n_tokens, stats
                )
            else:
                gen = torch.Generator().manual_seed(self.num_updates)
                order = torch.randperm(B, generator=gen).to(batch.scores.device)
                for micro in order.split(cfg.micro_batch_size):
                    sub = batch.select(micro)
                    logits = response_logits(self.actor, sub, T)
                    logp = logprobs_from_logits(logits, sub.response_ids)
                    self._actor_backward(
                        logits,
                        logp,
                        roll["old_logprobs"][micro],
                        advantages[micro],
                        mask[micro],
                        n_tokens,
                        stats,
                    )
            self._optimiser_step(stats)
        return self._finish_step(
            batch, stats, 1, roll["kl"], advantages, roll["returns"], roll["old_values"]
        )

    def _actor_backward(
        self,
        logits: torch.Tensor,
        logp: torch.Tensor,
        old_logp: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        n_tokens: float,
        stats: dict[str, list[float]],
    ) -> None:
        """Back-propagate one micro-batch's clipped surrogate minus the entropy bonus.

        ``logits`` ``[b, R, V]`` and ``logp`` ``[b, R]`` carry the gradient; the rest are
        rollout-time ``[b, R]``; sums are divided by the mini-batch's ``n_tokens``. Appends the
        loss terms to ``stats``.
        """
        cfg = self.config
        pg, pg_stats = policy_loss(
            logp, old_logp, advantages, mask, cfg.clip_ratio, normalizer=n_tokens
        )
        entropy = (entropy_from_logits(logits) * mask).sum() / n_tokens
        self.accelerator.backward(pg - cfg.entropy_coef * entropy)
        for k, val in {"pg_loss": pg, "entropy": entropy, **pg_stats}.items():
            stats.setdefault(k, []).append(float(val.detach()))

    def _critic_backward(
        self,
        values: torch.Tensor,
        old_values: torch.Tensor,
        returns: torch.Tensor,
        mask: torch.Tensor,
        n_tokens: float,
        stats: dict[str, list[float]],
    ) -> None:
        """Back-propagate one micro-batch's clipped value loss (times ``vf_coef``); ``values``
        ``[b, R]`` carries the gradient. Appends the loss terms to ``stats``."""
        cfg = self.config
        vf, vf_stats = value_loss(
            values, old_values, returns, mask, cfg.value_clip, normalizer=n_tokens
        )
        self.accelerator.backward(cfg.vf_coef * vf)
        for k, val in {"vf_loss": vf, **vf_stats}.items():
            stats.setdefault(k, []).append(float(val.detach()))

    def _optimiser_step(self, stats: dict[str, list[float]]) -> None:
        """Clip each model's gradient to ``max_grad_norm`` (global L2 norm) and step both
        optimisers; appends the norms before clipping to ``stats``."""
        norms = [
            self.accelerator.clip_grad_norm_(model.parameters(), self.config.max_grad_norm)
            for model in (self.actor, self.critic)
        ]
        self.actor_opt.step()
        self.critic_opt.step()
        for k, norm in zip(_GRAD_NORMS, norms, strict=True):
            stats.setdefault(k, []).append(float(norm or 0.0))

    def _finish_step(
        self,
        batch: PPOBatch,
        stats: dict[str, list[float]],
        n_mini: int,
        kl: torch.Tensor,
        advantages: torch.Tensor,
        returns: torch.Tensor,
        values: torch.Tensor,
    ) -> dict[str, float]:
        """Count the update, drop the gradients, return host memory; the step's statistics.

        Micro-batch losses are partial sums (normalised by the mini-batch's token count): they
        add within a mini-batch and average over the ``n_mini`` mini-batches; the gradient norms
        give their largest. ``kl``, ``advantages``, ``returns``, ``values``: ``[B, R]``.
        """
        self.num_updates += 1
        self.actor_opt.zero_grad(set_to_none=True)  # gradients are not needed between steps
        self.critic_opt.zero_grad(set_to_none=True)
        if self.accelerator.device.type == "cpu":
            release_host_memory()
        mask = batch.response_mask.float()
        out = {k: max(v) if k in _GRAD_NORMS else sum(v) / n_mini for k, v in stats.items()}
        out.update(
            kl=float(kl.sum(1).mean()),
            advantage_mean=float(masked_mean(advantages, mask)),
            return_mean=float(masked_mean(returns, mask)),
            value_mean=float(masked_mean(values, mask)),
            score_mean=float(batch.scores.mean()),
            response_len=float(mask.sum(1).mean()),
            query_len=float(batch.query_mask.sum(1).float().mean()),
            seq_len=float(batch.query_ids.shape[1] + mask.shape[1]),
        )
        return out

    # -- checkpoints ----------------------------------------------------------------------------

    def trainable_state(self) -> dict[str, dict[str, Any]]:
        """The trained parameters of actor and critic, by parameter name (CPU tensors).

        Full fine-tuning: the complete state dicts. LoRA: only the parameters with
        ``requires_grad`` -- the adapters of actor and critic and the value head -- so that a
        checkpoint holds no base weight; the base (the SFT weights) is rebuilt by the run.
        """
        acc = self.accelerator
        if not self.lora:
            return {
                "actor": acc.get_state_dict(self.actor),
                "critic": acc.get_state_dict(self.critic),
            }
        return {
            name: {
                n: p.detach().to("cpu").clone()
                for n, p in acc.unwrap_model(model).named_parameters()
                if p.requires_grad
            }
            for name, model in (("actor", self.actor), ("critic", self.critic))
        }

    def save(self, folder: Path) -> None:
        """Write the trained parameters and their optimiser states to ``folder``.

        Full fine-tuning: actor, critic and both AdamW states. LoRA: only the adapters and the
        value head (:meth:`trainable_state`) and their AdamW states (the optimisers hold only
        those). Plus the update counter, the config and the temperature. Atomic: a temporary
        folder, then a rename; a failed write removes the temporary folder (the previous
        checkpoint stays whole).

        Raises:
            DiskFull: the disk filled up while writing (names ``trainer.pt``).
        """
        folder = Path(folder)
        tmp = folder.with_name(folder.name + ".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        acc = self.accelerator
        state = {
            **self.trainable_state(),
            "lora": self.lora,
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "num_updates": self.num_updates,
            "config": asdict(self.config),
            "temperature": self.temperature,
        }
        if acc.is_main_process:
            with naming_disk_full(tmp / "trainer.pt", lambda: shutil.rmtree(tmp, True)):
                write_with(tmp / "trainer.pt", lambda f: torch.save(state, f))
            if folder.exists():
                shutil.rmtree(folder, ignore_errors=True)
            os.replace(tmp, folder)
        acc.wait_for_everyone()

    def load(self, folder: Path) -> None:
        """Restore the state written by :meth:`save` onto this trainer.

        With LoRA the trainer must be built on the same base weights as the saved one (the run
        rebuilds them from the stored SFT weights); only adapters, value head, optimiser states
        and the counter are read.

        Raises:
            FileNotFoundError: no checkpoint in ``folder``.
            CheckpointDamaged: ``trainer.pt`` cannot be read (names it and the cause).
            ValueError: a LoRA checkpoint loaded into a full fine-tuning trainer or the reverse,
                or parameter names that differ from this trainer's.
        """
        path = Path(folder) / "trainer.pt"
        if not path.exists():
            raise FileNotFoundError(f"no checkpoint at {path}")
        check_checkpoint_file(path)
        try:
            state = torch.load(path, map_location="cpu", weights_only=False)
        except (
            pickle.UnpicklingError,
            RuntimeError,
            EOFError,
            ValueError,
            zipfile.BadZipFile,
        ) as err:
            raise CheckpointDamaged(path, f"{type(err).__name__}: {err}") from None
        if not isinstance(state, dict) or not {"actor", "critic", "actor_opt"} <= set(state):
            raise CheckpointDamaged(path, "it holds no trainer state")
        saved_lora = bool(state.get("lora", False))
        if saved_lora != self.lora:
            raise ValueError(
                f"checkpoint {path} is {'LoRA' if saved_lora else 'full fine-tuning'} but this "
                f"trainer is {'LoRA' if self.lora else 'full fine-tuning'} "
                f"(lora_rank {self.config.lora_rank})"
            )
        for name, model in (("actor", self.actor), ("critic", self.critic)):
            model = self.accelerator.unwrap_model(model)
            if not self.lora:
                model.load_state_dict(state[name])
                continue
            params = {n: p for n, p in model.named_parameters() if p.requires_grad}
            if set(params) != set(state[name]):
                extra = sorted(set(state[name]) - set(params))[:3]
                lacking = sorted(set(params) - set(state[name]))[:3]
                raise ValueError(
                    f"checkpoint {path}: {name} parameters differ from this trainer's "
                    f"(unexpected {extra}, missing {lacking}); same lora_rank and model needed"
                )
            with torch.no_grad():
                for n, p in params.items():
                    p.copy_(state[name][n])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.num_updates = int(state["num_updates"])
