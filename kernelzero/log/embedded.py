"""The embedded event log: one SQLite file in WAL mode, shared by processes on one host; not for network filesystems.

Topics, partitions, offsets and consumer-group commits live in four tables. Group membership is
a table of heartbeats: a member that stops polling for `session_timeout_s` is dropped and its
partitions go to the others, from the group's last commit (at-least-once). Partitions are dealt
round-robin over the live members sorted by join time; during a rebalance two members may
briefly read the same partition, which at-least-once delivery allows. Retention is recorded
but not enforced: embedded logs keep every event.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Iterable, Sequence, TypeVar

import anyio

from kernelzero.log.base import (
    Consumer, EventLog, LogError, Message, Producer, Record, TopicPartition, TopicSpec, partition_for,
)

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS topics (name TEXT PRIMARY KEY, partitions INTEGER NOT NULL, retention_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, offset INTEGER NOT NULL,
    key BLOB, value BLOB NOT NULL, timestamp_ms INTEGER NOT NULL,
    PRIMARY KEY (topic, partition, offset)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS commits (
    grp TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL, next_offset INTEGER NOT NULL,
    PRIMARY KEY (grp, topic, partition)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS members (
    grp TEXT NOT NULL, member TEXT NOT NULL, joined REAL NOT NULL, heartbeat REAL NOT NULL,
    PRIMARY KEY (grp, member)) WITHOUT ROWID;
"""


def _into_wal(db: sqlite3.Connection, timeout_s: float) -> None:
    """Put the file in WAL mode, waiting out other connections doing the same: SQLite answers a new file's switch
    with "database is locked" at once, without its busy timeout, when another connection holds the file (two
    stages opening a new log together)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


class _Connection:
    """One SQLite connection used from worker threads, one call at a time."""

    def __init__(self, path: Path, timeout_s: float = 60.0):
        try:
            self.db = sqlite3.connect(path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
            _into_wal(self.db, timeout_s)
            self.db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process crashes
        except sqlite3.Error as exc:
            raise LogError(f"cannot open embedded log {path}: {exc}") from exc
        self.lock = threading.Lock()

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def call() -> T:
            with self.lock:
                try:
                    return fn(self.db)
                except sqlite3.Error as exc:
                    raise LogError(f"embedded log: {exc}") from exc

        return await anyio.to_thread.run_sync(call)

    def close(self) -> None:
        with self.lock:
            self.db.close()


def _transaction(db: sqlite3.Connection, body: Callable[[sqlite3.Connection], T]) -> T:
    db.execute("BEGIN IMMEDIATE")
    try:
        result = body(db)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return result


def _append(db: sqlite3.Connection, partitions: dict[str, int], messages: Sequence[Message]) -> None:
    """Insert messages at the end of their partitions; call inside a write transaction."""
    now = int(time.time() * 1000)
    ends: dict[TopicPartition, int] = {}
    for i, m in enumerate(messages):
        if m.topic not in partitions:
            raise LogError(f"topic {m.topic!r} does not exist")
        tp = (m.topic, partition_for(m.key, partitions[m.topic], fallback=i))
        if tp not in ends:
            row = db.execute(
                "SELECT COALESCE(MAX(offset) + 1, 0) FROM records WHERE topic=? AND partition=?", tp
            ).fetchone()
            ends[tp] = row[0]
        db.execute(
            "INSERT INTO records VALUES (?, ?, ?, ?, ?, ?)", (*tp, ends[tp], m.key, m.value, now)
        )
        ends[tp] += 1


def _store_commits(db: sqlite3.Connection, group: str, offsets: dict[TopicPartition, int]) -> None:
    db.executemany(
        "INSERT INTO commits VALUES (?, ?, ?, ?) ON CONFLICT (grp, topic, partition) "
        "DO UPDATE SET next_offset = excluded.next_offset",
        [(group, t, p, o) for (t, p), o in offsets.items()],
    )


class EmbeddedLog(EventLog):
    def __init__(self, path: str | Path, *, create: bool = True):
        self.path = Path(path).expanduser()
        if not create and not self.path.is_file():
            raise LogError(f"no event log at {self.path} (embedded:{path}): check the path, or --broker")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.url = f"embedded:{self.path}"
        self._conn = _Connection(self.path)
        self._conn.db.executescript(SCHEMA)

    async def ensure_topics(self, specs: Iterable[TopicSpec]) -> None:
        rows = [(s.name, s.partitions, s.retention_ms) for s in specs]
        await self._conn.run(lambda db: db.executemany("INSERT OR IGNORE INTO topics VALUES (?, ?, ?)", rows))

    async def producer(self, name: str = "producer") -> Producer:
        return EmbeddedProducer(self.path)

    async def consumer(self, group: str, topics: Sequence[str], *, session_timeout_s: float = 10.0) -> Consumer:
        known = await self.topics()
        missing = [t for t in topics if t not in known]
        if missing:
            raise LogError(f"cannot consume missing topics {missing} from {self.url}")
        return EmbeddedConsumer(self.path, group, list(topics), session_timeout_s)

    async def topics(self) -> dict[str, int]:
        return dict(await self._conn.run(lambda db: db.execute("SELECT name, partitions FROM topics").fetchall()))

    async def end_offsets(self, topic: str) -> dict[int, int]:
        def query(db: sqlite3.Connection) -> dict[int, int]:
            (count,) = db.execute("SELECT partitions FROM topics WHERE name=?", (topic,)).fetchone() or (0,)
            ends = {p: 0 for p in range(count)}
            ends.update(db.execute(
                "SELECT partition, MAX(offset) + 1 FROM records WHERE topic=? GROUP BY partition", (topic,)
            ).fetchall())
            return ends

        return await self._conn.run(query)

    async def committed(self, group: str, topic: str) -> dict[int, int]:
        def query(db: sqlite3.Connection) -> dict[int, int]:
            (count,) = db.execute("SELECT partitions FROM topics WHERE name=?", (topic,)).fetchone() or (0,)
            offsets = dict.fromkeys(range(count), 0)
            offsets.update(db.execute(
                "SELECT partition, next_offset FROM commits WHERE grp=? AND topic=?", (group, topic)
            ).fetchall())
            return offsets

        return await self._conn.run(query)

    async def groups(self) -> list[str]:
        rows = await self._conn.run(lambda db: db.execute(
            "SELECT DISTINCT grp FROM commits UNION SELECT DISTINCT grp FROM members ORDER BY 1"
        ).fetchall())
        return [r[0] for r in rows]

    async def close(self) -> None:
        self._conn.close()


class EmbeddedProducer(Producer):
    def __init__(self, path: Path):
        self._conn = _Connection(path)
        self._partitions = dict(self._conn.db.execute("SELECT name, partitions FROM topics").fetchall())

    async def send(self, messages: Sequence[Message]) -> None:
        if messages:
            await self._conn.run(lambda db: _transaction(db, lambda d: _append(d, self._partitions, messages)))

    async def close(self) -> None:
        self._conn.close()


class EmbeddedConsumer(Consumer):
    def __init__(self, path: Path, group: str, topics: list[str], session_timeout_s: float):
        self.group = group
        self.member = uuid.uuid4().hex
        self._topics = topics
        self._session_timeout_s = session_timeout_s
        self._conn = _Connection(path)
        self._partitions = dict(self._conn.db.execute("SELECT name, partitions FROM topics").fetchall())
        self._positions: dict[TopicPartition, int] = {}
        self._joined = False
        self._cursor = 0  # round-robin start, so one busy partition cannot starve the others
        # Heartbeats come from a thread, so a member busy with a long job between polls keeps its
        # partitions; only a dead process (or close) lets them go.
        self._stop = threading.Event()
        self._beats = threading.Thread(target=self._beat, name=f"heartbeat-{group}", daemon=True)
        self._beats.start()

    def _beat(self) -> None:
        while not self._stop.wait(self._session_timeout_s / 3):
            try:
                with self._conn.lock:
                    self._conn.db.execute(
                        "UPDATE members SET heartbeat=? WHERE grp=? AND member=?", (time.time(), self.group, self.member)
                    )
            except sqlite3.Error:
                continue  # a busy database: the next beat retries well within the session timeout

    def _heartbeat(self, db: sqlite3.Connection) -> None:
        """Renew membership, expire silent members, and take up this member's share of partitions."""
        now = time.time()
        db.execute("DELETE FROM members WHERE grp=? AND heartbeat < ?", (self.group, now - self._session_timeout_s))
        db.execute(
            "INSERT INTO members VALUES (?, ?, ?, ?) ON CONFLICT (grp, member) DO UPDATE SET heartbeat=excluded.heartbeat",
            (self.group, self.member, now, now),
        )
        members = [r[0] for r in db.execute(
            "SELECT member FROM members WHERE grp=? ORDER BY joined, member", (self.group,)
        )]
        index = members.index(self.member)
        every = [(t, p) for t in sorted(self._topics) for p in range(self._partitions[t])]
        mine = {tp for i, tp in enumerate(every) if i % len(members) == index}
        committed = {(t, p): o for t, p, o in db.execute(
            "SELECT topic, partition, next_offset FROM commits WHERE grp=?", (self.group,)
        )}
        self._positions = {tp: self._positions.get(tp, committed.get(tp, 0)) for tp in mine}
        self._joined = True

    def _fetch(self, db: sqlite3.Connection, max_records: int) -> list[Record]:
        _transaction(db, self._heartbeat)
        owned = sorted(self._positions)
        if not owned:
            return []
        self._cursor = (self._cursor + 1) % len(owned)
        records: list[Record] = []
        for tp in owned[self._cursor:] + owned[:self._cursor]:
            rows = db.execute(
                "SELECT offset, key, value, timestamp_ms FROM records WHERE topic=? AND partition=? AND offset>=? "
                "ORDER BY offset LIMIT ?", (*tp, self._positions[tp], max_records - len(records)),
            ).fetchall()
            records += [Record(tp[0], tp[1], o, k, v, ts) for o, k, v, ts in rows]
            if rows:
                self._positions[tp] = rows[-1][0] + 1
            if len(records) >= max_records:
                break
        return records

    async def poll(self, max_records: int = 500, timeout_s: float = 1.0) -> list[Record]:
        deadline = time.monotonic() + timeout_s
        pause = 0.005
        while True:
            records = await self._conn.run(lambda db: self._fetch(db, max_records))
            if records or time.monotonic() >= deadline:
                return records
            await anyio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.1)

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        if offsets:
            await self._conn.run(lambda db: _transaction(db, lambda d: _store_commits(d, self.group, offsets)))

    async def commit_with(self, messages: Sequence[Message], offsets: dict[TopicPartition, int]) -> None:
        def body(db: sqlite3.Connection) -> None:
            _append(db, self._partitions, messages)
            _store_commits(db, self.group, offsets)

        await self._conn.run(lambda db: _transaction(db, body))

    async def seek_to_beginning(self) -> None:
        if not self._joined:
            await self._conn.run(lambda db: _transaction(db, self._heartbeat))
        self._positions = {tp: 0 for tp in self._positions}

    async def position(self, tp: TopicPartition) -> int:
        return self._positions[tp]

    def assignment(self) -> set[TopicPartition]:
        return set(self._positions)

    async def close(self) -> None:
        self._stop.set()
        await anyio.to_thread.run_sync(self._beats.join)
        await self._conn.run(lambda db: db.execute(
            "DELETE FROM members WHERE grp=? AND member=?", (self.group, self.member)
        ))
        self._conn.close()
