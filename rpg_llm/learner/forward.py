"""The PPO batch layout ``[query | response]`` and the forward passes of the update over it.

``input_ids = [query (left-padded, length Q) | response (right-padded, length R)]``;
``response_mask[b, t] = 1`` for real response tokens. The logits at position ``Q - 1 + t``
predict response token ``t``; the value at the same position is the value of the state before
response token ``t``. Positions count real tokens only, so left padding does not shift them.

Log-probabilities at the sampling temperature. Rollouts are sampled at temperature ``T`` (paper:
0.7) with top-k 20 / top-p 0.8, so every log-prob of the update -- the actor's, the rollout-time
("old") one and the reference's, hence the importance ratio, the KL penalty and the entropy bonus
-- is computed from ``logits / T`` (:func:`response_logits`), as verl and TRL do. The top-k /
top-p truncation is *not* applied: the log-softmax runs over the full vocabulary. Reasons: (1)
it is the verl / TRL convention; (2) the truncated support depends on the parameters, so a token
sampled from the old top-p set can fall outside the new (or the reference's) set, giving
log-prob ``-inf``, an infinite KL and a zero ratio, and the set membership has no gradient; (3)
the full-vocabulary log-prob differs from the truncated sampler's by ``-log(kept mass)`` per
position, the same constant for actor and old policy up to the change of that mass, so the
ratio stays close to the truncated one where the kept set holds most of the mass. The sampler
(:func:`rpg_llm.learner.policy.generate`) returns its own per-token log-probs in this convention,
and a test holds the training-time log-probs to them.

Dropout is off in every forward pass of the update (eval mode, gradients kept;
:func:`update_mode`): with dropout on, the ratio at the first mini-batch is not 1 even before any
parameter changes.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from rpg_llm.learner.losses import at_least_float32

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "PPOBatch",
    "ValueModel",
    "check_temperature",
    "position_ids",
    "response_logits",
    "response_values",
    "update_mode",
]


@dataclass
class PPOBatch:
    """One rollout batch in the layout ``[query | response]``.

    Attributes:
        query_ids: ``[B, Q]`` int64, left-padded with ``pad_id``.
        query_mask: ``[B, Q]`` 0/1.
        response_ids: ``[B, R]`` int64, right-padded.
        response_mask: ``[B, R]`` 0/1, at least one 1 per row.
        scores: ``[B]`` float32 sequence rewards.

    Raises:
        ValueError: shapes that differ from these, an empty response or a non-finite score.
    """

    query_ids: torch.Tensor
    query_mask: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    scores: torch.Tensor

    def __post_init__(self) -> None:
        B = self.query_ids.shape[0]
        if self.query_mask.shape != self.query_ids.shape:
            raise ValueError("query_mask shape differs from query_ids")
        if self.response_mask.shape != self.response_ids.shape or self.response_ids.shape[0] != B:
            raise ValueError("response_ids / response_mask shapes differ from the batch")
        if self.scores.shape != (B,):
            raise ValueError(f"scores must have shape ({B},), got {tuple(self.scores.shape)}")
        if (self.response_mask.sum(1) < 1).any():
            raise ValueError("every response needs at least one token")
        if not torch.isfinite(self.scores).all():
            raise ValueError(f"scores must be finite, got {self.scores.tolist()}")

    @classmethod
    def from_lists(
        cls,
        query_ids: list[list[int]],
        response_ids: list[list[int]],
        scores: list[float],
        pad_id: int,
    ) -> PPOBatch:
        """Pad token-id lists into the ``[query | response]`` layout.

        Raises:
            ValueError: lengths differ, or a query or response is empty.
        """
        if not (len(query_ids) == len(response_ids) == len(scores)) or not query_ids:
            raise ValueError(
                f"need equal, non-zero counts of queries ({len(query_ids)}), responses "
                f"({len(response_ids)}) and scores ({len(scores)})"
            )
        if any(len(q) == 0 for q in query_ids) or any(len(r) == 0 for r in response_ids):
            raise ValueError("queries and responses must be non-empty")
        B = len(query_ids)
        Q = max(len(q) for q in query_ids)
        R = max(len(r) for r in response_ids)
        qi = torch.full((B, Q), pad_id, dtype=torch.long)
        qm = torch.zeros((B, Q), dtype=torch.long)
        ri = torch.full((B, R), pad_id, dtype=torch.long)
        rm = torch.zeros((B, R), dtype=torch.long)
        for b, (q, r) in enumerate(zip(query_ids, response_ids, strict=True)):
            qi[b, Q - len(q) :] = torch.tensor(q, dtype=torch.long)
            qm[b, Q - len(q) :] = 1
            ri[b, : len(r)] = torch.tensor(r, dtype=torch.long)
            rm[b, : len(r)] = 1
        return cls(qi, qm, ri, rm, torch.tensor(scores, dtype=torch.float32))

    @property
    def input_ids(self) -> torch.Tensor:
        """``[B, Q + R]`` int64: query, then response."""
        return torch.cat([self.query_ids, self.response_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        """``[B, Q + R]`` int64 0/1: the query mask, then the response mask."""
        return torch.cat([self.query_mask, self.response_mask], dim=1).long()

    def select(self, rows: torch.Tensor) -> PPOBatch:
        """The batch of ``rows`` (``[b]`` int64 indices), in that order."""
        return PPOBatch(
            self.query_ids[rows],
            self.query_mask[rows],
            self.response_ids[rows],
            self.response_mask[rows],
            self.scores[rows],
        )

    def to(self, device: torch.device | str) -> PPOBatch:
        """The batch with every tensor on ``device``."""
        return PPOBatch(
            self.query_ids.to(device),
            self.query_mask.to(device),
            self.response_ids.to(device),
            self.response_mask.to(device),
            self.scores.to(device),
        )


def check_temperature(temperature: float) -> float:
    """Return ``temperature`` as a float; ValueError unless it is a positive finite number."""
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        raise ValueError(f"temperature must be a number, got {temperature!r}")
    if not (0.0 < float(temperature) < math.inf):
        raise ValueError(f"temperature must be a positive finite number, got {temperature!r}")
    return float(temperature)


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counting real tokens only: ``[B, L]`` 0/1 mask -> ``[B, L]`` int64 (left
    padding gets position 0)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def response_logits(model: nn.Module, batch: PPOBatch, temperature: float) -> torch.Tensor:
    """Logits predicting the response tokens, divided by the sampling temperature.

    Args:
        model: a causal LM (``transformers``; a peft wrapper of one under LoRA).
        batch: ``B`` rows of ``Q + R`` tokens.
        temperature: the sampler's.

    Returns:
        ``[B, R, V]`` ``logits / temperature`` in float32 at least (the division happens after
        the cast, as in the sampler, which casts the logits to float32 before its warpers).
    """
    Q, R = batch.query_ids.shape[1], batch.response_ids.shape[1]
    mask = batch.attention_mask
    # only the last R + 1 positions go through the vocabulary projection (``logits_to_keep``):
    # the query's logits are never formed; position Q - 1 + t predicts response token t
    out = model(
        input_ids=batch.input_ids,
        attention_mask=mask,
        position_ids=position_ids(mask),
        use_cache=False,
        logits_to_keep=R + 1,
    )
    logits = out.logits[:, :R]
    if logits.shape[1] != R or Q < 1:
        raise ValueError(f"expected logits for {R} response positions, got {tuple(logits.shape)}")
    return at_least_float32(logits) / temperature


class ValueModel(nn.Module):
    """Critic: the policy's backbone architecture (``AutoModel``) plus a linear value head.

    ``forward(input_ids [B, L], attention_mask [B, L]) -> values [B, L]`` (float32).
    The head is initialised to zero so the first values are 0.
    """

    def __init__(self, backbone: nn.Module, hidden_size: int):
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    @classmethod
    def from_causal_lm(cls, model: PreTrainedModel) -> ValueModel:
        """Build a critic whose backbone is a deep copy of ``model``'s base model."""
        base = getattr(model, "model", None)
        if base is None:
            base = model.get_decoder()
        backbone = copy.deepcopy(base)
        hidden = model.config.get_text_config().hidden_size
        critic = cls(backbone, hidden)
        return critic.to(next(backbone.parameters()).device)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids(attention_mask),
            use_cache=False,
        )
        hidden = out.last_hidden_state
        return self.value_head(hidden.to(self.value_head.weight.dtype)).squeeze(-1).float()


def response_values(critic: nn.Module, batch: PPOBatch) -> torch.Tensor:
    """The critic's values of the states before each response token: ``[B, R]`` float32."""
    Q, R = batch.query_ids.shape[1], batch.response_ids.shape[1]
    return critic(batch.input_ids, batch.attention_mask)[:, Q - 1 : Q - 1 + R]


@contextlib.contextmanager
def update_mode(*models: nn.Module) -> Iterator[None]:
    """Dropout off for the update's forward passes, gradients kept, checkpointing still on.

    Every module goes to eval mode (``nn.Dropout`` and the attention-probability dropout of
    ``transformers`` layers read ``self.training``); decoder layers with gradient
    checkpointing enabled are flagged training again on their own (not their children), because
    ``transformers`` checkpoints a layer only while it is training. Restores the previous modes.
    """
    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
    except ImportError:  # pragma: no cover - older transformers
        GradientCheckpointingLayer = ()  # noqa: N806
    saved = [(m, m.training) for model in models for m in model.modules()]
    try:
        for model in models:
            model.eval()
            for m in model.modules():
                if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing:
                    m.training = True
        yield
    finally:
        for m, mode in saved:
            m.training = mode
