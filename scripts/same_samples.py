"""Do two checkouts train the same way? Three short runs with deterministic execution times.

``python scripts/same_samples.py --out DIR`` runs the CPU default (preset ``cpu-default``) three
times, through the library entry points every checkout of this project has had
(``rpg_llm.loop.train`` and ``rpg_llm.engines.trl.train_trl``, settings by
``dataclasses.replace`` of the preset):

* ``vanilla``: ``--method vanilla --steps 3 --seed 0``;
* ``rpg``: ``--method rpg --steps 3 --seed 0``;
* ``trl``: ``--engine trl --steps 2 --seed 0``;

and writes ``DIR/<name>/samples.csv`` (and the run folders). Scripts run and are graded for
real, but each sample's measured time is replaced by a function of its script's text (1 to 5 s
from its SHA-256), so that ``rho_hat`` and the RPG arm's parent ranking, which depend on the
times, do not move with the machine's load. Run it from two checkouts (``PYTHONPATH`` set to
the other checkout's root) and compare the files; ``--compare A B`` prints the first
difference in the answers' status, score, raw reward, parent and token count, and exits 1 when
there is one.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import os
import sys
from pathlib import Path

COLUMNS = ("step", "row", "id", "parent", "status", "score", "raw_reward", "tokens")
RUNS = ("vanilla", "rpg", "trl")


def fixed_seconds(code: str) -> float:
    """A script's stand-in execution time, seconds: 1 to 5 from its text's SHA-256."""
    return 1.0 + int(hashlib.sha256(code.encode()).hexdigest()[:8], 16) % 4001 / 1000.0


def _backends(cfg):
    from rpg_llm.loop.backends import default_backends

    backends = default_backends(cfg)
    real = backends.run_batch

    def run_batch(codes, task, sandbox, timeout_s, executor=None):
        outcomes = real(codes, task, sandbox, timeout_s, executor)
        return [
            dataclasses.replace(o, delta=fixed_seconds(c), cpu_s=fixed_seconds(c))
            for c, o in zip(codes, outcomes, strict=True)
        ]

    backends.run_batch = run_batch
    return backends


def run_all(out: Path) -> None:
    from rpg_llm.presets import get_preset

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    base = get_preset("cpu-default").config
    for name in RUNS:
        method = "rpg" if name == "trl" else name
        cfg = dataclasses.replace(
            base,
            steps=2 if name == "trl" else 3,
            seed=0,
            engine="trl" if name == "trl" else "ppo",
            reward=dataclasses.replace(base.reward, method=method),
        )
        run_dir = out / name
        if name == "trl":
            from rpg_llm.engines.trl import train_trl

            train_trl(cfg, run_dir, backends=_backends(cfg), progress=False)
        else:
            from rpg_llm.loop import train

            train(cfg, run_dir, backends=_backends(cfg), progress=False)
        print(f"{name}: {run_dir / 'samples.csv'}", flush=True)


def _rows(path: Path) -> list[tuple[str, ...]]:
    with open(path, newline="") as fh:
        return [tuple(r[c] for c in COLUMNS) for r in csv.DictReader(fh)]


def compare(a: Path, b: Path) -> int:
    """0 when every run's samples agree in :data:`COLUMNS`, else 1 (the first difference
    printed)."""
    status = 0
    for name in RUNS:
        ra, rb = _rows(a / name / "samples.csv"), _rows(b / name / "samples.csv")
        diff = next((i for i, (x, y) in enumerate(zip(ra, rb, strict=False)) if x != y), None)
        if diff is None and len(ra) == len(rb):
            print(f"{name}: {len(ra)} samples, the same")
            continue
        status = 1
        if diff is None:
            print(f"{name}: {len(ra)} against {len(rb)} samples")
        else:
            print(f"{name}: sample {diff} differs: {dict(zip(COLUMNS, ra[diff], strict=True))}")
            print(f"{' ' * len(name)}  against {dict(zip(COLUMNS, rb[diff], strict=True))}")
    return status


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--out", type=Path, help="write the three runs here")
    p.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="compare two --out")
    args = p.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        p.error("give --out DIR or --compare A B")
    run_all(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
