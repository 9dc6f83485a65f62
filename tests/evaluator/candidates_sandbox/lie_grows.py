# expect: runtime_error worker_exited:7
# problem: relu
# config: static_checks=false,timeout_s=20,max_processes=64
"""Lying file: a background writer in a session of its own keeps growing its output (the evaluator's file, on stdout) and a file at output.log, meant to outlive the job, which exits."""
import os
import subprocess
import sys
import time

WRITER = """
import os, time
chunk = b"kz-grows " * 7000
own = os.open("output.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
while True:
    os.write(1, chunk)
    os.write(own, chunk)
    time.sleep(0.01)
"""

subprocess.Popen([sys.executable, "-c", WRITER, "kz-lying-grows"], start_new_session=True)
time.sleep(1)
os._exit(7)
