# expect: runtime_error exception
# problem: relu
# config: static_checks=false,timeout_s=20,max_processes=64
"""Sandbox attack: writes a fixed path, the evaluator's result cache (reached from its scratch folder) and a log file."""
import os

import torch.nn as nn

TARGETS = [
    "/tmp/kz_pwned",  # a fixed path anyone could watch
    "/tmp/kz_sandbox_test/log.sqlite",  # stands for the embedded event log
    "../../../results/kz_pwned.json",  # the result cache: scratch is CACHE/scratch/WORKER/job outside a sandbox
    "../../../cache.key",  # the cache's signing key
]


class ModelNew(nn.Module):
    def forward(self, x):
        outcomes = []
        for target in TARGETS:
            try:
                with open(target, "a") as f:
                    f.write("pwned")
                outcomes.append(f"{target}: WRITTEN")
            except OSError as exc:
                outcomes.append(f"{target}: {exc.strerror}")
        raise RuntimeError("write attempts: " + "; ".join(outcomes))
