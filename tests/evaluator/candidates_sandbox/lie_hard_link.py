# expect: runtime_error worker_exited:7
# problem: relu
# config: static_checks=false,timeout_s=20,max_processes=64
"""Lying file: tries to put a hard link to a root-only file (the test's secret, /etc/shadow) at output.log, prints whether the kernel refused, then exits."""
import os

for target in ("/tmp/kz_lying_files/secret", "/etc/shadow"):
    try:
        os.link(target, "lie")
        os.replace("lie", "output.log")
        print(f"link {target}: LINKED", flush=True)
        break
    except OSError as exc:
        print(f"link {target}: {exc.strerror}", flush=True)
os._exit(7)
