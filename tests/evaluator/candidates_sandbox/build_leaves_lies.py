# expect: runtime_error exception
# problem: relu
# via: build
"""Lying files in a build folder: the build leaves links (to a root-only file, a host file, a folder), a FIFO, a socket, hard links and a device node where each job's copy of the build is made from; the job names what its copy holds."""
import os
import socket
import stat

import torch.nn as nn

FOLDER = "/kz/ext"  # the build's folder in its sandbox, and the job's copy of it in the job's
LINKS = {"link_secret": "/tmp/kz_lying_files/secret", "link_outside": "/tmp/kz_lying_host/outside", "link_folder": "/etc"}


def attempt(what: str, act) -> str:
    try:
        act()
        return f"{what}: MADE"
    except OSError as exc:
        return f"{what}: {exc.strerror}"


def plant() -> None:
    for name, target in LINKS.items():
        os.symlink(target, name)
    os.mkfifo("fifo")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("socket")
    with open("two_names", "w") as f:
        f.write("one file, two names")
    os.link("two_names", "second_name")  # within its own folder the kernel allows it
    report = [attempt(f"link {target}", lambda target=target: os.link(target, "hard_" + os.path.basename(target)))
              for target in ("/tmp/kz_lying_files/secret", "/etc/shadow")]
    report.append(attempt("mknod /dev/mem", lambda: os.mknod("device", stat.S_IFCHR | 0o600, os.makedev(1, 1))))
    with open("build_report.txt", "w") as f:
        f.write("; ".join(report))


def kind(entry: os.DirEntry) -> str:
    if entry.is_symlink():
        return "link"
    return "folder" if entry.is_dir() else "file" if entry.is_file() else "special"


if os.getcwd() == FOLDER:  # the build runs here; the job in /kz/job
    plant()


class ModelNew(nn.Module):
    def forward(self, x):
        held = sorted(f"{entry.name}:{kind(entry)}" for entry in os.scandir(FOLDER))
        with open(os.path.join(FOLDER, "build_report.txt")) as f:
            report = f.read()
        raise RuntimeError(f"the job's copy of the build holds {', '.join(held)}; the build: {report}")
