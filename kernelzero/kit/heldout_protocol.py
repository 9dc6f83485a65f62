"""The one held-out protocol (distillation's split, the SFT stopping rule, the demo, the report, the experiment): which API combinations are held out, and the intervals every held-out pass rate is reported with; it measures nothing itself.

Held out are whole API combinations (the set of APIs a module uses, `api_set_key`) of at least two
APIs that no training row has, each of whose member APIs appears in at least `MIN_MEMBER_ROWS`
training rows: a held-out module asks for a new composition of well-practised parts, never for a
rare API. A module with one API is never held out. The selection is a hash of (seed, combination),
so the same rows and seed give the same split anywhere.

Pass rates carry 95% intervals that stay inside [0, 1] and do not collapse at 0 or 1: Wilson's score
interval over modules (pass@1 of several samples per module is the mean of per-module rates; its
interval counts modules, not samples, since samples of one module are not independent), and a
bootstrap over modules for the paired difference of two policies on the same modules.

Every measurement samples a held-out row with the same random numbers (`sampling_seed`, the generation
contract's seeds): two policies are compared on the same draws (common random numbers), so a policy that
did not change measures exactly as before, and the paired difference carries only what changed.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import Counter
from typing import Sequence

from kernelzero.schemas import API_SET_SEPARATOR, api_set_key

MIN_MEMBER_ROWS = 20  # training rows that use each member API of a held-out combination
MIN_MODULES = 64  # held-out modules a measurement that claims anything needs
Z95 = 1.959963984540054


def sampling_seed(prompt_source: str) -> int:
    """The seed a held-out row is sampled with in every measurement, from the text its prompt is made of."""
    return int(hashlib.sha256(prompt_source.encode()).hexdigest()[:15], 16)


def _rank(seed: int, combination: str) -> str:
    return hashlib.sha256(f"{seed}:{combination}".encode()).hexdigest()


def held_out_combinations(row_apis: Sequence[Sequence[str]], share: float, seed: int = 0,
                          min_member_rows: int = MIN_MEMBER_ROWS) -> set[str]:
    """The combinations to hold out: about `share` of the distinct multi-API ones, in hash order, each kept
    only while every member API still has `min_member_rows` training rows without the held-out rows."""
    rows = Counter(api_set_key(list(apis)) for apis in row_apis)
    candidates = sorted((key for key in rows if len(key.split(API_SET_SEPARATOR)) >= 2), key=lambda key: _rank(seed, key))
    wanted = round(share * len(candidates))
    members: Counter[str] = Counter()
    for key, count in rows.items():
        for api in key.split(API_SET_SEPARATOR):
            members[api] += count
    chosen: set[str] = set()
    for key in candidates:
        if len(chosen) >= wanted:
            break
        apis = key.split(API_SET_SEPARATOR)
        if all(members[api] - rows[key] >= min_member_rows for api in apis):
            chosen.add(key)
            for api in apis:
                members[api] -= rows[key]
    return chosen


def wilson(rate: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for a pass rate measured on n modules; (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    rate = min(1.0, max(0.0, rate))
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # at 0 and 1 one end is exact: rounding must not turn "none passed" into a tiny positive bound
    return (0.0 if rate == 0.0 else max(0.0, centre - half)), (1.0 if rate == 1.0 else min(1.0, centre + half))


def paired_difference(first: Sequence[float], second: Sequence[float], resamples: int = 4000,
                      seed: int = 0) -> tuple[float, float, float]:
    """(mean of first - second, low, high): a 95% percentile bootstrap over modules of per-module pass rates
    measured on the same modules in the same order."""
    if len(first) != len(second) or not first:
        raise ValueError("a paired difference needs the same non-empty list of modules on both sides")
    diffs = [a - b for a, b in zip(first, second)]
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return sum(diffs) / n, means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]
