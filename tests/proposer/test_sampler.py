"""The API-set sampler: uniform without a frontier, weighted by a hand-built frontier, exploring untried APIs."""

import collections

import pytest

from kernelzero.producers.api_sampler import ApiSampler
from kernelzero.schemas import FrontierEntry, FrontierSnapshot

APIS = [f"api{i}" for i in range(10)]


def _frontier(*entries):
    return FrontierSnapshot(entries=[FrontierEntry(apis=list(a), attempts=n, passes=n // 2, pass_mean=0.5, weight=w)
                                     for a, n, w in entries], band_low=0.2, band_high=0.8)


def _first_draws(sampler, n=20000):
    return collections.Counter(sampler.sample(1)[0] for _ in range(n))


def test_uniform_without_frontier():
    counts = _first_draws(ApiSampler(APIS, explore=0.2, seed=0))
    assert set(counts) == set(APIS)
    assert max(counts.values()) / min(counts.values()) < 1.2


def test_frontier_weights_and_exploration():
    frontier = _frontier((["api0"], 50, 3.0), (["api1"], 50, 1.0), (["api2"], 400, 0.0))
    sampler = ApiSampler(APIS, frontier, explore=0.2, seed=1)
    p = sampler.probabilities
    novelty = {"api0": 51 ** -0.5, "api1": 51 ** -0.5, "api2": 401 ** -0.5} | {f"api{i}": 1.0 for i in range(3, 10)}
    total_novelty = sum(novelty.values())
    assert p["api0"] == pytest.approx(0.8 * 0.75 + 0.2 * novelty["api0"] / total_novelty)
    assert p["api5"] == pytest.approx(0.2 / total_novelty)
    counts = _first_draws(sampler)
    total = sum(counts.values())
    assert counts["api0"] / total == pytest.approx(p["api0"], abs=0.015)
    assert counts["api0"] > 2.5 * counts["api1"] > counts["api2"]
    # never-tried APIs are explored, more than the much-tried api2 with weight 0
    assert counts["api5"] > 2 * counts["api2"] > 0
    assert sum(p.values()) == pytest.approx(1.0)


def test_no_exploration_follows_weights_only():
    sampler = ApiSampler(APIS, _frontier((["api3"], 10, 1.0)), explore=0.0, seed=2)
    assert _first_draws(sampler, 500) == {"api3": 500}


def test_pairs_boost_partners_and_sets_are_distinct():
    frontier = _frontier((["api0"], 5, 1.0), (["api0", "api7"], 5, 4.0))
    sampler = ApiSampler(APIS, frontier, explore=0.5, seed=3)
    sets = [sampler.sample(3) for _ in range(3000)]
    assert all(len(set(s)) == 3 for s in sets)
    with_api0 = [s for s in sets if s[0] == "api0"]
    partners = collections.Counter(a for s in with_api0 for a in s[1:])
    assert partners["api7"] > 1.5 * max(v for k, v in partners.items() if k != "api7")


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        ApiSampler(APIS, explore=1.5)
    with pytest.raises(ValueError):
        ApiSampler(APIS, explore=0.2).sample(11)
