"""The in-process layer on this kernel: seccomp denies its list, allows the rest; Landlock confines writes; in_force is true."""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import threading
import traceback
from pathlib import Path

import pytest

from kernelzero.sandbox import confine, landlock, seccomp
from kernelzero.schemas.messages import Confinement

needs_seccomp = pytest.mark.skipif(not seccomp.supported(), reason=f"no syscall table for {seccomp.machine()}")
needs_landlock = pytest.mark.skipif(landlock.abi_version() < 1, reason="this kernel has no Landlock")


def in_child(check) -> int:
    """Run `check` in a forked child (filters and rulesets never come off); its exit status: 0 when it passed."""
    pid = os.fork()
    if pid == 0:
        try:
            check()
            os._exit(0)
        except BaseException:  # noqa: BLE001  (the child reports through its exit status and stderr)
            traceback.print_exc()
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def syscall_errno(number: int, *args: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return 0 if libc.syscall(number, *args) >= 0 else ctypes.get_errno()


@needs_seccomp
def test_the_filter_denies_what_it_lists_and_allows_what_kernels_use() -> None:
    numbers = seccomp.DENIED[seccomp.machine()]
    checked = seccomp.CHECKED[seccomp.machine()]

    def check() -> None:
        seccomp.install()
        for name in ("ptrace", "unshare", "setns", "bpf", "keyctl", "userfaultfd", "perf_event_open", "mount"):
            assert syscall_errno(numbers[name], 0, 0, 0, 0) == errno.EPERM, name
        assert syscall_errno(checked["clone3"], 0, 0) == errno.ENOSYS  # glibc falls back to clone
        assert syscall_errno(checked["clone"], 0x10000000 | 17, 0, 0, 0, 0) == errno.EPERM  # CLONE_NEWUSER
        with pytest.raises(PermissionError):
            socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
        child = os.fork()
        if child == 0:
            os._exit(7)
        assert os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 7
        thread = threading.Thread(target=lambda: None)
        thread.start()
        thread.join()

    assert in_child(check) == 0


def test_a_filter_for_another_architecture_is_refused_not_guessed() -> None:
    with pytest.raises(RuntimeError, match="no syscall table for riscv64"):
        seccomp.program("riscv64")
    assert len(seccomp.program("aarch64")) % 8 == 0 and len(seccomp.program("x86_64")) % 8 == 0


@needs_landlock
def test_landlock_allows_writes_beneath_the_folder_only(tmp_path: Path) -> None:
    inside, outside = tmp_path / "scratch", tmp_path / "elsewhere"
    inside.mkdir()
    outside.mkdir()

    def check() -> None:
        assert landlock.restrict([str(inside)], ["/dev"])
        (inside / "ok").write_text("written")
        with open(os.devnull, "w") as null:
            null.write("discarded")
        with pytest.raises(PermissionError):
            (outside / "no").write_text("not written")
        assert (tmp_path / "scratch" / "ok").read_text() == "written"  # reading stays as the file system allows

    assert in_child(check) == 0
    assert not (outside / "no").exists()


@needs_seccomp
def test_in_force_reports_what_holds_not_what_was_asked(tmp_path: Path) -> None:
    here = confine.vantage()
    asked = Confinement(launcher="none", max_processes=64, max_open_files=256, evaluator=here)

    def check() -> None:
        mechanisms = confine.enter(asked, [str(tmp_path)], str(tmp_path))
        assert {"seccomp", "nofile"} <= set(mechanisms)
        assert not {"net", "mount", "pid", "user", "uid"} & set(mechanisms)  # same namespaces and uid as here
        assert ("nproc" in mechanisms) == (os.getuid() != 0)  # root is not bound by RLIMIT_NPROC
        assert os.environ["HOME"] == str(tmp_path) and os.environ["TMPDIR"] == str(tmp_path / "tmp")

    assert in_child(check) == 0
