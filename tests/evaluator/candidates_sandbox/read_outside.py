# expect: runtime_error exception
# problem: relu
# config: static_checks=false,timeout_s=20,max_processes=64
"""Sandbox attack: reads a secret in a home folder, the cache's signing key, and credentials in the environment."""
import os

import torch.nn as nn

SECRETS = ["/tmp/kz_sandbox_test/home/.secret", "../../../cache.key", "/root/.bash_history"]


class ModelNew(nn.Module):
    def forward(self, x):
        outcomes = []
        for path in SECRETS:
            try:
                with open(path, "rb") as f:
                    outcomes.append(f"{path}: READ {f.read()[:64]!r}")
            except OSError as exc:
                outcomes.append(f"{path}: {exc.strerror}")
        leaked = {k: v for k, v in os.environ.items() if "KZ_TEST_SECRET" in k}
        outcomes.append(f"environment: {leaked or 'no secret'}")
        raise RuntimeError("read attempts: " + "; ".join(outcomes))
