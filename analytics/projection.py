"""The DuckDB projection of the event log: rows and consumed offsets commit in one DuckDB transaction; one writer process.

`Projection.apply(records)` is the whole core: records below the stored offset of their
partition are skipped (redelivery), the rest are decoded and turned into rows (`rows.py`). The
`events` rows go in first, as one Arrow batch with `ON CONFLICT DO NOTHING RETURNING event_id`;
only the events that came back as new get their typed rows (evaluations, samples, ...)
inserted, so an event produced twice at two offsets lands once everywhere. An evaluation is
its sample's `first_evaluation` when its claim in `evaluated_samples` (keyed by sample_id)
wins; evaluations of one sample share a partition (keyed by module), so log order decides the
same way in every rebuild. The partition
offsets move forward in the same transaction. A crash anywhere before COMMIT leaves neither
rows nor offsets, so the records come again and insert exactly once. Unknown event types and undecodable bytes are recorded in
`projection_skipped` and counted; the offset moves past them. A database written under another
`schema.sql` is dropped and rebuilt from the log when opened.

DuckDB allows one read-write process per file: while a projector service holds the database,
other processes cannot open it.
"""

from __future__ import annotations

import hashlib
import logging
from importlib import resources
from pathlib import Path
from typing import Sequence

import duckdb
import msgspec
import pyarrow as pa

from kernelzero.analytics.rows import Rows, rows_for
from kernelzero.log import Record, TopicPartition
from kernelzero.schemas import DecodeError, UnknownEventType, decode

SCHEMA_SQL = resources.files("kernelzero.analytics").joinpath("schema.sql").read_text()
SCHEMA_HASH = hashlib.sha256(SCHEMA_SQL.encode()).hexdigest()
# `events` first: its new ids decide which typed rows go in.
TABLES = (
    "events", "evaluations", "samples", "modules_proposed", "modules_accepted", "modules_rejected",
    "groups_scored", "group_samples", "policies", "projection_skipped",
)
ALL_TABLES = (*TABLES, "evaluated_samples", "projection_offsets")
logger = logging.getLogger("kernelzero.analytics")


class ApplyStats(msgspec.Struct):
    records: int = 0  # records handed in
    redelivered: int = 0  # below the stored next offset of their partition: skipped
    projected: int = 0  # decoded events written (duplicates by event_id insert nothing)
    evaluations: int = 0  # samples.evaluated events among them
    unknown: int = 0  # well-formed envelopes of a type this build does not know
    undecodable: int = 0

    def add(self, other: "ApplyStats") -> None:
        for field in self.__struct_fields__:
            setattr(self, field, getattr(self, field) + getattr(other, field))


class Projection:
    """One DuckDB database holding the projected tables and the offsets they reflect."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.con = duckdb.connect(str(self.path))
        self._ensure_schema()
        self._arrow_schemas = {t: self._arrow_schema(t) for t in TABLES}
        self._offsets = self.load_offsets()

    def _ensure_schema(self) -> None:
        """Create the tables; a database made under another schema.sql is emptied and rebuilt from the log."""
        self.con.execute("CREATE TABLE IF NOT EXISTS projection_meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
        stored = self.con.execute("SELECT value FROM projection_meta WHERE key = 'schema_sha256'").fetchone()
        if stored is not None and stored[0] != SCHEMA_HASH:
            logger.warning("%s was projected under another schema: rebuilding it from the log", self.path)
            self._drop_tables()
        self.con.execute(SCHEMA_SQL)
        self.con.execute("INSERT OR REPLACE INTO projection_meta VALUES ('schema_sha256', ?)", [SCHEMA_HASH])

    def _drop_tables(self) -> None:
        for table in ALL_TABLES:
            self.con.execute(f"DROP TABLE IF EXISTS {table}")

    def _arrow_schema(self, table: str) -> pa.Schema:
        return self.con.sql(f"SELECT * FROM {table} LIMIT 0").to_arrow_table().schema

    def load_offsets(self) -> dict[TopicPartition, int]:
        rows = self.con.execute('SELECT topic, "partition", next_offset FROM projection_offsets').fetchall()
        return {(t, p): o for t, p, o in rows}

    @property
    def offsets(self) -> dict[TopicPartition, int]:
        """Per partition, the next offset the projection has not yet applied."""
        return dict(self._offsets)

    def apply(self, records: Sequence[Record]) -> ApplyStats:
        """Project a batch of records and advance the stored offsets, all in one transaction."""
        stats = ApplyStats(records=len(records))
        fresh = [r for r in records if r.offset >= self._offsets.get((r.topic, r.partition), 0)]
        stats.redelivered = len(records) - len(fresh)
        if not fresh:
            return stats
        rows = self._rows(fresh, stats)
        advanced = dict(self._offsets)
        for r in fresh:
            tp = (r.topic, r.partition)
            advanced[tp] = max(advanced.get(tp, 0), r.offset + 1)
        self.con.begin()
        try:
            new_ids = self._insert_events(rows.pop("events", []))
            for table in TABLES[1:]:
                kept = [r for r in rows.get(table, ()) if table == "projection_skipped" or r["event_id"] in new_ids]
                if table == "evaluations":
                    self._mark_first_evaluations(kept)
                if kept:
                    self._insert(table, kept)
            self._store_offsets({tp: advanced[tp] for tp in advanced if advanced[tp] != self._offsets.get(tp)})
            self.con.commit()
        except BaseException:
            self.con.rollback()
            raise
        self._offsets = advanced
        return stats

    def _rows(self, records: Sequence[Record], stats: ApplyStats) -> Rows:
        rows: Rows = {}
        seen: set[str] = set()
        for record in records:
            try:
                event = decode(record.value)
            except UnknownEventType as exc:
                stats.unknown += 1
                rows.setdefault("projection_skipped", []).append(_skipped(record, "unknown_type", exc))
                continue
            except DecodeError as exc:
                stats.undecodable += 1
                rows.setdefault("projection_skipped", []).append(_skipped(record, "undecodable", exc))
                continue
            if event.event_id in seen:
                continue
            seen.add(event.event_id)
            stats.projected += 1
            stats.evaluations += event.type == "samples.evaluated"
            for table, table_rows in rows_for(event, record).items():
                rows.setdefault(table, []).extend(table_rows)
        return rows

    def _insert_events(self, rows: list[dict]) -> set[str]:
        """Insert event rows; returns the ids that were not there yet."""
        if not rows:
            return set()
        batch = self.con.from_arrow(pa.Table.from_pylist(rows, schema=self._arrow_schemas["events"]))
        inserted = self.con.execute(
            "INSERT INTO events BY NAME SELECT * FROM batch ON CONFLICT DO NOTHING RETURNING event_id"
        ).fetchall()
        return {event_id for (event_id,) in inserted}

    def _mark_first_evaluations(self, rows: list[dict]) -> None:
        """Clear `first_evaluation` on rows whose sample was evaluated before (in log order)."""
        firsts: dict[str, str] = {}
        for row in rows:
            firsts.setdefault(row["sample_id"], row["event_id"])
        if not firsts:
            return
        claims = self.con.from_arrow(pa.table({"sample_id": list(firsts), "event_id": list(firsts.values())}))
        won = {event_id for (event_id,) in self.con.execute(
            "INSERT INTO evaluated_samples SELECT * FROM claims ON CONFLICT DO NOTHING RETURNING event_id"
        ).fetchall()}
        for row in rows:
            row["first_evaluation"] = row["event_id"] in won

    def _insert(self, table: str, rows: list[dict]) -> None:
        batch = self.con.from_arrow(pa.Table.from_pylist(rows, schema=self._arrow_schemas[table]))
        # Typed tables have no key (their rows are new by construction); skipped records do.
        conflict = " ON CONFLICT DO NOTHING" if table == "projection_skipped" else ""
        self.con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM batch{conflict}")

    def _store_offsets(self, offsets: dict[TopicPartition, int]) -> None:
        self.con.executemany(
            'INSERT INTO projection_offsets VALUES (?, ?, ?) ON CONFLICT (topic, "partition") '
            "DO UPDATE SET next_offset = excluded.next_offset",
            [(t, p, o) for (t, p), o in offsets.items()],
        )

    def reset(self) -> None:
        """Drop and recreate every table, forgetting the offsets: the next sync rebuilds from the log's beginning."""
        self.con.begin()
        self._drop_tables()
        self.con.execute(SCHEMA_SQL)
        self.con.commit()
        self._offsets = {}

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> "Projection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _skipped(record: Record, reason: str, exc: Exception) -> dict:
    return {"topic": record.topic, "partition": record.partition, "offset": record.offset,
            "reason": reason, "error": str(exc)[:2000]}
