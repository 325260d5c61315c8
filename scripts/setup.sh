#!/usr/bin/env bash
# One-step set-up used by the README and by CI: system packages, then the project with all extras.
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v apt-get >/dev/null 2>&1 && ! command -v bwrap >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq bubblewrap
fi
# the docker sandbox's engine (optional: RPG_NO_DOCKER=1 skips it; a failure leaves docker unset)
bash scripts/setup_docker.sh || echo "setup: the docker engine is not set up (docker tests skip)"
python -m pip install -q --upgrade pip
# torch 2.13.0 first: the CPU build (an unpinned torch would pull a multi-GB CUDA build).
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[jax,llm,ray,trl,test]"
