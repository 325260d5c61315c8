"""The SFT warm start of a run: fine-tune the policy on the task's baselines before RL, once.

A fresh run fine-tunes the actor in place (:func:`rpg_llm.learner.sft.sft_warm_start`), records
the losses (``metrics.jsonl`` lines with ``step`` 0, TensorBoard ``sft/loss``), writes the weights
once to ``sft_weights.safetensors`` and their SHA-256 to ``sft.json``.  A resume loads the stored
weights instead of re-running the SFT, so the PPO reference (with LoRA, the frozen base) is the
fine-tuned model again, and checks their hash.  Runs that share the starting weights, the SFT
pairs and every SFT setting (the arms and seeds of ``paper_figures.llm_table`` at one
``--sft-seed``) compute it once: :mod:`rpg_llm.learner.sft_cache` memoises it (CPU, one process).
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

from rpg_core.diskfull import naming_disk_full
from rpg_llm.config import LoopConfig
from rpg_llm.learner import sft, sft_cache
from rpg_llm.loop.dist import Dist
from rpg_llm.loop.recording import Recorder
from rpg_llm.loop.rollout import CHAT_TEMPLATE_ROOM
from rpg_llm.loop.runfolder import RunFolder

__all__ = ["WarmStart", "weights_digest"]

log = logging.getLogger("rpg_llm.loop")


@dataclass
class WarmStart:
    """The SFT warm start of one run (module docstring).

    Attributes:
        cfg: the run's settings (``sft_*`` fields, sampling budget, seeds).
        policy: the loaded :class:`rpg_llm.learner.policy.Policy`; its model is fine-tuned in place.
        folder: the run folder; recorder: where the SFT losses go; dist: the processes.
        description: the task text the SFT prompts show.
        baselines: ``() -> [(name, code)]``, the task's baseline scripts (read only if needed).
    """

    cfg: LoopConfig
    policy: Any
    folder: RunFolder
    recorder: Recorder
    dist: Dist
    description: str
    baselines: Callable[[], list[tuple[str, str]]]

    def _count_tokens(self, s: str) -> int:
        return len(self.policy.tokenizer(s, add_special_tokens=False)["input_ids"])

    def run(self, resume: bool) -> list[float]:
        """Fine-tune the actor in place for ``cfg.sft_steps`` steps, or load the run's weights.

        Returns the SFT losses (those stored in ``sft.json`` on a resume).  Fresh run: the losses
        go to ``metrics.jsonl`` (lines with ``step`` 0 and ``sft_step``) and TensorBoard
        (``sft/loss``); the weights are written once to ``sft_weights.safetensors`` and
        ``sft.json`` records the losses with their SHA-256 and the SFT computation's cache key
        (``sft_cache_key``; None where the cache does not apply: GPU or several processes).
        Resume: the stored weights are loaded and their SHA-256 checked; a run folder that has
        ``sft.json`` but no weights file re-runs the seeded SFT (CPU-deterministic), checks it
        the same way and stores the weights. A resume of a run stopped during its SFT (no
        ``sft.json`` yet) drops the stopped SFT's loss lines and records the whole SFT again,
        so the record holds each SFT step once.

        Raises:
            RuntimeError: on resume, the loaded or re-run SFT weights differ from the stored
                hash.
        """
        cfg = self.cfg
        if cfg.sft_steps == 0:
            return []
        t0 = time.perf_counter()
        path = self.folder.root / "sft.json"
        stored = json.loads(path.read_text()) if resume and path.exists() else None
        weights = self.folder.sft_weights_path
        if stored is not None and weights.exists():
            load_model(self.policy.model, str(weights), strict=True)
            self._check_digest(stored, path, "loaded")
            log.info("SFT weights loaded from %s in %.1f s", weights, time.perf_counter() - t0)
            return list(stored.get("losses", []))
        if stored is None and resume and self.dist.main:
            dropped = self.folder.drop_sft_metrics()  # a stopped SFT's lines: recorded anew
            if dropped:
                log.info("SFT stopped after %d recorded steps: running it again", dropped)
        losses, digest, key = self._fine_tune(record=stored is None)
        if stored is not None:
            self._check_digest(stored, path, "re-run", digest)
        if self.dist.main:
            self._save_weights()
            if stored is None:
                info = {
                    "steps": cfg.sft_steps,
                    "losses": losses,
                    "weights_sha256": digest,
                    "sft_cache_key": key,
                }
                text = json.dumps(info, indent=1) + "\n"
                tmp = path.with_name(path.name + ".tmp")
                with naming_disk_full(path, lambda: tmp.unlink(missing_ok=True)):
                    tmp.write_text(text)
                    os.replace(tmp, path)
        self.dist.barrier()
        log.info(
            "SFT warm start: %d steps in %.1f s, loss %s",
            cfg.sft_steps,
            time.perf_counter() - t0,
            " ".join(f"{x:.3f}" for x in losses),
        )
        return losses

    def _fine_tune(self, record: bool) -> tuple[list[float], str, str | None]:
        """Build the SFT examples and fine-tune the actor in place; returns the losses, the
        fine-tuned weights' :func:`weights_digest` (hashed once: ~0.5 GB for the 135M model) and
        the :func:`rpg_llm.learner.sft_cache.sft_key` of the computation (None where the cache
        is not used: GPU or several processes).

        The result is memoised by :mod:`rpg_llm.learner.sft_cache`, keyed by the starting
        weights, the pairs and every SFT setting (bit-identical on a CPU).
        """

        cfg = self.cfg
        seed = cfg.seed if cfg.sft_seed is None else cfg.sft_seed
        budget = cfg.sampling.max_prompt_tokens - CHAT_TEMPLATE_ROOM
        examples = sft.build_sft_examples(
            self.description,
            self.baselines(),
            cfg.action,
            cfg.timeout_s,
            n=cfg.sft_examples,
            seed=seed,
            max_prompt_tokens=budget,
            count_tokens=self._count_tokens,
            switch_fraction=cfg.sft_switch_fraction,
        )
        settings = {
            "steps": cfg.sft_steps,
            "batch_size": cfg.sft_batch_size,
            "lr": cfg.sft_lr,
            "seed": seed,
            "max_prompt_tokens": cfg.sampling.max_prompt_tokens,
            "cpu_threads": cfg.cpu_threads,
            "device": str(self.policy.device),
        }
        # exact memoisation needs a deterministic SFT: one process on a CPU
        use_cache = self.policy.device.type == "cpu" and self.dist.world == 1
        if use_cache:
            sft_cache.max_entries()  # a bad RPG_SFT_CACHE_ENTRIES fails before the SFT runs
        key = sft_cache.sft_key(weights_digest(self.policy.model), examples, settings)
        cached = sft_cache.load_entry(key, self.policy.model, weights_digest) if use_cache else None
        if cached is not None:
            losses = [float(x) for x in cached["losses"]]
            if record:
                for k, loss in enumerate(losses, start=1):
                    self.recorder.record_sft(k, loss)
            log.info("SFT warm start: %d steps loaded from the SFT cache (%s)", len(losses), key)
            return losses, str(cached["weights_sha256"]), key  # load_entry checked it
        losses = sft.sft_warm_start(
            self.policy,
            examples,
            cfg.sft_steps,
            batch_size=cfg.sft_batch_size,
            lr=cfg.sft_lr,
            seed=seed,
            max_prompt_tokens=cfg.sampling.max_prompt_tokens,
            cpu_threads=cfg.cpu_threads,
            on_step=self.recorder.record_sft if record else None,
        )
        gc.collect()  # the SFT optimiser states and graphs go before PPO allocates its own
        digest = weights_digest(self.policy.model)
        if use_cache:
            info = {"losses": losses, "weights_sha256": digest}
            try:
                sft_cache.store_entry(key, self.policy.model, {**info, "settings": settings})
            except Exception as err:  # noqa: BLE001 - a full or read-only cache costs time, never the run
                log.warning("SFT cache not written: %s", err)
        return losses, digest, key if use_cache else None

    def _check_digest(
        self, stored: dict[str, Any], path: Path, how: str, digest: str | None = None
    ) -> None:
        """Raises RuntimeError when the actor's weights (``digest``, None: hash them now) are
        not the ones ``stored`` (``sft.json``) records."""
        digest = digest or weights_digest(self.policy.model)
        if stored.get("weights_sha256") != digest:
            raise RuntimeError(
                f"the {how} SFT warm start gave other weights than {path} records "
                f"(sha256 {digest[:12]}... != {str(stored.get('weights_sha256'))[:12]}...): "
                "the PPO reference would differ from the run's"
            )

    def _save_weights(self) -> None:
        """Write the fine-tuned weights to the run folder atomically (safetensors).

        Raises:
            DiskFull: the disk is full (no partial file is left).
        """
        weights = self.folder.sft_weights_path
        tmp = weights.with_name(weights.name + ".tmp")
        with naming_disk_full(tmp, lambda: tmp.unlink(missing_ok=True)):
            save_model(self.policy.model, str(tmp))
            os.replace(tmp, weights)


def weights_digest(model: torch.nn.Module) -> str:
    """SHA-256 (hex) of a model's parameters, in ``named_parameters`` order (names, shapes,
    dtypes and bytes): equal digests mean bit-identical weights."""
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        t = p.detach().to("cpu").contiguous()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()
