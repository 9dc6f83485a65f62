"""`kernelzero run`: every stage as its own `kernelzero serve` process, supervised; restarts a stage that dies.

Restarting is safe because stages commit outputs and offsets together (at-least-once): a stage
that dies mid-batch redoes that batch. It does not place stages on other machines: for that,
run `kernelzero serve ROLE` there against the same Kafka broker.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

ROLES = ("projector", "validator", "coder", "evaluator", "trainer", "proposer")
MAX_RESTARTS = 5


def add_arguments(parser) -> None:
    parser.add_argument("--roles", default=",".join(ROLES),
                        help=f"comma-separated stages to run (default: {','.join(ROLES)})")


def _command(role: str, args, config) -> list[str]:
    command = [sys.executable, "-m", "kernelzero.cli", "serve", role, "--broker", config.log.url]
    if args.config:
        command += ["--config", args.config]
    return command


def main(args, config) -> int:
    roles = [r.strip() for r in args.roles.split(",") if r.strip()]
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        print(f"kernelzero run: unknown roles {unknown}; choose from {', '.join(ROLES)}", file=sys.stderr)
        return 2
    processes = {role: subprocess.Popen(_command(role, args, config)) for role in roles}
    restarts = dict.fromkeys(roles, 0)
    stopping = False

    def stop(*_):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    print(f"kernelzero run: {', '.join(roles)} on {config.log.url} (Ctrl-C stops)", file=sys.stderr)
    try:
        while not stopping:
            time.sleep(0.5)
            for role, process in list(processes.items()):
                code = process.poll()
                if code is None or stopping:
                    continue
                if code == 0:
                    del processes[role]
                    continue
                restarts[role] += 1
                if restarts[role] > MAX_RESTARTS:
                    print(f"kernelzero run: {role} exited with {code} {MAX_RESTARTS} times; giving up", file=sys.stderr)
                    return 1
                print(f"kernelzero run: {role} exited with {code}; restarting", file=sys.stderr)
                processes[role] = subprocess.Popen(_command(role, args, config))
            if not processes:
                return 0
    finally:
        for process in processes.values():
            process.send_signal(signal.SIGINT)
        for process in processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
    return 0
