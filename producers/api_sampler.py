"""API-set sampler aimed at the Coder's frontier, with exploration of rarely tried APIs; it trusts the frontier's weights and does not recompute them.

Per API, the draw probability mixes two parts: (1 - explore) in proportion to the frontier weight
of the single-API entry (the analytics side makes it high for APIs solved sometimes but not
reliably), and `explore` in proportion to 1 / sqrt(1 + attempts), so never-tried APIs are drawn
most. Without a frontier (or with all weights zero) the first part is uniform. APIs of a set are
drawn without replacement; once some are chosen, a candidate's weight is multiplied by
(1 + its pair weights with the chosen ones, relative to the largest pair weight).
"""

from __future__ import annotations

import math
import random
from typing import Sequence

from kernelzero.kit import api_catalog
from kernelzero.schemas import FrontierSnapshot


class ApiSampler:
    def __init__(
        self,
        apis: Sequence[str] | None = None,
        frontier: FrontierSnapshot | None = None,
        *,
        explore: float,
        seed: int | None = None,
    ):
        if not 0.0 <= explore <= 1.0:
            raise ValueError(f"explore must be in [0, 1], got {explore}")
        self.apis = list(apis if apis is not None else api_catalog.names())
        if not self.apis:
            raise ValueError("no APIs to sample from")
        self.explore = explore
        self.rng = random.Random(seed)
        self.update(frontier)

    def update(self, frontier: FrontierSnapshot | None) -> None:
        """Use a new frontier snapshot (None: uniform with exploration by zero attempts, i.e. uniform)."""
        known = set(self.apis)
        weight: dict[str, float] = {}
        attempts: dict[str, int] = {}
        self.pairs: dict[frozenset[str], float] = {}
        for entry in frontier.entries if frontier else ():
            if len(entry.apis) == 1 and entry.apis[0] in known:
                weight[entry.apis[0]] = max(0.0, entry.weight)
                attempts[entry.apis[0]] = entry.attempts
            elif len(entry.apis) == 2 and set(entry.apis) <= known and entry.weight > 0:
                self.pairs[frozenset(entry.apis)] = entry.weight
        total_weight = sum(weight.values())
        exploit = [weight.get(a, 0.0) / total_weight if total_weight > 0 else 1.0 / len(self.apis) for a in self.apis]
        novelty = [1.0 / math.sqrt(1 + attempts.get(a, 0)) for a in self.apis]
        total_novelty = sum(novelty)
        self.probabilities = {
            a: (1 - self.explore) * e + self.explore * n / total_novelty
            for a, e, n in zip(self.apis, exploit, novelty)
        }
        self._max_pair = max(self.pairs.values(), default=0.0)

    def _draw_weight(self, api: str, chosen: Sequence[str]) -> float:
        p = self.probabilities[api]
        if self._max_pair > 0 and chosen:
            p *= 1.0 + sum(self.pairs.get(frozenset((api, c)), 0.0) for c in chosen) / self._max_pair
        return p

    def sample(self, size: int) -> list[str]:
        """`size` distinct APIs."""
        if not 1 <= size <= len(self.apis):
            raise ValueError(f"set size must be in [1, {len(self.apis)}], got {size}")
        chosen: list[str] = []
        for _ in range(size):
            candidates = [a for a in self.apis if a not in chosen]
            weights = [self._draw_weight(a, chosen) for a in candidates]
            if sum(weights) <= 0:
                weights = [1.0] * len(candidates)
            chosen.append(self.rng.choices(candidates, weights)[0])
        return chosen
