"""How close a pass rate is to the frontier's target: the one formula of the frontier's weight and the Proposer's reward.

1 at the target, falling linearly to 0 at the band edge on the pass rate's side of it, 0 outside
[band_low, band_high]. It says nothing about how sure the pass rate is (the frontier adds its own
exploration term for that).
"""

from __future__ import annotations


def closeness(pass_rate: float, band_low: float, target: float, band_high: float) -> float:
    if not band_low <= pass_rate <= band_high:
        return 0.0
    half = target - band_low if pass_rate <= target else band_high - target
    return 1.0 - abs(pass_rate - target) / half if half > 0 else 1.0
