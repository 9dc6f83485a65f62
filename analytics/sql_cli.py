"""`kernelzero sql "SELECT ..."`: ad hoc SQL over the projected log (read-only); prints a table, JSON lines or CSV.

Tables: events, evaluations, samples, modules_proposed, modules_accepted, modules_rejected,
groups_scored, group_samples, policies, projection_offsets, projection_skipped. Views: judged (every
first evaluation), attempts (less evaluator and problem errors), uncharged (those), frontier, failures,
failure_summary, speedups, training_curve, modules, proposer_stats.
"""

from __future__ import annotations

import argparse
import sys

from kernelzero.analytics.db import add_db_arguments, run_command
from kernelzero.analytics.output import add_format_arguments, print_relation
from kernelzero.config import Config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("query", help="one SQL statement, e.g. \"SELECT verdict, count(*) FROM evaluations GROUP BY 1\"")
    add_db_arguments(parser)
    add_format_arguments(parser)


def main(args: argparse.Namespace, config: Config) -> int:
    import duckdb

    def body(con) -> int:
        try:
            cursor = con.execute(args.query)
        except duckdb.Error as exc:
            print(f"kernelzero sql: {exc}", file=sys.stderr)
            return 2
        if cursor.description is None:
            return 0
        print_relation(cursor, args)
        return 0

    return run_command(args, config, body, needs_events=False)
