#!/usr/bin/env bash
# Install what the tests need, start the local Kafka broker for the tests, run every test, stop the broker.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYTHONDONTWRITEBYTECODE=  # each module's bytecode written once, by its first import (setup.sh)
port=${KZ_TEST_KAFKA_PORT:-19092}
bash scripts/kafka.sh start --port "$port" --fresh
trap 'bash scripts/kafka.sh stop --port "$port"' EXIT
.venv/bin/python -m pytest -q -rs "$@"
