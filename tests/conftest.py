"""Shared pytest settings and fixtures: async tests run on asyncio through anyio's plugin; tiny random-weight models, built once per session; the files lying-file candidates aim at."""

import pytest

from kernelzero.kit.models import TINY_QWEN2, build_random_model


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
def lie_targets():
    """A root-only secret, host files and /etc/shadow's first line, with fresh markers (tests/sandbox_targets.py)."""
    from tests.sandbox_targets import planted
    with planted() as targets:
        yield targets


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return build_random_model(tmp_path_factory.mktemp("tiny") / "model", TINY_QWEN2, seed=0)


@pytest.fixture(scope="session")
def other_model_dir(tmp_path_factory):
    """Same architecture and tokenizer, other random weights: a stand-in for a trained policy."""
    return build_random_model(tmp_path_factory.mktemp("tiny") / "model-v1", TINY_QWEN2, seed=1)


@pytest.fixture(scope="session")
def tiny_generator(tiny_model_dir):
    from kernelzero.producers.backend_transformers import TransformersGenerator

    return TransformersGenerator(str(tiny_model_dir), device="cpu", seed=0)
