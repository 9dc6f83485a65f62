"""Fixtures for the event-log tests: a real local Kafka broker for the kafka backend (started by scripts/kafka.sh).

The broker listens on 127.0.0.1:19092 (KZ_TEST_KAFKA_PORT overrides it), apart from a developer's
own 9092 broker. Tests share it and isolate themselves with unique topic and group names; nothing is
cleaned between tests. The tests are skipped only when Java is missing; a broker that fails to start
fails them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KAFKA_SCRIPT = REPO / "scripts" / "kafka.sh"
KAFKA_PORT = int(os.environ.get("KZ_TEST_KAFKA_PORT", "19092"))


def kafka_script(action: str, *options: str, timeout_s: float = 600) -> subprocess.CompletedProcess:
    """Run scripts/kafka.sh ACTION for the test broker; fails the test with the script's output if it fails."""
    result = subprocess.run(
        ["bash", str(KAFKA_SCRIPT), action, "--port", str(KAFKA_PORT), *options],
        capture_output=True, text=True, timeout=timeout_s,
    )
    if action != "status" and result.returncode != 0:
        pytest.fail(f"scripts/kafka.sh {action} --port {KAFKA_PORT} failed ({result.returncode}):\n"
                    f"{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture(scope="session")
def kafka_broker() -> str:
    """host:port of a running broker; one this session starts begins empty and is stopped at the end."""
    if shutil.which("java") is None:
        pytest.skip("java is not on PATH: the Kafka tests need Java 17+ to run a local broker (scripts/kafka.sh)")
    already_running = kafka_script("status").returncode == 0
    kafka_script("start", "--fresh")  # --fresh is ignored by a running broker
    yield f"127.0.0.1:{KAFKA_PORT}"
    if not already_running:
        kafka_script("stop")
