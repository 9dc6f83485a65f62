# expect: runtime_error worker_exited:7
# problem: relu
# config: static_checks=false,timeout_s=20,max_processes=64
"""Lying file: puts a symbolic link to a root-only file (the test's secret, mode 0600) at output.log, where its job's output was once read from, then exits."""
import os

os.symlink("/tmp/kz_lying_files/secret", "lie")
os.replace("lie", "output.log")
os._exit(7)
