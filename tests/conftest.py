"""Shared pytest settings: async tests run on asyncio through anyio's plugin."""

import pytest


@pytest.fixture
def anyio_backend():
    return "asyncio"
