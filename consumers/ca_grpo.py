"""CA-GRPO reward and advantage math for one group of Coder samples; pure functions, no torch, no I/O.

It does not decide which samples form a group (consumers.groups does) nor apply the loss
(consumers.policy_update does). The exact rule, every knob from `[trainer]` in the config:

1. Exclusion. A sample whose verdict is `evaluator_error` or `problem_error` (schemas'
   UNCHARGED_VERDICTS: our fault or the problem's) is never charged: weight 0, advantage 0,
   no part in steps 3-6, left out of `pass_rate`.
2. Staleness. age_i = current_version - policy_version_i. A sample with age_i > staleness_k is
   stale. stale = "drop": its weight is 0 and it takes no part in steps 3-6 (its reward is still
   reported). stale = "importance_weight": it stays in the group with weight 1; the policy update
   multiplies its token losses by the truncated importance ratio min(pi_theta / pi_behaviour,
   is_cap) (detached) instead of clipping against the behaviour policy.
3. Correctness. c_i = 1 if the verdict is "correct", else 0 ("rejected" included).
4. Gate. p = mean c_i over the kept samples (gate = "group"), or over the last gate_window
   outcomes of a moving window that this group's kept outcomes are pushed onto first
   (gate = "window"; one window for the whole policy, not per module). The gate is open when
   p >= tau. An empty group or window has p = 0.
5. Reward. rejected: r_i = rejected_penalty, open gate or not. Other incorrect verdicts: 0.
   Correct, gate closed: 1. Correct, gate open: 1 + perf_lambda * clip(log2 s_i,
   log2_speedup_min, log2_speedup_max). A speedup that is None, NaN, +-inf or <= 0 is no
   measurement (CPU evaluation has no timing; the evaluator rejects physically impossible
   speedups): its performance term is 0, so the sample earns exactly 1. Noise floor: the
   group's measured speedups are sorted and cut into runs where each stays within
   speedup_tolerance (relative) of its run's slowest; every speedup of a run is replaced by the
   run's geometric mean, so speedups that differ by timing noise earn the same reward.
6. Advantage over the kept samples: mean and population std (ddof = 0) of their rewards;
   A_i = (r_i - mean) / (std + eps) when scale_std, else r_i - mean. A group of identical
   rewards gets A = 0 everywhere and is not `informative` (the trainer skips it, as DAPO's
   dynamic sampling does); dropped samples get A = 0.
`pass_rate` reports the correctness rate over every charged sample of the group, dropped or
not: it measures the module, whatever the sample's age.
"""

from __future__ import annotations

import math
from typing import Sequence

import msgspec

from kernelzero.config import TrainerConfig
from kernelzero.schemas import UNCHARGED_VERDICTS, ScoredSample


class SampleOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What the reward needs of one evaluated sample."""

    sample_id: str
    verdict: str
    speedup: float | None = None
    policy_version: int = 0


class GateWindow(msgspec.Struct, frozen=True):
    """The most recent kept correctness outcomes (0/1), oldest first; at most gate_window long."""

    outcomes: tuple[int, ...] = ()


class GroupResult(msgspec.Struct, frozen=True, kw_only=True):
    samples: list[ScoredSample]
    pass_rate: float  # over every charged sample of the group
    gate_rate: float  # the p compared against tau
    gate_open: bool
    stale_dropped: int
    uncharged: int  # samples left out as evaluator_error / problem_error
    informative: bool  # some kept sample has a non-zero advantage
    window: GateWindow  # the window after this group (unchanged when gate = "group")


def describe_rule(config: TrainerConfig) -> str:
    """The configuration that produced a group's rewards, as one line (goes into groups.scored)."""
    c = config
    gate = f"window({c.gate_window})" if c.gate == "window" else "group"
    return (
        f"ca-grpo gate={gate} tau={c.tau} lambda={c.perf_lambda} "
        f"clip=[{c.log2_speedup_min},{c.log2_speedup_max}] rejected={c.rejected_penalty} "
        f"scale_std={c.scale_std} eps={c.eps} k={c.staleness_k} stale={c.stale} tol={c.speedup_tolerance}"
    )


def is_stale(policy_version: int, current_version: int, staleness_k: int) -> bool:
    return current_version - policy_version > staleness_k


def measured(speedup: float | None) -> bool:
    return speedup is not None and math.isfinite(speedup) and speedup > 0.0


def performance_term(speedup: float | None, config: TrainerConfig) -> float:
    """clip(log2 s, lo, hi); 0 for a speedup that is no measurement (None, NaN, +-inf, <= 0)."""
    if not measured(speedup):
        return 0.0
    return min(max(math.log2(speedup), config.log2_speedup_min), config.log2_speedup_max)


def equalize_speedups(speedups: Sequence[float | None], tolerance: float) -> list[float | None]:
    """The noise floor of rule 5: each run of speedups within `tolerance` of its slowest becomes its geometric mean."""
    order = sorted((s, i) for i, s in enumerate(speedups) if measured(s))
    out = list(speedups)
    run: list[tuple[float, int]] = []
    for speedup, index in order + [(math.inf, -1)]:
        if run and speedup > run[0][0] * (1.0 + tolerance):
            mean = math.exp(sum(math.log(s) for s, _ in run) / len(run))
            for _, member in run:
                out[member] = mean
            run = []
        run.append((speedup, index))
    return out


def sample_reward(outcome: SampleOutcome, gate_open: bool, config: TrainerConfig, speedup: float | None = None) -> float:
    """Rule 5 for one sample; `speedup` is its noise-floored speedup (the outcome's own when not given)."""
    if outcome.verdict == "rejected":
        return config.rejected_penalty
    if outcome.verdict != "correct":
        return 0.0
    if not gate_open:
        return 1.0
    return 1.0 + config.perf_lambda * performance_term(outcome.speedup if speedup is None else speedup, config)


def group_advantages(rewards: Sequence[float], scale_std: bool, eps: float) -> list[float]:
    """(r - mean) / (std + eps), or r - mean; population std. Also used for the Proposer's groups."""
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    centred = [r - mean for r in rewards]
    if not scale_std:
        return centred
    std = math.sqrt(sum(d * d for d in centred) / len(rewards))
    return [d / (std + eps) for d in centred]


def push_window(window: GateWindow, outcomes: Sequence[int], size: int) -> GateWindow:
    merged = window.outcomes + tuple(outcomes)
    return GateWindow(merged[-size:] if size > 0 else ())


def _rate(outcomes: Sequence[int]) -> float:
    return sum(outcomes) / len(outcomes) if outcomes else 0.0


def score_group(
    outcomes: Sequence[SampleOutcome],
    current_version: int,
    config: TrainerConfig,
    window: GateWindow = GateWindow(),
) -> GroupResult:
    """Rewards, advantages and weights for one group under the rule in this module's docstring."""
    drop = config.stale == "drop"
    charged = [o.verdict not in UNCHARGED_VERDICTS for o in outcomes]
    kept = [c and not (drop and is_stale(o.policy_version, current_version, config.staleness_k))
            for o, c in zip(outcomes, charged)]
    correct = [1 if o.verdict == "correct" else 0 for o in outcomes]
    kept_correct = [c for c, k in zip(correct, kept) if k]
    if config.gate == "window":
        window = push_window(window, kept_correct, config.gate_window)
    gate_population = window.outcomes if config.gate == "window" else kept_correct
    gate_rate = _rate(gate_population)
    gate_open = bool(gate_population) and gate_rate >= config.tau
    floored = equalize_speedups(
        [o.speedup if k and o.verdict == "correct" else None for o, k in zip(outcomes, kept)], config.speedup_tolerance)
    rewards = [sample_reward(o, gate_open, config, s) for o, s in zip(outcomes, floored)]
    kept_advantages = group_advantages([r for r, k in zip(rewards, kept) if k], config.scale_std, config.eps)
    advantages = iter(kept_advantages)
    samples = [
        ScoredSample(
            sample_id=o.sample_id, verdict=o.verdict, reward=r,
            advantage=next(advantages) if k else 0.0,
            speedup=o.speedup if o.speedup is None or math.isfinite(o.speedup) else None,
            policy_version=o.policy_version, weight=1.0 if k else 0.0,
        )
        for o, r, k in zip(outcomes, rewards, kept)
    ]
    return GroupResult(
        samples=samples, pass_rate=_rate([c for c, ch in zip(correct, charged) if ch]), gate_rate=gate_rate,
        gate_open=gate_open, stale_dropped=sum(ch and not k for ch, k in zip(charged, kept)),
        uncharged=charged.count(False), informative=any(a != 0.0 for a in kept_advantages), window=window,
    )
