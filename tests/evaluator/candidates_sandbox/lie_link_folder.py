# expect: runtime_error worker_exited:7
# problem: relu
# config: static_checks=false,timeout_s=20,max_processes=64
"""Lying file: puts a symbolic link to a folder (/etc) at output.log, then exits."""
import os

os.symlink("/etc", "lie")
os.replace("lie", "output.log")
os._exit(7)
