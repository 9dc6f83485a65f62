"""How the trusted side touches files in folders untrusted code could write (job scratch, build folders): never through a link, never blocking, bounded; it guards opening, reading, copying and writing, not what the bytes say.

Trusted processes (the fork server, the pool, the validator) hold more rights than the code that
left the files: a path it controls may name a link to a root-only file, a FIFO that blocks an open for
ever, a device, a file hard-linked elsewhere, or be swapped between a check and an open. So:
- what the trusted side will read back, it creates itself, nameless, before untrusted code exists, in a
  folder untrusted code cannot write, and reads through its own descriptor (`create_output`, then `tail`);
- where a path must be opened, `open_regular` opens it without following a link, without blocking,
  and keeps it only if the descriptor is a regular file with one link, owned by whom it should be;
- `copy_tree` copies folders and such files only (no links, special files, hard-linked or others' files);
- `replace_file` writes a new file and renames it over the path: a link there is replaced, not written through;
- `remove_tree` and `hand_over` remove a tree and change its owner without following links, however deep
  untrusted code nested it (GNU find and chown walk by descriptor; Python's shutil.rmtree and os.walk recurse).
docs/evaluator.md (Containment) lists every such access and which of these guards it.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
import uuid

TAIL_BYTES = 1500
COPY_DEPTH = 32  # how deep a copy descends: a build nests a few folders; deeper ones are left out
_OPEN = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class NotRegular(OSError):
    """Not a regular file with one link owned as expected: a link, FIFO, socket, device, hard link or another's file."""


def create_output(folder: str) -> int:
    """A read-write descriptor of a new, empty file in `folder` without a name: nothing can open it by a path."""
    with tempfile.TemporaryFile(dir=folder, buffering=0) as nameless:  # O_TMPFILE, or a name removed at once
        return os.dup(nameless.fileno())


def tail(fd: int, limit: int = TAIL_BYTES) -> str:
    """The last `limit` bytes of the regular file open at `fd`, as text; "" for anything else."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        return ""
    start = max(0, info.st_size - limit)
    return os.pread(fd, limit, start).decode(errors="replace")


def open_regular(path: str, owner: int, dir_fd: int | None = None) -> int:
    """A read-only descriptor of `path` (relative to `dir_fd` where given); NotRegular unless it is a regular file
    with one link owned by `owner`. A link at the path is not followed, a FIFO or device does not block the open."""
    fd = os.open(path, os.O_RDONLY | _OPEN, dir_fd=dir_fd)
    info = os.fstat(fd)
    if stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and info.st_uid == owner:
        return fd
    os.close(fd)
    raise NotRegular(f"{path}: not a regular file with one link owned by uid {owner}")


def copy_tree(source: str, target: str, owner: int, leave_out: tuple[str, ...] = ()) -> None:
    """Copy `source`'s folders and regular files (see open_regular) to a new folder `target`, leaving out the rest
    and the names in `leave_out` at its top."""
    folder = os.open(source, os.O_RDONLY | os.O_DIRECTORY | _OPEN)
    try:
        _copy_folder(folder, target, owner, leave_out, COPY_DEPTH)
    finally:
        os.close(folder)


def _copy_folder(folder: int, target: str, owner: int, leave_out: tuple[str, ...], depth: int) -> None:
    os.mkdir(target, 0o755)
    with os.scandir(folder) as entries:
        names = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries
                 if e.name not in leave_out and (e.is_dir(follow_symlinks=False) or e.is_file(follow_symlinks=False))]
    for name, is_folder in names:  # what the listing called a folder or file is checked again once open
        try:
            if not is_folder:
                _copy_file(open_regular(name, owner, dir_fd=folder), os.path.join(target, name))
            elif depth > 0:
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | _OPEN, dir_fd=folder)
                try:
                    if os.fstat(sub).st_uid == owner:
                        _copy_folder(sub, os.path.join(target, name), owner, (), depth - 1)
                finally:
                    os.close(sub)
        except OSError:
            pass  # not what the listing said, or gone: left out


def _copy_file(source: int, target: str) -> None:
    """Bytes, permissions and times (build tools compare them: a copy must not look newer than its sources)."""
    try:
        info = os.fstat(source)
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, info.st_mode & 0o777)
        try:
            while os.sendfile(out, source, None, 1 << 24):
                pass
            os.utime(out, ns=(info.st_atime_ns, info.st_mtime_ns))
        finally:
            os.close(out)
    finally:
        os.close(source)


def replace_file(path: str, data: bytes) -> None:
    """Put a new file holding `data` at `path` (a link or anything else there is replaced, never written through)."""
    folder, name = os.path.split(path)
    fresh = os.path.join(folder, f".{name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    os.replace(fresh, path)


def remove_tree(path: str, keep_top: bool = False) -> None:
    """Remove `path` and all beneath it (with `keep_top`, only what is beneath), following no link, however deep.

    find's -delete never follows a link; shutil.rmtree recursed in Python, and a scratch folder a candidate
    nested 2000 folders deep made it raise RecursionError in the pool.
    """
    subprocess.run([_system_tool("find"), path, *(["-mindepth", "1"] if keep_top else []), "-delete"],
                   stdin=subprocess.DEVNULL, capture_output=True, check=False)


def hand_over(path: str, uid: int) -> None:
    """Make `uid` (and its group) the owner of `path` and all beneath it; a link is changed itself, never what it names."""
    subprocess.run([_system_tool("chown"), "-R", "-h", f"{uid}:{uid}", "--", path],
                   stdin=subprocess.DEVNULL, capture_output=True, check=True)


def _system_tool(name: str) -> str:
    """`name` from the system's own folders (os.defpath), whatever PATH the caller has."""
    return shutil.which(name, path=os.defpath) or name
