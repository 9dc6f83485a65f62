"""What every analytics command does first: find the database and the log, bring the projection up to date, install the views.

`--db` takes a run directory (its `analytics.duckdb`, and its `log.sqlite` unless `--broker`
says otherwise) or a DuckDB file. Errors come out as `AnalyticsError` with the message to print
and the exit status; nothing here prints results.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import anyio

from kernelzero.config import Config

DB_FILE = "analytics.duckdb"
LOG_FILE = "log.sqlite"


class AnalyticsError(Exception):
    """A problem the user can fix (bad SQL, no database, a locked file); carries the exit status."""

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status


def add_db_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", metavar="PATH", help="run directory or DuckDB file (default: [analytics] db)")
    parser.add_argument("--no-update", action="store_true",
                        help="answer from the database as it is, without reading the log")
    parser.add_argument("--rebuild", action="store_true",
                        help="drop the projection and rebuild it from the start of the log")


def resolve(args: argparse.Namespace, config: Config) -> tuple[Path, str]:
    """The DuckDB file and the log URL this command uses."""
    if not args.db:
        return Path(config.analytics.db).expanduser(), config.log.url
    path = Path(args.db).expanduser()
    if path.is_dir() or (not path.suffix and not path.exists()):
        log_url = config.log.url if args.broker else f"embedded:{path / LOG_FILE}"
        return path / DB_FILE, log_url
    return path, config.log.url


def _embedded_log_missing(log_url: str) -> bool:
    return log_url.startswith("embedded:") and not Path(log_url.removeprefix("embedded:")).expanduser().exists()


async def _sync(db_path: Path, log_url: str, config: Config, rebuild: bool) -> None:
    from kernelzero.analytics.sync import sync_projection
    from kernelzero.log import LogError, open_log

    try:
        log = await open_log(log_url, create=False)
    except LogError as exc:
        print(f"kernelzero: cannot read the log ({exc}); answering from {db_path} as it is", file=sys.stderr)
        return
    try:
        with _open_projection(db_path) as projection:
            if rebuild:
                projection.reset()
            await sync_projection(log, projection, batch_records=config.analytics.batch_records)
    finally:
        await log.close()


@contextmanager
def _open_projection(db_path: Path):
    import duckdb

    from kernelzero.analytics.projection import Projection

    try:
        projection = Projection(db_path)
    except duckdb.IOException as exc:
        raise AnalyticsError(
            f"cannot open {db_path} for writing (is `kernelzero serve projector` running?): {exc}") from None
    try:
        yield projection
    finally:
        projection.close()


@contextmanager
def analytics_connection(args: argparse.Namespace, config: Config) -> Iterator:
    """A read-only connection with the views installed, after syncing the projection with the log."""
    import duckdb

    from kernelzero.analytics.views import install_views

    db_path, log_url = resolve(args, config)
    if args.rebuild and (args.no_update or _embedded_log_missing(log_url)):
        raise AnalyticsError(f"cannot rebuild: no log to read (at {log_url}, or --no-update given)")
    if not args.no_update and not _embedded_log_missing(log_url):
        anyio.run(_sync, db_path, log_url, config, args.rebuild)
    if not db_path.exists():
        raise AnalyticsError(f"nothing yet: no analytics database at {db_path} and no event log at {log_url}")
    try:
        con = duckdb.connect(str(db_path), read_only=True)
    except duckdb.IOException as exc:
        raise AnalyticsError(f"cannot open {db_path} (is `kernelzero serve projector` running?): {exc}") from None
    try:
        try:
            install_views(con, config.analytics)
        except duckdb.Error as exc:
            raise AnalyticsError(f"{db_path} does not match this version's tables ({exc}); "
                                 "run again with --rebuild next to its log") from None
        yield con
    finally:
        con.close()


def configured_connection(config: Config):
    """What a command opens without --db: [analytics] db, synced with the configured log first."""
    return analytics_connection(argparse.Namespace(db=None, broker=None, rebuild=False, no_update=False), config)


def count_events(con) -> int:
    return con.execute("SELECT count(*) FROM events").fetchone()[0]


def run_command(args: argparse.Namespace, config: Config, body, *, needs_events: bool = True) -> int:
    """Open the analytics database for `body(con) -> int`, turning AnalyticsError into a message and a status."""
    try:
        with analytics_connection(args, config) as con:
            if needs_events and count_events(con) == 0:
                print("nothing yet: the log holds no events", file=sys.stderr)
                return 0
            return body(con)
    except AnalyticsError as exc:
        print(f"kernelzero: {exc}", file=sys.stderr)
        return exc.status
