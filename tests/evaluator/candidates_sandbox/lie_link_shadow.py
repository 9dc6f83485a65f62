# expect: runtime_error worker_exited:7
# problem: relu
# config: static_checks=false,timeout_s=20,max_processes=64
"""Lying file (issue 29 as measured): puts a symbolic link to the host's /etc/shadow at output.log, where its job's output was once read from, then exits."""
import os

os.symlink("/etc/shadow", "lie")
os.replace("lie", "output.log")
os._exit(7)
