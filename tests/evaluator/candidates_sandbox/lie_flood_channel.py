# expect: rejected forged_result
# problem: relu
# config: static_checks=false,timeout_s=20,max_processes=64
"""Lying channel: announces an answer of almost 4 GiB on every descriptor it holds (the result pipe among them) and streams 1 GiB into it, then exits."""
import os
import struct

JUNK = b"\0" * (1 << 20)

for fd in range(3, 64):
    try:
        os.write(fd, struct.pack("!I", 0xFFFFFFF0))
        for _ in range(1024):
            os.write(fd, JUNK)
    except OSError:
        pass
os._exit(0)
