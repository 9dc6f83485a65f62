# expect: runtime_error worker_exited:7
# problem: relu
# config: static_checks=false,timeout_s=20,max_processes=64
"""Lying file: puts a FIFO nobody writes at output.log (opening it to read would wait for ever), then exits."""
import os

os.mkfifo("lie")
os.replace("lie", "output.log")
os._exit(7)
