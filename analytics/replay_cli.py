"""`kernelzero replay --to FILE.jsonl|FILE.parquet --kind sft|rl|pref [--where SQL]`: rebuild a dataset from the log (see replay.py)."""

from __future__ import annotations

import argparse
import sys

from kernelzero.analytics.db import add_db_arguments, run_command
from kernelzero.config import Config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--to", required=True, metavar="FILE", help="output file: .jsonl or .parquet")
    parser.add_argument("--kind", required=True, choices=("sft", "rl", "pref"),
                        help="sft: best correct kernel per module; rl: frontier modules; pref: faster vs slower kernels")
    parser.add_argument("--where", metavar="SQL", help="a condition on the dataset's columns, e.g. \"backend = 'triton'\"")
    parser.add_argument("--min-gain", type=float, default=0.05,
                        help="pref: the chosen kernel must be at least 1 + this times faster (default 0.05)")
    add_db_arguments(parser)


def main(args: argparse.Namespace, config: Config) -> int:
    import duckdb

    from kernelzero.analytics.replay import write_dataset

    def body(con) -> int:
        try:
            rows = write_dataset(con, config.analytics, args.kind, args.to, where=args.where, min_gain=args.min_gain,
                                 prompt_style=config.coder.prompt)
        except (ValueError, duckdb.Error) as exc:
            print(f"kernelzero replay: {exc}", file=sys.stderr)
            return 2
        print(f"wrote {rows} {args.kind} rows to {args.to}")
        return 0

    return run_command(args, config, body)
