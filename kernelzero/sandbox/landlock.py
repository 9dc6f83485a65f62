"""Landlock for a candidate process: writes only beneath given folders, no signals out of its domain (ABI 6+); not reads.

Reads stay as the file system allows them (the sandbox's mounts and the candidate's uid decide
what is visible). A kernel without Landlock (before 5.13, or the LSM not enabled) refuses, and
`restrict` says so by returning False: the caller reports the mechanism as missing. Like
seccomp, the restriction covers the calling thread and what it starts later, not threads that
already run.
"""

from __future__ import annotations

import ctypes
import os

# syscall numbers are the same on every architecture (added after the tables were unified)
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

WRITE_FILE, REMOVE_DIR, REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
MAKE = sum(1 << bit for bit in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
REFER, TRUNCATE = 1 << 13, 1 << 14  # ABI 2 and ABI 3
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """The kernel's Landlock ABI version, 0 where Landlock is unavailable."""
    version = _libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(0, version)


def write_rights(abi: int) -> int:
    """Every right that changes the file system, as far as this ABI knows them."""
    rights = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    return rights


def restrict(writable: list[str], write_only: list[str]) -> bool:
    """Allow changes beneath `writable` (all rights) and writes to existing files beneath `write_only` (devices, /proc).

    Returns False, restricting nothing, where the kernel has no Landlock; raises OSError when a
    path cannot be opened or the kernel refuses a rule on a kernel that has it.
    """
    abi = abi_version()
    if abi < 1:
        return False
    handled = write_rights(abi)
    attr = _RulesetAttr(handled, 0, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0)
    size = ctypes.sizeof(attr) if abi >= 6 else 8  # older kernels reject fields they do not know
    ruleset = _check(_libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)))
    try:
        for path in writable:
            _allow(ruleset, path, handled)
        for path in write_only:
            _allow(ruleset, path, handled & (WRITE_FILE | TRUNCATE))
        _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
        _check(_libc.syscall(_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)))
    finally:
        os.close(ruleset)
    return True


def _allow(ruleset: int, path: str, rights: int) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        rule = _PathBeneath(rights, fd)
        _check(_libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0)))
    finally:
        os.close(fd)


def _check(result: int) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock: {os.strerror(err)}")
    return result
