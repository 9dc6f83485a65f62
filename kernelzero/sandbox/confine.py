"""A candidate process confines itself before any candidate code runs, then reports what holds; it does not start the sandbox.

`enter` is the last trusted step of every process that will run candidate code (a worker's
per-job fork, a build, the start-up probe): it sets the process and open-file limits, takes the
candidate's uid where one is mapped (dropping every capability), points HOME, TMPDIR and the
compilers' caches into the candidate's own folder, restricts writes to that folder with
Landlock, and installs the seccomp filter. `in_force` then reads back, from the process's own
vantage point, which mechanisms are really in force (namespaces differ from the evaluator's,
uid, limits, filters), so evidence never claims what was only asked for, and
`usable_compiler` whether the C compiler builds need runs. Namespaces and the file system come
from the launcher (kernelzero/sandbox/launcher.py), not from here.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import tempfile

from kernelzero.sandbox import landlock, seccomp
from kernelzero.schemas.messages import Confinement, Vantage

# what each mechanism name in evidence means; REQUIRED is what `require_sandbox` insists on
MECHANISMS = {
    "net": "its own network namespace (bwrap --unshare-net): no route to any host, 127.0.0.1 included",
    "mount": "its own mount namespace (bwrap): system folders read-only, only its scratch writable, "
             "the evaluator's cache, logs and home absent",
    "pid": "its own PID namespace (bwrap --unshare-pid): no other process visible or signalled",
    "ipc": "its own IPC namespace",
    "uts": "its own hostname namespace",
    "cgroup": "its own cgroup namespace",
    "user": "its own user namespace",
    "uid": "a uid other than the evaluator's (the evaluator runs as root and maps candidate_uid)",
    "env": "an environment holding only the variables compilers and CUDA need (no credentials)",
    "seccomp": "the seccomp filter of kernelzero/sandbox/seccomp.py",
    "landlock": "Landlock: writes only beneath its own folders, no signals out of its domain",
    "nproc": "a process limit that binds (RLIMIT_NPROC on a uid other than root, with no capabilities)",
    "nofile": "an open-file limit (RLIMIT_NOFILE)",
}
REQUIRED = ("net", "mount", "pid", "seccomp", "nproc", "nofile")
NAMESPACES = (("net", "net"), ("mnt", "mount"), ("pid", "pid"), ("ipc", "ipc"), ("uts", "uts"),
              ("cgroup", "cgroup"), ("user", "user"))
# the environment a candidate process may see: what compilers, Python, torch, Triton and CUDA read
ENV_NAMES = {"PATH", "PWD", "LANG", "LANGUAGE", "TZ", "TERM", "HOME", "USER", "LOGNAME", "TMPDIR", "SHELL",
             "LD_LIBRARY_PATH", "CC", "CXX", "CUDAHOSTCXX", "MAX_JOBS", "XDG_CACHE_HOME"}
ENV_PREFIXES = ("LC_", "PYTHON", "CUDA_", "NVIDIA_", "NVCC_", "TORCH_", "PYTORCH_", "TORCHINDUCTOR_", "TRITON_",
                "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "CUBLAS_", "CUDNN_")
ENV_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL")


def vantage() -> Vantage:
    """Where this process stands: the evaluator's own, read before it starts any candidate process."""
    return Vantage(namespaces=_namespaces(), uid=os.getuid(), seccomp_filters=_seccomp_filters(_status()))


def env_allowed(name: str) -> bool:
    if any(word in name.upper() for word in ENV_SECRET_WORDS):
        return False
    return name in ENV_NAMES or name.startswith(ENV_PREFIXES)


def enter(confinement: Confinement, writable: list[str], home: str) -> list[str]:
    """Confine this process (call it while it has one thread); returns the mechanisms in force."""
    _limit(resource.RLIMIT_NOFILE, confinement.max_open_files)
    _limit(resource.RLIMIT_NPROC, confinement.max_processes)
    if confinement.switch_id >= 0:
        os.setgroups([])
        os.setresgid(confinement.switch_id, confinement.switch_id, confinement.switch_id)
        os.setresuid(confinement.switch_id, confinement.switch_id, confinement.switch_id)
    _move_home(home)
    try:
        landlocked = landlock.restrict([*writable, *confinement.also_writable], ["/dev", "/proc"])
    except OSError:
        landlocked = False
    try:
        seccomp.install()
    except (OSError, RuntimeError):
        pass  # reported by in_force: the filter count did not grow
    return in_force(confinement, landlocked)


def _limit(which: int, value: int) -> None:
    _, hard = resource.getrlimit(which)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(which, (value, value))


def _move_home(home: str) -> None:
    """HOME, TMPDIR and every cache a compiler or library writes point into the candidate's own folder."""
    for name, sub in (("HOME", ""), ("TMPDIR", "tmp"), ("XDG_CACHE_HOME", ".cache"), ("TRITON_CACHE_DIR", ".triton"),
                      ("CUDA_CACHE_PATH", ".nv"), ("TORCHINDUCTOR_CACHE_DIR", ".inductor")):
        path = os.path.join(home, sub) if sub else home
        os.makedirs(path, exist_ok=True)
        os.environ[name] = path
    os.environ["USER"] = os.environ["LOGNAME"] = "kernelzero"
    tempfile.tempdir = None  # computed again from TMPDIR


def in_force(confinement: Confinement, landlocked: bool) -> list[str]:
    """The mechanisms that hold for this process, read from /proc and getrlimit, in MECHANISMS order."""
    seen = _namespaces()
    found = {name for kind, name in NAMESPACES if seen.get(kind) != confinement.evaluator.namespaces.get(kind)}
    uid = _uid_as_evaluator_sees_it("user" in found)
    status = _status()
    found |= {name for name, holds in (
        ("uid", uid != confinement.evaluator.uid),
        ("env", all(env_allowed(name) for name in os.environ)),
        ("seccomp", _seccomp_filters(status) > confinement.evaluator.seccomp_filters),
        ("landlock", landlocked),
        ("nproc", _limited(resource.RLIMIT_NPROC) and uid != 0 and int(status.get("CapEff", "0"), 16) == 0),
        ("nofile", _limited(resource.RLIMIT_NOFILE)),
    ) if holds}
    return [name for name in MECHANISMS if name in found]


def missing(required: list[str], mechanisms: list[str]) -> list[str]:
    return [name for name in required if name not in mechanisms]


def label(launcher: str, mechanisms: list[str]) -> str:
    """How containment reads in evidence, e.g. `bwrap 0.8.0: net,mount,pid,...`."""
    return f"{launcher}: {','.join(mechanisms) or 'nothing'}"


def usable_compiler() -> str:
    """The first C compiler here that runs (CC, then cc, gcc, clang), as Triton picks one; "" when none does."""
    for name in (os.environ.get("CC", ""), "cc", "gcc", "clang"):
        path = shutil.which(name) if name else None
        if path and subprocess.run([path, "--version"], capture_output=True).returncode == 0:
            return path
    return ""


def _namespaces() -> dict[str, int]:
    out = {}
    for kind, _ in NAMESPACES:
        try:
            out[kind] = os.stat(f"/proc/self/ns/{kind}").st_ino
        except OSError:
            pass
    return out


def _uid_as_evaluator_sees_it(own_user_namespace: bool) -> int:
    """This process's uid in the evaluator's user namespace (the parent of ours, where we have our own)."""
    uid = os.getuid()
    if not own_user_namespace:
        return uid
    with open("/proc/self/uid_map") as f:
        for line in f:
            inside, outside, count = (int(v) for v in line.split())
            if inside <= uid < inside + count:
                return outside + uid - inside
    return -1


def _status() -> dict[str, str]:
    with open("/proc/self/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def _seccomp_filters(status: dict[str, str]) -> int:
    if "Seccomp_filters" in status:  # Linux 5.9+
        return int(status["Seccomp_filters"])
    return 1 if status.get("Seccomp", "0").strip() == "2" else 0


def _limited(which: int) -> bool:
    return resource.getrlimit(which)[0] != resource.RLIM_INFINITY

