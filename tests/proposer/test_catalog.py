"""The API catalog: size, families, and internal consistency of every entry."""

import collections
import string

from kernelzero.kit import api_catalog
from kernelzero.kit.api_catalog import CATALOG, DOMAINS, EXTRA_KINDS, FAMILIES, NEEDS, RULES, Limits


def test_catalog_has_150_apis_in_every_family():
    counts = collections.Counter(spec.family for spec in CATALOG)
    assert len(CATALOG) >= 150
    assert set(counts) == set(FAMILIES)
    assert all(counts[f] >= 3 for f in FAMILIES), counts


def test_every_entry_refers_to_known_rules_domains_and_extras():
    for spec in CATALOG:
        assert spec.rule in RULES, spec.name
        assert spec.domain in DOMAINS, spec.name
        assert all(kind in EXTRA_KINDS for kind in spec.extras), spec.name
        assert spec.needs in NEEDS or spec.needs == "", spec.name
        assert spec.trace_names() and all(n and "[" not in n for n in spec.trace_names()), spec.name
        fields = {f for _, f, _, _ in string.Formatter().parse(spec.call) if f}
        assert "x" in fields or spec.name.endswith("[keepdim]"), spec.name
        assert all(f"e{i}" in fields for i in range(len(spec.extras))), spec.name


def test_output_shape_rules():
    assert RULES["drop_last"]((4, 8, 16))[0] == (4, 8)
    assert RULES["spatial_half"]((2, 3, 8, 8))[0] == (2, 3, 4, 4)
    assert RULES["conv_transpose"]((2, 8, 4, 4))[0] == (2, 2, 8, 8)
    assert RULES["fold"]((2, 16, 32))[0] == (2, 4, 8, 16)
    assert RULES["unfold"]((2, 4, 8, 8))[0] == (2, 16, 16)
    assert RULES["scalar"]((3, 4))[0] == ()


def test_limits_scale_with_problem_size():
    big, small = Limits.at_scale(1.0), Limits.at_scale(2.0 ** -13)
    assert big.numel == 2**26 and small.numel == 2**13
    assert big.feature > small.feature and big.seq > small.seq
    assert api_catalog.get("torch.nn.Conv2d").rank == 4
