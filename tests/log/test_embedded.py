"""The event-log contract on the embedded SQLite backend."""

import pytest

from tests.log.contract import EventLogContract


class TestEmbeddedLog(EventLogContract):
    session_timeout_s = 2.0

    @pytest.fixture
    def log_url(self, tmp_path):
        return f"embedded:{tmp_path}/log.sqlite"


def test_stages_opening_a_new_log_together_all_open_it(tmp_path):
    # SQLite refused a new file's switch to WAL at once to all but one of several connections: the demo's evaluator,
    # opened in the background, and its first publication failed "database is locked" when they met
    import threading

    import anyio

    from kernelzero.log import open_log

    async def open_and_close(url):
        async with await open_log(url):
            pass

    failures = []

    def opener(url):
        try:
            anyio.run(open_and_close, url)
        except Exception as exc:  # noqa: BLE001  (every failure is the finding)
            failures.append(exc)

    for attempt in range(40):
        url = f"embedded:{tmp_path}/log-{attempt}.sqlite"
        threads = [threading.Thread(target=opener, args=(url,)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []
