"""The Coder's frontier per API and API pair, and its `frontier.snapshot` payload; the SQL lives in views.sql.

For each API a (and each unordered pair {a, b} of APIs one module uses together), over the
first evaluation of every sample whose module uses it (optionally only the last
`frontier_versions` Coder policy versions):

    n = attempts, k = passes (verdict `correct`)
    posterior  Beta(alpha, beta),  alpha = prior_alpha + k,  beta = prior_beta + n - k
    pass_mean  mu    = alpha / (alpha + beta)
    pass_std   sigma = sqrt(alpha * beta / ((alpha + beta)^2 * (alpha + beta + 1)))
    in_band    band_low <= mu <= band_high

    weight = closeness(mu) + explore * sigma / sigma_0

where sigma_0 is the std of the prior Beta(prior_alpha, prior_beta) and closeness is
kernelzero/kit/frontier_band.py's, the Proposer's reward's too: 1 at the target, falling linearly
to 0 at the band edge on mu's side, 0 outside the band (in-band APIs are favoured). The
second is `explore` for an API never tried and shrinks like 1/sqrt(n) as attempts accumulate
(rarely tried APIs are explored). The Proposer samples APIs in proportion to weight; an API
absent from the snapshot has never been tried and has weight
closeness(prior mean) + explore.
"""

from __future__ import annotations

import duckdb

from kernelzero.analytics.views import view_parameters
from kernelzero.config import AnalyticsConfig
from kernelzero.schemas import FrontierEntry, FrontierSnapshot

FRONTIER_QUERY = (
    "SELECT * FROM frontier_at($band_low, $band_high, $target, $prior_alpha, $prior_beta, $explore, $versions, $first_turns)"
)


def frontier_snapshot(con: duckdb.DuckDBPyConnection, config: AnalyticsConfig) -> FrontierSnapshot:
    """The highest-weight `snapshot_max_entries` entries, ties broken by kind and APIs so snapshots are reproducible."""
    rows = con.execute(
        f"SELECT apis, attempts, passes, pass_mean, weight FROM ({FRONTIER_QUERY}) "
        "ORDER BY weight DESC, kind, apis LIMIT $limit",
        view_parameters(config) | {"limit": config.snapshot_max_entries},
    ).fetchall()
    entries = [
        FrontierEntry(apis=list(apis), attempts=attempts, passes=passes, pass_mean=pass_mean, weight=weight)
        for apis, attempts, passes, pass_mean, weight in rows
    ]
    return FrontierSnapshot(entries=entries, band_low=config.band_low, band_high=config.band_high,
                            target=config.target)
