"""Frontier math on hand-built evaluations, checked against numbers worked out by hand (prior Beta(1, 1))."""

from __future__ import annotations

import math

import pytest

from kernelzero.analytics.frontier import FRONTIER_QUERY, frontier_snapshot
from kernelzero.analytics.projection import Projection
from kernelzero.analytics.views import install_views, view_parameters
from kernelzero.config import AnalyticsConfig

from tests.analytics.helpers import evaluation, module, records, sample

PRIOR_STD = math.sqrt(1 / 12)  # std of Beta(1, 1)


def _events():
    a = ["a"]
    events = [
        # module mA uses API a: 2 of 4 pass
        evaluation("a1", "mA", a), evaluation("a2", "mA", a),
        evaluation("a3", "mA", a, "incorrect"), evaluation("a4", "mA", a, "compile_error"),
        # module mAB uses a and b together: 1 of 2 passes
        evaluation("ab1", "mAB", ["b", "a"]), evaluation("ab2", "mAB", ["a", "b"], "runtime_error"),
    ]
    # a3 evaluated again later (a redelivered sample): the first evaluation counts
    again = evaluation("a3", "mA", a, "correct")
    again.envelope.produced_at = events[2].envelope.produced_at + 1
    events.append(again)
    # module mC (API c) by Coder version 2: 4 of 4 pass; the evaluations carry no policy
    # version or APIs, so both come from the samples
    for i in range(4):
        events.append(sample(f"c{i}", "mC", policy_version=2, apis=["c"]))
        events.append(evaluation(f"c{i}", "mC", [], policy_version=None))
    return events


@pytest.fixture
def con(tmp_path):
    with Projection(tmp_path / "a.duckdb") as projection:
        projection.apply(records(_events()))
        install_views(projection.con, AnalyticsConfig())
        yield projection.con


def _frontier(con, config):
    """Every frontier column by APIs, read as `kernelzero frontier` reads it (analytics/frontier_cli.py)."""
    cursor = con.execute(f"SELECT * FROM ({FRONTIER_QUERY})", view_parameters(config))
    columns = [d[0] for d in cursor.description]
    return {tuple(row[columns.index("apis")]): dict(zip(columns, row)) for row in cursor.fetchall()}


def test_posterior_band_and_weight_by_hand(con):
    f = _frontier(con, AnalyticsConfig())
    assert set(f) == {("a",), ("b",), ("c",), ("a", "b")}
    a, b, c, ab = f[("a",)], f[("b",)], f[("c",)], f[("a", "b")]
    # a: 6 attempts, 3 passes -> Beta(4, 4): mean 1/2, std sqrt(16 / (64 * 9)) = 1/6
    assert (a["attempts"], a["passes"], a["alpha"], a["beta"]) == (6, 3, 4.0, 4.0)
    assert a["pass_mean"] == pytest.approx(0.5) and a["pass_std"] == pytest.approx(1 / 6)
    assert a["weight"] == pytest.approx(1 + 0.5 * (1 / 6) / PRIOR_STD)
    # b and the pair {a, b}: 2 attempts, 1 pass -> Beta(2, 2): std sqrt(4 / (16 * 5))
    for entry in (b, ab):
        assert (entry["attempts"], entry["passes"]) == (2, 1)
        assert entry["pass_std"] == pytest.approx(math.sqrt(0.05))
        assert entry["weight"] == pytest.approx(1 + 0.5 * math.sqrt(0.05) / PRIOR_STD)
    assert ab["kind"] == "pair" and b["kind"] == "api"
    # c: 4 of 4 -> Beta(5, 1): mean 5/6 is above the band, so only the exploration term is left
    assert (c["attempts"], c["passes"]) == (4, 4)
    assert c["pass_mean"] == pytest.approx(5 / 6) and not c["in_band"] and a["in_band"]
    assert c["weight"] == pytest.approx(0.5 * math.sqrt(5 / (36 * 7)) / PRIOR_STD)


def test_band_and_prior_come_from_config(con):
    config = AnalyticsConfig(band_low=0.1, band_high=0.9, target=0.5, prior_alpha=2.0, prior_beta=3.0, explore=0.0)
    c = _frontier(con, config)[("c",)]
    # Beta(2 + 4, 3 + 0): mean 6/9; closeness 1 - (2/3 - 1/2) / 0.4
    assert c["pass_mean"] == pytest.approx(6 / 9) and c["in_band"]
    assert c["weight"] == pytest.approx(1 - (6 / 9 - 0.5) / 0.4)


def test_an_uneven_band_weighs_as_the_proposer_rewards(con):
    """One closeness for both (kit/frontier_band.py): the half-width on the pass rate's side of the target."""
    from kernelzero.consumers.proposer_trainer import frontier_score

    config = AnalyticsConfig(band_low=0.3, band_high=0.9, target=0.55, explore=0.0)
    weight = _frontier(con, config)[("a",)]["weight"]  # a's mean is 1/2, below the target
    # 1 - 0.05 / (0.55 - 0.3); the farther edge's half-width (0.35) would give 0.857
    assert weight == pytest.approx(0.8) and weight == pytest.approx(frontier_score(0.5, config))


def test_frontier_versions_keeps_only_recent_policies(con):
    f = _frontier(con, AnalyticsConfig(frontier_versions=1))
    assert set(f) == {("c",)}


def test_snapshot_payload_is_ordered_and_limited(con):
    snapshot = frontier_snapshot(con, AnalyticsConfig(snapshot_max_entries=2, band_low=0.25))
    assert [e.apis for e in snapshot.entries] == [["b"], ["a", "b"]]
    assert snapshot.band_low == 0.25 and snapshot.band_high == 0.8 and snapshot.target == 0.5
    assert snapshot.entries[0].attempts == 2 and snapshot.entries[0].passes == 1


def test_evaluator_and_problem_errors_are_counted_but_are_no_attempts(tmp_path):
    uncharged = [evaluation("a5", "mA", ["a"], "evaluator_error", reason="exception"),
                 evaluation("a6", "mA", ["a"], "problem_error", reason="constant_output"),
                 evaluation("d1", "mD", ["d"], "problem_error", reason="non_deterministic"),
                 module("mA", ["a"]), module("mC", ["c"]), module("mD", ["d"])]
    with Projection(tmp_path / "u.duckdb") as projection:
        projection.apply(records(_events() + uncharged))
        install_views(projection.con, AnalyticsConfig())
        f = _frontier(projection.con, AnalyticsConfig())
        assert (f[("a",)]["attempts"], f[("a",)]["passes"]) == (6, 3)  # as without them
        assert ("d",) not in f  # a module with nothing but problem errors was never attempted
        rows = projection.con.execute("SELECT sample_id, verdict, reason FROM uncharged ORDER BY 1").fetchall()
        assert rows == [("a5", "evaluator_error", "exception"), ("a6", "problem_error", "constant_output"),
                        ("d1", "problem_error", "non_deterministic")]
        judged = projection.con.execute("SELECT count(*) FROM judged").fetchone()[0]
        attempts = projection.con.execute("SELECT count(*) FROM attempts").fetchone()[0]
        assert judged - attempts == 3
        curve = dict(projection.con.execute("SELECT policy_version, uncharged FROM training_curve").fetchall())
        assert curve[1] == 3 and curve[2] == 0
        modules = {m: (a, e) for m, a, e in projection.con.execute(
            "SELECT module_id, attempts, problem_errors FROM modules").fetchall()}
        assert modules == {"mA": (4, 1), "mC": (4, 0), "mD": (0, 1)}
