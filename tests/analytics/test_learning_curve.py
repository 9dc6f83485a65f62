"""The learning curve by Coder policy version: training pass rate and held-out pass@1 side by side."""

from __future__ import annotations

import msgspec

from kernelzero.analytics.projection import Projection
from kernelzero.analytics.views import install_views
from kernelzero.config import AnalyticsConfig
from kernelzero.schemas import ModuleAccepted, make_event

from tests.analytics.helpers import evaluation, module, records, sample


def test_a_version_measured_only_on_held_out_modules_keeps_its_number(tmp_path):
    """The demo's last measurement is at a version no training sample carries: it was listed with no version."""
    heldout = make_event(ModuleAccepted(module_id="mH", source="# module mH", apis=["b"], fingerprint="fp-mH",
                                        split="heldout"), correlation_id="mH", producer="heldout")
    answered = [make_event(msgspec.structs.replace(e.payload, split="heldout"), correlation_id="mH",
                           producer=e.envelope.producer, policy_version=3)
                for e in (sample("h1", "mH", apis=["b"]), evaluation("h1", "mH", ["b"], "incorrect"))]
    events = [module("mT", ["a"]), sample("t1", "mT", policy_version=0, apis=["a"]),
              evaluation("t1", "mT", ["a"], policy_version=0), heldout, *answered]
    with Projection(tmp_path / "c.duckdb") as projection:
        projection.apply(records(events))
        install_views(projection.con, AnalyticsConfig())
        rows = projection.con.execute(
            "SELECT policy_version, train_samples, heldout_modules, heldout_pass_at_1 FROM learning_curve").fetchall()
    assert rows == [(0, 1, None, None), (3, None, 1, 0.0)]
