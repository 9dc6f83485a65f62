"""The evaluator's version and its results (`evaluation`: the schema's Evaluation, stamped with that version), and the problem's failure inside a trial.

A service turns an Evaluation into a SampleEvaluated (an Evaluation plus the sample's ids) with
`msgspec.structs.asdict`.
"""

from __future__ import annotations

from typing import Any

from kernelzero.schemas import Evaluation

# Bump when a rule changes what a candidate's verdict would be: the result cache keys on it.
# 2: unjoined side streams rejected; unwritten outputs found by a re-run.
# 3: evaluator_error and problem_error verdicts; 0-dim and Python-number outputs compared; the reference's input
#    draw no longer counted as its work; matrix products one family, fused bias adds and scalings counted.
# 4: a CUDA out-of-memory within the candidate's allowance (the reference's peak) is the evaluator's, not charged;
#    cached `runtime_error out_of_memory` results of version 3 may have been such shortfalls.
# 5: the torch.compile'd reference compiled in the trial's own thread: inductor's compile pool, started late, made
#    correct candidates `rejected background_thread` (timed runs on a GPU); threads compared as objects, not counted.
# 6: every candidate call is judged, timed ones included (the same buffers and poisoning, inputs checked by a keyed
#    checksum, outputs against references computed before import, whole or as digests); a timed call that did less
#    work is `incorrect`. The evaluator's own copies shrink to fit the card (issue 26): cached out-of-memory results
#    of version 5 may have been the evaluator's.
# 7: the reference timed once per problem and GPU by a job without candidate code, the candidate alone against it
#    (the speedup a ratio of medians, no longer of interleaved calls; the synchronization's cost measured beside
#    the candidate on a spin kernel of ours); timing stops at the timer's resolution.
# 8: a spin of ours timed beside warm-up in both jobs: the reference's times carry its time, a candidate's evidence
#    how far its clock was from the reference's (`clock_vs_reference`).
# 9: a call no longer than the synchronization's cost reads as the timer's resolution (it read as 1e-6 ms), and a
#    physical floor is broken only by more than that resolution: cached `beyond_physical_limit` verdicts of tiny
#    modules may have been false, their speedups unbounded.
EVALUATOR_VERSION = "kz-eval-9"


def evaluation(verdict: str, reason: str, **fields: Any) -> Evaluation:
    """A result of this evaluator: an Evaluation stamped with EVALUATOR_VERSION."""
    return Evaluation(verdict=verdict, reason=reason, evaluator_version=EVALUATOR_VERSION, **fields)


class ProblemFailed(RuntimeError):
    """Raised inside a trial when the problem is unusable (fails, non-deterministic, constant, too large): a `problem_error`."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"problem {reason}: {detail}" if detail else f"problem {reason}")
        self.reason = reason
        self.detail = detail
