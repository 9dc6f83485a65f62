"""Print query results as a rich table, JSON lines or CSV; lists and JSON values print as JSON text, floats rounded for tables only."""

from __future__ import annotations

import argparse
import csv
import sys
from typing import Any

import msgspec


def add_format_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--json", dest="format", action="store_const", const="json", help="one JSON object per row")
    group.add_argument("--csv", dest="format", action="store_const", const="csv", help="CSV with a header row")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="print at most N rows")
    parser.set_defaults(format="table")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return " + ".join(value)  # API lists read best this way in a table
    if isinstance(value, (list, dict)):
        return msgspec.json.encode(value).decode()
    return str(value)


def print_rows(columns: list[str], rows: list[tuple], fmt: str, title: str | None = None) -> None:
    if fmt == "json":
        encoder = msgspec.json.Encoder()
        for row in rows:
            sys.stdout.write(encoder.encode(dict(zip(columns, row))).decode() + "\n")
    elif fmt == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([msgspec.json.encode(v).decode() if isinstance(v, (list, dict)) else v for v in row])
    else:
        from rich.console import Console
        from rich.table import Table

        cells = [[_cell(v) for v in row] for row in rows]
        table = Table(title=title, show_lines=False)
        for i, name in enumerate(columns):
            widest = max((len(row[i]) for row in cells), default=0)
            # long text columns (API lists, sources) keep a readable width when the terminal is narrow
            table.add_column(name, overflow="fold", min_width=24 if widest > 24 else None)
        for row in cells:
            table.add_row(*row)
        Console().print(table)
        sys.stdout.flush()
        print(f"({len(rows)} rows)", file=sys.stderr)


def print_relation(rel, args: argparse.Namespace, title: str | None = None) -> None:
    """Fetch a DuckDB relation (or executed cursor) and print it in the format `args` asks for."""
    columns = [d[0] for d in rel.description]
    rows = rel.fetchmany(args.limit) if args.limit is not None else rel.fetchall()
    print_rows(columns, rows, args.format, title)
