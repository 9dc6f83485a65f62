"""KernelBench's published metrics over per-sample results: unbiased pass@k and fast_p, averaged over problems; arithmetic only.

pass@k is the unbiased estimator of Chen et al. (2021), 1 - C(n - c, k) / C(n, k), computed as
KernelBench's `calc_pass_at_k` (scripts/eval_from_generations.py) does; where k exceeds a
problem's n samples, k is taken as n there, as that script does (so pass@k is then 1 if any
sample is correct). fast_p is KernelBench's `fastp` (src/kernelbench/score.py): the share of
problems whose sample is correct with a speedup above p; with several samples per problem each
problem counts the share of its samples that are, which equals KernelBench's fast_p averaged
over sample indices when every problem has the same number of samples. Problems to leave out
(unusable ones) are the caller's to drop before calling. It claims no timing where a correct
sample has no speedup (an evaluation on a CPU): fast_p is then None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FAST_P_THRESHOLDS = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)  # KernelBench's benchmark_eval_analysis.py


@dataclass(frozen=True)
class SampleScore:
    correct: bool
    speedup: float | None = None  # over the baseline (eager or torch.compile); None when not timed


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of k samples drawn from n (c of them correct) is correct; 0 for n = 0."""
    if n == 0:
        return 0.0
    k = min(k, n)
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def mean_pass_at_k(problems: list[list[SampleScore]], k: int) -> float | None:
    """pass@k averaged over problems; None when there is no problem."""
    if not problems:
        return None
    return sum(pass_at_k(len(p), sum(s.correct for s in p), k) for p in problems) / len(problems)


def fast_share(samples: list[SampleScore], p: float) -> float:
    """One problem's share of samples that are correct with a speedup above p (0 for no samples)."""
    if not samples:
        return 0.0
    return sum(s.correct and s.speedup is not None and s.speedup > p for s in samples) / len(samples)


def fast_p(problems: list[list[SampleScore]], p: float) -> float | None:
    """KernelBench's fast_p averaged over problems; None when there is no problem or a correct sample was not timed."""
    if not problems or any(s.correct and s.speedup is None for samples in problems for s in samples):
        return None
    return sum(fast_share(samples, p) for samples in problems) / len(problems)


def fast_p_table(problems: list[list[SampleScore]]) -> dict[str, float | None]:
    """fast_p at KernelBench's thresholds, keyed as its reports write them ("0", "0.5", ..., "2")."""
    return {f"{p:g}": fast_p(problems, p) for p in FAST_P_THRESHOLDS}
