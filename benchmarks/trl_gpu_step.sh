#!/usr/bin/env bash
# One step of the Qwen3.5-4B MLE-Bench preset on TRL's GRPOTrainer, vLLM colocated, one GPU.
#
#   bash benchmarks/trl_gpu_step.sh                       # B = 16 answers (4 prompts x G = 4)
#   B=128 G=8 bash benchmarks/trl_gpu_step.sh             # the paper's 128 answers per step
#   bash benchmarks/trl_gpu_step.sh --model /weights/Qwen3.5-4B --data-root ~/mlebench/data
#
# Needs: a CUDA GPU; pip install -e ".[trl]" vllm; the Qwen/Qwen3.5-4B weights (hub cache or
# --model FOLDER); MLE-Bench data (env RPG_MLEBENCH_DATA or --data-root). A missing one ends in
# one line and exit 2 before any model loads. Prints the step line, the wall time and the
# run folder; extra arguments go to python -m rpg_llm.run.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-runs/trl-gpu-step-$(date +%Y%m%d-%H%M%S)}
start=$(date +%s)
python -m rpg_llm.run --preset qwen3.5-4b-mlebench --engine trl --use-vllm \
  --steps 1 --batch-size "${B:-16}" --num-generations "${G:-4}" --no-progress --no-plot \
  --out "$out" "$@"
echo "trl_gpu_step: 1 step in $(( $(date +%s) - start )) s, run folder $out"
