"""The seccomp filter for candidate processes: a classic-BPF deny list, installed with prctl; not a full allow-list.

A kernel candidate computes, allocates, reads and writes its own files, starts compilers and
threads; it never needs to debug other processes, mount, make namespaces, load kernel modules,
use keyrings, BPF, userfaultfd, perf events, io_uring, or open network sockets. Those calls fail
with EPERM (clone3 with ENOSYS, so glibc falls back to clone, whose flags are checked); a
syscall of another ABI (i386 or x32 on x86_64, arm32 on aarch64) kills the process, since the
numbers below would not apply. Built with `struct` from the tables here rather than libseccomp:
no library to find on the GPU machine, and the program is short enough to read. What stays
allowed is the rest of Linux: the filter narrows the kernel's attack surface, the namespaces
and uid do the containing.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

# syscall numbers: x86_64 from asm/unistd_64.h, aarch64 from asm-generic/unistd.h (Linux 6.x)
DENIED = {
    "x86_64": {
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "pidfd_getfd": 438,
        "process_madvise": 440, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "setns": 308,
        "unshare": 272, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "init_module": 175, "finit_module": 313, "delete_module": 176,
        "kexec_load": 246, "kexec_file_load": 320, "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163,
        "quotactl": 179, "quotactl_fd": 443, "syslog": 103, "lookup_dcookie": 212, "keyctl": 250, "add_key": 248,
        "request_key": 249, "bpf": 321, "userfaultfd": 323, "perf_event_open": 298, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "open_by_handle_at": 304, "name_to_handle_at": 303,
        "fanotify_init": 300, "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159,
        "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173,
    },
    "aarch64": {
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "pidfd_getfd": 438,
        "process_madvise": 440, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "setns": 268,
        "unshare": 97, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "init_module": 105, "finit_module": 273, "delete_module": 106,
        "kexec_load": 104, "kexec_file_load": 294, "reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89,
        "quotactl": 60, "quotactl_fd": 443, "syslog": 116, "lookup_dcookie": 18, "keyctl": 219, "add_key": 217,
        "request_key": 218, "bpf": 280, "userfaultfd": 282, "perf_event_open": 241, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "open_by_handle_at": 265, "name_to_handle_at": 264,
        "fanotify_init": 262, "settimeofday": 170, "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171,
        "sethostname": 161, "setdomainname": 162,
    },
}
CHECKED = {"x86_64": {"clone": 56, "clone3": 435, "socket": 41},
           "aarch64": {"clone": 220, "clone3": 435, "socket": 198}}
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
CLONE_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
NETWORK_FAMILIES = (2, 10, 17)  # AF_INET, AF_INET6, AF_PACKET; AF_UNIX and AF_NETLINK stay

# classic BPF opcodes and seccomp return values
_LD_W_ABS, _JEQ_K, _JSET_K, _JGE_K, _RET_K = 0x20, 0x15, 0x45, 0x35, 0x06
_RET_ALLOW, _RET_KILL_PROCESS, _RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data (arg0's low 32 bits on little-endian)
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2


class _Program:
    """Instructions whose jumps name labels; offsets are resolved when the program is packed."""

    def __init__(self) -> None:
        self.code: list[tuple[int, str | None, str | None, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def load(self, offset: int) -> None:
        self.code.append((_LD_W_ABS, None, None, offset))

    def jump(self, op: int, k: int, if_true: str | None = None, if_false: str | None = None) -> None:
        """A conditional jump to a label, None meaning the next instruction."""
        self.code.append((op, if_true, if_false, k))

    def ret(self, value: int) -> None:
        self.code.append((_RET_K, None, None, value))

    def pack(self) -> bytes:
        out = b""
        for i, (op, if_true, if_false, k) in enumerate(self.code):
            jt, jf = (0 if t is None else self.labels[t] - i - 1 for t in (if_true, if_false))
            out += struct.pack("HBBI", op, jt, jf, k)
        return out


def machine() -> str:
    return platform.machine()


def supported() -> bool:
    return machine() in DENIED


def program(arch: str | None = None) -> bytes:
    """The filter as packed `struct sock_filter` instructions for `arch` (default: this machine)."""
    arch = arch or machine()
    if arch not in DENIED:
        raise RuntimeError(f"seccomp: no syscall table for {arch} (known: {', '.join(DENIED)})")
    nr = CHECKED[arch]
    p = _Program()
    p.load(_ARCH)
    p.jump(_JEQ_K, AUDIT_ARCH[arch], None, "kill")
    p.load(_NR)
    if arch == "x86_64":
        p.jump(_JGE_K, X32_SYSCALL_BIT, "kill")
    for denied in sorted(set(DENIED[arch].values())):
        p.jump(_JEQ_K, denied, "eperm")
    p.jump(_JEQ_K, nr["clone3"], "enosys")
    p.jump(_JEQ_K, nr["socket"], "socket")
    p.jump(_JEQ_K, nr["clone"], None, "allow")
    p.load(_ARG0)
    p.jump(_JSET_K, CLONE_NAMESPACE_FLAGS, "eperm", "allow")
    p.label("socket")
    p.load(_ARG0)
    for family in NETWORK_FAMILIES:
        p.jump(_JEQ_K, family, "eperm")
    p.label("allow")
    p.ret(_RET_ALLOW)
    p.label("eperm")
    p.ret(_RET_ERRNO | errno.EPERM)
    p.label("enosys")
    p.ret(_RET_ERRNO | errno.ENOSYS)
    p.label("kill")
    p.ret(_RET_KILL_PROCESS)
    return p.pack()


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install() -> None:
    """Filter this thread and every process or thread it starts later; raises OSError if the kernel refuses.

    Sets no_new_privs first (the kernel requires it of a process without CAP_SYS_ADMIN). Call it
    while the process has one thread: threads that already exist keep running unfiltered.
    """
    code = program()
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = _SockFprog(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
            libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp: prctl refused the filter: {errno.errorcode.get(err, err)}")
