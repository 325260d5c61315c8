"""The self-improvement training loop (paper Algorithm 1), one module per stage.

``rollout`` (prompts + generation), ``execution`` (scripts -> stored samples), ``accounting``
(estimator refit + rewards), ``update`` (PPO), ``recording`` (metrics, TensorBoard,
checkpoints), ``dist`` (several processes), ``backends`` (the injectable environment) and
``trainer`` (:class:`Trainer`, whose ``step`` strings the stages together; :func:`train`).
"""

from rpg_llm.config import LoopConfig, SamplingConfig
from rpg_llm.loop.accounting import Accounts, RateTracker
from rpg_llm.loop.backends import Backends, default_backends
from rpg_llm.loop.recording import StepRecord
from rpg_llm.loop.rollout import Rollout
from rpg_llm.loop.trainer import SEED_STEP, Trainer, train

__all__ = [
    "LoopConfig",
    "SamplingConfig",
    "Accounts",
    "RateTracker",
    "Backends",
    "default_backends",
    "StepRecord",
    "Rollout",
    "SEED_STEP",
    "Trainer",
    "train",
]
