"""Shared fixtures of the proposer tests: one validator sandbox per session (its fork server imports torch once)."""

import pytest

from kernelzero.config import EvaluatorConfig, ValidatorConfig
from kernelzero.consumers.validator import validator_sandbox

SMALL = 2.0 ** -13  # problem scale for CPU tests: ~8k elements per tensor


@pytest.fixture(scope="session")
def sandbox():
    box = validator_sandbox(EvaluatorConfig(), "auto")
    yield box
    box.close()


@pytest.fixture
def cpu_config():
    return ValidatorConfig(device="cpu", timeout_s=60.0, max_runtime_ms=5000.0, max_memory_gb=2.0)
