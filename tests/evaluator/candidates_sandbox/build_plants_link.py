# expect: compile_error build_failed
# problem: relu
# via: build
"""Lying file in a build folder: the build replaces its source file (the evaluator wrote it there) with a symbolic link to a host file and fails, so that the next build of the same source would write through the link."""
import os

os.unlink("kz_candidate.py")
os.symlink("/tmp/kz_lying_host/victim", "kz_candidate.py")
raise RuntimeError("the build failed; its folder stays for the next build of the same source")
