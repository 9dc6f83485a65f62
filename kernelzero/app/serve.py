"""`kernelzero serve ROLE`: run one stage as a long-running service against the configured log."""

from __future__ import annotations

import argparse
import copy
from types import ModuleType

from kernelzero.config import Config
from kernelzero.stage import ROLES


def service(role: str) -> ModuleType:
    """The module providing `serve(args, config) -> int` for `role`, imported only when that role runs
    (the trainer's and projector's import torch and duckdb, which every other command would pay for)."""
    if role == "evaluator":
        from kernelzero.gpu_workers import service as evaluator
        return evaluator
    if role == "coder":
        from kernelzero.producers import coder
        return coder
    if role == "proposer":
        from kernelzero.producers import proposer
        return proposer
    if role == "validator":
        from kernelzero.consumers import validator
        return validator
    if role == "trainer":
        from kernelzero.consumers import trainer_service
        return trainer_service
    if role == "projector":
        from kernelzero.analytics import service as projector
        return projector
    raise ValueError(f"unknown role {role!r}; choose from {', '.join(ROLES)}")


def add_arguments(parser) -> None:
    parser.add_argument("role", choices=ROLES, help="the stage to run")
    parser.add_argument("--workers", default=None, metavar="auto|N",
                        help="evaluator: one supervised worker process per visible GPU (auto), or N sharing them")
    parser.add_argument("--idle-exit", type=float, default=None, metavar="S",
                        help="stop after S seconds with nothing to consume (default: run until interrupted)")
    parser.add_argument("--no-result-cache", action="store_true",
                        help="evaluator: evaluate every sample, reading and writing no cached result (benchmarks)")


def main(args, config) -> int:
    return int(service(args.role).serve(args, config) or 0)


def serve_until_idle(role: str, config: Config, idle_s: float = 0.5) -> int:
    """Run one stage in this process until its input has been drained for `idle_s` (the demo and benches).

    The stage gets its own copy of `config`, as a `kernelzero serve` process reading the same file would. A stage
    ends only where the log says its input is drained (kernelzero/stage.py `drained`), so the quiet period need not
    cover stragglers: it is one empty poll. At 3 s the demo's 26 stage runs waited over a minute in all."""
    options = argparse.Namespace(role=role, workers=None, idle_exit=idle_s, no_result_cache=False)
    return int(service(role).serve(options, copy.deepcopy(config)) or 0)
