# expect: runtime_error worker_exited:7
# problem: relu
# config: static_checks=false,timeout_s=20,max_processes=64
"""Lying file: tries to put a device node for the host's memory (/dev/mem, 1:1) at output.log, prints whether the kernel refused, then exits."""
import os
import stat

try:
    os.mknod("lie", stat.S_IFCHR | 0o600, os.makedev(1, 1))
    os.replace("lie", "output.log")
    print("mknod /dev/mem: MADE", flush=True)
except OSError as exc:
    print(f"mknod /dev/mem: {exc.strerror}", flush=True)
os._exit(7)
