# expect: compile_error build_failed
# problem: relu
# via: build
"""Lying folder in a build folder: the build nests folders 2000 deep (twice Python's recursion limit) and fails, so that the next build of the same source walks them."""
import os

here = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
for _ in range(2000):
    os.mkdir("d", dir_fd=here)
    deeper = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=here)
    os.close(here)
    here = deeper
raise RuntimeError("the build failed; its folder stays for the next build of the same source")
