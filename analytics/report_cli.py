"""`kernelzero report --out DIR`: PNG plots (pass rate, speedup, verdict mix, frontier heat map) and an index.html."""

from __future__ import annotations

import argparse

from kernelzero.analytics.db import add_db_arguments, run_command
from kernelzero.config import Config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, metavar="DIR", help="directory for the PNG files and index.html")
    add_db_arguments(parser)


def main(args: argparse.Namespace, config: Config) -> int:
    from kernelzero.analytics.report import write_report

    def body(con) -> int:
        files = write_report(con, args.out)
        print(f"wrote {len(files)} files to {args.out} (open {files[-1]})")
        return 0

    return run_command(args, config, body)
