"""The progress bar follows a consumer group's committed records on a real embedded log."""

import threading

import anyio

from kernelzero.app.progress import _follow, following
from tests.test_log_cli import fill


class Recorded:
    def __init__(self):
        self.updates = []

    def update(self, task, **fields):
        self.updates.append(fields)


def test_the_bar_counts_what_the_group_committed_out_of_the_topic(tmp_path):
    url = f"embedded:{tmp_path}/log.sqlite"
    fill(url, 5)  # 5 records of modules.rejected, the group "reader" committed 3
    stop = threading.Event()
    stop.set()
    progress = Recorded()
    anyio.run(_follow, url, "reader", "modules.rejected", progress, 0, stop)
    assert progress.updates == [{"total": 5, "completed": 3}]


def test_following_leaves_the_block_promptly_and_writes_to_stderr_only(tmp_path, capsys):
    url = f"embedded:{tmp_path}/log.sqlite"
    fill(url, 2)
    with following(url, "reader", "modules.rejected", "reading"):
        pass
    out, err = capsys.readouterr()
    assert out == "" and "reading" in err and "100%" in err
    assert not [t for t in threading.enumerate() if t.name == "progress-reader"]
