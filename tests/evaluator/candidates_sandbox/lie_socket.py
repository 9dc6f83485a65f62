# expect: runtime_error worker_exited:7
# problem: relu
# config: static_checks=false,timeout_s=20,max_processes=64
"""Lying file: puts a listening unix socket at output.log, then exits."""
import os
import socket

listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind("lie")
listener.listen(1)
os.replace("lie", "output.log")
os._exit(7)
