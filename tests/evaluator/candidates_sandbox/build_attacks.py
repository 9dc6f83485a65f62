# expect: compile_error build_failed
# problem: relu
# via: build
"""Sandbox attack at build time: the candidate's Python runs in the build process, its C++ includes a secret by path."""
import socket

from torch.utils.cpp_extension import load_inline

SECRET = "/tmp/kz_sandbox_test/home/.secret"
WRITES = ["/tmp/kz_pwned_build", "../../results/kz_pwned.json"]  # outside a sandbox a build runs in CACHE/builds/HASH


def attempts() -> list[str]:
    outcomes = []
    for target in WRITES:
        try:
            with open(target, "a") as f:
                f.write("pwned")
            outcomes.append(f"write {target}: WRITTEN")
        except OSError as exc:
            outcomes.append(f"write {target}: {exc.strerror}")
    try:
        with open(SECRET) as f:
            outcomes.append(f"read {SECRET}: READ {f.read()!r}")
    except OSError as exc:
        outcomes.append(f"read {SECRET}: {exc.strerror}")
    try:
        with socket.create_connection(("127.0.0.1", 47319), timeout=5):
            outcomes.append("connect: CONNECTED")
    except OSError as exc:
        outcomes.append(f"connect: {exc.strerror}")
    return outcomes


REPORT = "; ".join(attempts())
try:
    load_inline("kz_sandbox_secret", cpp_sources=f'#include "{SECRET}"\n', functions=[])
except Exception as exc:
    raise RuntimeError(f"build-time attempts: {REPORT} | build: {str(exc)[-300:]}") from None
