# expect: rejected forged_result
# problem: relu
# config: static_checks=false,timeout_s=20,max_processes=64
"""Lying channel: announces an answer of almost 4 GiB on every descriptor it holds (the result pipe among them) and streams up to 1 GiB into each, then exits.

Each descriptor is made non-blocking first: on a GPU the job also holds CUDA's own descriptors, and a
blocking write into one that nobody drains stalled this candidate until its timeout before it reached
the result pipe (an H100 run: `timeout` where the CPU gives `rejected forged_result`), which tested
nothing of the host's reader.
"""
import fcntl
import os
import struct

JUNK = b"\0" * (1 << 20)

for fd in range(3, 64):
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        os.write(fd, struct.pack("!I", 0xFFFFFFF0))
        for _ in range(1024):
            os.write(fd, JUNK)
    except OSError:
        pass
os._exit(0)
