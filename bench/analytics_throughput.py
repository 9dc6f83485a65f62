"""Benchmark the analytics projection (events/s through the real log -> DuckDB path) and frontier refresh at 1 M and 10 M samples.

Usage: .venv/bin/python bench/analytics_throughput.py --out DIR [--events 200000] [--sizes 1000000,10000000]

1. Projection throughput: synthetic events (kernelzero.analytics.synthetic) are appended to an
   embedded SQLite log, then `sync_projection` projects them into an empty DuckDB file; the
   events/s figure includes reading the log, decoding, row building, Arrow inserts and commits.
2. Frontier refresh: the `evaluations` and `samples` tables are filled to each size directly with
   DuckDB SQL (generating 10 M events through the log would take hours on 2 cores), then the
   full frontier snapshot (views.sql `frontier_at` over the `attempts` view) is computed; median
   of 3. After the largest fill, more events are appended to the log and projected through the
   real path, to show insert speed with large tables and the event_id index.
It does not measure Kafka, or concurrent readers.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import anyio

from kernelzero.analytics.frontier import frontier_snapshot
from kernelzero.analytics.projection import Projection
from kernelzero.analytics.sync import sync_projection
from kernelzero.analytics.synthetic import synthetic_run
from kernelzero.analytics.views import install_views
from kernelzero.config import AnalyticsConfig
from kernelzero.log import open_log
from kernelzero.stage import publish

API_VOCABULARY = 40
FILL_SQL = """
INSERT INTO {table} BY NAME
SELECT 'bench-{table}-' || i AS event_id, 's' || i AS sample_id, 'bm' || (i // 8) AS module_id,
       CASE WHEN i % 2 = 0 THEN 'cuda' ELSE 'triton' END AS backend, {extra}
       apis, 1 AS level, (i * 10 // {total})::INTEGER AS policy_version, to_timestamp(1.7e9 + i) AS produced_at
FROM (SELECT i, list_sort(list_distinct(list_transform(range(1 + (hash(i // 8) % 3)::BIGINT),
                  lambda k: 'torch.api' || (hash(i // 8 + k * 7919) % {vocab})))) AS apis
      FROM range({start}, {stop}) t(i))
"""
EVAL_EXTRA = """CASE WHEN hash(i) % 100 < 40 THEN 'correct' WHEN hash(i) % 100 < 70 THEN 'compile_error'
            ELSE 'incorrect' END AS verdict, TRUE AS first_evaluation, array_to_string(apis, ' + ') AS api_set,
       CASE WHEN hash(i) % 100 < 40 THEN 0.5 + (hash(i * 3) % 1000) / 500.0 END AS speedup,"""


async def _fill_log(url: str, modules: int, seed: int) -> int:
    log = await open_log(url)
    try:
        batch, count = [], 0
        for event in synthetic_run(modules, group_size=8, versions=10, seed=seed):
            batch.append(event)
            if len(batch) == 5000:
                await publish(log, batch)
                count, batch = count + len(batch), []
        await publish(log, batch)
        return count + len(batch)
    finally:
        await log.close()


async def _project(url: str, projection: Projection, config: AnalyticsConfig):
    log = await open_log(url)
    try:
        return await sync_projection(log, projection, batch_records=config.batch_records)
    finally:
        await log.close()


def projection_throughput(url: str, events_target: int, config: AnalyticsConfig, projection: Projection,
                          seed: int) -> dict:
    """Append about `events_target` new events to the log, then time bringing the projection up to date."""
    started = time.perf_counter()
    appended = anyio.run(_fill_log, url, max(1, events_target // 19), seed)  # ~19 events per module of 8 samples
    fill_s = time.perf_counter() - started
    started = time.perf_counter()
    stats = anyio.run(_project, url, projection, config)
    seconds = time.perf_counter() - started
    return {"events": stats.projected, "evaluations": stats.evaluations, "seconds": round(seconds, 2),
            "events_per_s": round(stats.projected / seconds), "log_append_s": round(fill_s, 2),
            "appended": appended}


def fill_tables(projection: Projection, start: int, stop: int, total: int) -> float:
    started = time.perf_counter()
    chunk = 2_000_000
    for lo in range(start, stop, chunk):
        hi = min(stop, lo + chunk)
        for table, extra in (("evaluations", EVAL_EXTRA), ("samples", "")):
            projection.con.execute(FILL_SQL.format(table=table, extra=extra, vocab=API_VOCABULARY,
                                                   start=lo, stop=hi, total=total))
    return time.perf_counter() - started


def frontier_refresh(projection: Projection, config: AnalyticsConfig) -> dict:
    times, entries = [], 0
    for _ in range(3):
        started = time.perf_counter()
        entries = len(frontier_snapshot(projection.con, config).entries)
        times.append(time.perf_counter() - started)
    full = projection.con.execute("SELECT count(*) FROM frontier").fetchone()[0]
    return {"median_s": round(statistics.median(times), 3), "min_s": round(min(times), 3),
            "frontier_rows": full, "snapshot_entries": entries}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for results.json and the working files")
    parser.add_argument("--events", type=int, default=200_000, help="events projected through the real path")
    parser.add_argument("--sizes", default="1000000,10000000", help="evaluated-sample counts for the frontier refresh")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = AnalyticsConfig()
    db = out / "bench.duckdb"
    for stale in out.glob("bench*"):
        stale.unlink()
    for stale in out.glob("log.sqlite*"):
        stale.unlink()
    url = f"embedded:{out}/log.sqlite"
    results: dict = {"machine": f"{platform.machine()} {platform.processor() or ''} ".strip(),
                     "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    with Projection(db) as projection:
        install_views(projection.con, config)
        results["projection_empty"] = projection_throughput(url, args.events, config, projection, seed=0)
        print("projection into an empty database:", results["projection_empty"], flush=True)
        filled, rows = 0, []
        sizes = [int(s) for s in args.sizes.split(",")]
        for size in sizes:
            fill_s = fill_tables(projection, filled, size, sizes[-1])
            filled = size
            refresh = frontier_refresh(projection, config)
            rows.append({"samples": size, "fill_s": round(fill_s, 1)} | refresh)
            print(f"frontier at {size:,} samples:", rows[-1], flush=True)
        results["frontier"] = rows
        results["projection_large"] = projection_throughput(url, args.events // 4, config, projection, seed=1)
        print(f"projection into a database of {filled:,} samples:", results["projection_large"], flush=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print()
    print("| measurement | value |")
    print("|---|---|")
    for key in ("projection_empty", "projection_large"):
        r = results[key]
        print(f"| projection ({key.split('_')[1]} db): {r['events']:,} events | {r['events_per_s']:,} events/s |")
    for r in rows:
        print(f"| frontier refresh at {r['samples']:,} samples ({r['frontier_rows']} rows) | {r['median_s']} s |")


if __name__ == "__main__":
    main()
