#!/usr/bin/env bash
# Install KernelZero into .venv and run the main job on the embedded log: `kernelzero demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/kernelzero demo "$@"
