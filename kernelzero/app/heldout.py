"""`kernelzero heldout --rows FILE`: put held-out modules on the log for the running Coder to answer; evaluation only, never trained on.

Each row (a `kernelzero distill` *_heldout.jsonl row: `reference` and `apis`) becomes a
modules.accepted event with split "heldout" and a module id of its own per `--tag`, so that each
publication measures the Coder's policy at that moment. The Coder samples its group for each, the
evaluator judges them, the trainer ignores them, and analytics' `heldout_curve` view (and the
report's held-out plot) gives pass@1 by policy version. It does not wait for the answers.
"""

from __future__ import annotations

import hashlib
import sys
import time
from typing import Sequence

from kernelzero.schemas import Event, ModuleAccepted, make_event
from kernelzero.schemas.events import Split


def add_arguments(parser) -> None:
    parser.add_argument("--rows", required=True, metavar="FILE", help="held-out rows (JSON lines with reference, apis)")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N rows")
    parser.add_argument("--tag", default=None, help="names this measurement (default: the current time)")
    parser.add_argument("--no-greedy", action="store_true",
                        help="only the sampled group per module, not its greedy answer too")


def heldout_events(rows: Sequence, tag: str, greedy: bool = True, split: Split = "heldout") -> list[Event]:
    """Evaluation-only modules.accepted events (`split` "heldout", or "probe" for training rows) for rows with
    `reference` and `apis` (as kernelzero.bootstrap.heldout_judge reads them): one per row for a group sampled at the
    Coder's temperature, and with `greedy` one more for its greedy answer. A row's sampling seed comes from its
    reference, so every measurement of it draws the same random numbers."""
    from kernelzero.kit.heldout_protocol import sampling_seed

    events = []
    for index, row in enumerate(rows):
        fingerprint = hashlib.sha256(row.reference.encode()).hexdigest()
        seed = sampling_seed(row.reference)
        for decoding in ("sampled", "greedy") if greedy else ("sampled",):
            payload = ModuleAccepted(module_id=f"{split}-{tag}-{index:04d}" + ("-greedy" if decoding == "greedy" else ""),
                                     source=row.reference, apis=list(row.apis), fingerprint=fingerprint,
                                     split=split, greedy=decoding == "greedy",
                                     sampling_seed=seed)
            events.append(make_event(payload, correlation_id=payload.module_id, producer="heldout"))
    return events


def publish_heldout(config, rows_path, limit: int | None, tag: str, greedy: bool = True,
                    split: Split = "heldout") -> int:
    """Put the first `limit` rows of `rows_path` on the configured log under `tag` (heldout_events); 0, or 2 with a
    message."""
    from kernelzero.bootstrap.heldout_judge import read_heldout
    from kernelzero.stage import publish_to

    try:
        rows = read_heldout(rows_path, limit)
    except (OSError, ValueError) as exc:
        print(f"kernelzero heldout: cannot read {rows_path}: {exc}", file=sys.stderr)
        return 2
    if not rows or not all(row.reference for row in rows):
        print(f"kernelzero heldout: {rows_path} holds no rows with a reference module", file=sys.stderr)
        return 2
    events = heldout_events(rows, tag, greedy=greedy, split=split)
    publish_to(config.log.url, events, producer_name="heldout")
    print(f"published {len(events)} {'held-out' if split == 'heldout' else split} modules to {config.log.url}")
    return 0


def main(args, config) -> int:
    return publish_heldout(config, args.rows, args.limit, args.tag or time.strftime("%Y%m%d-%H%M%S"),
                           greedy=not args.no_greedy)
