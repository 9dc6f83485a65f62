"""`kernelzero frontier`: the Coder's frontier per API and API pair, highest sampling weight first (see frontier.py)."""

from __future__ import annotations

import argparse

from kernelzero.analytics.db import add_db_arguments, run_command
from kernelzero.analytics.output import add_format_arguments, print_relation
from kernelzero.config import Config

COLUMNS = "kind, apis, attempts, passes, pass_mean, pass_std, in_band, weight, geomean_speedup"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kind", choices=("api", "pair", "all"), default="all", help="single APIs, pairs, or both")
    parser.add_argument("--in-band", action="store_true", help="only entries whose pass rate lies in the band")
    add_db_arguments(parser)
    add_format_arguments(parser)


def main(args: argparse.Namespace, config: Config) -> int:
    from kernelzero.analytics.frontier import FRONTIER_QUERY
    from kernelzero.analytics.views import view_parameters

    conditions = ["TRUE"]
    if args.kind != "all":
        conditions.append(f"kind = '{args.kind}'")
    if args.in_band:
        conditions.append("in_band")

    def body(con) -> int:
        cursor = con.execute(
            f"SELECT {COLUMNS} FROM ({FRONTIER_QUERY}) WHERE {' AND '.join(conditions)} "
            "ORDER BY weight DESC, kind, apis", view_parameters(config.analytics),
        )
        a = config.analytics
        print_relation(cursor, args, title=f"frontier (band {a.band_low}-{a.band_high}, target {a.target})")
        return 0

    return run_command(args, config, body)
