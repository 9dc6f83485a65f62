"""Install the analysis views (views.sql) on a DuckDB connection with the [analytics] parameters; TEMP, per connection.

The views are recomputed on every query: nothing here caches results, so each read sees the
projection as committed at that moment.
"""

from __future__ import annotations

from importlib import resources

import duckdb

from kernelzero.config import AnalyticsConfig
from kernelzero.kit.codeblocks import answer
from kernelzero.kit.coder_prompts import render_coder_prompt
from kernelzero.kit.frontier_band import closeness
from kernelzero.kit.heldout_protocol import wilson
from kernelzero.schemas import UNCHARGED_VERDICTS

VIEWS_SQL = resources.files("kernelzero.analytics").joinpath("views.sql").read_text()


def view_parameters(config: AnalyticsConfig) -> dict[str, float | bool]:
    return {
        "band_low": config.band_low, "band_high": config.band_high, "target": config.target,
        "prior_alpha": config.prior_alpha, "prior_beta": config.prior_beta, "explore": config.explore,
        "versions": config.frontier_versions, "first_turns": config.frontier_turns == "first",
    }


def install_views(con: duckdb.DuckDBPyConnection, config: AnalyticsConfig) -> None:
    """Create (or replace) the macros and views; view bodies cannot hold parameters, so values are inlined."""
    sql = VIEWS_SQL.replace("$uncharged_verdicts", "(" + ", ".join(f"'{v}'" for v in UNCHARGED_VERDICTS) + ")")
    # Longest names first, so that no parameter name is replaced inside a longer one.
    for name, value in sorted(view_parameters(config).items(), key=lambda kv: -len(kv[0])):
        sql = sql.replace(f"${name}", str(value).lower() if isinstance(value, bool) else repr(float(value)))
    _install_functions(con)
    con.execute(sql)


def _install_functions(con: duckdb.DuckDBPyConnection) -> None:
    """`coder_prompt(source, backend, style)` and `python_answer(source)`: datasets carry what the Coder saw and
    must say; `wilson_low/high(rate, n)`: the held-out protocol's interval, and `band_closeness(rate, low, target,
    high)`: the frontier's closeness to its target, the same functions their other users call."""
    varchar, double, bigint = (duckdb.sqltype(name) for name in ("VARCHAR", "DOUBLE", "BIGINT"))
    functions = {
        "coder_prompt": (lambda source, backend, style: render_coder_prompt(source, backend, style=style),
                         [varchar, varchar, varchar], varchar),
        "python_answer": (answer, [varchar], varchar),
        "wilson_low": (lambda rate, n: wilson(rate, n)[0], [double, bigint], double),
        "wilson_high": (lambda rate, n: wilson(rate, n)[1], [double, bigint], double),
        "band_closeness": (closeness, [double, double, double, double], double),
    }
    installed = {row[0] for row in con.execute(
        "SELECT function_name FROM duckdb_functions() WHERE function_name IN ?", [list(functions)]).fetchall()}
    for name, (function, arguments, returns) in functions.items():
        if name not in installed:
            con.create_function(name, function, arguments, returns)
