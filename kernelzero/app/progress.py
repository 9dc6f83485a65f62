"""A progress bar that follows a consumer group through one topic, from its own thread and log connection.

It shows the share of the topic's offsets the group has committed (so it moves a round at a time),
on stderr so that stdout stays the command's answer: a share, not a count, since on Kafka every
transaction's commit marker takes an offset too. It does NOT know what the stage made of the
records, and records published after it started only lengthen the bar.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

POLL_S = 1.0


async def _follow(log_url: str, group: str, topic: str, progress, task, stop: threading.Event) -> None:
    import anyio

    from kernelzero.log import open_log

    async with await open_log(log_url, create=False) as log:
        while True:
            total = sum((await log.end_offsets(topic)).values())
            done = sum((await log.committed(group, topic)).values())
            progress.update(task, total=total, completed=done)
            if stop.is_set():
                return
            await anyio.sleep(POLL_S)


@contextmanager
def following(log_url: str, group: str, topic: str, label: str) -> Iterator[None]:
    """Show `label` with the share of topic that group has committed, while the block runs."""
    import anyio
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    stop = threading.Event()
    with Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True)) as progress:
        task = progress.add_task(label, total=None)
        watcher = threading.Thread(target=anyio.run, args=(_follow, log_url, group, topic, progress, task, stop),
                                   name=f"progress-{group}", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            stop.set()
            watcher.join(timeout=10 * POLL_S)
