# expect: timeout timeout
# problem: relu
# config: static_checks=false,timeout_s=20,max_processes=64
"""Lying channel: closes every descriptor it holds from 3 up (the result pipe among them: the evaluator reads its end of file), then hangs past its timeout."""
import os
import time

os.closerange(3, 1024)
time.sleep(600)
