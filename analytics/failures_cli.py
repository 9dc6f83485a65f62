"""`kernelzero failures`: the failure taxonomy (verdict, class, mismatch magnitude) with counts and an example sample each."""

from __future__ import annotations

import argparse

from kernelzero.analytics.db import add_db_arguments, run_command
from kernelzero.analytics.output import add_format_arguments, print_relation
from kernelzero.config import Config

GROUPINGS = {
    "class": "verdict, failure_class, mismatch_bucket",
    "backend": "backend, verdict, failure_class",
    "api": "api, verdict, failure_class",
    "version": "policy_version, verdict, failure_class",
}


def _source(by: str) -> str:
    """The failures view with empty strings for missing classes; one row per API only when grouping by API."""
    api = "unnest(CASE WHEN len(apis) > 0 THEN apis ELSE [''] END)" if by == "api" else "''"
    return (f"(SELECT * REPLACE (coalesce(failure_class, '') AS failure_class, "
            f"coalesce(mismatch_bucket, '') AS mismatch_bucket), {api} AS api FROM failures)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--by", choices=tuple(GROUPINGS), default="class", help="how to group failures")
    parser.add_argument("--verdict", help="only this verdict (compile_error, runtime_error, incorrect, ...)")
    add_db_arguments(parser)
    add_format_arguments(parser)


def main(args: argparse.Namespace, config: Config) -> int:
    keys = GROUPINGS[args.by]
    query = (
        f"SELECT {keys}, count(*) AS samples, round(count(*) / sum(count(*)) OVER (), 4) AS share, "
        f"min(sample_id) AS example_sample FROM {_source(args.by)} WHERE $verdict IS NULL OR verdict = $verdict "
        f"GROUP BY {keys} ORDER BY samples DESC, {keys}"
    )

    def body(con) -> int:
        print_relation(con.execute(query, {"verdict": args.verdict}), args, title=f"failures by {args.by}")
        return 0

    return run_command(args, config, body)
