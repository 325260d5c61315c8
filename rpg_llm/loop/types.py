"""The seams of the loop: what a buffer and a reward-rate estimator must offer.

:class:`rpg_llm.loop.buffer.SampleBuffer` is the :class:`Buffer`; the module
:mod:`rpg_llm.loop.estimator` is the :class:`RateEstimator` (DESIGN.md section 4, the estimator
contract shared with ``rpg_jax.estimator``).  Tests inject other implementations through
:class:`rpg_llm.loop.backends.Backends`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from rpg_llm.loop.buffer import Sample

__all__ = ["Buffer", "ParentSource", "RateEstimator"]


class Buffer(Protocol):
    """Durable storage of every sample of a run (Algorithm 1)."""

    def add_many(self, samples: Sequence[Sample]) -> list[int]:
        """Store ``samples`` at once (all or none); their new ids, in order."""
        ...

    def get(self, sample_id: int) -> Sample:
        """The stored sample with id ``sample_id`` (KeyError: none)."""
        ...

    def all(self, run: str | None = None) -> list[Sample]:
        """Every stored sample (of ``run`` if given), in insertion order."""
        ...

    def step_samples(self, run: str, step: int) -> list[Sample]:
        """The stored samples of ``step`` of ``run``, in row order."""
        ...

    def max_step(self, run: str) -> int:
        """Largest stored step of ``run`` (-1: none)."""
        ...

    def exec_seconds_by_row(self, run: str | None, max_step: int) -> dict[int, float]:
        """Per batch row, the execution seconds of steps ``1 .. max_step`` (infra left out)."""
        ...

    def close(self) -> None: ...


class ParentSource(Protocol):
    """Where the next prompts' parents come from (:class:`rpg_llm.loop.parents.ParentPool`)."""

    def top(
        self, k: int, rho: float | None, *, eligible: Callable[[Sample], bool] | None = None
    ) -> list[Sample]:
        """The ``k`` parents by ``raw_reward - rho * exec_time`` (``rho=None``: raw reward)."""
        ...


class RateEstimator(Protocol):
    """The reward-rate estimator contract, torch backend (DESIGN.md section 4)."""

    def init_state(self, dtype: torch.dtype = ..., device: Any = None) -> Any:
        """The state before any data (``rho_hat = 0``)."""
        ...

    def refit(
        self,
        state: Any,
        slot_rewards: Any,
        slot_times: Any,
        generator: torch.Generator,
        num_batches: int = ...,
    ) -> Any:
        """Refit on the slot sums (shape ``[S]`` each, seconds for times); the new state, whose
        ``rho_hat`` is the estimate (reward per second)."""
        ...
