#!/usr/bin/env bash
# Install what the tests need, start the local Kafka broker, run every test, stop the broker.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/kafka.sh start
trap 'bash scripts/kafka.sh stop' EXIT
.venv/bin/python -m pytest -q -rs "$@"
