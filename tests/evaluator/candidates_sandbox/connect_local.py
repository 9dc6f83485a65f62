# expect: runtime_error exception
# problem: relu
# config: static_checks=false,timeout_s=20,max_processes=64
"""Sandbox attack: connects to a TCP port on 127.0.0.1 and to an abstract unix socket the test listens on."""
import socket

import torch.nn as nn

TCP_PORT = 47319
ABSTRACT_NAME = b"\0kz_sandbox_test"


def attempt(family: int, address) -> str:
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(address)
            s.sendall(b"forged samples.evaluated")
        return "CONNECTED"
    except OSError as exc:
        return exc.strerror or str(exc)


class ModelNew(nn.Module):
    def forward(self, x):
        tcp = attempt(socket.AF_INET, ("127.0.0.1", TCP_PORT))
        unix = attempt(socket.AF_UNIX, ABSTRACT_NAME)
        raise RuntimeError(f"connect attempts: tcp 127.0.0.1:{TCP_PORT}: {tcp}; abstract unix: {unix}")
