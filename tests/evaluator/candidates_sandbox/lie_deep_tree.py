# expect: runtime_error worker_exited:7
# problem: relu
# config: static_checks=false,timeout_s=20,max_processes=64
"""Lying folder: leaves trees of folders 2000 deep in its scratch and in /dev/shm (a remover that recurses in Python, as shutil.rmtree does, fails on them), then exits."""
import os

DEPTH = 2000  # twice the recursion limit of Python; deeper costs Landlock time at every level


def nest(top: str) -> None:
    here = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(DEPTH):
        os.mkdir("d", dir_fd=here)
        deeper = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=here)
        os.close(here)
        here = deeper
    os.close(here)


os.mkdir("deep")
nest("deep")
os.mkdir("/dev/shm/deep")
nest("/dev/shm/deep")
os._exit(7)
