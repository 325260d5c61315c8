#!/usr/bin/env bash
# The bandit simulation on one GPU: throughput and a stated part of the default figure, each
# printed as a ratio to the same script's run on a CPU (benchmarks/figure_cpu_reference.json).
#
#   bash benchmarks/figure_gpu.sh                    # on a GPU machine: pip install -e ".[jax,cuda]"
#   PLATFORM=cpu RECORD=1 bash benchmarks/figure_gpu.sh   # the CPU reference (writes the JSON)
#   SEEDS=100 ARMS=5,30 bash benchmarks/figure_gpu.sh     # a larger part of the figure
#
# Measures, in one run:
#  1. python benchmarks/bandit_throughput.py --seeds 4096: NPG-NIW decision.seeds/s (compile
#     excluded) and the estimator's ns per bivariate draw;
#  2. python -m paper_figures.regret_vs_arms --envs E1 --arms $ARMS --seeds $SEEDS (defaults 30
#     and 10): wall seconds of the whole command, compilation included, with an empty
#     compilation cache so that the CPU and GPU runs pay the same compile.
# Needs < 10 min on one GPU; no GPU visible to JAX with PLATFORM=cuda: one line, exit 2.
set -euo pipefail
cd "$(dirname "$0")/.."
platform=${PLATFORM:-cuda}
arms=${ARMS:-30}
seeds=${SEEDS:-10}
out=${OUT:-runs/figure-$platform-$(date +%Y%m%d-%H%M%S)}
ref=benchmarks/figure_cpu_reference.json
case "$platform" in cuda | cpu) ;; *) echo "figure_gpu.sh: PLATFORM=$platform: expected cuda or cpu" >&2; exit 2 ;; esac
export JAX_PLATFORMS=$platform
if [ "$platform" = cuda ] && ! python -c "import jax; jax.devices('gpu')" >/dev/null 2>&1; then
  echo "figure_gpu.sh: JAX sees no CUDA GPU (install the extra: pip install -e '.[jax,cuda]')" >&2
  exit 2
fi
mkdir -p "$out"
export RPG_JAX_CACHE="$out/jax-cache"  # empty: both platforms compile everything
python benchmarks/bandit_throughput.py --seeds 4096 --numpy-steps 400 --numpy-warmup 200 \
  | tee "$out/throughput.txt"
start=$(date +%s.%N)
python -m paper_figures.regret_vs_arms --envs E1 --arms "$arms" --seeds "$seeds" \
  --no-progress --out "$out/figure" | tee "$out/figure.txt"
end=$(date +%s.%N)
python - "$out" "$platform" "$arms" "$seeds" "$start" "$end" "$ref" "${RECORD:-0}" <<'PY'
import datetime, json, os, re, sys
from pathlib import Path

out, platform, arms, seeds, start, end, ref, record = sys.argv[1:]
text = (Path(out) / "throughput.txt").read_text()
row = re.search(r"^npg-niw\s+4096\s+\S+\s+([\d.]+)", text, re.M)
draw = re.search(r"([\d.eE+-]+) ns per bivariate draw", text)
now = {
    "platform": platform,
    "part": f"regret_vs_arms --envs E1 --arms {arms} --seeds {seeds}",
    "figure_part_s": round(float(end) - float(start), 1),
    "npg_decision_seeds_per_s": float(row.group(1)) if row else None,
    "ns_per_draw": float(draw.group(1)) if draw else None,
    "cpus": os.cpu_count(),
    "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
    "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M"),
}
(Path(out) / "summary.json").write_text(json.dumps(now, indent=1) + "\n")
print(json.dumps(now))
if record == "1":
    Path(ref).write_text(json.dumps(now, indent=1) + "\n")
    print(f"reference written: {ref}")
elif Path(ref).exists():
    cpu = json.loads(Path(ref).read_text())
    if cpu["part"] != now["part"]:
        print(f"no ratio: the CPU reference timed {cpu['part']!r}")
    else:
        print(
            f"{platform} / CPU reference: figure part {cpu['figure_part_s'] / now['figure_part_s']:.3g}x "
            f"faster, NPG-NIW decision.seeds/s {now['npg_decision_seeds_per_s'] / cpu['npg_decision_seeds_per_s']:.3g}x, "
            f"ns per draw {cpu['ns_per_draw'] / now['ns_per_draw']:.3g}x faster"
        )
PY
