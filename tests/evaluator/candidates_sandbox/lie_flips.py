# expect: timeout timeout
# problem: relu
# config: static_checks=false,timeout_s=20,max_processes=64
"""Lying file: a background process flips output.log between a regular file and a symbolic link to a root-only file (a check, then an open, would see two files) while the job hangs past its timeout."""
import os
import time

SECRET = "/tmp/kz_lying_files/secret"

if os.fork() == 0:
    os.setsid()
    while True:
        for make in (lambda: open("lie", "w").close(), lambda: os.symlink(SECRET, "lie")):
            make()
            os.replace("lie", "output.log")
time.sleep(600)
