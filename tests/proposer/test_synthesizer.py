"""The synthesizer: deterministic, sized by scale, and every module it writes passes the validator."""

import math
import random

import pytest

from kernelzero.consumers.validator import validate
from kernelzero.kit import api_catalog
from kernelzero.kit.api_catalog import Limits
from kernelzero.producers.synthesizer import SynthesisError, synthesize

from .conftest import SMALL


def test_same_seed_same_source_other_seed_other_sizes():
    apis = ["torch.nn.Conv2d", "torch.nn.functional.gelu", "torch.sum"]
    assert synthesize(apis, seed=3, scale=SMALL).source == synthesize(apis, seed=3, scale=SMALL).source
    sources = {synthesize(apis, seed=s, scale=SMALL).source for s in range(6)}
    assert len(sources) > 1


def test_gpu_scale_fills_the_element_budget_without_running():
    rng = random.Random(7)
    limits = Limits.at_scale(1.0)
    for i in range(40):
        module = synthesize(rng.sample(api_catalog.names(), 3), seed=i, scale=1.0, check=False)
        assert limits.numel // 8 <= module.max_numel <= limits.numel
        assert all(d > 0 and d & (d - 1) == 0 for d in module.input_shape)
        compile(module.source, "<m>", "exec")


def test_bad_api_sets_are_refused_by_name():
    with pytest.raises(KeyError, match="torch.no_such_api"):
        synthesize(["torch.no_such_api"], scale=SMALL)
    with pytest.raises(SynthesisError, match="repeats"):
        synthesize(["torch.relu", "torch.relu"], scale=SMALL)


def test_100_random_api_sets_are_all_accepted(sandbox, cpu_config):
    rng = random.Random(2024)
    names = api_catalog.names()
    rejected = []
    for i in range(100):
        apis = rng.sample(names, rng.choice((2, 3, 4)))
        module = synthesize(apis, seed=i, scale=SMALL)
        verdict = validate(module.source, apis, cpu_config, sandbox=sandbox)
        if not verdict.ok:
            rejected.append((apis, verdict.reason, verdict.detail))
    assert rejected == []


def test_every_catalog_api_alone_is_accepted_and_traced(sandbox, cpu_config):
    rejected = []
    for spec in api_catalog.CATALOG:
        module = synthesize([spec.name], seed=1, scale=SMALL)
        verdict = validate(module.source, [spec.name], cpu_config, sandbox=sandbox)
        if not verdict.ok:
            rejected.append((spec.name, verdict.reason, verdict.detail))
    assert rejected == []
    assert math.isfinite(verdict.runtime_ms)
