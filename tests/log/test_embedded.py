"""The event-log contract on the embedded SQLite backend."""

import pytest

from tests.log.contract import EventLogContract


class TestEmbeddedLog(EventLogContract):
    session_timeout_s = 2.0

    @pytest.fixture
    def log_url(self, tmp_path):
        return f"embedded:{tmp_path}/log.sqlite"
