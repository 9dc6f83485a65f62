#!/usr/bin/env bash
# Install KernelZero into .venv and run the main job on the embedded log: `kernelzero demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYTHONDONTWRITEBYTECODE=  # each module's bytecode written once, by its first import (setup.sh)
exec .venv/bin/kernelzero demo "$@"
