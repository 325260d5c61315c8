"""Several processes (``accelerate launch`` / ``torchrun``): who samples, who writes, messaging.

Each process samples and trains on its share of the batch rows (``rank::world``); the main
process executes, grades, stores and writes the run folder; :meth:`Dist.bcast` hands its
results to every process. With one process every call is the identity.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Dist"]


class Dist:
    """The process group of one run, from an ``accelerate.Accelerator``."""

    def __init__(self, accelerator: Any):
        self.acc = accelerator
        self.main: bool = accelerator.is_main_process
        self.world: int = accelerator.num_processes
        self.rank: int = accelerator.process_index

    def shard(self, n: int) -> list[int]:
        """This process's rows of a batch of ``n`` rows (``rank, rank + world, ...``)."""
        return list(range(self.rank, n, self.world))

    def bcast(self, obj: Any) -> Any:
        """The main process's ``obj`` on every process (identity with one process)."""
        if self.world == 1:
            return obj
        from accelerate.utils import broadcast_object_list

        box = [obj]
        broadcast_object_list(box, from_process=0)
        return box[0]

    def gather(self, obj: Any) -> list[Any]:
        """Every process's ``obj``, in rank order (``[obj]`` with one process)."""
        if self.world == 1:
            return [obj]
        from accelerate.utils import gather_object

        return gather_object([obj])

    def barrier(self) -> None:
        self.acc.wait_for_everyone()

    def on_main(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` run on the main process only, its result on every process."""
        return self.bcast(fn(*args) if self.main else None)
