"""How processes that run untrusted code (evaluator workers and builds, the validator's fork server) start: in bubblewrap, what bound where; not what they do inside.

A worker (one per GPU, persistent), each CUDA build and the validator's fork server start inside `bwrap` with their own
user, network, PID, IPC, UTS and cgroup namespaces and a file system made of read-only binds:
the system folders, the Python installation and the project's package folders, plus `/proc`,
a minimal `/dev` (and the NVIDIA device files for a GPU worker), `/sys` read-only, and an empty
`/tmp`. The only host folder it can write is its own: a worker's folder of this cache's
`scratch/` at `/kz` (the job's scratch at `/kz/job`, a copy of the job's CUDA extensions at
`/kz/ext`), a build's own build folder at `/kz/ext`. The cache (results, builds, key), the log,
checkpoints and home are not there. The environment is cut to what compilers and CUDA read.

When the evaluator runs as root it writes the user namespace's maps itself (bwrap
`--userns-block-fd`): ns uid 0 is the evaluator (keeping CAP_SETUID, CAP_SETGID and CAP_KILL
within the namespace), ns uid 1000 is `candidate_uid` on the host, which candidate code takes
before it runs (kernelzero/sandbox/confine.py), so RLIMIT_NPROC binds it and it cannot touch the worker.
Without root, bwrap maps the user's own uid and candidate and worker share it.

`Sandbox.probe` starts a process in it as a candidate's would start and reads back what is in
force; where `require_sandbox` asks for more it raises SandboxUnavailable naming each mechanism
that is missing (`python -m kernelzero.sandbox.probe` prints what holds on this machine).
"""

from __future__ import annotations

import asyncio
import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import msgspec

from kernelzero.config import EvaluatorConfig
from kernelzero.sandbox import confine, untrusted_files
from kernelzero.sandbox.workspace import SHARED_MEMORY, Workspace
from kernelzero.schemas.messages import Confinement, ProbeReport

TOOLS_DIR = Path(__file__).resolve().parents[2] / ".sandbox-tools"  # bwrap (and lib/) carried with a checkout
INSIDE_ID = 1000  # the candidate's uid and gid in the sandbox's user namespace
WORKER_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL")  # within the namespace: take the candidate's uid, kill it
PACKAGES = ("kernelzero", "kernelzero.gpu_workers", "kernelzero.schemas")  # what workers and builds import of ours
VALIDATOR_PACKAGES = ("kernelzero", "kernelzero.consumers", "kernelzero.producers", "kernelzero.schemas")
SYSTEM_TOP = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
COMPILERS = ("cc", "c++", "gcc", "g++", "clang")  # what Triton's launcher build and load_inline may call
SYSTEM_BOUND = ("/usr", "/etc", "/sys", *SYSTEM_TOP)  # host folders bound whole: what lies below them exists


class SandboxUnavailable(RuntimeError):
    """Candidate code would run without containment `require_sandbox` asks for; the message names what is missing."""


def find_bwrap(setting: str) -> str | None:
    """The configured bwrap, else `bwrap` on PATH, else the project's .sandbox-tools/bwrap."""
    if setting:
        return shutil.which(setting)
    return shutil.which("bwrap") or shutil.which(str(TOOLS_DIR / "bwrap"))


class Sandbox:
    """The launcher of one EvaluatorPool: its mode ("bwrap", "none": no bubblewrap, "off"), and what holds in it."""

    def __init__(self, config: EvaluatorConfig, cache_dir: Path, packages: tuple[str, ...] = PACKAGES):
        """`config`: [evaluator]'s containment settings; `packages`: our packages the sandboxed processes import."""
        self.config = config
        self.cache_dir = cache_dir
        self.packages = packages
        self.bwrap = find_bwrap(config.bwrap) if config.sandbox else None
        self.mode = "off" if not config.sandbox else ("bwrap" if self.bwrap else "none")
        # root can map a second uid into bwrap's user namespace; without bwrap the candidate keeps the evaluator's
        # (the scratch folder and the Python installation may not be reachable for another uid)
        self.maps_candidate = self.mode == "bwrap" and os.geteuid() == 0
        self.version = _bwrap_version(self.bwrap) if self.bwrap else ""
        self.required: list[str] = list(confine.REQUIRED) if config.require_sandbox is True or (
            config.require_sandbox == "auto" and self.mode == "bwrap") else []
        self.mechanisms: list[str] = []  # known once probed
        self.compiler = ""  # the C compiler that ran in the sandbox, known once probed
        self.probed = False

    async def probe(self) -> None:
        """Start a process as a candidate's starts, read back what holds; SandboxUnavailable where it is not enough.

        Once it held, probing again does nothing: every server of this sandbox starts as the probe found."""
        if self.probed:
            return
        if self.mode == "none" and self.config.require_sandbox is True:
            looked = f"[evaluator] bwrap = {self.config.bwrap!r} is not an executable" if self.config.bwrap \
                else f"no bwrap on PATH nor at {TOOLS_DIR / 'bwrap'}"
            raise SandboxUnavailable(
                f"require_sandbox = true, but bubblewrap was not found ({looked}): install it (apt-get install "
                "bubblewrap; scripts/setup.sh does as root) or carry it in .sandbox-tools (scripts/sandbox_tools.sh)")
        if self.mode == "off":
            return
        try:
            answer = await self._probe()
        except SandboxUnavailable as exc:
            if self.required:
                raise SandboxUnavailable(f"{exc}; {self._requirement()}: set require_sandbox = false to evaluate "
                                         "without bubblewrap") from None
            print(f"evaluator: {exc}; evaluating without bubblewrap", file=sys.stderr)
            self.bwrap, self.mode, self.maps_candidate, self.version = None, "none", False, ""
            answer = await self._probe()
        self.mechanisms, self.compiler = answer.in_force, answer.compiler
        self._check_compiler(self.compiler)
        missing = confine.missing(self.required, self.mechanisms)
        if missing:
            raise SandboxUnavailable(self.refusal(missing))
        if self.mode == "none":
            print(f"evaluator: bubblewrap not found: candidate code runs without namespaces ({self.label}); "
                  "install bubblewrap to contain it", file=sys.stderr)
        self.probed = True

    def _check_compiler(self, inside: str) -> None:
        """A compiler that runs here but not in the sandbox would fail every Triton or CUDA build as the candidate's."""
        here = confine.usable_compiler()
        if here and not inside:
            raise SandboxUnavailable(
                f"the C compiler {here} runs here but not in the sandbox ({self.launcher}): Triton and CUDA builds "
                f"need it; add its installation folder to [evaluator] sandbox_binds")

    @property
    def launcher(self) -> str:
        return f"bwrap {self.version}".strip() if self.mode == "bwrap" else self.mode

    @property
    def label(self) -> str:
        """What evidence says about containment: `bwrap 0.8.0: net,mount,pid,...`, `none: ...` or `off`."""
        return "off" if self.mode == "off" else confine.label(self.launcher, self.mechanisms)

    def _requirement(self) -> str:
        return "bwrap was found, so [evaluator] require_sandbox = auto requires it" \
            if self.config.require_sandbox == "auto" else "[evaluator] require_sandbox = true"

    def refusal(self, missing: list[str]) -> str:
        return (f"{self._requirement()}, but candidate processes would run without: "
                + "; ".join(f"{name} ({confine.MECHANISMS[name]})" for name in missing)
                + f". In force: {self.label}. Set require_sandbox = false to evaluate with what is in force.")

    def confinement(self) -> Confinement:
        """What candidate processes apply to themselves (kernelzero/sandbox/confine.py)."""
        return Confinement(launcher=self.launcher, switch_id=INSIDE_ID if self.maps_candidate else -1,
                                   max_processes=self.config.max_processes,
                                   max_open_files=self.config.max_open_files, required=self.required,
                                   also_writable=[SHARED_MEMORY] if self.mode == "bwrap" else [],
                                   evaluator=confine.vantage())

    def confinement_arg(self) -> str:
        return msgspec.json.encode(self.confinement()).decode()

    @property
    def candidate_owner(self) -> int:
        """The host uid owning what candidate code makes: `candidate_uid` where the evaluator maps one, else its own."""
        return self.config.candidate_uid if self.maps_candidate else os.geteuid()

    def own(self, path: Path) -> None:
        """Hand a folder and what is in it to the candidate's host uid, where one is mapped (a reused build folder
        is the candidate's making: untrusted_files.hand_over follows no link, at any depth)."""
        if self.maps_candidate:
            untrusted_files.hand_over(str(path), self.candidate_owner)

    # ---- starting processes ----
    async def start(self, command: list[str], *, writable: list[tuple[str, str]], gpu: bool = False,
                    env: dict[str, str | None] | None = None, readable: list[tuple[str, str]] = (),
                    **kwargs) -> asyncio.subprocess.Process:
        """`command` in the sandbox, host folders `writable` bound read-write and `readable` read-only at their inside paths.

        `env` sets (None: removes) variables of the environment the sandbox passes on; the other
        keyword arguments go to asyncio.create_subprocess_exec.
        """
        argv, env, uid_map = self._launch(command, writable, gpu, env or {}, list(readable))
        if uid_map is None:
            return await asyncio.create_subprocess_exec(*argv, env=env, **kwargs)
        try:
            proc = await asyncio.create_subprocess_exec(*argv, env=env, pass_fds=uid_map.passed, **kwargs)
        finally:
            uid_map.spawned()
        try:
            await asyncio.to_thread(uid_map.write)
        except SandboxUnavailable:
            proc.kill()
            await proc.wait()
            raise
        return proc

    def popen(self, command: list[str], *, writable: list[tuple[str, str]], gpu: bool = False,
              env: dict[str, str | None] | None = None, readable: list[tuple[str, str]] = (),
              **kwargs) -> subprocess.Popen:
        """`start`, for a caller without an event loop: a subprocess.Popen (keyword arguments go to it)."""
        argv, env, uid_map = self._launch(command, writable, gpu, env or {}, list(readable))
        if uid_map is None:
            return subprocess.Popen(argv, env=env, **kwargs)
        try:
            proc = subprocess.Popen(argv, env=env, pass_fds=uid_map.passed, **kwargs)
        finally:
            uid_map.spawned()
        try:
            uid_map.write()
        except SandboxUnavailable:
            proc.kill()
            proc.wait()
            raise
        return proc

    def _launch(self, command: list[str], writable: list[tuple[str, str]], gpu: bool, env: dict[str, str | None],
                readable: list[tuple[str, str]]) -> tuple[list[str], dict[str, str], "_UidMap | None"]:
        """(argv, its environment, the uid map to write once it started, if any) for `command` in the sandbox."""
        env = self._environment(env)
        if self.mode != "bwrap":
            return command, env, None
        args = self._bwrap_args(writable, gpu, env, readable)
        uid_map = _UidMap(self.config.candidate_uid) if self.maps_candidate else None
        return [self.bwrap, *(uid_map.args() if uid_map else []), *args, "--", *command], self._bwrap_env(env), uid_map

    def _environment(self, changes: dict[str, str | None]) -> dict[str, str]:
        env = dict(os.environ)
        if self.mode != "off":
            env = {k: v for k, v in env.items() if confine.env_allowed(k)}
        if self.mode == "bwrap":
            env.update(HOME="/tmp", TMPDIR="/tmp")  # the sandbox's own, empty /tmp
        # no bytecode of candidate code in its build and scratch folders, whatever the caller's environment: a
        # `__pycache__` the job's copy of a build would hold (tests/evaluator/test_lying_files.py saw one once the
        # scripts let processes write bytecode), and a file of the candidate's process an import would trust
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        for name, value in changes.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env

    def _bwrap_env(self, env: dict[str, str]) -> dict[str, str]:
        """bwrap's own environment: `env`, plus its carried libraries (the sandbox gets `env` back, _bwrap_args)."""
        return {**env, **_lib_path(self.bwrap)}

    def _bwrap_args(self, writable: list[tuple[str, str]], gpu: bool, env: dict[str, str],
                    readable: list[tuple[str, str]]) -> list[str]:
        args = ["--unshare-user", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--hostname", "kernelzero",
                "--chdir", "/"]
        if self.maps_candidate:
            args += ["--cap-drop", "ALL", *[a for cap in WORKER_CAPS for a in ("--cap-add", cap)]]
        if _lib_path(self.bwrap):
            args += ["--setenv", "LD_LIBRARY_PATH", env["LD_LIBRARY_PATH"]] if "LD_LIBRARY_PATH" in env \
                else ["--unsetenv", "LD_LIBRARY_PATH"]
        args += _system_mounts()
        read_only = read_only_paths(self.config.sandbox_binds, self.packages)
        cache = str(self.cache_dir.resolve())
        masked = [cache] if any(_within(cache, path) for path in read_only) else []
        for folder in _folders_above([*read_only, *(inside for _, inside in [*writable, *readable])]):
            args += ["--perms", "0755", "--dir", folder]  # bwrap would make them 0700: the candidate's uid must pass
        for path in read_only:
            args += ["--ro-bind", path, path]
        for path in masked:
            args += ["--tmpfs", path]  # a read-only bind above the cache must not show it
        for device in (gpu_devices() if gpu else []):
            args += ["--dev-bind", device, device]
        for host, inside in writable:
            args += ["--bind", host, inside]
        for host, inside in readable:  # after the cache's mask: they may lie in the cache
            args += ["--ro-bind", host, inside]
        return args

    # ---- the probe ----
    async def _probe(self) -> ProbeReport:
        area = Workspace(self, self.cache_dir / "scratch" / f"probe-{uuid.uuid4().hex}")
        try:
            scratch, _ = area.prepare("")
            proc = await self.start([sys.executable, "-m", "kernelzero.sandbox.probe", self.confinement_arg(),
                                     scratch], writable=area.binds(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            out, err = await proc.communicate()
        finally:
            area.remove()
        if proc.returncode != 0:
            raise SandboxUnavailable(f"the sandbox did not start ({self.launcher}, exit status {proc.returncode}): "
                                     f"{err.decode(errors='replace').strip()[-1500:]}")
        return msgspec.json.decode(out.decode().strip().splitlines()[-1], type=ProbeReport)


class _UidMap:
    """bwrap waits (--userns-block-fd) while we write a two-uid map: the evaluator as 0, the candidate as INSIDE_ID."""

    def __init__(self, candidate_uid: int):
        self.candidate_uid = candidate_uid
        self.info_r, self.info_w = os.pipe()
        self.block_r, self.block_w = os.pipe()
        self.passed = (self.block_r, self.info_w)

    def args(self) -> list[str]:
        return ["--userns-block-fd", str(self.block_r), "--info-fd", str(self.info_w)]

    def spawned(self) -> None:
        """Close bwrap's ends here, once it has them."""
        os.close(self.info_w)
        os.close(self.block_r)

    def write(self) -> None:
        """Read bwrap's child pid from --info-fd, write its uid and gid maps, let it go on; closes our ends."""
        try:
            info = _read_all(self.info_r)
            if info:  # empty: bwrap failed before it cloned; its exit status and stderr tell why
                child, candidate = json.loads(info)["child-pid"], self.candidate_uid
                _write(f"/proc/{child}/uid_map", f"0 {os.getuid()} 1\n{INSIDE_ID} {candidate} 1\n")
                _write(f"/proc/{child}/gid_map", f"0 {os.getgid()} 1\n{INSIDE_ID} {candidate} 1\n")
                os.write(self.block_w, b"1")
        except OSError as exc:
            raise SandboxUnavailable(f"could not map candidate_uid {self.candidate_uid} into the sandbox's "
                                     f"user namespace: {exc}") from None
        finally:
            os.close(self.info_r)
            os.close(self.block_w)


def read_only_paths(extra: list[str], packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """Host paths bound read-only beyond the system folders: Python, the Python path, our packages, CUDA, the C compilers, `extra`.

    A source checkout on the Python path (it holds our package folders and a pyproject.toml or
    .git) is replaced by the package folders alone: its runs/, logs and checkpoints stay out.
    The home folder and its ancestors are never bound whole.
    """
    packages = _package_dirs(packages)
    home = os.path.expanduser("~")
    paths = [sys.base_prefix, sys.prefix, sys.exec_prefix, *packages, *_cuda_dirs(), *_compiler_dirs(), *extra]
    for entry in sys.path:
        if not entry or not os.path.exists(entry) or _within(home, entry):
            continue
        checkout = any(_within(p, entry) for p in packages) and \
            (os.path.exists(os.path.join(entry, "pyproject.toml")) or os.path.exists(os.path.join(entry, ".git")))
        if not checkout:
            paths.append(entry)
    kept: list[str] = []
    for path in sorted({os.path.abspath(p) for p in paths if os.path.exists(p)}, key=len):
        if not any(_within(path, k) for k in [*kept, "/usr", "/etc"]):
            kept.append(path)
    return kept


def gpu_devices() -> list[str]:
    """The NVIDIA device files (and /dev/nvidia-caps) that exist here."""
    return sorted(glob.glob("/dev/nvidia*"))


def _system_mounts() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for top in SYSTEM_TOP:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    return args + ["--ro-bind", "/sys", "/sys", "--proc", "/proc", "--dev", "/dev",
                   "--perms", "0755", "--tmpfs", "/tmp"]


def _folders_above(paths: list[str]) -> list[str]:
    """Folders on the way to `paths` that the sandbox must make, parents first: not /, /tmp, or below a bind."""
    bound = [*SYSTEM_BOUND, *paths]
    above = set()
    for path in paths:
        parent = os.path.dirname(os.path.abspath(path))
        while parent not in ("/", "/tmp") and not any(_within(parent, b) for b in bound):
            above.add(parent)
            parent = os.path.dirname(parent)
    return sorted(above)


def _package_dirs(names: tuple[str, ...]) -> list[str]:
    dirs = []
    for name in names:
        spec = importlib.util.find_spec(name)
        dirs += list(spec.submodule_search_locations or []) if spec else []
    return dirs


def _cuda_dirs() -> list[str]:
    dirs = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", "")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        dirs.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    return [d for d in dirs if d]


def _compiler_dirs() -> list[str]:
    """The installations of the C and C++ compilers Triton and load_inline run (a gcc in /opt/gcc/bin brings /opt/gcc)."""
    names = [os.environ.get("CC", ""), os.environ.get("CXX", ""), *COMPILERS]
    found = {shutil.which(name) for name in names if name}
    return [os.path.dirname(os.path.dirname(os.path.realpath(path))) for path in found if path]


def _within(path: str, folder: str) -> bool:
    """Whether `path` is `folder` or lies beneath it."""
    path, folder = os.path.abspath(path), os.path.abspath(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _bwrap_version(bwrap: str) -> str:
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10,
                             env={**os.environ, **_lib_path(bwrap)})
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip().split()[-1] if out.returncode == 0 and out.stdout.strip() else ""


def _lib_path(bwrap: str) -> dict[str, str]:
    """LD_LIBRARY_PATH for a bwrap carried with its libraries in lib/ beside it (scripts/sandbox_tools.sh)."""
    libs = Path(bwrap).resolve().parent / "lib"
    return {"LD_LIBRARY_PATH": str(libs)} if libs.is_dir() else {}


def _read_all(fd: int) -> bytes:
    data = b""
    while chunk := os.read(fd, 4096):
        data += chunk
    return data


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)

